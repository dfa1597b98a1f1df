//! One computing party of secure GPT-2, LLaMA or BERT as its own process, connected to the other two
//! over TCP+TLS or QUIC (the `puma-party` binary).
//!
//! The three parties share a configuration file (`parties.toml`, written by the `keygen`
//! binary for a development set-up):
//!
//! ```toml
//! session_id = 7          # all parties must agree on it
//! transport = "tcp"       # or "quic"
//! timeout_secs = 30       # longest wait for a peer (connecting, or any frame)
//!
//! [[party]]
//! id = 0
//! addr = "127.0.0.1:7000" # where this party listens (P2 listens only with QUIC)
//! cert = "p0.cert.pem"    # every party pins every peer's certificate
//! key = "p0.key.pem"      # needed only on party 0's own host
//! # ... one [[party]] table each for ids 1 and 2
//! ```
//!
//! Paths are relative to the file's folder. Roles are those of [`crate::gpt2`]: P0 the
//! client (prompt, output), P1 the model owner (weights), P2 a helper. The client
//! announces its input's public sizes (a decoder's prompt length and the number of tokens
//! to generate; an encoder batch's shape and attention mask) in the first rounds; the
//! input itself stays secret-shared.

use std::fmt;
use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use puma_core::proto::SamplingParams;
use puma_core::{Ctx, Error, PartyId, Width};
use puma_layers::bert::secure::{BatchShape, BertHeads, Outputs, SharedBert, run};
use puma_layers::bert::{BertBatch, BertConfig, BertWeights};
use puma_layers::nn::{
    DecoderArch, Decoding, Observer, OutputMode, SecureSettings, SharedDecoder, StopCheck, generate,
};
use puma_transports::loopback::Network;
use puma_transports::tls::{Identity, Pins, read_cert};
use serde::Deserialize;

use crate::gpt2::{CLIENT, OWNER};

/// The parsed `parties.toml`.
#[derive(Clone, Debug)]
pub struct PartiesConfig {
    /// The session id all parties use.
    pub session_id: u64,
    /// TCP+TLS or QUIC.
    pub transport: Network,
    /// Longest wait for a peer: connecting, and each wait for a frame.
    pub timeout: Duration,
    /// The three parties, by index.
    pub parties: [PartyEntry; 3],
}

/// One party's public entry (and, on its own host, its key).
#[derive(Clone, Debug)]
pub struct PartyEntry {
    /// Where it listens, as written (`host:port`).
    pub addr: String,
    /// Its certificate (PEM).
    pub cert: PathBuf,
    /// Its private key (PEM), if this host has it.
    pub key: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    session_id: u64,
    #[serde(default = "default_transport")]
    transport: String,
    #[serde(default = "default_timeout")]
    timeout_secs: u64,
    party: Vec<RawParty>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParty {
    id: u8,
    addr: String,
    cert: PathBuf,
    key: Option<PathBuf>,
}

fn default_transport() -> String {
    "tcp".into()
}

fn default_timeout() -> u64 {
    30
}

/// Why a party could not run or failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum PartyError {
    /// The configuration file, a certificate, a key or an address is wrong.
    Config(String),
    /// The model could not be loaded or the prompt does not fit it.
    Model(String),
    /// The network could not be set up (a peer unreachable or refused).
    Connect(puma_transports::TransportError),
    /// The peers were started on another model (their fingerprints differ).
    ModelDiffers(ModelDiffers),
    /// The session failed. `broken` lists the peers whose connection broke (a crash or a
    /// cut) when the error itself names another party (one that aborted because of it).
    Session {
        /// The error of this party's run.
        error: puma_transports::TransportError,
        /// Peers whose connection broke without a clean close.
        broken: Vec<PartyId>,
    },
}

