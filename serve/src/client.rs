//! The thin client of the service, outside the computing servers: it deals its prompt
//! (or an encoder's batch) to the three servers, receives their shares of the ids as
//! they are produced (or of the encoder's outputs), checks that the two copies of every
//! component agree, and reconstructs. The model owner's upload is here too: it deals a
//! checkpoint to the three servers and exits.
//!
//! Neither holds a share of the model or computes with the servers: a client sends one
//! correction vector of its prompt's one-hot rows (to two servers) and two seeds, and
//! keeps only its tokens.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use puma_core::dealing::{self, Dealt, Mismatch, Seed};
use puma_core::{FixedPoint, PartyId};
use puma_layers::bert::secure::{BertSpec, input_columns};
use puma_layers::bert::{BertBatch, BertConfig, BertWeights};
use puma_layers::nn::DecoderArch;
use puma_layers::nn::client::{OutsideTokens, deal_hot, deal_prompts};
use puma_layers::store::ModelHash;
use puma_layers::upload::{DealtTensor, deal_decoder, deal_encoder, spec_json};
use rand_core::{OsRng, TryRngCore};
use rustls::ClientConfig;
use tokio::net::TcpStream;
use tokio::runtime::Runtime;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use zeroize::Zeroize;

use crate::config::{ServiceConfig, resolve};
use crate::model::{DECODER_ARCH, ENCODER_ARCH};
use crate::protocol::{
    EncodeHeader, ErrorKind, GenerateHeader, ModelInfo, ProtocolError, Reply, Request,
    StatusReport, UploadHeader, WireMode, WireOutputs, WireSampling, decode_components,
    encode_dealt, read_message, write_message,
};
use puma_transports::tls::{read_cert, service_client_config, service_server_name};

/// Why a client request failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The configuration or a certificate is unusable.
    #[error("configuration: {0}")]
    Config(String),
    /// A server could not be reached.
    #[error("cannot connect to server {party} at {addr}: {error}")]
    Connect {
        /// The server.
        party: PartyId,
        /// Its address.
        addr: String,
        /// Why.
        error: String,
    },
    /// A server's messages could not be read or written.
    #[error("server {party}: {error}")]
    Protocol {
        /// The server.
        party: PartyId,
        /// What went wrong.
        error: ProtocolError,
    },
    /// A server refused or failed the request.
    #[error("server {party} ({kind:?}): {message}")]
    Server {
        /// The server.
        party: PartyId,
        /// What kind of failure.
        kind: ErrorKind,
        /// Its message.
        message: String,
    },
    /// The servers answered inconsistently (a server that misbehaves).
    #[error("the servers disagree: {0}")]
    Disagree(String),
    /// The two copies of a share component differ: one of the two servers named lies.
    #[error("{0}")]
    Mismatch(Mismatch),
    /// The prompt or the options do not fit the model.
    #[error("request: {0}")]
    Request(String),
    /// The request did not end in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// How to generate.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// The most tokens per prompt.
    pub max_new: usize,
    /// Ids as they are produced, or all at the end.
    pub mode: WireMode,
    /// End-of-sequence ids.
    pub eos: Vec<u32>,
    /// Draw tokens instead of the argmax.
    pub sampling: Option<WireSampling>,
    /// The longest the request may take.
    pub deadline: Duration,
}

impl GenerateOptions {
    /// Greedy generation of at most `max_new` tokens per prompt, each streamed.
    pub fn greedy(max_new: usize) -> GenerateOptions {
        GenerateOptions {
            max_new,
            mode: WireMode::SecureArgmax,
            eos: Vec::new(),
            sampling: None,
            deadline: Duration::from_secs(600),
        }
    }
}

