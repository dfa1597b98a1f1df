//! Generation through the C API: how each token is picked (the argmax, or drawn with a
//! temperature and top-k / top-p / min-p filters), when generation ends (end-of-sequence
//! ids, the client's own stop test, the token limit), the client's tokens as they come,
//! and why it ended.
//!
//! The client's two callbacks (its stop test and its token observer) run inside
//! `puma_session_poll`, on the thread that polls the client's session: the library calls
//! the host back only from a call the host made.

use std::ffi::c_void;
use std::sync::Arc;

use puma_core::Error;
use puma_core::proto::SamplingParams;
use puma_layers::nn::{
    Decoding, Finish, Observer, OutputMode, Progress, SecureSettings, StopCheck, generate,
};

use crate::error::{FfiError, entry, puma_status};
use crate::handle;
use crate::model::{SharedModel, client_ids, own_decoder, puma_model};
use crate::session::{OpResult, party, puma_session};

/// Output mode of a generation: the last position's logits of each step are revealed to
/// the client, which picks the next id (greedy) and shares it. (With sampling, the parties
/// draw the id and the client still learns the logits.)
pub const PUMA_OUTPUT_REVEAL_LOGITS: u32 = 0;
/// Output mode: the parties pick each step's id securely and reveal only the id to the
/// client.
pub const PUMA_OUTPUT_SECURE_ARGMAX: u32 = 1;
/// Output mode: the generated ids stay shared until the end, when they are revealed to
/// the client.
pub const PUMA_OUTPUT_PRIVATE: u32 = 2;

/// Flag of `puma_generate_options`: also end at the end-of-sequence ids of the model's
/// checkpoint (`puma_model_eos_ids`), besides `eos_ids`.
pub const PUMA_GENERATE_MODEL_EOS: u32 = 1;
/// Flag of `puma_generate_options`: the client has a stop test of its own (`stop`; stop
/// strings, typically). Every party passes the flag; only the client passes the test.
pub const PUMA_GENERATE_CLIENT_STOPS: u32 = 2;

/// Finish reason (`puma_session_result_finish`): the generation produced `max_new` ids.
pub const PUMA_FINISH_LENGTH: u32 = 0;
/// Finish reason: the last id is an end-of-sequence id.
pub const PUMA_FINISH_EOS: u32 = 1;
/// Finish reason: the client's stop test ended the generation (at the client).
pub const PUMA_FINISH_STOP: u32 = 2;
/// Finish reason: the client ended the generation, for a reason only the client knows
/// (what the other parties learn when the client's stop test ends it).
pub const PUMA_FINISH_ENDED: u32 = 3;

/// The client's stop test: called with all ids generated so far (`len` of them, the last
/// one new); returns nonzero to end the generation after the last id (which is kept).
/// `ids` is valid only during the call. It must not call the library on the same session.
pub type puma_stop_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, ids: *const u32, len: usize) -> i32>;

/// The client's token observer: called once per generated id as the client learns it
/// (`step` 0 is the id after the prompt), in order. Not called in `PUMA_OUTPUT_PRIVATE`
/// mode, where the ids come only at the end. It must not call the library on the same
/// session.
pub type puma_token_fn = Option<unsafe extern "C" fn(user_data: *mut c_void, step: usize, id: u32)>;

/// The rules of one generation (`puma_session_start_generate_with`). Start from
/// `puma_generate_options_init`, then set fields. Every party passes the same values but
/// the callbacks and `user_data`, which only the client's are used.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct puma_generate_options {
    /// The most tokens to generate (at least 1).
    pub max_new: usize,
    /// `PUMA_OUTPUT_REVEAL_LOGITS`, `PUMA_OUTPUT_SECURE_ARGMAX` or `PUMA_OUTPUT_PRIVATE`.
    pub mode: u32,
    /// A sum of `PUMA_GENERATE_MODEL_EOS` and `PUMA_GENERATE_CLIENT_STOPS`.
    pub flags: u32,
    /// 0: take the most likely token (greedy). Above 0 (finite): draw each token from the
    /// softmax of the logits divided by it, on shares, from randomness no party knows
    /// alone.
    pub temperature: f64,
    /// Draw only among the `top_k` most likely tokens (at most the vocabulary size); 0:
    /// no such filter.
    pub top_k: usize,
    /// Draw only among the most likely tokens that together reach probability `top_p`, in
    /// (0, 1]; 1: no such filter.
    pub top_p: f64,
    /// Draw only among tokens at least `min_p` times as likely as the most likely, in
    /// [0, 1); 0: no such filter.
    pub min_p: f64,
    /// End-of-sequence ids (each below the vocabulary size): generation ends after the
    /// step that produces one of them, which is kept as the last id. May be `NULL` if
    /// `eos_len` is 0.
    pub eos_ids: *const u32,
    /// The number of `eos_ids`.
    pub eos_len: usize,
    /// The client's stop test (required at the client with `PUMA_GENERATE_CLIENT_STOPS`).
    pub stop: puma_stop_fn,
    /// The client's token observer, or `NULL`.
    pub on_token: puma_token_fn,
    /// Passed to `stop` and `on_token`; the library never dereferences it.
    pub user_data: *mut c_void,
}