impl std::fmt::Display for PartyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PartyError::Config(e) => write!(f, "configuration: {e}"),
            PartyError::Model(e) => write!(f, "model: {e}"),
            PartyError::Connect(e) => write!(f, "connecting: {e}"),
            PartyError::ModelDiffers(e) => write!(f, "model: {e}"),
            PartyError::Session { error, broken } => {
                write!(f, "session failed: {error}")?;
                for p in broken {
                    if error.peer() != Some(*p) {
                        write!(f, "; lost peer {p} (its connection broke)")?;
                    }
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for PartyError {}

impl PartiesConfig {
    /// Reads and checks a `parties.toml`; relative paths are taken from its folder.
    ///
    /// # Errors
    /// [`PartyError::Config`] for an unreadable or malformed file, an unknown transport, or
    /// parties missing or listed twice.
    pub fn from_file(path: &Path) -> Result<PartiesConfig, PartyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| PartyError::Config(format!("cannot read {}: {e}", path.display())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        PartiesConfig::from_toml_str(&text, base)
    }

    /// Parses a `parties.toml` text; relative paths are joined to `base`.
    ///
    /// # Errors
    /// As [`PartiesConfig::from_file`].
    pub fn from_toml_str(text: &str, base: &Path) -> Result<PartiesConfig, PartyError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| PartyError::Config(e.to_string()))?;
        let transport = match raw.transport.as_str() {
            "tcp" => Network::Tcp,
            "quic" => Network::Quic,
            other => {
                return Err(PartyError::Config(format!(
                    "unknown transport {other:?} (expected \"tcp\" or \"quic\")"
                )));
            }
        };
        if raw.timeout_secs == 0 {
            return Err(PartyError::Config("timeout_secs must be positive".into()));
        }
        let mut parties: [Option<PartyEntry>; 3] = [None, None, None];
        for p in raw.party {
            let slot = parties
                .get_mut(usize::from(p.id))
                .ok_or_else(|| PartyError::Config(format!("party id {} is not 0, 1 or 2", p.id)))?;
            if slot.is_some() {
                return Err(PartyError::Config(format!(
                    "party {} is listed twice",
                    p.id
                )));
            }
            *slot = Some(PartyEntry {
                addr: p.addr,
                cert: base.join(p.cert),
                key: p.key.map(|k| base.join(k)),
            });
        }
        let [Some(a), Some(b), Some(c)] = parties else {
            return Err(PartyError::Config(
                "the file must list parties 0, 1 and 2".into(),
            ));
        };
        Ok(PartiesConfig {
            session_id: raw.session_id,
            transport,
            timeout: Duration::from_secs(raw.timeout_secs),
            parties: [a, b, c],
        })
    }

    /// `party`'s entry.
    pub fn entry(&self, party: PartyId) -> &PartyEntry {
        // `parties` has exactly three entries, one per party index.
        let [a, b, c] = &self.parties;
        match party {
            PartyId::P0 => a,
            PartyId::P1 => b,
            PartyId::P2 => c,
        }
    }

    /// `me`'s identity (its certificate and key) and its pins of the peers' certificates.
    ///
    /// # Errors
    /// [`PartyError::Config`] if `me` has no key in the file or a PEM file is unreadable.
    pub fn identity_and_pins(&self, me: PartyId) -> Result<(Identity, Pins), PartyError> {
        let mine = self.entry(me);
        let key = mine.key.as_ref().ok_or_else(|| {
            PartyError::Config(format!("no key for party {} in the file", me.index()))
        })?;
        let identity = Identity::from_pem_files(&mine.cert, key)
            .map_err(|e| PartyError::Config(e.to_string()))?;
        let mut pins = Pins::new();
        for p in [me.next(), me.prev()] {
            let cert =
                read_cert(&self.entry(p).cert).map_err(|e| PartyError::Config(e.to_string()))?;
            pins = pins.with(p, cert);
        }
        Ok((identity, pins))
    }
}

