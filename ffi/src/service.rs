//! The thin client of the secure inference service from C (and Python over ctypes): a
//! client outside the three `puma-serve` servers deals its prompt or batch to them and
//! reconstructs its result from their shares (`puma_serve::client::ServiceClient`).
//! Unlike the rest of this API, these calls do their own network IO and block until the
//! request ends.

use std::ffi::c_char;
use std::path::Path;
use std::time::Duration;

use puma_serve::client::{ClientError, GenerateOptions, ServiceClient};
use puma_serve::config::ServiceConfig;
use puma_serve::protocol::{ErrorKind, WireMode, WireOutputs, WireSampling};

use crate::error::{FfiError, entry, puma_status};
use crate::generate::{
    PUMA_GENERATE_CLIENT_STOPS, PUMA_GENERATE_MODEL_EOS, PUMA_OUTPUT_PRIVATE,
    PUMA_OUTPUT_SECURE_ARGMAX, puma_generate_options,
};
use crate::handle::{self, Handle, Kind};
use crate::model::{
    PUMA_ENCODE_EMBEDDINGS, PUMA_ENCODE_HIDDEN, PUMA_ENCODE_LOGITS, PUMA_ENCODE_POOLED,
};

/// The longest a service request may take from C.
const DEADLINE: Duration = Duration::from_secs(600);

/// A client of the three servers of a service, from `puma_service_client_new`; freed
/// with `puma_service_client_free`.
pub struct puma_service_client {
    client: ServiceClient,
}

impl Handle for puma_service_client {
    const KIND: Kind = Kind::ServiceClient;
    const NAME: &'static str = "service client";
}

impl From<ClientError> for FfiError {
    fn from(e: ClientError) -> Self {
        let status = match &e {
            ClientError::Config(_) | ClientError::Request(_) => {
                puma_status::PUMA_ERR_INVALID_ARGUMENT
            }
            ClientError::Connect { .. } | ClientError::Protocol { .. } => puma_status::PUMA_ERR_IO,
            ClientError::Server { kind, .. } => match kind {
                ErrorKind::UnknownModel | ErrorKind::BadRequest => {
                    puma_status::PUMA_ERR_INVALID_ARGUMENT
                }
                ErrorKind::Timeout => puma_status::PUMA_ERR_TIMEOUT,
                _ => puma_status::PUMA_ERR_ABORTED,
            },
            ClientError::Disagree(_) | ClientError::Mismatch(_) => puma_status::PUMA_ERR_PROTOCOL,
            ClientError::Timeout(_) => puma_status::PUMA_ERR_TIMEOUT,
        };
        // Client errors name servers, models and sizes, never a prompt or a result.
        FfiError::new(status, e.to_string())
    }
}

/// Creates a client of the service described by the `service.toml` at `config_path`
/// (the servers' client addresses and certificates) and writes its handle to `*out`.
/// Nothing is sent until a request.
///
/// Ownership: the caller owns the client and frees it with `puma_service_client_free`.
///
/// Errors: `PUMA_ERR_NULL_POINTER` for `config_path` or `out`; `PUMA_ERR_INVALID_ARGUMENT`
/// for a file that does not read or parse, an address that does not resolve or a
/// certificate that does not load (the message names it).
///
/// # Safety
/// `config_path` must be null or a NUL-terminated string; `out` must be valid for
/// writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_service_client_new(
    config_path: *const c_char,
    out: *mut *mut puma_service_client,
) -> puma_status {
    entry(|| {
        handle::check_out(out, "out")?;
        // SAFETY: the caller's contract.
        let path = unsafe { handle::c_str(config_path, "config_path") }?;
        let cfg = ServiceConfig::from_file(Path::new(path))
            .map_err(|e| FfiError::invalid(e.to_string()))?;
        let client = ServiceClient::new(&cfg)?;
        let h = handle::into_raw(puma_service_client { client });
        // SAFETY: checked non-null and aligned; writable by the caller's contract.
        unsafe { handle::write(out, h) }
    })
}

/// Frees a client; `NULL` is a no-op.
///
/// Errors: `PUMA_ERR_INVALID_HANDLE` for a pointer that is not a live client.
///
/// # Safety
/// `client` must be null or a client used by no other thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_service_client_free(client: *mut puma_service_client) -> puma_status {
    // SAFETY: the caller's contract.
    entry(|| unsafe { handle::free(client) })
}

