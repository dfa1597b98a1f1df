//! Whole models over shared weights: the owner shares a checkpoint within a session, then
//! all parties run forward passes or generate tokens for a client, in the same session.
//!
//! The architecture is read from the checkpoint (`model_type` in `config.json`, or a GGUF
//! file): GPT-2 and LLaMA-style decoders run on the one decoder path of `puma-layers`
//! (generation with the KV cache, forward passes), BERT / RoBERTa on its encoder path
//! (embeddings, pooled output, classification logits).

use std::ffi::c_char;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use puma_core::{Ctx, Error, PartyId};
use puma_layers::bert::secure::{BatchShape, BertHeads, Outputs, SharedBert};
use puma_layers::bert::{BertBatch, BertConfig, BertWeights, load_bert};
use puma_layers::gguf::GgufFile;
use puma_layers::llama::{LlamaConfig, LlamaWeights, load_gguf, load_hf};
use puma_layers::nn::{SecureSettings, SharedDecoder, forward_logits};
use puma_layers::stopping::{eos_ids_in_dir, eos_ids_in_gguf};
use puma_layers::{Gpt2Config, Gpt2Weights, load_gpt2};

use crate::error::{FfiError, entry, puma_status};
use crate::handle::{self, Handle, Kind};
use crate::session::{OpResult, party, puma_session};

/// Architecture of `puma_model_info`: GPT-2 (`model_type` `"gpt2"`).
pub const PUMA_ARCH_GPT2: u32 = 0;
/// Architecture of `puma_model_info`: a LLaMA-style decoder (`model_type` `"llama"`, or a
/// GGUF file).
pub const PUMA_ARCH_LLAMA: u32 = 1;
/// Architecture of `puma_model_info`: a BERT / RoBERTa encoder (`model_type` `"bert"` or
/// `"roberta"`).
pub const PUMA_ARCH_BERT: u32 = 2;

/// Output of `puma_session_start_encode`: the last hidden state of every position
/// (`batch·seq_len × d`; padded positions are zeros).
pub const PUMA_ENCODE_HIDDEN: u32 = 1;
/// Output of `puma_session_start_encode`: the pooled output (`batch × d`).
pub const PUMA_ENCODE_POOLED: u32 = 2;
/// Output of `puma_session_start_encode`: the classification logits (`batch × labels`).
pub const PUMA_ENCODE_LOGITS: u32 = 4;
/// Output of `puma_session_start_encode`: mean-pooled, L2-normalised sentence embeddings
/// (`batch × d`).
pub const PUMA_ENCODE_EMBEDDINGS: u32 = 8;

/// One party's shares of a model of some architecture.
pub(crate) enum SharedModel {
    /// A decoder (GPT-2 or LLaMA).
    Decoder {
        /// `PUMA_ARCH_GPT2` or `PUMA_ARCH_LLAMA`.
        arch: u32,
        /// The shares.
        model: SharedDecoder,
        /// The end-of-sequence ids of the checkpoint this party named (its own files).
        eos: Vec<u32>,
    },
    /// A BERT / RoBERTa encoder.
    Encoder(SharedBert),
}

/// One party's shares of a model, from `puma_session_take_model`; freed with
/// `puma_model_free`.
pub struct puma_model {
    party: PartyId,
    pub(crate) shared: Arc<SharedModel>,
}

impl Handle for puma_model {
    const KIND: Kind = Kind::Model;
    const NAME: &'static str = "model";
}

impl puma_model {
    /// The model `shared` of party `party`.
    pub(crate) fn new(party: PartyId, shared: SharedModel) -> puma_model {
        puma_model {
            party,
            shared: Arc::new(shared),
        }
    }
}

/// The public description of a model, of any architecture.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct puma_model_info {
    /// `PUMA_ARCH_GPT2`, `PUMA_ARCH_LLAMA` or `PUMA_ARCH_BERT`.
    pub architecture: u32,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    /// Longest input, in tokens (prompt and generated tokens together).
    pub max_positions: usize,
    /// Vocabulary size: the number of logits per position.
    pub vocab_size: usize,
}