/// Resolves `host:port` to one socket address.
///
/// # Errors
/// [`PartyError::Config`] if it does not resolve.
pub fn resolve(addr: &str) -> Result<SocketAddr, PartyError> {
    addr.to_socket_addrs()
        .map_err(|e| PartyError::Config(format!("address {addr:?}: {e}")))?
        .next()
        .ok_or_else(|| PartyError::Config(format!("address {addr:?} does not resolve")))
}

/// What each party knows before a decoder run: the public architecture, and its own
/// secret (the owner's weights, the client's prompt ids).
#[derive(Clone, Debug)]
pub struct DecoderJob<A: DecoderArch> {
    /// The public architecture (GPT-2's or LLaMA's config).
    pub config: A,
    /// The weights, at the owner only.
    pub weights: Option<Arc<A::Weights>>,
    /// The prompt ids, at the client only.
    pub prompt: Option<Arc<[u32]>>,
    /// The most tokens to generate (the client's choice; announced to the others).
    pub max_new_tokens: usize,
    /// The model's end-of-sequence ids (public, from the checkpoint; all parties must
    /// agree, so they are part of the model fingerprint).
    pub eos: Vec<u32>,
    /// The client's decoding rules ([`ClientRules`]); announced to the others, who pass
    /// `None`.
    pub rules: Option<ClientRules>,
    /// Approximation settings (all parties must agree).
    pub settings: SecureSettings,
}

/// How the client wants its tokens: its decoding rules, whose public part it announces
/// (output mode, whether it ends at the model's end-of-sequence ids, whether it has a
/// stop test, sampling, drafts per step), and its stop test. Its drafter and stop test
/// stay with it.
#[derive(Clone)]
pub struct ClientRules {
    /// The rules; `max_new` is ignored ([`DecoderJob::max_new_tokens`] is announced), and
    /// a non-empty `eos` means "end at the model's end-of-sequence ids".
    pub decoding: Decoding,
    /// The client's stop test (stop strings), if any.
    pub stop: Option<StopCheck>,
}

impl fmt::Debug for ClientRules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientRules")
            .field("decoding", &self.decoding)
            .field("stop", &self.stop.as_ref().map(|_| "client stop test"))
            .finish()
    }
}

/// The announced form of a [`ClientRules`]' public part: mode, end-of-sequence rule,
/// stop test, drafts, then the sampling (present, temperature, top-k + 1 or 0, top-p and
/// min-p as f64 bits or `u64::MAX`).
const RULE_WORDS: usize = 9;

impl ClientRules {
    fn announced(&self) -> [u64; RULE_WORDS] {
        let d = &self.decoding;
        let mode = match d.mode {
            OutputMode::RevealLogits => 0,
            OutputMode::SecureArgmax => 1,
            OutputMode::Private => 2,
        };
        let opt = |v: Option<f64>| v.map_or(u64::MAX, f64::to_bits);
        let (sampled, t, k, p, m) = match &d.sampling {
            Some(s) => (
                1,
                s.temperature.to_bits(),
                s.top_k.map_or(0, |k| k as u64 + 1),
                opt(s.top_p),
                opt(s.min_p),
            ),
            None => (0, 0, 0, u64::MAX, u64::MAX),
        };
        [
            mode,
            u64::from(!d.eos.is_empty()),
            u64::from(d.client_stops),
            d.drafts as u64,
            sampled,
            t,
            k,
            p,
            m,
        ]
    }
}