/// What a generation produced, and what it cost.
#[derive(Clone, Debug, Default)]
pub struct Generated {
    /// Each prompt's generated ids.
    pub ids: Vec<Vec<u32>>,
    /// Rounds of the servers' session.
    pub rounds: u64,
    /// Bytes each server sent to the others.
    pub server_bytes: [u64; 3],
    /// Bytes this client sent (all three servers).
    pub client_sent: u64,
    /// Bytes this client received.
    pub client_received: u64,
    /// From sending the request to the first ids.
    pub first_ids: Option<Duration>,
    /// The whole request.
    pub total: Duration,
}

/// What an encode request returned (each output asked for, row-major), and what it cost.
#[derive(Clone, Debug, Default)]
pub struct Encoded {
    /// The encoder output of every token, sequence after sequence (`tokens × hidden`).
    pub hidden: Option<Vec<f64>>,
    /// The pooled output (`sequences × hidden`).
    pub pooled: Option<Vec<f64>>,
    /// The classification logits (`sequences × labels`).
    pub logits: Option<Vec<f64>>,
    /// The sentence embeddings (`sequences × hidden`).
    pub embeddings: Option<Vec<f64>>,
    /// Rounds of the servers' session.
    pub rounds: u64,
    /// Bytes each server sent to the others.
    pub server_bytes: [u64; 3],
    /// Bytes this client sent (all three servers).
    pub client_sent: u64,
    /// Bytes this client received.
    pub client_received: u64,
    /// The whole request.
    pub total: Duration,
}

struct Server {
    party: PartyId,
    addr: String,
    socket: SocketAddr,
    tls: Arc<ClientConfig>,
}

type Conn = TlsStream<TcpStream>;

/// A client of the three servers of a service.
pub struct ServiceClient {
    servers: [Server; 3],
    rt: Runtime,
    connect_timeout: Duration,
}

impl std::fmt::Debug for ServiceClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let addrs: Vec<&str> = self.servers.iter().map(|s| s.addr.as_str()).collect();
        f.debug_struct("ServiceClient")
            .field("servers", &addrs)
            .finish_non_exhaustive()
    }
}

/// The largest reply payload: one step's shares are 16 bytes per id.
const MAX_REPLY_PAYLOAD: u64 = 1 << 30;

impl ServiceClient {
    /// A client of the servers in `cfg` (their client addresses and certificates).
    ///
    /// # Errors
    /// [`ClientError::Config`] for an address that does not resolve or an unreadable
    /// certificate.
    pub fn new(cfg: &ServiceConfig) -> Result<ServiceClient, ClientError> {
        let server = |party: PartyId| -> Result<Server, ClientError> {
            let e = cfg.server(party);
            let socket = resolve(&e.client_addr).map_err(|e| ClientError::Config(e.0))?;
            let cert = read_cert(&e.cert).map_err(|e| ClientError::Config(e.to_string()))?;
            let tls = service_client_config(party, cert)
                .map_err(|e| ClientError::Config(e.to_string()))?;
            Ok(Server {
                party,
                addr: e.client_addr.clone(),
                socket,
                tls: Arc::new(tls),
            })
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ClientError::Config(format!("cannot start the runtime: {e}")))?;
        Ok(ServiceClient {
            servers: [
                server(PartyId::P0)?,
                server(PartyId::P1)?,
                server(PartyId::P2)?,
            ],
            rt,
            connect_timeout: Duration::from_secs(10),
        })
    }

    async fn connect(&self, s: &Server) -> Result<Conn, ClientError> {
        let fail = |error: String| ClientError::Connect {
            party: s.party,
            addr: s.addr.clone(),
            error,
        };
        let go = async {
            let tcp = TcpStream::connect(s.socket)
                .await
                .map_err(|e| fail(e.to_string()))?;
            let _ = tcp.set_nodelay(true);
            TlsConnector::from(Arc::clone(&s.tls))
                .connect(service_server_name(s.party), tcp)
                .await
                .map_err(|e| fail(format!("TLS: {e}")))
        };
        tokio::time::timeout(self.connect_timeout, go)
            .await
            .map_err(|_| fail(format!("no connection within {:?}", self.connect_timeout)))?
    }

