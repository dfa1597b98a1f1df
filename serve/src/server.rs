//! A computing server: the shared models it holds, the requests of outside clients it
//! runs (each its own session over the [`Mux`]), and its status.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use puma_core::dealing::{Dealt, Span};
use puma_core::{Config, Ctx, FixedPoint, PartyId, Session, Shares};
use puma_layers::bert::secure::{BatchShape, Outputs, run_observed};
use puma_layers::nn::{ClientAt, Decoding, Deliver, Generation, SecureSettings, generate_batch};
use puma_layers::store::{self, ComponentSeeds, Expect, ModelHash, StoreError, StoreHeader};
use puma_layers::upload::{DealtTensor, common_seeds};
use puma_transports::mux::Mux;
use puma_transports::{TransportError, drive};
use rand_core::{OsRng, TryRngCore};

use crate::admission::{Admission, Refused};
use crate::cancel::{Cancel, Guarded};
use crate::model::ServedModel;
use crate::protocol::{ModelInfo, StatusReport};

/// The server that orders requests: it alone runs at most `max_running` at once and
/// queues the others; the other two start a request when its client's part arrives and
/// wait for the leader's first frame (docs/ARCHITECTURE.md, Service).
pub const LEADER: PartyId = PartyId::P0;

/// Limits of a server.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Requests run at once (enforced by the [`LEADER`]).
    pub max_running: usize,
    /// Requests waiting for a slot at the [`LEADER`]; more are refused at once.
    pub max_queued: usize,
    /// How long a request may wait for a slot (at the others: for the leader's first
    /// frame).
    pub queue_wait: Duration,
    /// The longest wait for a peer within a request (an idle timeout: each frame
    /// restarts it).
    pub peer_timeout: Duration,
    /// The secure layers' settings (all three servers must agree).
    pub settings: SecureSettings,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            max_running: 4,
            max_queued: 16,
            queue_wait: Duration::from_secs(60),
            peer_timeout: Duration::from_secs(30),
            settings: SecureSettings::default(),
        }
    }
}

/// One generation request of an outside client, as one server receives it.
#[derive(Debug)]
pub struct GenerateRequest {
    /// The request's session id; the client gives all three servers the same one, and
    /// never reuses it.
    pub session_id: u64,
    /// The model's name on the servers.
    pub model: String,
    /// The prompts' lengths (public).
    pub lens: Vec<usize>,
    /// The decoding rules (public; the same at all three servers).
    pub decoding: Decoding,
    /// This server's part of the prompts' one-hot rows, dealt by the client
    /// ([`puma_layers::nn::client::deal_prompts`]).
    pub prompt: Dealt,
}

/// One encode request of an outside client (an encoder's outputs for a batch), as one
/// server receives it.
#[derive(Debug)]
pub struct EncodeRequest {
    /// The request's session id (as for [`GenerateRequest`]).
    pub session_id: u64,
    /// The model's name on the servers.
    pub model: String,
    /// The sequences' lengths (public).
    pub lens: Vec<usize>,
    /// What the client learns.
    pub outputs: Outputs,
    /// This server's part of the batch's one-hot rows (word id and token type per token),
    /// dealt by the client ([`puma_layers::nn::client::deal_hot`]).
    pub input: Dealt,
}

/// What a request cost this server's session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SessionCost {
    /// Rounds.
    pub rounds: u64,
    /// Payload bytes this server sent to the other two.
    pub bytes_sent: u64,
}