/// The public decoding rules from their announced words (`model_eos`: the checkpoint's
/// end-of-sequence ids), or an error blaming the client.
fn announced_decoding(w: &[u64], max_new: usize, model_eos: &[u32]) -> Result<Decoding, Error> {
    let bad = || Error::protocol(CLIENT, "announced decoding rules are malformed");
    let word = |i: usize| w.get(i).copied().ok_or_else(bad);
    let mode = match word(0)? {
        0 => OutputMode::RevealLogits,
        1 => OutputMode::SecureArgmax,
        2 => OutputMode::Private,
        _ => return Err(bad()),
    };
    let flag = |i: usize| match word(i)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(bad()),
    };
    let opt = |i: usize| -> Result<Option<f64>, Error> {
        Ok(Some(word(i)?)
            .filter(|&b| b != u64::MAX)
            .map(f64::from_bits))
    };
    let sampling = if flag(4)? {
        Some(SamplingParams {
            temperature: f64::from_bits(word(5)?),
            top_k: match word(6)? {
                0 => None,
                k => Some(usize::try_from(k - 1).map_err(|_| bad())?),
            },
            top_p: opt(7)?,
            min_p: opt(8)?,
        })
    } else {
        None
    };
    let mut d = Decoding::new(max_new, mode);
    if flag(1)? {
        d.eos = model_eos.to_vec();
    }
    d.client_stops = flag(2)?;
    d.drafts = usize::try_from(word(3)?).map_err(|_| bad())?;
    d.sampling = sampling;
    Ok(d)
}

/// What each party knows before an encoder run.
#[derive(Clone, Debug)]
pub struct EncoderJob {
    /// The public architecture.
    pub config: BertConfig,
    /// The weights, at the owner only (their heads are announced by the owner).
    pub weights: Option<Arc<BertWeights>>,
    /// The token ids, at the client only (its public shape is announced by the client).
    pub batch: Option<BertBatch>,
    /// Approximation settings (all parties must agree).
    pub settings: SecureSettings,
}

/// The boxed run of one party's protocol: its output at the client.
pub type PartyRun<T> = std::pin::Pin<Box<dyn Future<Output = Result<T, Error>> + Send>>;

/// Most sequences of an encoder batch the others accept from the client.
pub const MAX_BATCH: usize = 4096;

/// The client announces public sizes to both peers; the others receive them. Returns them.
async fn announce(
    ctx: &mut Ctx,
    from: PartyId,
    sizes: Option<Vec<u64>>,
    n: usize,
) -> Result<Vec<u64>, Error> {
    let me = ctx.me();
    match sizes {
        Some(v) if me == from => {
            ctx.send(me.next(), &v, Width::W64)?;
            ctx.send(me.prev(), &v, Width::W64)?;
            Ok(v)
        }
        _ => ctx.recv(from, n, Width::W64).await,
    }
}

/// A size announced by a peer as a `usize` (`usize::MAX` if it does not fit, which every
/// bound then rejects).
fn size(v: &[u64], i: usize) -> usize {
    v.get(i)
        .and_then(|&x| usize::try_from(x).ok())
        .unwrap_or(usize::MAX)
}

/// A digest of everything public the three parties must agree on before a run: the
/// architecture's public shape, the approximation settings, the fixed-point format and
/// this program's version. Parties loaded with different models (or settings, or
/// versions) have different fingerprints, and [`agree_on_model`] names the peer that
/// differs instead of failing later on a message of an unexpected length.
///
/// `public` is the public description (for example `format!("{spec:?}")`); it must not
/// contain secrets: the fingerprint is sent to both peers and printed.
pub fn model_fingerprint(kind: &str, public: &str, settings: &SecureSettings) -> [u64; 2] {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [
        "puma-rs model fingerprint v1",
        env!("CARGO_PKG_VERSION"),
        kind,
        public,
        &format!("{settings:?}"),
    ] {
        // Length-prefixed, so that no two descriptions concatenate alike.
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let d = h.finalize();
    let word = |i: usize| {
        let mut w = [0u8; 8];
        if let Some(b) = d.get(i * 8..i * 8 + 8) {
            w.copy_from_slice(b);
        }
        u64::from_le_bytes(w)
    };
    [word(0), word(1)]
}

/// The peers whose model fingerprint differs from this party's (see
/// [`model_fingerprint`]): the party protocols' output when the parties were started on
/// different models, settings or versions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelDiffers(pub Vec<PartyId>);

impl std::fmt::Display for ModelDiffers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        write!(
            f,
            "{} {} a different model, settings or puma-rs version: the model fingerprint \
             differs from ours (check every party's --model and options)",
            names.join(" and "),
            if self.0.len() == 1 { "runs" } else { "run" }
        )
    }
}