    /// Connects to the three servers and sends each its part of the client's dealt input
    /// with `request`; returns the connections and the bytes sent.
    async fn send_request(
        &self,
        request: &Request,
        parts: [Dealt; 3],
    ) -> Result<([Conn; 3], u64), ClientError> {
        let mut conns = self.connect_all().await?;
        let sent = send_all(&mut conns, |i| (request, encode_dealt(&parts[i]))).await?;
        Ok((conns, sent))
    }

    async fn connect_all(&self) -> Result<[Conn; 3], ClientError> {
        let [a, b, c] = &self.servers;
        let (a, b, c) = tokio::try_join!(self.connect(a), self.connect(b), self.connect(c))?;
        Ok([a, b, c])
    }

    /// Each server's status.
    ///
    /// # Errors
    /// [`ClientError`] if a server cannot be reached or answers otherwise.
    pub fn status(&self) -> Result<[StatusReport; 3], ClientError> {
        self.rt.block_on(async {
            let [a, b, c] = &self.servers;
            let (a, b, c) =
                tokio::try_join!(self.status_of(a), self.status_of(b), self.status_of(c))?;
            Ok([a, b, c])
        })
    }

    async fn status_of(&self, s: &Server) -> Result<StatusReport, ClientError> {
        let mut conn = self.connect(s).await?;
        let proto = |error| ClientError::Protocol {
            party: s.party,
            error,
        };
        write_message(&mut conn, &Request::Status, &[])
            .await
            .map_err(proto)?;
        match read_message::<_, Reply>(&mut conn, 0)
            .await
            .map_err(proto)?
        {
            Some((Reply::Status(r), _)) => Ok(r),
            other => Err(unexpected(s.party, other.map(|(r, _)| r))),
        }
    }

    /// Model `name` as all three servers have it.
    ///
    /// # Errors
    /// [`ClientError::Server`] (unknown model) if a server does not have it;
    /// [`ClientError::Disagree`] if they describe it differently.
    pub fn model(&self, name: &str) -> Result<ModelInfo, ClientError> {
        let reports = self.status()?;
        let mut found: Option<ModelInfo> = None;
        for r in &reports {
            let party = party_of(r.party);
            let m =
                r.models
                    .iter()
                    .find(|m| m.name == name)
                    .ok_or_else(|| ClientError::Server {
                        party,
                        kind: ErrorKind::UnknownModel,
                        message: format!("no model named {name:?} is loaded on server {party}"),
                    })?;
            match &found {
                Some(f) if f != m => {
                    return Err(ClientError::Disagree(format!(
                        "model {name:?} differs between the servers"
                    )));
                }
                _ => found = Some(m.clone()),
            }
        }
        found.ok_or_else(|| ClientError::Disagree("no server answered".into()))
    }