/// The public architecture of a GPT-2 model.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct puma_gpt2_config {
    /// Transformer blocks.
    pub n_layer: usize,
    /// Width of the residual stream.
    pub n_embd: usize,
    /// Attention heads.
    pub n_head: usize,
    /// Longest input, in tokens.
    pub n_positions: usize,
    /// Vocabulary size: the number of logits per position.
    pub vocab_size: usize,
}

/// A path from C.
///
/// # Safety
/// `p` must be null or a NUL-terminated string.
unsafe fn path<'a>(p: *const c_char) -> Result<&'a Path, FfiError> {
    // SAFETY: the caller's contract.
    unsafe { handle::c_str(p, "path") }.map(Path::new)
}

/// What a party loaded to share a model: the public config, and the weights at the owner.
enum Loaded {
    Gpt2(Gpt2Config, Option<Gpt2Weights>, Vec<u32>),
    Llama(LlamaConfig, Option<LlamaWeights>, Vec<u32>),
    Bert(Box<(BertConfig, Option<BertWeights>)>),
}

/// The `config.json` of `path`: the file itself, or the one in the directory `path`.
fn config_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("config.json")
    } else {
        path.to_path_buf()
    }
}

fn io_error(e: &dyn std::fmt::Display) -> FfiError {
    FfiError::new(puma_status::PUMA_ERR_IO, e.to_string())
}

/// Reads the architecture from the checkpoint and loads what this party shares: the whole
/// checkpoint (a directory, or a LLaMA GGUF file) at the owner, the public config (the
/// `config.json` file, its directory, or the GGUF file) elsewhere.
fn load(path: &Path, owner: bool) -> Result<Loaded, FfiError> {
    if path.extension().is_some_and(|e| e == "gguf") {
        let file = GgufFile::open(path).map_err(|e| io_error(&e))?;
        let eos = eos_ids_in_gguf(&file);
        return if owner {
            drop(file);
            let (cfg, w) = load_gguf(path).map_err(|e| io_error(&e))?;
            Ok(Loaded::Llama(cfg, Some(w), eos))
        } else {
            let cfg = LlamaConfig::from_gguf(&file).map_err(|e| io_error(&e))?;
            Ok(Loaded::Llama(cfg, None, eos))
        };
    }
    let config = config_file(path);
    let text = std::fs::read_to_string(&config)
        .map_err(|e| io_error(&format_args!("{}: {e}", config.display())))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| io_error(&format_args!("{}: {e}", config.display())))?;
    // A decoder's end-of-sequence ids, from the directory of its config.json.
    let eos = || {
        let dir = config.parent().unwrap_or(Path::new("."));
        eos_ids_in_dir(dir).map_err(|e| io_error(&e))
    };
    match json.get("model_type").and_then(serde_json::Value::as_str) {
        Some("gpt2") if owner => {
            let (cfg, w) = load_gpt2(path).map_err(|e| io_error(&e))?;
            Ok(Loaded::Gpt2(cfg, Some(w), eos()?))
        }
        Some("gpt2") => {
            let cfg = Gpt2Config::from_file(&config).map_err(|e| io_error(&e))?;
            Ok(Loaded::Gpt2(cfg, None, eos()?))
        }
        Some("llama") if owner => {
            let (cfg, w) = load_hf(path).map_err(|e| io_error(&e))?;
            Ok(Loaded::Llama(cfg, Some(w), eos()?))
        }
        Some("llama") => {
            let cfg = LlamaConfig::from_file(&config).map_err(|e| io_error(&e))?;
            Ok(Loaded::Llama(cfg, None, eos()?))
        }
        Some("bert" | "roberta") if owner => {
            let (cfg, w) = load_bert(path).map_err(|e| io_error(&e))?;
            Ok(Loaded::Bert(Box::new((cfg, Some(w)))))
        }
        Some("bert" | "roberta") => {
            let cfg = BertConfig::from_file(&config).map_err(|e| io_error(&e))?;
            Ok(Loaded::Bert(Box::new((cfg, None))))
        }
        Some(other) => Err(FfiError::invalid(format!(
            "model_type {other:?} is not supported (supported: \"gpt2\", \"llama\", \"bert\", \"roberta\")"
        ))),
        None => Err(io_error(&format_args!(
            "{}: no model_type",
            config.display()
        ))),
    }
}

