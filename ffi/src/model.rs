//! GPT-2 over shared weights: the owner shares a checkpoint, then all parties run forward
//! passes on a client's token ids.

use std::ffi::{CStr, c_char};
use std::path::Path;
use std::sync::Arc;

use puma_core::PartyId;
use puma_layers::nn::{self, SecureSettings, SharedDecoder as SharedGpt2};
use puma_layers::{Gpt2Config, load_gpt2};

use crate::error::{FfiError, entry, puma_status};
use crate::handle::{self, Handle, Kind};
use crate::session::{OpResult, party, puma_session};

/// One party's shares of a GPT-2 model, from `puma_session_take_model`; freed with
/// `puma_model_free`.
pub struct puma_model {
    party: PartyId,
    shared: Arc<SharedGpt2>,
}

impl Handle for puma_model {
    const KIND: Kind = Kind::Model;
    const NAME: &'static str = "model";
}

impl puma_model {
    /// The model `shared` of party `party`.
    pub(crate) fn new(party: PartyId, shared: SharedGpt2) -> puma_model {
        puma_model {
            party,
            shared: Arc::new(shared),
        }
    }
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
    if p.is_null() {
        return Err(FfiError::new(
            puma_status::PUMA_ERR_NULL_POINTER,
            "`path` is null",
        ));
    }
    // SAFETY: non-null, NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(Path::new)
        .map_err(|_| FfiError::invalid("`path` is not UTF-8"))
}

/// Starts sharing a GPT-2 model held by party `owner`. At the owner, `path` is a Hugging
/// Face checkpoint directory (`config.json` + `model.safetensors`, f32/f16/bf16); at the
/// other parties it is the path of the same public `config.json`. Result: a model
/// (`puma_session_take_model`).
///
/// Cost: 1 round; 8 bytes per parameter from the owner.
///
/// Ownership: `path` is only read during the call (the files are loaded at once).
///
/// Errors: `PUMA_ERR_IO` if a file cannot be read or parsed; `PUMA_ERR_INVALID_ARGUMENT`
/// for a bad owner or weights that do not fit; `PUMA_ERR_WRONG_STATE` if an operation
/// runs or a result waits.
///
/// # Safety
/// `session` must be a live session used by no other thread; `path` a NUL-terminated
/// string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_gpt2_share(
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
        let io = |e: &dyn std::fmt::Display| FfiError::new(puma_status::PUMA_ERR_IO, e.to_string());
        let (cfg, weights) = if s.me() == owner {
            let (cfg, w) = load_gpt2(path).map_err(|e| io(&e))?;
            (cfg, Some(w))
        } else {
            (Gpt2Config::from_file(path).map_err(|e| io(&e))?, None)
        };
        s.start(move |mut ctx| async move {
            let m = SharedGpt2::share(&mut ctx, owner, &cfg, weights.as_ref()).await?;
            Ok(OpResult::Model(Box::new(m)))
        })
    })
}

/// Starts one secure GPT-2 forward pass over `len` token ids held by party `client`:
/// the client passes its `ids` (`len` of them, each below the vocabulary size), the other
/// parties `NULL` and the same `len` (public). Result: values
/// (`puma_session_take_values`): the `len × vocab_size` logits of every position
/// (row-major) at the client, nothing elsewhere. Uses the precise GeLU of the model's
/// form and the second-order softmax exponential.
///
/// Ownership: `ids` is only read during the call; `model` stays owned by the caller (the
/// operation keeps its own reference, so the model may be freed while it runs).
///
/// Errors: `PUMA_ERR_INVALID_ARGUMENT` for `len` outside 1..=n_positions, ids outside the
/// vocabulary, ids at a non-client, a model of another party; `PUMA_ERR_NULL_POINTER` for
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
        let m = unsafe { handle::borrow(model) }?;
        if m.party != s.me() {
            return Err(FfiError::invalid(
                "the model belongs to another party's session",
            ));
        }
        let client = party(client, "client")?;
        let spec = m.shared.spec();
        if len == 0 || len > spec.max_positions {
            return Err(FfiError::invalid(format!(
                "`len` must be in 1..={}",
                spec.max_positions
            )));
        }
        let mine = match (s.me() == client, ids.is_null()) {
            (true, true) => {
                return Err(FfiError::new(
                    puma_status::PUMA_ERR_NULL_POINTER,
                    "the client must pass its ids",
                ));
            }
            (true, false) => {
                // SAFETY: readable for `len` values by the caller's contract.
                let v = unsafe { handle::slice(ids, len, "ids") }?;
                if v.iter().any(|&id| id as usize >= spec.vocab) {
                    return Err(FfiError::invalid("an id is outside the vocabulary"));
                }
                Some(v.to_vec())
            }
            (false, true) => None,
            (false, false) => return Err(FfiError::invalid("only the client passes ids")),
        };
        let shared = Arc::clone(&m.shared);
        s.start(move |mut ctx| async move {
            let settings = SecureSettings::default();
            let logits =
                nn::forward_logits(&mut ctx, &shared, client, mine.as_deref(), len, &settings)
                    .await?;
            Ok(OpResult::Values(logits))
        })
    })
}

/// Writes the model's public architecture to `*out`.
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
        let c = m.shared.spec();
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
