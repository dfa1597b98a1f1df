//! The messages between a server and its outside clients and owners, and their framing
//! (docs/ARCHITECTURE.md, Service).
//!
//! A message is a JSON header (public: names, sizes, rules) and a binary payload (share
//! material: dealt prompts and tensors, or a server's shares of the ids), framed as
//!
//! ```text
//! u32 header length | header (JSON) | u64 payload length | payload
//! ```
//!
//! all little-endian. A header is at most [`MAX_HEADER`] bytes; a payload at most the
//! receiver's limit, and it is read as it arrives, never allocated from the announced
//! length alone. Share material is never in a header, so a header may be logged.

use puma_core::PartyId;
use puma_core::dealing::{Component, Dealt, Seed};
use puma_core::proto::SamplingParams;
use puma_layers::nn::{Decoding, OutputMode};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use zeroize::Zeroize;

/// The largest header accepted.
pub const MAX_HEADER: usize = 64 << 10;

/// What a client or an owner asks a server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Generate from a dealt prompt; the payload is this server's [`Dealt`] part of the
    /// prompts' one-hot rows.
    Generate(GenerateHeader),
    /// Run an encoder on a dealt batch; the payload is this server's [`Dealt`] part of the
    /// batch's one-hot rows (word id and token type, two per row).
    Encode(EncodeHeader),
    /// An owner starts uploading a model; [`Request::UploadTensor`]s follow, then
    /// [`Request::UploadEnd`].
    UploadBegin(UploadHeader),
    /// One tensor of an upload, in the plan's order; the payload is this server's part.
    UploadTensor {
        /// The tensor's generic name.
        name: String,
        /// Its number of elements.
        len: u64,
    },
    /// The upload is complete: assemble, save and load the model.
    UploadEnd {
        /// The owner's content hash of the model (hex), known once every tensor is dealt.
        model_hash: String,
    },
    /// What the server is doing.
    Status,
}

/// A generation request's public part; all three servers receive the same.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerateHeader {
    /// The session id the three servers run the request under (fresh and random, chosen
    /// by the client).
    pub session_id: u64,
    /// The model's name on the servers.
    pub model: String,
    /// The prompts' lengths.
    pub lens: Vec<usize>,
    /// The most tokens to generate per prompt.
    pub max_new: usize,
    /// What the client learns as it goes.
    pub mode: WireMode,
    /// End-of-sequence ids.
    #[serde(default)]
    pub eos: Vec<u32>,
    /// Draw tokens instead of the argmax.
    #[serde(default)]
    pub sampling: Option<WireSampling>,
    /// The client's deadline for the whole request, in milliseconds from its arrival
    /// (0: the server's own limit).
    #[serde(default)]
    pub deadline_ms: u64,
}

impl GenerateHeader {
    /// The decoding rules the request asks for (the same at the servers and the client).
    pub fn decoding(&self) -> Decoding {
        let mode = match self.mode {
            WireMode::SecureArgmax => OutputMode::SecureArgmax,
            WireMode::Private => OutputMode::Private,
        };
        Decoding {
            eos: self.eos.clone(),
            sampling: self.sampling.map(|s| SamplingParams {
                temperature: s.temperature,
                top_k: s.top_k,
                top_p: s.top_p,
                min_p: s.min_p,
            }),
            ..Decoding::new(self.max_new, mode)
        }
    }
}

/// An encode request's public part; all three servers receive the same.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncodeHeader {
    /// The session id the three servers run the request under (fresh and random, chosen
    /// by the client).
    pub session_id: u64,
    /// The model's name on the servers.
    pub model: String,
    /// The sequences' lengths (with their special tokens).
    pub lens: Vec<usize>,
    /// What the client learns.
    pub outputs: WireOutputs,
    /// The client's deadline for the whole request, in milliseconds from its arrival
    /// (0: the server's own limit).
    #[serde(default)]
    pub deadline_ms: u64,
}