/// Shares the model that `owner` loaded (an encoder's heads are announced by the owner
/// first).
async fn share(ctx: &mut Ctx, owner: PartyId, loaded: Loaded) -> Result<SharedModel, Error> {
    Ok(match loaded {
        Loaded::Gpt2(cfg, w, eos) => SharedModel::Decoder {
            arch: PUMA_ARCH_GPT2,
            model: SharedDecoder::share(ctx, owner, &cfg, w.as_ref()).await?,
            eos,
        },
        Loaded::Llama(cfg, w, eos) => SharedModel::Decoder {
            arch: PUMA_ARCH_LLAMA,
            model: SharedDecoder::share(ctx, owner, &cfg, w.as_ref()).await?,
            eos,
        },
        Loaded::Bert(b) => {
            let (cfg, w) = *b;
            let heads = BertHeads::announce(ctx, owner, w.as_ref().map(BertHeads::of)).await?;
            SharedModel::Encoder(SharedBert::share(ctx, owner, &cfg, heads, w.as_ref()).await?)
        }
    })
}

/// Starts sharing a model held by party `owner`, of the architecture that its
/// `config.json` names (`model_type` `"gpt2"`, `"llama"`, `"bert"` or `"roberta"`) or a
/// LLaMA GGUF file. At the owner, `path` is a Hugging Face checkpoint directory
/// (`config.json` + `model.safetensors`, f32/f16/bf16) or a GGUF file; at the other
/// parties it is the same public `config.json`, a directory holding it, or the GGUF file
/// (whose metadata is read). Result: a
/// model (`puma_session_take_model`), usable in this session only.
///
/// Cost: rounds of the chunked share (one per 2^20 parameters, at least one; an encoder
/// one more to announce its heads); 8 bytes per parameter from the owner.
///
/// Ownership: `path` is only read during the call (the files are loaded at once).
///
/// Every party checks the configuration, sizes included, before anything is allocated:
/// a model beyond the size limits of `puma_layers::limits` (e.g. more than 262,144 tokens
/// of vocabulary, or more than 2^34 parameters) is refused at every party.
///
/// Errors: `PUMA_ERR_IO` if a file cannot be read or parsed, describes an invalid model
/// or one beyond the size limits (the message names the field and the limit), or
/// `config.json` names no `model_type`; `PUMA_ERR_INVALID_ARGUMENT` for a bad owner or an
/// unsupported architecture; `PUMA_ERR_WRONG_STATE` if an operation runs or a result
/// waits.
///
/// # Safety
/// `session` must be a live session used by no other thread; `path` a NUL-terminated
/// string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_model_share(
    session: *mut puma_session,
    owner: u32,
    path: *const c_char,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow_mut(session) }?;
        s.check_idle()?;
        let owner = party(owner, "owner")?;
        // SAFETY: the caller's contract.
        let path = unsafe { self::path(path) }?;
        let loaded = load(path, s.me() == owner)?;
        s.start(move |mut ctx| async move {
            let m = share(&mut ctx, owner, loaded).await?;
            Ok(OpResult::Model(Box::new(m)))
        })
    })
}

/// Starts sharing a GPT-2 model held by party `owner`: `puma_session_start_model_share`
/// for a checkpoint whose `config.json` names `model_type` `"gpt2"`.
///
/// # Safety
/// As `puma_session_start_model_share`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_gpt2_share(
    session: *mut puma_session,
    owner: u32,
    path: *const c_char,
) -> puma_status {
    // SAFETY: the caller's contract, which is the same.
    unsafe { puma_session_start_model_share(session, owner, path) }
}

/// Borrows a model of `s`'s party.
///
/// # Safety
/// `model` must be null or a model pointer not being freed by another thread.
unsafe fn own_model<'a>(
    s: &puma_session,
    model: *const puma_model,
) -> Result<&'a puma_model, FfiError> {
    // SAFETY: the caller's contract.
    let m = unsafe { handle::borrow(model) }?;
    if m.party != s.me() {
        return Err(FfiError::invalid(
            "the model belongs to another party's session",
        ));
    }
    Ok(m)
}

