//! A computing server: the shared models it holds, the generation requests of outside
//! clients it runs (each its own session over the [`Mux`]), and its status.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use std::path::Path;

use puma_core::dealing::{Dealt, Span};
use puma_core::{Config, FixedPoint, PartyId, Session};
use puma_layers::nn::upload::{DealtTensor, assemble_decoder, spec_json};
use puma_layers::nn::{
    ClientAt, DecoderSpec, Decoding, Deliver, Generation, SecureSettings, SharedDecoder,
    generate_batch,
};
use puma_layers::store::{self, Expect, ModelHash, StoreError, StoreHeader};
use puma_transports::mux::Mux;
use puma_transports::{TransportError, drive};
use rand_core::{OsRng, TryRngCore};

use crate::admission::{Admission, Refused};
use crate::cancel::{Cancel, Guarded};
use crate::protocol::{ModelInfo, StatusReport};

/// The architecture name of a decoder's share store: its config is the serialised
/// [`DecoderSpec`], whatever the checkpoint's own config format (GPT-2's `config.json`,
/// LLaMA's GGUF metadata).
pub const DECODER_ARCH: &str = "decoder";

/// Limits of a server.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Requests run at once.
    pub max_running: usize,
    /// Requests waiting for a slot; more are refused at once.
    pub max_queued: usize,
    /// How long a request may wait for a slot.
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
    /// A store that reads but does not hold a decoder this server can run.
    #[error("{path}: {reason}")]
    NotADecoder {
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
    models: RwLock<BTreeMap<String, Arc<SharedDecoder>>>,
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
            admission: Admission::new(opts.max_running, opts.max_queued),
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
    pub fn add_model(&self, name: &str, model: SharedDecoder) -> Result<(), ServeError> {
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
            .map(|(name, m)| ModelInfo {
                name: name.clone(),
                vocab: m.spec().vocab,
                max_positions: m.spec().max_positions,
            })
            .collect()
    }

    /// Assembles an owner's upload (the spec it announced and this server's part of
    /// every tensor, in plan order), loads it under `name` and saves it to a share store
    /// at `store` with the owner's content hash.
    ///
    /// # Errors
    /// [`ServeError::Upload`] if the parts do not assemble into the spec's model;
    /// [`ServeError::Store`] if the store cannot be written.
    pub fn install_upload(
        &self,
        name: &str,
        spec_json: &str,
        model_hash: ModelHash,
        tensors: Vec<DealtTensor>,
        store: &Path,
    ) -> Result<(), ServeError> {
        let spec: DecoderSpec = serde_json::from_str(spec_json)
            .map_err(|e| ServeError::Upload(format!("the spec does not parse: {e}")))?;
        let model = assemble_decoder(self.me(), spec, tensors)
            .map_err(|e| ServeError::Upload(e.to_string()))?;
        self.add_model(name, model)?;
        self.save_model(name, store, model_hash)
    }

    /// Model `name`.
    fn model(&self, name: &str) -> Result<Arc<SharedDecoder>, ServeError> {
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
        let model = self.model(name)?;
        let not_decoder = |reason: String| ServeError::NotADecoder {
            path: path.display().to_string(),
            reason,
        };
        let config_json = spec_json(model.spec()).map_err(|e| not_decoder(e.to_string()))?;
        let header = StoreHeader {
            party: self.me(),
            frac_bits: FixedPoint::default().frac_bits(),
            arch: DECODER_ARCH.into(),
            config_json,
            model_hash,
        };
        let tensors = model.tensors().map_err(|e| not_decoder(e.to_string()))?;
        store::write(path, &header, &tensors)?;
        Ok(())
    }

    /// Loads model `name` from this server's share store at `path`, refusing a store of
    /// another party, another fixed-point format, not of a decoder, or (with
    /// `model_hash`) of another model. Returns the store's header.
    ///
    /// # Errors
    /// [`ServeError::Store`] naming the file and the reason; [`ServeError::NotADecoder`]
    /// for a spec that does not parse or tensors that do not fit it.
    pub fn load_store(
        &self,
        name: &str,
        path: &Path,
        model_hash: Option<ModelHash>,
    ) -> Result<StoreHeader, ServeError> {
        let mut expect = Expect::party(self.me(), FixedPoint::default()).arch(DECODER_ARCH);
        if let Some(h) = model_hash {
            expect = expect.model(h);
        }
        let (header, tensors) = store::read(path, &expect)?;
        let not_decoder = |reason: String| ServeError::NotADecoder {
            path: path.display().to_string(),
            reason,
        };
        let spec: DecoderSpec =
            serde_json::from_str(&header.config_json).map_err(|e| not_decoder(e.to_string()))?;
        let plan = spec.plan().map_err(|e| not_decoder(e.to_string()))?;
        tensors
            .check(&plan)
            .map_err(|e| not_decoder(e.to_string()))?;
        let model =
            SharedDecoder::from_tensors(spec, tensors).map_err(|e| not_decoder(e.to_string()))?;
        self.add_model(name, model)?;
        Ok(header)
    }

    /// Runs one request to its end: waits for a slot, then generates on shares with the
    /// other two servers, handing this server's shares of every token to `deliver` as
    /// they are produced. Returns this server's view (no ids: it learns none).
    ///
    /// # Errors
    /// [`ServeError`]: unknown model, a request that does not fit it, a full queue, no
    /// slot in time, or a failed session (naming the peer or the cause).
    pub fn generate(
        &self,
        request: GenerateRequest,
        deliver: Deliver,
        cancel: &Cancel,
    ) -> Result<Vec<Generation>, ServeError> {
        let model = self.model(&request.model)?;
        let peers = self.peers()?;
        let down = peers.gone();
        if !down.is_empty() {
            return Err(ServeError::PeersDown(down));
        }
        let vocab = model.spec().vocab;
        let rows = request
            .lens
            .iter()
            .try_fold(0usize, |a, &l| a.checked_add(l))
            .and_then(|t| t.checked_mul(vocab))
            .ok_or(ServeError::BadRequest("the prompt lengths overflow"))?;
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
        let prompt_hot = request
            .prompt
            .into_shares(me, rows, Span::whole(0))
            .map_err(|_| {
                ServeError::BadRequest("the dealt prompt does not match the prompt lengths")
            })?;
        let mut entropy = [0u8; 32];
        OsRng
            .try_fill_bytes(&mut entropy)
            .map_err(|e| ServeError::Entropy(e.to_string()))?;
        let (lens, decoding, settings) = (request.lens, request.decoding, self.opts.settings);
        let session = Session::new(
            Config::new(request.session_id),
            me,
            entropy,
            move |mut ctx| async move {
                let client = ClientAt::Outside {
                    prompt_hot,
                    deliver,
                };
                generate_batch(
                    &mut ctx, &model, client, None, &lens, &decoding, &settings, None, None,
                )
                .await
            },
        );
        let result = session
            .map_err(TransportError::from)
            .and_then(|mut session| {
                let link = Guarded::new(peers.open(request.session_id)?, cancel);
                let r = drive(&mut session, link, self.opts.peer_timeout);
                let stats = session.stats();
                self.counters
                    .rounds
                    .fetch_add(u64::from(stats.rounds), Ordering::Relaxed);
                self.counters
                    .bytes
                    .fetch_add(stats.payload_bytes_total(), Ordering::Relaxed);
                r
            });
        let counter = if result.is_ok() {
            &self.counters.served
        } else {
            &self.counters.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(result?)
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