/// What an encode request returns, in this order when several are asked for (see
/// `puma_layers::bert::secure::Outputs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireOutputs {
    /// The encoder output of every token (`tokens × hidden`).
    #[serde(default)]
    pub hidden: bool,
    /// The pooled output (`sequences × hidden`).
    #[serde(default)]
    pub pooled: bool,
    /// The classification logits (`sequences × labels`).
    #[serde(default)]
    pub logits: bool,
    /// Mean-pooled, L2-normalised sentence embeddings (`sequences × hidden`).
    #[serde(default)]
    pub embeddings: bool,
}

impl WireOutputs {
    /// The outputs as the encoder takes them.
    pub fn outputs(self) -> puma_layers::bert::secure::Outputs {
        puma_layers::bert::secure::Outputs {
            hidden: self.hidden,
            pooled: self.pooled,
            logits: self.logits,
            embeddings: self.embeddings,
        }
    }

    /// The outputs asked for, by name, joined with `+` (for a log line).
    pub fn names(self) -> String {
        let all = [
            (self.hidden, "hidden"),
            (self.pooled, "pooled"),
            (self.logits, "logits"),
            (self.embeddings, "embeddings"),
        ];
        let on: Vec<&str> = all.iter().filter(|(w, _)| *w).map(|(_, n)| *n).collect();
        on.join("+")
    }

    /// How many values each output asked for has, in delivery order, for `lens` and a
    /// model with `info`; `None` if a size overflows.
    pub fn sizes(self, lens: &[usize], info: &EncoderInfo) -> Option<[usize; 4]> {
        let tokens = lens.iter().try_fold(0usize, |a, &l| a.checked_add(l))?;
        let b = lens.len();
        let on = |want: bool, n: Option<usize>| if want { n } else { Some(0) };
        Some([
            on(self.hidden, tokens.checked_mul(info.hidden))?,
            on(self.pooled, b.checked_mul(info.hidden))?,
            on(self.logits, b.checked_mul(info.labels))?,
            on(self.embeddings, b.checked_mul(info.hidden))?,
        ])
    }
}

/// The output modes an outside client can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WireMode {
    /// Each step's ids, as they are produced.
    SecureArgmax,
    /// All ids at the end.
    Private,
}

/// Sampling parameters (see `puma_core::proto::SamplingParams`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireSampling {
    /// The temperature.
    pub temperature: f64,
    /// Keep the k most likely tokens.
    #[serde(default)]
    pub top_k: Option<usize>,
    /// Keep the most likely tokens up to this mass.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Keep the tokens at least this fraction as likely as the most likely.
    #[serde(default)]
    pub min_p: Option<f64>,
}

/// An upload's public part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadHeader {
    /// The name the model is served under.
    pub name: String,
    /// The architecture: `"decoder"` (GPT-2, LLaMA) or `"bert"` (BERT, RoBERTa).
    pub arch: String,
    /// The serialised spec of the architecture.
    pub spec_json: String,
    /// How many tensors follow.
    pub tensors: u64,
}

/// What a server answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Reply {
    /// This server's shares of ids; the payload holds its two components.
    Ids {
        /// The generation step (0 = the prompt), or `None` for all ids at the end.
        step: Option<usize>,
        /// How many ids.
        count: usize,
    },
    /// This server's shares of an encoder's outputs (fixed point); the payload holds its
    /// two components.
    Encoded {
        /// How many values.
        count: usize,
    },
    /// The request ended well.
    Done {
        /// Rounds of the session.
        rounds: u64,
        /// Payload bytes this server sent to the other servers.
        bytes_sent: u64,
    },
    /// The request failed.
    Error {
        /// What kind of failure.
        kind: ErrorKind,
        /// What happened, naming the culprit (never a secret).
        message: String,
    },
    /// The server's status.
    Status(StatusReport),
    /// An upload is assembled, saved and loaded.
    Uploaded {
        /// The model's name.
        name: String,
        /// The share store it was saved to.
        store: String,
    },
}

/// Kinds of failure a client can act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// No model of that name.
    UnknownModel,
    /// The request does not fit the model or the protocol.
    BadRequest,
    /// The queue is full: try again later.
    Busy,
    /// No slot came free in time, or the deadline passed.
    Timeout,
    /// The computation failed: a peer server was lost or aborted.
    Session,
    /// Uploads are not accepted here, or the upload was refused.
    Upload,
    /// Anything else on the server's side.
    Internal,
}