/// Generates from `prompt` (token ids, `prompt_len` of them) with the decoder the servers
/// serve as `model`, under `opts` (`puma_generate_options_init`, then set fields): writes
/// the generated ids to `out_ids` (room for `out_cap`, which must be at least
/// `opts->max_new`) and their number to `*written`. In `PUMA_OUTPUT_SECURE_ARGMAX` mode
/// `opts->on_token` hears each id as it arrives; in `PUMA_OUTPUT_PRIVATE` mode the ids come
/// at the end. No server learns the prompt or an id. Blocks until the request ends (at
/// most ten minutes).
///
/// `opts->eos_ids` end generation (the client passes its model's, e.g. from
/// `generation_config.json`); `PUMA_GENERATE_MODEL_EOS`, `PUMA_GENERATE_CLIENT_STOPS`
/// and `PUMA_OUTPUT_REVEAL_LOGITS` need the client inside the computation and are
/// refused.
///
/// Errors: `PUMA_ERR_NULL_POINTER` / `PUMA_ERR_MISALIGNED_POINTER` for a pointer;
/// `PUMA_ERR_INSUFFICIENT_SIZE` if `out_cap < opts->max_new` (nothing is sent);
/// `PUMA_ERR_INVALID_ARGUMENT` for options or a prompt the model does not take, or an
/// unknown model; `PUMA_ERR_IO` if a server cannot be reached; `PUMA_ERR_ABORTED` if a
/// server refuses (busy) or fails the request; `PUMA_ERR_TIMEOUT` at the deadline;
/// `PUMA_ERR_PROTOCOL` if the servers' shares disagree (the message names the two
/// possible culprits).
///
/// # Safety
/// `client` must be a live client used by no other thread; `model` a NUL-terminated
/// string; `prompt` valid for reading `prompt_len` ids; `opts` valid for reading one
/// `puma_generate_options` whose `eos_ids` is valid for `eos_len` ids; `out_ids` valid
/// for writing `out_cap` ids; `written` valid for writing one `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_service_generate(
    client: *mut puma_service_client,
    model: *const c_char,
    prompt: *const u32,
    prompt_len: usize,
    opts: *const puma_generate_options,
    out_ids: *mut u32,
    out_cap: usize,
    written: *mut usize,
) -> puma_status {
    entry(|| {
        handle::check_out(written, "written")?;
        // SAFETY: the caller's contract for every pointer.
        let (c, model, prompt, o) = unsafe {
            (
                handle::borrow(client)?,
                handle::c_str(model, "model")?,
                handle::slice(prompt, prompt_len, "prompt")?,
                *handle::slice(opts, 1, "opts")?
                    .first()
                    .ok_or(FfiError::invalid("`opts` is empty"))?,
            )
        };
        // SAFETY: the caller's contract for `eos_ids`.
        let eos = unsafe { handle::slice(o.eos_ids, o.eos_len, "opts.eos_ids") }?;
        let mode = match o.mode {
            PUMA_OUTPUT_SECURE_ARGMAX => WireMode::SecureArgmax,
            PUMA_OUTPUT_PRIVATE => WireMode::Private,
            _ => {
                return Err(FfiError::invalid(
                    "a service client learns ids only: mode must be \
                     PUMA_OUTPUT_SECURE_ARGMAX or PUMA_OUTPUT_PRIVATE",
                ));
            }
        };
        if o.flags & (PUMA_GENERATE_MODEL_EOS | PUMA_GENERATE_CLIENT_STOPS) != 0 {
            return Err(FfiError::invalid(
                "a service client passes its end-of-sequence ids in `eos_ids`; \
                 PUMA_GENERATE_MODEL_EOS and PUMA_GENERATE_CLIENT_STOPS are not served",
            ));
        }
        if o.max_new == 0 {
            return Err(FfiError::invalid("`max_new` must be at least 1"));
        }
        if out_cap < o.max_new {
            // SAFETY: checked above; the caller's contract.
            unsafe { handle::write(written, o.max_new) }?;
            return Err(FfiError::new(
                puma_status::PUMA_ERR_INSUFFICIENT_SIZE,
                format!("`out_cap` is {out_cap}, below `max_new` ({})", o.max_new),
            ));
        }
        let sampling = (o.temperature > 0.0).then_some(WireSampling {
            temperature: o.temperature,
            top_k: (o.top_k > 0).then_some(o.top_k),
            top_p: (o.top_p < 1.0).then_some(o.top_p),
            min_p: (o.min_p > 0.0).then_some(o.min_p),
        });
        let opts = GenerateOptions {
            max_new: o.max_new,
            mode,
            eos: eos.to_vec(),
            sampling,
            deadline: DEADLINE,
        };
        let mut step = 0;
        let generated = c.client.generate(model, &[prompt.to_vec()], &opts, |got| {
            for &(_, id) in got {
                if let Some(f) = o.on_token.filter(|_| mode == WireMode::SecureArgmax) {
                    // SAFETY: the host's callback with its own `user_data`, on the
                    // host's thread, as the callback's contract says.
                    unsafe { f(o.user_data, step, id) };
                }
                step += 1;
            }
        })?;
        let ids = generated.ids.into_iter().next().unwrap_or_default();
        if ids.len() > out_cap {
            return Err(FfiError::new(
                puma_status::PUMA_ERR_PROTOCOL,
                "the servers delivered more ids than asked for",
            ));
        }
        // SAFETY: `out_ids` has room for `out_cap >= ids.len()` ids by the caller's
        // contract; `written` was checked.
        unsafe {
            handle::copy_to(&ids, out_ids, "out_ids")?;
            handle::write(written, ids.len())
        }
    })
}