    /// Generates from `prompts` (token ids) with model `name`: deals them to the
    /// servers, calls `on_ids` with `(prompt, id)` pairs as ids arrive (each step in
    /// secure-argmax mode, all at the end in private mode), and returns every prompt's ids.
    ///
    /// # Errors
    /// [`ClientError`]: a prompt that does not fit the model, a server that refuses or
    /// fails (named), shares that do not agree (both possible servers named), no answer
    /// within the deadline.
    pub fn generate(
        &self,
        name: &str,
        prompts: &[Vec<u32>],
        opts: &GenerateOptions,
        mut on_ids: impl FnMut(&[(usize, u32)]),
    ) -> Result<Generated, ClientError> {
        let model = self.model(name)?;
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(0);
        if longest.saturating_add(opts.max_new) > model.max_positions {
            return Err(ClientError::Request(format!(
                "a prompt of {longest} tokens and {} new ones exceed the model's {} positions",
                opts.max_new, model.max_positions
            )));
        }
        let mut seeds = fresh_seeds()?;
        let parts = deal_prompts(prompts, model.vocab, &seeds, 0)
            .map_err(|e| ClientError::Request(e.to_string()));
        seeds.zeroize();
        let parts = parts?;
        let header = GenerateHeader {
            session_id: fresh_session_id()?,
            model: name.to_owned(),
            lens: prompts.iter().map(Vec::len).collect(),
            max_new: opts.max_new,
            mode: opts.mode,
            eos: opts.eos.clone(),
            sampling: opts.sampling,
            deadline_ms: u64::try_from(opts.deadline.as_millis()).unwrap_or(u64::MAX),
        };
        let mut tokens = OutsideTokens::new(prompts.len(), &header.decoding(), model.vocab);
        // The servers end a request at its deadline; give their answer a little longer.
        let wait = opts.deadline.saturating_add(Duration::from_secs(10));
        let run = self.run_generate(&header, parts, &mut tokens, &mut on_ids);
        let mut out = self
            .rt
            .block_on(async { tokio::time::timeout(wait, run).await })
            .map_err(|_| ClientError::Timeout(wait))??;
        out.ids = tokens.ids();
        Ok(out)
    }

    async fn run_generate(
        &self,
        header: &GenerateHeader,
        parts: [Dealt; 3],
        tokens: &mut OutsideTokens,
        on_ids: &mut impl FnMut(&[(usize, u32)]),
    ) -> Result<Generated, ClientError> {
        let start = Instant::now();
        let (mut conns, client_sent) = self
            .send_request(&Request::Generate(header.clone()), parts)
            .await?;
        let mut out = Generated {
            client_sent,
            ..Generated::default()
        };
        loop {
            let replies = next_replies(&mut conns).await?;
            for (_, p, n) in &replies {
                out.client_received += 12 + p.len() as u64 + *n;
            }
            let [ra, rb, rc] = &replies;
            match (&ra.0, &rb.0, &rc.0) {
                (
                    Reply::Ids { step, count },
                    Reply::Ids {
                        step: s1,
                        count: c1,
                    },
                    Reply::Ids {
                        step: s2,
                        count: c2,
                    },
                ) if (step, count) == (s1, c1) && (step, count) == (s2, c2) => {
                    let ids = reconstruct_replies(&replies, *count)?;
                    out.first_ids.get_or_insert(start.elapsed());
                    let got = match step {
                        Some(_) => tokens.step(&ids),
                        None => tokens.finish(&ids).map(|()| {
                            tokens
                                .ids()
                                .iter()
                                .enumerate()
                                .flat_map(|(s, ids)| ids.iter().map(move |&i| (s, i)))
                                .collect()
                        }),
                    }
                    .map_err(|e| ClientError::Disagree(e.to_string()))?;
                    on_ids(&got);
                }
                (
                    Reply::Done {
                        rounds,
                        bytes_sent: b0,
                    },
                    Reply::Done { bytes_sent: b1, .. },
                    Reply::Done { bytes_sent: b2, .. },
                ) => {
                    if !tokens.done() {
                        return Err(ClientError::Disagree(
                            "the servers ended before the sequences did".into(),
                        ));
                    }
                    out.rounds = *rounds;
                    out.server_bytes = [*b0, *b1, *b2];
                    out.total = start.elapsed();
                    return Ok(out);
                }
                _ => {
                    return Err(ClientError::Disagree(
                        "the servers sent different messages at one step".into(),
                    ));
                }
            }
        }
    }