impl Default for puma_generate_options {
    fn default() -> Self {
        puma_generate_options {
            max_new: 0,
            mode: PUMA_OUTPUT_SECURE_ARGMAX,
            flags: 0,
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            eos_ids: std::ptr::null(),
            eos_len: 0,
            stop: None,
            on_token: None,
            user_data: std::ptr::null_mut(),
        }
    }
}

/// The client's callbacks, moved into the generation that calls them.
#[derive(Clone, Copy)]
struct HostCallbacks {
    stop: puma_stop_fn,
    on_token: puma_token_fn,
    user_data: *mut c_void,
}

// SAFETY: the callbacks run only inside `puma_session_poll`, on the thread that polls the
// client's session (a session is used by one thread at a time, by the API's contract);
// the library never dereferences `user_data`, it only hands it back to the host's code.
unsafe impl Send for HostCallbacks {}
// SAFETY: as for `Send`: no two threads call them at once through this library.
unsafe impl Sync for HostCallbacks {}

impl HostCallbacks {
    fn stop_check(self) -> Option<StopCheck> {
        let f = self.stop?;
        Some(Arc::new(move |ids: &[u32]| {
            // The whole struct is captured (it is Send), not its raw pointer field alone.
            let cb = self;
            // SAFETY: the host's function, with its own `user_data` and an array valid for
            // the call (the contract of `puma_stop_fn`).
            unsafe { f(cb.user_data, ids.as_ptr(), ids.len()) != 0 }
        }))
    }

    fn observer(self) -> Option<Observer> {
        let f = self.on_token?;
        Some(Arc::new(move |ev: Progress| {
            // The whole struct is captured (it is Send), not its raw pointer field alone.
            let cb = self;
            if let Progress::Token { step, id, .. } = ev {
                // SAFETY: the host's function with its own `user_data` (the contract of
                // `puma_token_fn`).
                unsafe { f(cb.user_data, step, id) };
            }
        }))
    }
}

/// A finish reason as its C code.
pub(crate) fn finish_code(f: Finish) -> u32 {
    match f {
        Finish::Length => PUMA_FINISH_LENGTH,
        Finish::Eos => PUMA_FINISH_EOS,
        Finish::Stop => PUMA_FINISH_STOP,
        Finish::Ended => PUMA_FINISH_ENDED,
    }
}

/// The sampling that `o` asks for (`None`: greedy), checked against a vocabulary of
/// `vocab` tokens.
fn sampling(o: &puma_generate_options, vocab: usize) -> Result<Option<SamplingParams>, FfiError> {
    let t = o.temperature;
    if !(t.is_finite() && t >= 0.0) {
        return Err(FfiError::invalid(
            "`temperature` must be 0 (greedy) or finite and positive",
        ));
    }
    if !(o.top_p > 0.0 && o.top_p <= 1.0) {
        return Err(FfiError::invalid("`top_p` must be in (0, 1]"));
    }
    if !(0.0..1.0).contains(&o.min_p) {
        return Err(FfiError::invalid("`min_p` must be in [0, 1)"));
    }
    if o.top_k > vocab {
        return Err(FfiError::invalid(format!(
            "`top_k` must be at most the vocabulary size {vocab}"
        )));
    }
    let filtered = o.top_k > 0 || o.top_p < 1.0 || o.min_p > 0.0;
    if t == 0.0 {
        return if filtered {
            Err(FfiError::invalid(
                "top-k, top-p and min-p filter the draws: they need a `temperature` above 0",
            ))
        } else {
            Ok(None)
        };
    }
    let p = SamplingParams {
        top_k: (o.top_k > 0).then_some(o.top_k),
        top_p: (o.top_p < 1.0).then_some(o.top_p),
        min_p: (o.min_p > 0.0).then_some(o.min_p),
        ..SamplingParams::with_temperature(t)
    };
    p.validate(vocab)?;
    Ok(Some(p))
}