/// Runs the encoder the servers serve as `model` on `n_seqs` sequences and writes the
/// outputs asked for to `out` (room for `out_cap` values) and their number to
/// `*written`. Sequence `s` has `lens[s]` tokens (special tokens included); `ids` holds
/// all sequences' ids one after the other, `types` their token types (or `NULL` for all
/// 0). `outputs` is a sum of `PUMA_ENCODE_HIDDEN` (every token's hidden state, sequence
/// after sequence), `PUMA_ENCODE_POOLED`, `PUMA_ENCODE_LOGITS` and
/// `PUMA_ENCODE_EMBEDDINGS` (one row per sequence each), written in that order, row-major.
/// No server learns an id or an output. Blocks until the request ends (at most ten
/// minutes).
///
/// Errors: `PUMA_ERR_NULL_POINTER` / `PUMA_ERR_MISALIGNED_POINTER` for a pointer;
/// `PUMA_ERR_INSUFFICIENT_SIZE` if `out_cap` is below the outputs' size, which
/// `*written` then holds (nothing is sent); `PUMA_ERR_INVALID_ARGUMENT` for no output,
/// sequences the model does not take, lengths that do not add up to the ids, an unknown
/// model or a decoder; otherwise as `puma_service_generate`.
///
/// # Safety
/// `client` must be a live client used by no other thread; `model` a NUL-terminated
/// string; `lens` valid for reading `n_seqs` values; `ids` (and `types`, unless `NULL`)
/// valid for reading their sum; `out` valid for writing `out_cap` values; `written` valid
/// for writing one `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_service_encode(
    client: *mut puma_service_client,
    model: *const c_char,
    ids: *const u32,
    types: *const u32,
    lens: *const usize,
    n_seqs: usize,
    outputs: u32,
    out: *mut f64,
    out_cap: usize,
    written: *mut usize,
) -> puma_status {
    entry(|| {
        handle::check_out(written, "written")?;
        // SAFETY: the caller's contract for `client`, `model` and `lens`.
        let (c, model, lens) = unsafe {
            (
                handle::borrow(client)?,
                handle::c_str(model, "model")?,
                handle::slice(lens, n_seqs, "lens")?,
            )
        };
        let total = lens
            .iter()
            .try_fold(0usize, |a, &l| a.checked_add(l))
            .ok_or(FfiError::invalid("the lengths overflow"))?;
        // SAFETY: the caller's contract: `ids` (and `types`, unless null) hold `total`.
        let (ids, types) = unsafe {
            (
                handle::slice(ids, total, "ids")?,
                if types.is_null() {
                    None
                } else {
                    Some(handle::slice(types, total, "types")?)
                },
            )
        };
        let all =
            PUMA_ENCODE_HIDDEN | PUMA_ENCODE_POOLED | PUMA_ENCODE_LOGITS | PUMA_ENCODE_EMBEDDINGS;
        if outputs == 0 || outputs & !all != 0 {
            return Err(FfiError::invalid(
                "`outputs` must be a non-empty sum of the PUMA_ENCODE_* flags",
            ));
        }
        let wire = WireOutputs {
            hidden: outputs & PUMA_ENCODE_HIDDEN != 0,
            pooled: outputs & PUMA_ENCODE_POOLED != 0,
            logits: outputs & PUMA_ENCODE_LOGITS != 0,
            embeddings: outputs & PUMA_ENCODE_EMBEDDINGS != 0,
        };
        let info = c.client.model(model)?.encoder.ok_or_else(|| {
            FfiError::invalid(format!("model {model:?} is a decoder: generate with it"))
        })?;
        let need: usize = wire
            .sizes(lens, &info)
            .ok_or(FfiError::invalid("the outputs' size overflows"))?
            .iter()
            .sum();
        if out_cap < need {
            // SAFETY: checked above; the caller's contract.
            unsafe { handle::write(written, need) }?;
            return Err(FfiError::new(
                puma_status::PUMA_ERR_INSUFFICIENT_SIZE,
                format!("`out_cap` is {out_cap}, the outputs need {need}"),
            ));
        }
        let mut seqs = Vec::with_capacity(lens.len());
        let mut at = 0;
        for &l in lens {
            let s = ids.get(at..at + l).unwrap_or_default().to_vec();
            let t = match types {
                Some(t) => t.get(at..at + l).unwrap_or_default().to_vec(),
                None => vec![0; l],
            };
            seqs.push((s, t));
            at += l;
        }
        let e = c.client.encode(model, &seqs, wire, DEADLINE)?;
        let values: Vec<f64> = [e.hidden, e.pooled, e.logits, e.embeddings]
            .into_iter()
            .flatten()
            .flatten()
            .collect();
        if values.len() != need {
            return Err(FfiError::new(
                puma_status::PUMA_ERR_PROTOCOL,
                "the servers delivered another number of values than asked for",
            ));
        }
        // SAFETY: `out` has room for `out_cap >= need` values by the caller's contract;
        // `written` was checked.
        unsafe {
            handle::copy_to(&values, out, "out")?;
            handle::write(written, values.len())
        }
    })
}