    /// Deals `weights` of `arch` (a decoder: GPT-2, LLaMA) to the three servers as model
    /// `name` (each saves its part to its share store and serves it); `progress` hears
    /// `(tensors done, total)`. Returns the model's content hash.
    ///
    /// # Errors
    /// [`ClientError`]: weights the protocols cannot take, a server that refuses the
    /// upload (uploads off, a bad name) or cannot be reached.
    pub fn upload<A: DecoderArch>(
        &self,
        name: &str,
        arch: &A,
        weights: &A::Weights,
        progress: impl FnMut(usize, usize),
    ) -> Result<ModelHash, ClientError> {
        let request = |e: puma_core::Error| ClientError::Request(e.to_string());
        let spec = arch.spec().map_err(request)?;
        let total = spec.plan().map_err(request)?.tensors().len();
        let json = spec_json(&spec).map_err(request)?;
        self.upload_dealt(name, DECODER_ARCH, json, total, progress, |seeds, send| {
            deal_decoder(arch, weights, FixedPoint::default(), seeds, send).map(|(_, h)| h)
        })
    }

    /// Deals a BERT / RoBERTa encoder to the three servers as model `name`, as
    /// [`ServiceClient::upload`] does a decoder.
    ///
    /// # Errors
    /// As [`ServiceClient::upload`].
    pub fn upload_encoder(
        &self,
        name: &str,
        config: &BertConfig,
        weights: &BertWeights,
        progress: impl FnMut(usize, usize),
    ) -> Result<ModelHash, ClientError> {
        let request = |e: puma_core::Error| ClientError::Request(e.to_string());
        let spec = BertSpec::of(config, weights);
        let total = spec.plan().map_err(request)?.tensors().len();
        let json = spec_json(&spec).map_err(request)?;
        self.upload_dealt(name, ENCODER_ARCH, json, total, progress, |seeds, send| {
            deal_encoder(config, weights, FixedPoint::default(), seeds, send).map(|(_, h)| h)
        })
    }

    /// The upload both architectures share: the announcement, the `total` tensors that
    /// `deal` deals under fresh seeds (each sent to the three servers as it comes), and
    /// the content hash that ends it.
    fn upload_dealt(
        &self,
        name: &str,
        arch: &str,
        spec_json: String,
        total: usize,
        mut progress: impl FnMut(usize, usize),
        deal: impl FnOnce(
            &[Seed; 2],
            &mut dyn FnMut([DealtTensor; 3]) -> Result<(), puma_core::Error>,
        ) -> Result<ModelHash, puma_core::Error>,
    ) -> Result<ModelHash, ClientError> {
        let begin = Request::UploadBegin(UploadHeader {
            name: name.to_owned(),
            arch: arch.to_owned(),
            spec_json,
            tensors: total as u64,
        });
        let mut conns = self.rt.block_on(self.connect_all())?;
        self.rt
            .block_on(send_all(&mut conns, |_| (&begin, Vec::new())))?;
        let mut seeds = fresh_seeds()?;
        let mut failed: Option<ClientError> = None;
        let mut done = 0;
        let mut send = |three: [DealtTensor; 3]| {
            let msgs: Vec<(Request, Vec<u8>)> = three
                .iter()
                .map(|t| {
                    let header = Request::UploadTensor {
                        name: t.name.clone(),
                        len: t.len as u64,
                    };
                    (header, encode_dealt(&t.dealt))
                })
                .collect();
            let sent = self.rt.block_on(send_all(&mut conns, |i| {
                let (h, p) = &msgs[i];
                (h, p.clone())
            }));
            done += 1;
            progress(done, total);
            sent.map(drop).map_err(|e| {
                failed = Some(e);
                puma_core::Error::misuse("a server could not take the upload")
            })
        };
        let dealt = deal(&seeds, &mut send);
        seeds.zeroize();
        let hash = match (dealt, failed) {
            (_, Some(e)) => return Err(e),
            (Err(e), None) => return Err(ClientError::Request(e.to_string())),
            (Ok(h), None) => h,
        };
        let end = Request::UploadEnd {
            model_hash: hash.to_string(),
        };
        self.rt.block_on(async {
            send_all(&mut conns, |_| (&end, Vec::new())).await?;
            let [ra, rb, rc] = next_replies(&mut conns).await?;
            for (reply, party) in [
                (ra.0, PartyId::P0),
                (rb.0, PartyId::P1),
                (rc.0, PartyId::P2),
            ] {
                if !matches!(reply, Reply::Uploaded { .. }) {
                    return Err(unexpected(party, Some(reply)));
                }
            }
            Ok(())
        })?;
        Ok(hash)
    }