/// Borrows a decoder model of `s`'s party, for `what` (named in the error otherwise).
///
/// # Safety
/// As [`own_model`].
pub(crate) unsafe fn own_decoder<'a>(
    s: &puma_session,
    model: *const puma_model,
    what: &str,
) -> Result<&'a puma_model, FfiError> {
    // SAFETY: the caller's contract.
    let m = unsafe { own_model(s, model) }?;
    match &*m.shared {
        SharedModel::Decoder { .. } => Ok(m),
        SharedModel::Encoder(_) => Err(FfiError::invalid(format!(
            "{what} needs a decoder model (GPT-2, LLaMA)"
        ))),
    }
}

/// The client's token ids, checked: `Some` at the client (which must pass them), `None`
/// elsewhere (which must not).
///
/// # Safety
/// `ids` must be null or valid for reading `len` values.
pub(crate) unsafe fn client_ids(
    s: &puma_session,
    client: PartyId,
    ids: *const u32,
    len: usize,
    vocab_size: usize,
) -> Result<Option<Vec<u32>>, FfiError> {
    match (s.me() == client, ids.is_null()) {
        (true, true) => Err(FfiError::new(
            puma_status::PUMA_ERR_NULL_POINTER,
            "the client must pass its ids",
        )),
        (true, false) => {
            // SAFETY: readable for `len` values by the caller's contract.
            let v = unsafe { handle::slice(ids, len, "ids") }?;
            if v.iter().any(|&id| id as usize >= vocab_size) {
                return Err(FfiError::invalid("an id is outside the vocabulary"));
            }
            Ok(Some(v.to_vec()))
        }
        (false, true) => Ok(None),
        (false, false) => Err(FfiError::invalid("only the client passes ids")),
    }
}

/// Starts one secure forward pass of a decoder (GPT-2, LLaMA) over `len` token ids held
/// by party `client`:
/// the client passes its `ids` (`len` of them, each below the vocabulary size), the other
/// parties `NULL` and the same `len` (public). Result: values
/// (`puma_session_take_values`): the `len × vocab_size` logits of every position
/// (row-major) at the client, nothing elsewhere. Uses the secure model's default settings
/// (the precise GeLU or SiLU, the minimax softmax exponential).
///
/// Ownership: `ids` is only read during the call; `model` stays owned by the caller (the
/// operation keeps its own reference, so the model may be freed while it runs).
///
/// Errors: `PUMA_ERR_INVALID_ARGUMENT` for an encoder model, `len` outside
/// 1..=max_positions, ids outside the vocabulary, ids at a non-client, a model of another
/// party; `PUMA_ERR_NULL_POINTER` for
/// no ids at the client; `PUMA_ERR_WRONG_STATE` if an operation runs or a result waits.
///
/// # Safety
/// `session` must be a live session used by no other thread; `model` a live model; `ids`
/// `NULL` or valid for reading `len` values.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_gpt2_forward(
    session: *mut puma_session,
    model: *const puma_model,
    client: u32,
    ids: *const u32,
    len: usize,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow_mut(session) }?;
        s.check_idle()?;
        // SAFETY: the caller's contract.
        let m = unsafe { own_decoder(s, model, "a forward pass") }?;
        let client = party(client, "client")?;
        let info = m.info();
        if len == 0 || len > info.max_positions {
            return Err(FfiError::invalid(format!(
                "`len` must be in 1..={}",
                info.max_positions
            )));
        }
        // SAFETY: the caller's contract.
        let mine = unsafe { client_ids(s, client, ids, len, info.vocab_size) }?;
        let shared = Arc::clone(&m.shared);
        s.start(move |mut ctx| async move {
            let settings = SecureSettings::default();
            let SharedModel::Decoder { model, .. } = &*shared else {
                return Err(Error::bug("a forward pass on an encoder"));
            };
            let logits =
                forward_logits(&mut ctx, model, client, mine.as_deref(), len, &settings).await?;
            Ok(OpResult::Values(logits))
        })
    })
}