impl std::error::Error for ModelDiffers {}

/// The first round of every party protocol: each party sends its model fingerprint to
/// both peers and compares both of theirs with its own. Returns the peers that differ.
///
/// A mismatch ends the protocol with this result, not with an error: an error aborts the
/// session, and the abort could reach a peer before that peer has compared the
/// fingerprints itself, leaving it with "aborted by …" instead of the reason. Since any
/// difference is seen by every party (whoever agrees with one peer differs from the
/// other), all three end cleanly after this round, each naming whom it differs from.
///
/// # Errors
/// As `Ctx::send` and `Ctx::recv`.
pub async fn agree_on_model(
    ctx: &mut Ctx,
    fingerprint: [u64; 2],
) -> Result<Result<(), ModelDiffers>, Error> {
    let me = ctx.me();
    ctx.send(me.next(), &fingerprint, Width::W64)?;
    ctx.send(me.prev(), &fingerprint, Width::W64)?;
    let mut differ = Vec::new();
    for peer in [me.next(), me.prev()] {
        let theirs = ctx.recv(peer, fingerprint.len(), Width::W64).await?;
        if theirs.as_slice() != fingerprint.as_slice() {
            differ.push(peer);
        }
    }
    differ.sort_by_key(|p| p.index());
    Ok(if differ.is_empty() {
        Ok(())
    } else {
        Err(ModelDiffers(differ))
    })
}

/// The protocol one party runs for a decoder (GPT-2, LLaMA): the parties check that they
/// run the same model ([`agree_on_model`]), the client announces the public sizes and its
/// decoding rules ([`ClientRules`]; greedy with the logits revealed, ending at the model's
/// end-of-sequence ids, if it gives none), the owner shares the weights, the client its
/// prompt, and the parties generate by those rules up to the announced number of tokens. Returns the generated ids at
/// the client, nothing elsewhere, or [`ModelDiffers`] at every party if the fingerprints
/// differ.
pub fn decoder_protocol<A>(
    me: PartyId,
    job: DecoderJob<A>,
    observer: Option<Observer>,
) -> impl FnOnce(Ctx) -> PartyRun<Result<Vec<u32>, ModelDiffers>> + Send + 'static
where
    A: DecoderArch + Send + Sync + 'static,
    A::Weights: Send + Sync + 'static,
{
    move |mut ctx: Ctx| {
        Box::pin(async move {
            let DecoderJob {
                config,
                weights,
                prompt,
                max_new_tokens,
                eos,
                rules,
                settings,
            } = job;
            let spec = config.spec()?;
            let fingerprint = model_fingerprint(
                "decoder",
                &format!("{spec:?} {:?} eos {eos:?}", ctx.fixed()),
                &settings,
            );
            if let Err(differs) = agree_on_model(&mut ctx, fingerprint).await? {
                return Ok(Err(differs));
            }
            let max_positions = spec.max_positions;
            // The prompt length, the number of steps and the decoding rules are public;
            // the client tells.
            let rules = (me == CLIENT).then(|| {
                rules.unwrap_or_else(|| ClientRules {
                    decoding: Decoding {
                        eos: eos.clone(),
                        ..Decoding::new(max_new_tokens, OutputMode::RevealLogits)
                    },
                    stop: None,
                })
            });
            let mine = rules.as_ref().map(|r| {
                let len = prompt.as_ref().map_or(0, |p| p.len());
                let mut words = vec![len as u64, max_new_tokens as u64];
                words.extend(r.announced());
                words
            });
            let sizes = announce(&mut ctx, CLIENT, mine, 2 + RULE_WORDS).await?;
            let (prompt_len, max_new) = (size(&sizes, 0), size(&sizes, 1));
            let mut decoding = announced_decoding(sizes.get(2..).unwrap_or(&[]), max_new, &eos)?;
            let stop = match rules {
                Some(r) => {
                    decoding.drafter = r.decoding.drafter;
                    r.stop
                }
                None => None,
            };
            let fits = prompt_len >= 1
                && prompt_len
                    .checked_add(max_new)
                    .is_some_and(|n| n <= max_positions);
            if !fits {
                return Err(if me == CLIENT {
                    Error::misuse("the prompt and the tokens to generate do not fit the model")
                } else {
                    Error::protocol(CLIENT, "announced sizes do not fit the model")
                });
            }
            let shared = SharedDecoder::share(&mut ctx, OWNER, &config, weights.as_deref()).await?;
            // The owner's plaintext is not needed any more.
            drop(weights);
            let generation = generate(
                &mut ctx,
                &shared,
                CLIENT,
                prompt.as_deref(),
                prompt_len,
                &decoding,
                &settings,
                observer,
                stop.as_ref(),
            )
            .await?;
            Ok(Ok(generation.ids))
        })
    }
}