    /// Runs encoder `name` on `sequences` (each its token ids and token types, special
    /// tokens included): deals them to the servers and returns the `outputs` asked for,
    /// reconstructed from the three servers' shares.
    ///
    /// # Errors
    /// [`ClientError`]: sequences that do not fit the model (or a decoder), a server that
    /// refuses or fails (named), shares that do not agree (both possible servers named),
    /// no answer within `deadline`.
    pub fn encode(
        &self,
        name: &str,
        sequences: &[(Vec<u32>, Vec<u32>)],
        outputs: WireOutputs,
        deadline: Duration,
    ) -> Result<Encoded, ClientError> {
        let model = self.model(name)?;
        let info = model.encoder.ok_or_else(|| {
            ClientError::Request(format!("model {name:?} is a decoder: generate with it"))
        })?;
        let bad = |m: String| ClientError::Request(m);
        let batch = BertBatch::padded(sequences, 0).map_err(|e| bad(e.to_string()))?;
        let lens: Vec<usize> = sequences.iter().map(|(ids, _)| ids.len()).collect();
        if let Some(l) = lens.iter().find(|&&l| l == 0 || l > model.max_positions) {
            return Err(bad(format!(
                "a sequence of {l} tokens: the model takes 1 to {}",
                model.max_positions
            )));
        }
        if outputs == WireOutputs::default() {
            return Err(bad("no output asked for".into()));
        }
        let sizes = outputs
            .sizes(&lens, &info)
            .ok_or_else(|| bad("the outputs' sizes overflow".into()))?;
        let cols =
            input_columns(&batch, model.vocab, info.token_types).map_err(|e| bad(e.to_string()))?;
        let mut seeds = fresh_seeds()?;
        let parts = deal_hot(
            &cols,
            cols.len() / 2,
            2,
            model.vocab + info.token_types,
            &seeds,
            0,
        )
        .map_err(|e| bad(e.to_string()));
        seeds.zeroize();
        let header = EncodeHeader {
            session_id: fresh_session_id()?,
            model: name.to_owned(),
            lens,
            outputs,
            deadline_ms: u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX),
        };
        let parts = parts?;
        let wait = deadline.saturating_add(Duration::from_secs(10));
        let run = self.run_encode(&header, parts, sizes);
        self.rt
            .block_on(async { tokio::time::timeout(wait, run).await })
            .map_err(|_| ClientError::Timeout(wait))?
    }

    async fn run_encode(
        &self,
        header: &EncodeHeader,
        parts: [Dealt; 3],
        sizes: [usize; 4],
    ) -> Result<Encoded, ClientError> {
        let start = Instant::now();
        let (mut conns, client_sent) = self
            .send_request(&Request::Encode(header.clone()), parts)
            .await?;
        let mut out = Encoded {
            client_sent,
            ..Encoded::default()
        };
        let total: usize = sizes.iter().sum();
        let replies = next_replies(&mut conns).await?;
        for (_, p, n) in &replies {
            out.client_received += 12 + p.len() as u64 + *n;
        }
        let values = match replies.each_ref().map(|r| &r.0) {
            [
                Reply::Encoded { count },
                Reply::Encoded { count: c1 },
                Reply::Encoded { count: c2 },
            ] if *count == total && *c1 == total && *c2 == total => {
                reconstruct_replies(&replies, total)?
            }
            _ => {
                return Err(ClientError::Disagree(
                    "the servers did not all send the outputs asked for".into(),
                ));
            }
        };
        let fx = FixedPoint::default();
        let mut at = 0;
        let mut next = |n: usize| {
            let v = values.get(at..at + n).map(|v| fx.decode_slice(v));
            at += n;
            v
        };
        let [h, p, l, e] = sizes;
        out.hidden = next(h).filter(|_| header.outputs.hidden);
        out.pooled = next(p).filter(|_| header.outputs.pooled);
        out.logits = next(l).filter(|_| header.outputs.logits);
        out.embeddings = next(e).filter(|_| header.outputs.embeddings);
        let [ra, rb, rc] = next_replies(&mut conns).await?;
        match (&ra.0, &rb.0, &rc.0) {
            (
                Reply::Done {
                    rounds,
                    bytes_sent: b0,
                },
                Reply::Done { bytes_sent: b1, .. },
                Reply::Done { bytes_sent: b2, .. },
            ) => {
                out.rounds = *rounds;
                out.server_bytes = [*b0, *b1, *b2];
                out.total = start.elapsed();
                Ok(out)
            }
            _ => Err(ClientError::Disagree(
                "the servers did not all end the request".into(),
            )),
        }
    }
}