/// The output mode named by `mode`.
fn output_mode(mode: u32) -> Result<OutputMode, FfiError> {
    match mode {
        PUMA_OUTPUT_REVEAL_LOGITS => Ok(OutputMode::RevealLogits),
        PUMA_OUTPUT_SECURE_ARGMAX => Ok(OutputMode::SecureArgmax),
        PUMA_OUTPUT_PRIVATE => Ok(OutputMode::Private),
        _ => Err(FfiError::invalid(format!("unknown output mode {mode}"))),
    }
}

/// Checks the request and starts the generation at this party.
///
/// # Safety
/// As `puma_session_start_generate_with`, with `o` read from the caller's options.
unsafe fn start(
    s: &mut puma_session,
    model: *const puma_model,
    client: u32,
    prompt: *const u32,
    prompt_len: usize,
    o: &puma_generate_options,
) -> Result<(), FfiError> {
    s.check_idle()?;
    // SAFETY: the caller's contract.
    let m = unsafe { own_decoder(s, model, "generation") }?;
    let client = party(client, "client")?;
    let info = m.info();
    if prompt_len == 0 || o.max_new == 0 {
        return Err(FfiError::invalid(
            "`prompt_len` and `max_new` must be positive",
        ));
    }
    if prompt_len.saturating_add(o.max_new) > info.max_positions {
        return Err(FfiError::invalid(format!(
            "`prompt_len + max_new` must be at most {}",
            info.max_positions
        )));
    }
    let known = PUMA_GENERATE_MODEL_EOS | PUMA_GENERATE_CLIENT_STOPS;
    if o.flags & !known != 0 {
        return Err(FfiError::invalid(format!("unknown flags {:#x}", o.flags)));
    }
    let mut decoding = Decoding::new(o.max_new, output_mode(o.mode)?);
    decoding.sampling = sampling(o, info.vocab_size)?;
    // SAFETY: readable for `eos_len` values by the caller's contract.
    let mut eos = unsafe { handle::slice(o.eos_ids, o.eos_len, "eos_ids") }?.to_vec();
    if o.flags & PUMA_GENERATE_MODEL_EOS != 0
        && let SharedModel::Decoder { eos: model_eos, .. } = &*m.shared
    {
        eos.extend_from_slice(model_eos);
    }
    if let Some(&bad) = eos.iter().find(|&&e| e as usize >= info.vocab_size) {
        return Err(FfiError::invalid(format!(
            "end-of-sequence id {bad} is not below the vocabulary size {}",
            info.vocab_size
        )));
    }
    eos.sort_unstable();
    eos.dedup();
    decoding.eos = eos;
    decoding.client_stops = o.flags & PUMA_GENERATE_CLIENT_STOPS != 0;
    let is_client = s.me() == client;
    let callbacks = HostCallbacks {
        stop: o.stop,
        on_token: o.on_token,
        user_data: o.user_data,
    };
    let (stop, observer) = if is_client {
        if decoding.client_stops && o.stop.is_none() {
            return Err(FfiError::invalid(
                "the client must pass its `stop` test with PUMA_GENERATE_CLIENT_STOPS",
            ));
        }
        let stop = callbacks.stop_check().filter(|_| decoding.client_stops);
        (stop, callbacks.observer())
    } else {
        (None, None)
    };
    // SAFETY: the caller's contract.
    let mine = unsafe { client_ids(s, client, prompt, prompt_len, info.vocab_size) }?;
    let shared = Arc::clone(&m.shared);
    s.start(move |mut ctx| async move {
        let SharedModel::Decoder { model, .. } = &*shared else {
            return Err(Error::bug("generation on an encoder"));
        };
        let settings = SecureSettings::default();
        let g = generate(
            &mut ctx,
            model,
            client,
            mine.as_deref(),
            prompt_len,
            &decoding,
            &settings,
            observer,
            stop.as_ref(),
        )
        .await?;
        let ids = (ctx.me() == client).then_some(g.ids);
        Ok(OpResult::Ids(ids, finish_code(g.finish)))
    })
}