impl puma_model {
    pub(crate) fn info(&self) -> puma_model_info {
        match &*self.shared {
            SharedModel::Decoder { arch, model, .. } => {
                let c = model.spec();
                puma_model_info {
                    architecture: *arch,
                    n_layer: c.layers,
                    d_model: c.d,
                    max_positions: c.max_positions,
                    vocab_size: c.vocab,
                }
            }
            SharedModel::Encoder(m) => {
                let c = m.config();
                puma_model_info {
                    architecture: PUMA_ARCH_BERT,
                    n_layer: c.num_hidden_layers,
                    d_model: c.hidden_size,
                    max_positions: c.max_position_embeddings,
                    vocab_size: c.vocab_size,
                }
            }
        }
    }
}

/// Writes the public description of a model of any architecture to `*out`.
///
/// # Safety
/// `model` must be a live model; `out` valid for writing one `puma_model_info`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_model_get_info(
    model: *const puma_model,
    out: *mut puma_model_info,
) -> puma_status {
    entry(|| {
        handle::check_out(out, "out")?;
        // SAFETY: the caller's contract.
        let m = unsafe { handle::borrow(model) }?;
        // SAFETY: checked non-null and aligned; writable by the caller's contract.
        unsafe { handle::write(out, m.info()) }
    })
}

/// Writes a GPT-2 model's public architecture to `*out`.
///
/// Errors: `PUMA_ERR_INVALID_ARGUMENT` for a model of another architecture (see
/// `puma_model_get_info`).
///
/// # Safety
/// `model` must be a live model; `out` valid for writing one `puma_gpt2_config`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_model_config(
    model: *const puma_model,
    out: *mut puma_gpt2_config,
) -> puma_status {
    entry(|| {
        handle::check_out(out, "out")?;
        // SAFETY: the caller's contract.
        let m = unsafe { handle::borrow(model) }?;
        let SharedModel::Decoder {
            arch: PUMA_ARCH_GPT2,
            model,
            ..
        } = &*m.shared
        else {
            return Err(FfiError::invalid(
                "not a GPT-2 model (see puma_model_get_info)",
            ));
        };
        let c = model.spec();
        let cfg = puma_gpt2_config {
            n_layer: c.layers,
            n_embd: c.d,
            n_head: c.heads.q,
            n_positions: c.max_positions,
            vocab_size: c.vocab,
        };
        // SAFETY: checked non-null and aligned; writable by the caller's contract.
        unsafe { handle::write(out, cfg) }
    })
}