/// Two fresh seeds from the OS.
fn fresh_seeds() -> Result<[Seed; 2], ClientError> {
    let mut seeds: [Seed; 2] = [[0; 32]; 2];
    for s in &mut seeds {
        OsRng
            .try_fill_bytes(s)
            .map_err(|e| ClientError::Config(format!("no OS randomness: {e}")))?;
    }
    Ok(seeds)
}

/// A fresh random session id.
fn fresh_session_id() -> Result<u64, ClientError> {
    let mut id = [0u8; 8];
    OsRng
        .try_fill_bytes(&mut id)
        .map_err(|e| ClientError::Config(format!("no OS randomness: {e}")))?;
    Ok(u64::from_le_bytes(id))
}

/// The values the three servers' replies (P0's, P1's, P2's) carry shares of, `n` each,
/// checked: every component's two copies must agree.
fn reconstruct_replies(
    replies: &[(Reply, Vec<u8>, u64); 3],
    n: usize,
) -> Result<Vec<u64>, ClientError> {
    let decode = |i: usize, party| {
        decode_components(&replies[i].1, n).map_err(|error| ClientError::Protocol { party, error })
    };
    let (x0, x1) = decode(0, PartyId::P0)?;
    let (y1, y2) = decode(1, PartyId::P1)?;
    let (z2, z0) = decode(2, PartyId::P2)?;
    dealing::reconstruct([(&x0, &x1), (&y1, &y2), (&z2, &z0)]).map_err(ClientError::Mismatch)
}

/// Sends `msg(i)` to server `i`, all three at once; payloads are wiped after.
async fn send_all<'r>(
    conns: &mut [Conn; 3],
    msg: impl Fn(usize) -> (&'r Request, Vec<u8>),
) -> Result<u64, ClientError> {
    let [a, b, c] = conns;
    let (x, y, z) = tokio::try_join!(
        send_one(a, PartyId::P0, msg(0)),
        send_one(b, PartyId::P1, msg(1)),
        send_one(c, PartyId::P2, msg(2))
    )?;
    Ok(x + y + z)
}

async fn send_one(
    conn: &mut Conn,
    party: PartyId,
    (header, mut payload): (&Request, Vec<u8>),
) -> Result<u64, ClientError> {
    let r = write_message(conn, header, &payload).await;
    payload.zeroize();
    r.map_err(|error| ClientError::Protocol { party, error })
}

/// How long the client waits, after a server reported that the session failed, for
/// another server's report of why (a deadline, a refusal, a lost connection).
const CAUSE_GRACE: Duration = Duration::from_secs(2);

/// One server's reply, its payload and its header's size.
type ServerReply = (Reply, Vec<u8>, u64);