/// Why a server did not serve a request.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// No model of that name is loaded.
    #[error("no model named {0:?} is loaded on this server")]
    UnknownModel(String),
    /// The request does not fit the model or the server.
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    /// Too many requests are waiting.
    #[error("the server is busy: {queued} requests are waiting already")]
    Busy {
        /// Requests waiting.
        queued: usize,
    },
    /// No slot came free in time.
    #[error("no slot came free within {0:?}")]
    QueueTimeout(Duration),
    /// A model for another party.
    #[error("the model's shares belong to {found}, this server is {me}")]
    OtherParty {
        /// The shares' party.
        found: PartyId,
        /// This server.
        me: PartyId,
    },
    /// This server has no OS randomness.
    #[error("no OS randomness: {0}")]
    Entropy(String),
    /// A share store could not be written or read, or was refused (names the file and
    /// the reason: another party, another model, corrupt, ...).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A store that reads but does not hold a model this server can run.
    #[error("{path}: {reason}")]
    NotAModel {
        /// The store.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The session failed (a peer, a timeout, a protocol error); names the cause.
    #[error("the session failed: {0}")]
    Session(#[from] TransportError),
    /// The connections to the other servers are down (being re-established).
    #[error("this server is not connected to {0:?} (reconnecting)")]
    PeersDown(Vec<PartyId>),
    /// An owner's upload that does not assemble into a model.
    #[error("upload refused: {0}")]
    Upload(String),
}

#[derive(Debug, Default)]
struct Counters {
    served: AtomicU64,
    failed: AtomicU64,
    rounds: AtomicU64,
    bytes: AtomicU64,
}

/// One computing server.
#[derive(Debug)]
pub struct Server {
    me: PartyId,
    /// The connections to the other servers; `None` while they are re-established.
    peers: RwLock<Option<Arc<Mux>>>,
    models: RwLock<BTreeMap<String, Arc<ServedModel>>>,
    admission: Admission,
    opts: ServeOptions,
    counters: Counters,
}

impl Server {
    /// A server over its connections to the other two.
    pub fn new(mux: Mux, opts: ServeOptions) -> Server {
        let server = Server::unconnected(mux.me(), opts);
        server.connect_peers(mux);
        server
    }

    /// Server `me`, not yet connected to the other two ([`Server::connect_peers`]).
    pub fn unconnected(me: PartyId, opts: ServeOptions) -> Server {
        Server {
            me,
            peers: RwLock::new(None),
            admission: if me == LEADER {
                Admission::new(opts.max_running, opts.max_queued)
            } else {
                // Room for every request the leader may run or queue: the others never
                // hold back a request the leader admitted (whose peers would otherwise
                // wait on each other until their timeout), and a request waiting here for
                // the leader's turn costs no computation.
                Admission::new(opts.max_running.saturating_add(opts.max_queued), 0)
            },
            models: RwLock::default(),
            opts,
            counters: Counters::default(),
        }
    }

    /// This server's party.
    pub fn me(&self) -> PartyId {
        self.me
    }

    /// Serves over `mux`, the (new) connections to the other two servers.
    pub fn connect_peers(&self, mux: Mux) {
        *self.peers.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(mux));
    }

    fn peers(&self) -> Result<Arc<Mux>, ServeError> {
        self.peers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| ServeError::PeersDown(self.others()))
    }

    fn others(&self) -> Vec<PartyId> {
        vec![self.me.next(), self.me.prev()]
    }

    /// The peers whose connection is down (both while unconnected).
    pub fn peers_down(&self) -> Vec<PartyId> {
        match &*self.peers.read().unwrap_or_else(PoisonError::into_inner) {
            Some(mux) => mux.gone(),
            None => self.others(),
        }
    }

    /// Drops the connections to the other servers if one of them is down and no request
    /// uses them any more, so that they can be re-established; returns whether the
    /// server is now unconnected.
    pub fn release_broken_peers(&self) -> bool {
        let mut peers = self.peers.write().unwrap_or_else(PoisonError::into_inner);
        let release = match &*peers {
            None => return true,
            // Every running request holds a clone of the Arc.
            Some(mux) => !mux.gone().is_empty() && Arc::strong_count(mux) == 1,
        };
        if release {
            *peers = None;
        }
        release
    }

    /// Loads `model` under `name` (replacing a model of that name for later requests).
    ///
    /// # Errors
    /// [`ServeError::OtherParty`] if the shares are another party's.
    pub fn add_model(&self, name: &str, model: impl Into<ServedModel>) -> Result<(), ServeError> {
        let model = model.into();
        if model.party() != self.me() {
            return Err(ServeError::OtherParty {
                found: model.party(),
                me: self.me(),
            });
        }
        self.models
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_owned(), Arc::new(model));
        Ok(())
    }

    /// The loaded models' public facts.
    pub fn model_infos(&self) -> Vec<ModelInfo> {
        self.models
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(name, m)| m.info(name))
            .collect()
    }

    /// Assembles an owner's upload (the architecture and spec it announced and this
    /// server's part of every tensor, in plan order), loads it under `name` and saves it
    /// to a share store at `store` with the owner's content hash.
    ///
    /// # Errors
    /// [`ServeError::Upload`] if the parts do not assemble into the spec's model;
    /// [`ServeError::Store`] if the store cannot be written.
    pub fn install_upload(
        &self,
        name: &str,
        arch: &str,
        spec_json: &str,
        model_hash: ModelHash,
        tensors: Vec<DealtTensor>,
        store: &Path,
    ) -> Result<(), ServeError> {
        let seeds = common_seeds(&tensors);
        let model = ServedModel::assemble(self.me(), arch, spec_json, tensors)
            .map_err(ServeError::Upload)?;
        self.add_model(name, model)?;
        self.save(name, store, model_hash, &seeds)
    }

    /// Model `name`.
    fn model(&self, name: &str) -> Result<Arc<ServedModel>, ServeError> {
        self.models
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
            .ok_or_else(|| ServeError::UnknownModel(name.to_owned()))
    }

    /// Saves model `name`'s shares to a share store at `path` (mode 0600, replaced
    /// atomically), with the owner's content hash `model_hash`, so that this server can
    /// restart without the owner ([`Server::load_store`]).
    ///
    /// # Errors
    /// [`ServeError::UnknownModel`]; [`ServeError::Store`] if writing fails.
    pub fn save_model(
        &self,
        name: &str,
        path: &Path,
        model_hash: ModelHash,
    ) -> Result<(), ServeError> {
        self.save(name, path, model_hash, &ComponentSeeds::none())
    }

    /// [`Server::save_model`], keeping the components `seeds` names as their seeds.
    fn save(
        &self,
        name: &str,
        path: &Path,
        model_hash: ModelHash,
        seeds: &ComponentSeeds,
    ) -> Result<(), ServeError> {
        let model = self.model(name)?;
        let not_model = |reason: String| ServeError::NotAModel {
            path: path.display().to_string(),
            reason,
        };
        let header = StoreHeader {
            party: self.me(),
            frac_bits: FixedPoint::default().frac_bits(),
            arch: model.arch().into(),
            config_json: model.spec_json().map_err(|e| not_model(e.to_string()))?,
            model_hash,
        };
        let tensors = model.tensors().map_err(|e| not_model(e.to_string()))?;
        store::write(path, &header, &tensors, seeds)?;
        Ok(())
    }

    /// Loads model `name` from this server's share store at `path`, refusing a store of
    /// another party, another fixed-point format, of a model this server cannot run, or
    /// (with `model_hash`) of another model. Returns the store's header.
    ///
    /// # Errors
    /// [`ServeError::Store`] naming the file and the reason; [`ServeError::NotAModel`]
    /// for an unknown architecture, a spec that does not parse or tensors that do not fit
    /// it.
    pub fn load_store(
        &self,
        name: &str,
        path: &Path,
        model_hash: Option<ModelHash>,
    ) -> Result<StoreHeader, ServeError> {
        let mut expect = Expect::party(self.me(), FixedPoint::default());
        if let Some(h) = model_hash {
            expect = expect.model(h);
        }
        let (header, tensors) = store::read(path, &expect)?;
        let model = ServedModel::from_store(&header.arch, &header.config_json, tensors).map_err(
            |reason| ServeError::NotAModel {
                path: path.display().to_string(),
                reason,
            },
        )?;
        self.add_model(name, model)?;
        Ok(header)
    }

    /// Runs one generation request to its end: waits for a slot, then generates on shares
    /// with the other two servers, handing this server's shares of every token to
    /// `deliver` as they are produced. Returns this server's view (no ids: it learns
    /// none) and what the session cost.
    ///
    /// # Errors
    /// [`ServeError`]: unknown model (or an encoder), a request that does not fit it, a
    /// full queue, no slot in time, or a failed session (naming the peer or the cause).
    pub fn generate(
        &self,
        request: GenerateRequest,
        deliver: Deliver,
        cancel: &Cancel,
    ) -> Result<(Vec<Generation>, SessionCost), ServeError> {
        let model = self.model(&request.model)?;
        let ServedModel::Decoder(decoder) = &*model else {
            return Err(ServeError::BadRequest(
                "the model is an encoder: ask it to encode, not to generate",
            ));
        };
        let rows = request
            .lens
            .iter()
            .try_fold(0usize, |a, &l| a.checked_add(l))
            .and_then(|t| t.checked_mul(decoder.spec().vocab))
            .ok_or(ServeError::BadRequest("the prompt lengths overflow"))?;
        let (lens, decoding, settings) = (request.lens, request.decoding, self.opts.settings);
        let held = Arc::clone(&model);
        self.run_session(
            request.session_id,
            request.prompt,
            rows,
            "the dealt prompt does not match the prompt lengths",
            cancel,
            move |mut ctx, prompt_hot| async move {
                let ServedModel::Decoder(model) = &*held else {
                    return Err(puma_core::Error::bug("the model changed its kind"));
                };
                let client = ClientAt::Outside {
                    prompt_hot,
                    deliver,
                };
                generate_batch(
                    &mut ctx, model, client, None, &lens, &decoding, &settings, None, None,
                )
                .await
            },
        )
    }

    /// Runs one encode request to its end: waits for a slot, then runs the encoder on
    /// shares with the other two servers and hands this server's shares of the outputs
    /// the client asked for to `deliver`. Returns what the session cost.
    ///
    /// # Errors
    /// As [`Server::generate`] (a decoder is refused).
    pub fn encode(
        &self,
        request: EncodeRequest,
        deliver: Deliver,
        cancel: &Cancel,
    ) -> Result<SessionCost, ServeError> {
        let model = self.model(&request.model)?;
        let ServedModel::Encoder(encoder) = &*model else {
            return Err(ServeError::BadRequest(
                "the model is a decoder: ask it to generate, not to encode",
            ));
        };
        let cfg = encoder.config();
        let shape = BatchShape::right_padded(&request.lens);
        let fits = !request.lens.is_empty()
            && request.lens.iter().all(|&l| l > 0 && l <= cfg.max_len())
            && (!request.outputs.logits || encoder.heads().labels > 0)
            && (!request.outputs.pooled || encoder.heads().pooler);
        if !fits {
            return Err(ServeError::BadRequest(
                "the sequences or the outputs asked for do not fit the model",
            ));
        }
        let rows = request
            .lens
            .iter()
            .try_fold(0usize, |a, &l| a.checked_add(l))
            .and_then(|t| t.checked_mul(cfg.vocab_size + cfg.type_vocab_size))
            .ok_or(ServeError::BadRequest("the sequence lengths overflow"))?;
        let (outputs, settings) = (request.outputs, self.opts.settings);
        let held = Arc::clone(&model);
        self.run_session(
            request.session_id,
            request.input,
            rows,
            "the dealt input does not match the sequence lengths",
            cancel,
            move |mut ctx, prompt_hot| async move {
                let ServedModel::Encoder(model) = &*held else {
                    return Err(puma_core::Error::bug("the model changed its kind"));
                };
                let client = ClientAt::Outside {
                    prompt_hot,
                    deliver,
                };
                run_observed(
                    &mut ctx, model, client, None, &shape, outputs, &settings, None,
                )
                .await
                .map(drop)
            },
        )
        .map(|((), cost)| cost)
    }

    /// The part of every request that does not depend on the model: a slot, the client's
    /// dealt input (`rows` values) as this server's shares, a session with fresh OS
    /// entropy driven over the peers' link until it ends or `cancel` ends it, and the
    /// counters.
    fn run_session<T, F, Fut>(
        &self,
        session_id: u64,
        input: Dealt,
        rows: usize,
        mismatch: &'static str,
        cancel: &Cancel,
        task: F,
    ) -> Result<(T, SessionCost), ServeError>
    where
        T: Send + 'static,
        F: FnOnce(Ctx, Shares) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, puma_core::Error>> + Send + 'static,
    {
        let peers = self.peers()?;
        let down = peers.gone();
        if !down.is_empty() {
            return Err(ServeError::PeersDown(down));
        }
        let _permit = self
            .admission
            .admit(self.opts.queue_wait)
            .map_err(|r| match r {
                Refused::Busy => ServeError::Busy {
                    queued: self.admission.load().1,
                },
                Refused::Timeout => ServeError::QueueTimeout(self.opts.queue_wait),
            })?;
        let me = self.me();
        let input = input
            .into_shares(me, rows, Span::whole(0))
            .map_err(|_| ServeError::BadRequest(mismatch))?;
        let mut entropy = [0u8; 32];
        OsRng
            .try_fill_bytes(&mut entropy)
            .map_err(|e| ServeError::Entropy(e.to_string()))?;
        let session = Session::new(Config::new(session_id), me, entropy, move |ctx| {
            task(ctx, input)
        });
        let mut cost = SessionCost::default();
        let result = session
            .map_err(TransportError::from)
            .and_then(|mut session| {
                let link = Guarded::new(peers.open(session_id)?, cancel);
                let link = if me == LEADER {
                    link
                } else {
                    link.awaiting(LEADER, Instant::now() + self.opts.queue_wait)
                };
                let r = drive(&mut session, link, self.opts.peer_timeout);
                let stats = session.stats();
                cost = SessionCost {
                    rounds: u64::from(stats.rounds),
                    bytes_sent: stats.payload_bytes_total(),
                };
                r
            });
        self.counters
            .rounds
            .fetch_add(cost.rounds, Ordering::Relaxed);
        self.counters
            .bytes
            .fetch_add(cost.bytes_sent, Ordering::Relaxed);
        let counter = if result.is_ok() {
            &self.counters.served
        } else {
            &self.counters.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok((result?, cost))
    }

    /// What the server is doing now, for its operator.
    pub fn status(&self) -> StatusReport {
        let (running, queued) = self.admission.load();
        StatusReport {
            party: self.me().index() as u8,
            models: self.model_infos(),
            running,
            queued,
            served: self.counters.served.load(Ordering::Relaxed),
            failed: self.counters.failed.load(Ordering::Relaxed),
            rounds: self.counters.rounds.load(Ordering::Relaxed),
            bytes_sent: self.counters.bytes.load(Ordering::Relaxed),
            peers_down: self.peers_down().iter().map(|p| p.index() as u8).collect(),
        }
    }
}