/// A server's status, for its operator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusReport {
    /// The server's party index.
    pub party: u8,
    /// The models loaded.
    pub models: Vec<ModelInfo>,
    /// Requests running.
    pub running: usize,
    /// Requests waiting for a slot.
    pub queued: usize,
    /// Requests served to the end.
    pub served: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Rounds of all requests.
    pub rounds: u64,
    /// Payload bytes sent to the other servers for them.
    pub bytes_sent: u64,
    /// Peers whose connection is down.
    pub peers_down: Vec<u8>,
}

/// A loaded model's public facts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelInfo {
    /// Its name.
    pub name: String,
    /// Its vocabulary size.
    pub vocab: usize,
    /// The longest sequence (prompt and generated tokens).
    pub max_positions: usize,
    /// For an encoder, what its inputs and outputs are; `None` for a decoder.
    #[serde(default)]
    pub encoder: Option<EncoderInfo>,
}

/// An encoder's public facts beyond its vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EncoderInfo {
    /// Token types (segment ids).
    pub token_types: usize,
    /// Width of the hidden states and embeddings.
    pub hidden: usize,
    /// Whether it has a pooler.
    pub pooler: bool,
    /// Classification labels (0: no classifier).
    pub labels: usize,
}

/// Why a message could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The connection failed or ended.
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    /// A header or payload is longer than allowed.
    #[error("the {what} is {len} bytes, above the limit of {max}")]
    TooLong {
        /// Header or payload.
        what: &'static str,
        /// Its announced length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A header that is not a valid message.
    #[error("malformed header: {0}")]
    Header(String),
    /// A payload that does not hold what the header says.
    #[error("malformed payload: {0}")]
    Payload(&'static str),
}

/// Writes one message; returns its size in bytes.
///
/// # Errors
/// [`ProtocolError::Io`].
pub async fn write_message<W: AsyncWrite + Unpin, H: Serialize>(
    w: &mut W,
    header: &H,
    payload: &[u8],
) -> Result<u64, ProtocolError> {
    let head = serde_json::to_vec(header).map_err(|e| ProtocolError::Header(e.to_string()))?;
    let head_len = u32::try_from(head.len())
        .ok()
        .filter(|&l| l as usize <= MAX_HEADER)
        .ok_or(ProtocolError::TooLong {
            what: "header",
            len: head.len() as u64,
            max: MAX_HEADER as u64,
        })?;
    w.write_all(&head_len.to_le_bytes()).await?;
    w.write_all(&head).await?;
    w.write_all(&(payload.len() as u64).to_le_bytes()).await?;
    w.write_all(payload).await?;
    w.flush().await?;
    Ok(12 + head.len() as u64 + payload.len() as u64)
}

/// Reads one message with a payload of at most `max_payload` bytes; `Ok(None)` when the
/// peer closed the connection cleanly before a message began.
///
/// # Errors
/// [`ProtocolError`]: a connection failure, a length above its limit, a malformed header.
pub async fn read_message<R: AsyncRead + Unpin, H: for<'de> Deserialize<'de>>(
    r: &mut R,
    max_payload: u64,
) -> Result<Option<(H, Vec<u8>)>, ProtocolError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let head_len = u32::from_le_bytes(len) as usize;
    if head_len > MAX_HEADER {
        return Err(ProtocolError::TooLong {
            what: "header",
            len: head_len as u64,
            max: MAX_HEADER as u64,
        });
    }
    let mut head = vec![0u8; head_len];
    r.read_exact(&mut head).await?;
    let header: H =
        serde_json::from_slice(&head).map_err(|e| ProtocolError::Header(e.to_string()))?;
    let mut plen = [0u8; 8];
    r.read_exact(&mut plen).await?;
    let payload_len = u64::from_le_bytes(plen);
    if payload_len > max_payload {
        return Err(ProtocolError::TooLong {
            what: "payload",
            len: payload_len,
            max: max_payload,
        });
    }
    // Grows as bytes arrive: a peer that announces much and sends little costs little.
    let mut payload = Vec::with_capacity(payload_len.min(1 << 20) as usize);
    let got = r.take(payload_len).read_to_end(&mut payload).await?;
    if got as u64 != payload_len {
        payload.zeroize();
        return Err(ProtocolError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    Ok(Some((header, payload)))
}

const SEED: u8 = 0;
const VALUES: u8 = 1;

fn put_component(out: &mut Vec<u8>, c: &Component) {
    match c {
        Component::Seed(s) => {
            out.push(SEED);
            out.extend_from_slice(s);
        }
        Component::Values(v) => {
            out.push(VALUES);
            out.extend_from_slice(&(v.len() as u64).to_le_bytes());
            for x in v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
    }
}

/// The payload of a [`Dealt`] part: its party, then each component as a seed or values.
pub fn encode_dealt(d: &Dealt) -> Vec<u8> {
    let mut out = Vec::new();
    out.push(d.party.index() as u8);
    put_component(&mut out, &d.first);
    put_component(&mut out, &d.second);
    out
}

/// Reads a payload of [`encode_dealt`]; a vector component has at most `max_len` values.
/// The payload is wiped afterwards (it is share material).
///
/// # Errors
/// [`ProtocolError::Payload`] for a payload that is not a dealt part.
pub fn decode_dealt(mut payload: Vec<u8>, max_len: usize) -> Result<Dealt, ProtocolError> {
    let r = parse_dealt(&payload, max_len);
    payload.zeroize();
    r
}

fn parse_dealt(bytes: &[u8], max_len: usize) -> Result<Dealt, ProtocolError> {
    let mut at = Cursor(bytes);
    let party = match at.take(1)? {
        [0] => PartyId::P0,
        [1] => PartyId::P1,
        [2] => PartyId::P2,
        _ => return Err(ProtocolError::Payload("the party is not 0, 1 or 2")),
    };
    let first = at.component(max_len)?;
    let second = at.component(max_len)?;
    if !at.0.is_empty() {
        return Err(ProtocolError::Payload("bytes after the dealt part"));
    }
    Ok(Dealt {
        party,
        first,
        second,
    })
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtocolError> {
        if self.0.len() < n {
            return Err(ProtocolError::Payload("the payload ends early"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u64(&mut self) -> Result<u64, ProtocolError> {
        let b = self.take(8)?;
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        Ok(u64::from_le_bytes(w))
    }

    fn values(&mut self, n: usize) -> Result<Vec<u64>, ProtocolError> {
        let bytes = n
            .checked_mul(8)
            .ok_or(ProtocolError::Payload("a vector's length overflows"))?;
        let b = self.take(bytes)?;
        Ok(b.chunks_exact(8)
            .map(|c| {
                let mut w = [0u8; 8];
                w.copy_from_slice(c);
                u64::from_le_bytes(w)
            })
            .collect())
    }

    fn component(&mut self, max_len: usize) -> Result<Component, ProtocolError> {
        match self.take(1)? {
            [SEED] => {
                let mut s: Seed = [0; 32];
                s.copy_from_slice(self.take(32)?);
                Ok(Component::Seed(s))
            }
            [VALUES] => {
                let n = usize::try_from(self.u64()?)
                    .ok()
                    .filter(|&n| n <= max_len)
                    .ok_or(ProtocolError::Payload(
                        "a vector is longer than the request allows",
                    ))?;
                Ok(Component::Values(self.values(n)?))
            }
            _ => Err(ProtocolError::Payload(
                "a component is neither seed nor values",
            )),
        }
    }
}

/// The payload of a server's shares of `n` values (ids, or an encoder's outputs): its two
/// components, one after the other.
pub fn encode_components(first: &[u64], second: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity((first.len() + second.len()) * 8);
    for x in first.iter().chain(second) {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out
}

/// Reads a payload of [`encode_components`] holding `n` values.
///
/// # Errors
/// [`ProtocolError::Payload`] if its length is not that of two vectors of `n`.
pub fn decode_components(payload: &[u8], n: usize) -> Result<(Vec<u64>, Vec<u64>), ProtocolError> {
    if Some(payload.len()) != n.checked_mul(16) {
        return Err(ProtocolError::Payload(
            "the shares do not hold the announced number of values",
        ));
    }
    let mut at = Cursor(payload);
    Ok((at.values(n)?, at.values(n)?))
}