/// Writes the default generation options to `*out`: greedy (`temperature` 0, no
/// filters: `top_k` 0, `top_p` 1, `min_p` 0), `PUMA_OUTPUT_SECURE_ARGMAX`, no flags, no
/// end-of-sequence ids, no callbacks, and `max_new` 0 (set it).
///
/// # Safety
/// `out` must be valid for writing one `puma_generate_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_generate_options_init(
    out: *mut puma_generate_options,
) -> puma_status {
    entry(|| {
        handle::check_out(out, "out")?;
        // SAFETY: checked non-null and aligned; writable by the caller's contract.
        unsafe { handle::write(out, puma_generate_options::default()) }
    })
}

/// Starts generating up to `options->max_new` tokens with the secret-shared KV cache
/// (after the prompt, each step processes one position) after a prompt of `prompt_len`
/// ids held by party `client`: the client passes its `prompt` ids (each below the
/// vocabulary size), the other parties `NULL` and the same `prompt_len` (public). Every
/// party passes the same options but the callbacks (see `puma_generate_options`).
///
/// Each token is the argmax of the logits (ties to the lowest id), or, with a
/// `temperature` above 0, drawn on shares after the filters (the randomness comes from the
/// session's keys, so the same entropies, session id and sequence of operations draw the
/// same tokens). Generation ends after `max_new` ids, after an end-of-sequence id
/// (`eos_ids`, and the model's with `PUMA_GENERATE_MODEL_EOS`), or when the client's
/// `stop` test says so (`PUMA_GENERATE_CLIENT_STOPS`); every party learns how many ids
/// were generated. The client's `on_token` receives each id as it learns it (not in
/// `PUMA_OUTPUT_PRIVATE` mode).
///
/// Result: ids (`puma_session_take_ids`; at the client, none elsewhere) and the finish
/// reason (`puma_session_result_finish`).
///
/// Cost: as `puma_layers::nn::generate` (docs/PROTOCOLS.md): an end-of-sequence rule or a
/// stop test adds no round in `PUMA_OUTPUT_REVEAL_LOGITS` mode; in
/// `PUMA_OUTPUT_SECURE_ARGMAX` mode a stop test adds one round per token; in
/// `PUMA_OUTPUT_PRIVATE` mode an end-of-sequence rule adds one round per token (the stop
/// test runs at the client on the ids revealed at the end). Sampling costs the rounds of
/// `proto::sample_rows` per token.
///
/// Ownership: `prompt`, `options` and `eos_ids` are only read during the call; `model`
/// stays owned by the caller (the operation keeps its own reference); `user_data` must
/// stay valid until the operation is done.
///
/// Errors: `PUMA_ERR_INVALID_ARGUMENT` for `prompt_len` or `max_new` of 0,
/// `prompt_len + max_new` above the model's positions, ids outside the vocabulary, ids at
/// a non-client, an unknown mode or flag, a negative or non-finite `temperature`, `top_k`
/// above the vocabulary, `top_p` outside (0, 1], `min_p` outside [0, 1), a filter with
/// `temperature` 0, an end-of-sequence id not below the vocabulary size, no `stop` at the
/// client with `PUMA_GENERATE_CLIENT_STOPS`, or a model of another party;
/// `PUMA_ERR_NULL_POINTER` for null `options`, null `eos_ids` with `eos_len` above 0, or
/// no ids at the client; `PUMA_ERR_WRONG_STATE` if an operation runs or a result waits.
///
/// # Safety
/// `session` must be a live session used by no other thread; `model` a live model;
/// `prompt` `NULL` or valid for reading `prompt_len` values; `options` valid for reading
/// one `puma_generate_options` whose `eos_ids` is `NULL` or valid for reading `eos_len`
/// values and whose callbacks, if not `NULL`, are functions of the types given.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_generate_with(
    session: *mut puma_session,
    model: *const puma_model,
    client: u32,
    prompt: *const u32,
    prompt_len: usize,
    options: *const puma_generate_options,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow_mut(session) }?;
        // SAFETY: readable for one value by the caller's contract.
        let o = unsafe { handle::slice(options, 1, "options") }?;
        let o = o
            .first()
            .copied()
            .ok_or_else(|| FfiError::invalid("no options"))?;
        // SAFETY: the caller's contract.
        unsafe { start(s, model, client, prompt, prompt_len, &o) }
    })
}