/// Whether `e` may only echo another server's failure: a session that failed (a peer
/// aborted it or was lost) says less than the error that made that peer abort.
fn is_echo(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Server {
            kind: ErrorKind::Session,
            ..
        }
    )
}

/// The next reply of each server. The first error ends the wait, but for a failed
/// session, which usually echoes another server's error: then the client waits up to
/// [`CAUSE_GRACE`] for the others and reports the first error that is not an echo (the
/// request's deadline, rather than the abort it caused at the other two), else the first.
async fn next_replies(conns: &mut [Conn; 3]) -> Result<[ServerReply; 3], ClientError> {
    let [a, b, c] = conns;
    let mut futs = [
        Box::pin(next_reply(a, PartyId::P0)),
        Box::pin(next_reply(b, PartyId::P1)),
        Box::pin(next_reply(c, PartyId::P2)),
    ];
    let mut got: [Option<Result<ServerReply, ClientError>>; 3] = [None, None, None];
    let mut first_error = None;
    let grace = tokio::time::sleep(CAUSE_GRACE);
    tokio::pin!(grace);
    let [fa, fb, fc] = &mut futs;
    loop {
        let (i, r) = tokio::select! {
            r = fa.as_mut(), if got[0].is_none() => (0, r),
            r = fb.as_mut(), if got[1].is_none() => (1, r),
            r = fc.as_mut(), if got[2].is_none() => (2, r),
            () = &mut grace, if first_error.is_some() => break,
        };
        let r = match r {
            Err(e) if !is_echo(&e) => return Err(e),
            Err(e) => {
                if first_error.is_none() {
                    first_error = Some(i);
                    grace
                        .as_mut()
                        .reset(tokio::time::Instant::now() + CAUSE_GRACE);
                }
                Err(e)
            }
            ok => ok,
        };
        if let Some(slot) = got.get_mut(i) {
            *slot = Some(r);
        }
        if got.iter().all(Option::is_some) {
            break;
        }
    }
    if let Some(i) = first_error
        && let Some(Some(Err(e))) = got.get_mut(i).map(Option::take)
    {
        return Err(e);
    }
    let [ra, rb, rc] = got;
    let missing = || ClientError::Disagree("a server's reply went missing".into());
    Ok([
        ra.ok_or_else(missing)??,
        rb.ok_or_else(missing)??,
        rc.ok_or_else(missing)??,
    ])
}

/// The next reply of server `party`, with its payload and header size; an error reply
/// or a closed connection is an error naming it.
async fn next_reply(conn: &mut Conn, party: PartyId) -> Result<(Reply, Vec<u8>, u64), ClientError> {
    match read_message::<_, Reply>(conn, MAX_REPLY_PAYLOAD).await {
        Ok(Some((Reply::Error { kind, message }, _))) => Err(ClientError::Server {
            party,
            kind,
            message,
        }),
        Ok(Some((reply, payload))) => {
            let head = serde_json::to_vec(&reply).map_or(0, |v| v.len() as u64);
            Ok((reply, payload, head))
        }
        Ok(None) => Err(ClientError::Protocol {
            party,
            error: ProtocolError::Io(std::io::ErrorKind::UnexpectedEof.into()),
        }),
        Err(error) => Err(ClientError::Protocol { party, error }),
    }
}

fn unexpected(party: PartyId, reply: Option<Reply>) -> ClientError {
    match reply {
        Some(Reply::Error { kind, message }) => ClientError::Server {
            party,
            kind,
            message,
        },
        Some(r) => ClientError::Disagree(format!("server {party} answered {r:?}")),
        None => ClientError::Protocol {
            party,
            error: ProtocolError::Io(std::io::ErrorKind::UnexpectedEof.into()),
        },
    }
}

fn party_of(index: u8) -> PartyId {
    match index {
        1 => PartyId::P1,
        2 => PartyId::P2,
        _ => PartyId::P0,
    }
}