/// The protocol one party runs for an encoder (BERT, RoBERTa): the parties check that
/// they run the same model ([`agree_on_model`]), the owner announces its
/// model's heads, the client its batch's public shape (sizes and attention mask), the
/// owner shares the weights, and the parties compute mean-pooled sentence embeddings
/// revealed to the client. Returns the `batch × d` embeddings at the client, or
/// [`ModelDiffers`] at every party if the fingerprints differ.
pub fn encoder_protocol(
    me: PartyId,
    job: EncoderJob,
) -> impl FnOnce(Ctx) -> PartyRun<Result<Vec<f64>, ModelDiffers>> + Send + 'static {
    move |mut ctx: Ctx| {
        Box::pin(async move {
            let EncoderJob {
                config,
                weights,
                batch,
                settings,
            } = job;
            let fingerprint = model_fingerprint(
                "encoder",
                &format!("{config:?} {:?}", ctx.fixed()),
                &settings,
            );
            if let Err(differs) = agree_on_model(&mut ctx, fingerprint).await? {
                return Ok(Err(differs));
            }
            // The owner's heads and the client's batch size, together.
            let heads = weights.as_deref().map(BertHeads::of);
            let dims = batch
                .as_ref()
                .map(|b| vec![b.batch as u64, b.seq_len as u64]);
            let (mut ch, mut cd) = (ctx.fork(), ctx.fork());
            let (heads, dims) = puma_core::try_join(
                BertHeads::announce(&mut ch, OWNER, heads),
                announce(&mut cd, CLIENT, dims, 2),
            )
            .await?;
            let (nb, len) = (size(&dims, 0), size(&dims, 1));
            if nb == 0 || nb > MAX_BATCH || len == 0 || len > config.max_position_embeddings {
                return Err(if me == CLIENT {
                    Error::misuse("the batch does not fit the model")
                } else {
                    Error::protocol(CLIENT, "announced sizes do not fit the model")
                });
            }
            // Then the attention mask (public, as the sequence lengths are).
            let mask = batch
                .as_ref()
                .map(|b| b.attention_mask.iter().map(|&m| u64::from(m)).collect());
            let mask = announce(&mut ctx, CLIENT, mask, nb * len).await?;
            let shape = BatchShape {
                batch: nb,
                seq_len: len,
                attention_mask: mask.iter().map(|&m| m != 0).collect(),
            };
            let shared =
                SharedBert::share(&mut ctx, OWNER, &config, heads, weights.as_deref()).await?;
            drop(weights);
            let outputs = Outputs {
                embeddings: true,
                ..Outputs::default()
            };
            let r = run(
                &mut ctx,
                &shared,
                CLIENT,
                batch.as_ref(),
                &shape,
                outputs,
                &settings,
            )
            .await?;
            Ok(Ok(r.embeddings.unwrap_or_default()))
        })
    }
}