/// Starts one secure run of an encoder (BERT, RoBERTa) over a batch of `batch` sequences
/// padded to `seq_len` tokens, held by party `client`: every party passes the same public
/// `attention_mask` (`batch × seq_len` bytes, 1 for a real token, 0 for padding: the
/// sequence lengths are public), the client its `ids` (`batch × seq_len`, each below the
/// vocabulary size; padded positions are ignored), the others `NULL`. Token types are 0.
/// `outputs` is a sum of `PUMA_ENCODE_HIDDEN`, `PUMA_ENCODE_POOLED`,
/// `PUMA_ENCODE_LOGITS` and `PUMA_ENCODE_EMBEDDINGS`. Result: values
/// (`puma_session_take_values`) at the client, nothing elsewhere: the requested outputs
/// one after the other in that order, each row-major (hidden: `batch·seq_len × d` with
/// zeros at padded positions; pooled: `batch × d`; logits: `batch × labels`; embeddings:
/// `batch × d`).
///
/// Ownership: `ids` and `attention_mask` are only read during the call; `model` stays
/// owned by the caller.
///
/// Errors: `PUMA_ERR_INVALID_ARGUMENT` for a decoder model, no or unknown outputs, pooled
/// output or logits from a model without pooler or classifier, a batch that does not fit
/// the model (an empty sequence, `seq_len` above its positions), ids outside the
/// vocabulary, ids at a non-client, a model of another party; `PUMA_ERR_NULL_POINTER` for
/// no mask, or no ids at the client; `PUMA_ERR_WRONG_STATE` if an operation runs or a
/// result waits.
///
/// # Safety
/// `session` must be a live session used by no other thread; `model` a live model;
/// `attention_mask` valid for reading `batch × seq_len` bytes; `ids` `NULL` or valid for
/// reading `batch × seq_len` values.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn puma_session_start_encode(
    session: *mut puma_session,
    model: *const puma_model,
    client: u32,
    ids: *const u32,
    attention_mask: *const u8,
    batch: usize,
    seq_len: usize,
    outputs: u32,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow_mut(session) }?;
        s.check_idle()?;
        // SAFETY: the caller's contract.
        let m = unsafe { own_model(s, model) }?;
        let client = party(client, "client")?;
        let SharedModel::Encoder(bert) = &*m.shared else {
            return Err(FfiError::invalid(
                "encoding needs an encoder model (BERT, RoBERTa)",
            ));
        };
        let all =
            PUMA_ENCODE_HIDDEN | PUMA_ENCODE_POOLED | PUMA_ENCODE_LOGITS | PUMA_ENCODE_EMBEDDINGS;
        if outputs == 0 || outputs & !all != 0 {
            return Err(FfiError::invalid(format!("unknown outputs {outputs:#x}")));
        }
        let want = Outputs {
            hidden: outputs & PUMA_ENCODE_HIDDEN != 0,
            pooled: outputs & PUMA_ENCODE_POOLED != 0,
            logits: outputs & PUMA_ENCODE_LOGITS != 0,
            embeddings: outputs & PUMA_ENCODE_EMBEDDINGS != 0,
        };
        let heads = bert.heads();
        if (want.pooled && !heads.pooler) || (want.logits && heads.labels == 0) {
            return Err(FfiError::invalid(
                "the model has no pooler or no classifier for the requested outputs",
            ));
        }
        let cfg = bert.config();
        if batch == 0 || seq_len == 0 || seq_len > cfg.max_position_embeddings {
            return Err(FfiError::invalid(format!(
                "`batch` must be positive and `seq_len` in 1..={}",
                cfg.max_position_embeddings
            )));
        }
        let n = batch
            .checked_mul(seq_len)
            .ok_or_else(|| FfiError::invalid("`batch × seq_len` overflows"))?;
        // SAFETY: readable for `n` bytes by the caller's contract.
        let mask = unsafe { handle::slice(attention_mask, n, "attention_mask") }?;
        let attention_mask: Vec<bool> = mask.iter().map(|&b| b != 0).collect();
        // SAFETY: the caller's contract.
        let mine = unsafe { client_ids(s, client, ids, n, cfg.vocab_size) }?;
        let input = mine.map(|input_ids| BertBatch {
            batch,
            seq_len,
            input_ids,
            token_type_ids: vec![0; n],
            attention_mask: attention_mask.clone(),
        });
        if let Some(b) = &input {
            b.check(cfg).map_err(|e| FfiError::invalid(e.to_string()))?;
        }
        let shape = BatchShape {
            batch,
            seq_len,
            attention_mask,
        };
        let shared = Arc::clone(&m.shared);
        s.start(move |mut ctx| async move {
            let SharedModel::Encoder(bert) = &*shared else {
                return Err(Error::bug("encoding with a decoder"));
            };
            let settings = SecureSettings::default();
            let r = puma_layers::bert::secure::run(
                &mut ctx,
                bert,
                client,
                input.as_ref(),
                &shape,
                want,
                &settings,
            )
            .await?;
            let parts = [r.hidden, r.pooled, r.logits, r.embeddings];
            let values = (ctx.me() == client)
                .then(|| parts.into_iter().flatten().flatten().collect::<Vec<f64>>());
            Ok(OpResult::Values(values))
        })
    })
}

/// Frees a model. `NULL` is a no-op; a forward pass already started keeps its own
/// reference.
///
/// Errors: `PUMA_ERR_INVALID_HANDLE` if `model` is not a live model (e.g. freed already).
///
/// # Safety
/// `model` must be `NULL` or a model pointer from this library, not in use by another
/// thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_model_free(model: *mut puma_model) -> puma_status {
    // SAFETY: the caller's contract.
    entry(|| unsafe { handle::free(model) })
}