/// Starts a greedy generation of exactly `max_new` tokens in output mode `mode`:
/// `puma_session_start_generate_with` with the default options
/// (`puma_generate_options_init`) but `max_new` and `mode`.
///
/// Errors: as `puma_session_start_generate_with`.
///
/// # Safety
/// `session` must be a live session used by no other thread; `model` a live model;
/// `prompt` `NULL` or valid for reading `prompt_len` values.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_generate(
    session: *mut puma_session,
    model: *const puma_model,
    client: u32,
    prompt: *const u32,
    prompt_len: usize,
    max_new: usize,
    mode: u32,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow_mut(session) }?;
        let o = puma_generate_options {
            max_new,
            mode,
            ..puma_generate_options::default()
        };
        // SAFETY: the caller's contract.
        unsafe { start(s, model, client, prompt, prompt_len, &o) }
    })
}

/// Writes the finish reason of the waiting generation result to `*out`:
/// `PUMA_FINISH_LENGTH`, `PUMA_FINISH_EOS`, `PUMA_FINISH_STOP` (client only) or
/// `PUMA_FINISH_ENDED` (the other parties, when the client's stop test ended it). Read it
/// before `puma_session_take_ids`; the result stays.
///
/// Errors: `PUMA_ERR_WRONG_STATE` if no result waits or it is not a generation's.
///
/// # Safety
/// `session` must be a live session used by no other thread; `out` must be valid for
/// writing one `uint32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_result_finish(
    session: *const puma_session,
    out: *mut u32,
) -> puma_status {
    entry(|| {
        handle::check_out(out, "out")?;
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow(session) }?;
        let code = match s.ready() {
            Some(OpResult::Ids(_, finish)) => *finish,
            Some(_) => {
                return Err(FfiError::wrong_state(
                    "the last operation's result is not a generation's",
                ));
            }
            None => return Err(FfiError::wrong_state("no result is waiting")),
        };
        // SAFETY: checked non-null and aligned; writable by the caller's contract.
        unsafe { handle::write(out, code) }
    })
}

/// Copies the end-of-sequence ids this party read from the checkpoint it named when the
/// model was shared (`generation_config.json`, else `config.json`, in the directory of the
/// config; or the GGUF metadata) to `out` (room for `out_len`) and writes their number to
/// `*written`. `PUMA_GENERATE_MODEL_EOS` ends generation at them: compare them across the
/// parties first if they named different files (the rules must be the same everywhere).
///
/// Errors: `PUMA_ERR_INSUFFICIENT_SIZE` if `out_len` is too small (`*written` is the
/// number needed); `PUMA_ERR_INVALID_ARGUMENT` for an encoder model.
///
/// # Safety
/// `model` must be a live model; `out` valid for writing `out_len` values (may be `NULL`
/// if `out_len` is 0); `written` valid for writing one `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_model_eos_ids(
    model: *const puma_model,
    out: *mut u32,
    out_len: usize,
    written: *mut usize,
) -> puma_status {
    entry(|| {
        handle::check_out(written, "written")?;
        // SAFETY: the caller's contract.
        let m = unsafe { handle::borrow(model) }?;
        let SharedModel::Decoder { eos, .. } = &*m.shared else {
            return Err(FfiError::invalid(
                "an encoder model has no end-of-sequence ids",
            ));
        };
        // SAFETY: checked non-null and aligned; writable by the caller's contract.
        unsafe { handle::write(written, eos.len()) }?;
        if eos.len() > out_len {
            return Err(FfiError::new(
                puma_status::PUMA_ERR_INSUFFICIENT_SIZE,
                format!("{} ids do not fit a buffer of {out_len}", eos.len()),
            ));
        }
        // SAFETY: room for `out_len >= eos.len()` values by the caller's contract.
        unsafe { handle::copy_to(eos, out, "out") }
    })
}
