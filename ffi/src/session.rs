//! Sessions: one party's end of a sequence of secure operations, driven by the host
//! exactly as the core's sans-IO `Session` (feed frames in, poll frames and results out).
//!
//! A `puma_session` holds one core session for its whole life, so keys are agreed once, at
//! creation. Its protocol is a loop that waits for its host (`Ctx::wait_for_host`), takes
//! the operation the host started, runs it on a fork of the same context and hands the
//! result back. Parties may drift apart by whole operations: the engine keeps the epochs
//! in lockstep (an idle party holds its epoch open) and buffers the frames of faster
//! peers. If the core session fails (a peer's bad frame, an abort, a timeout), the
//! puma_session starts a new one (a new generation, with its own session id and setup
//! round), so the host can go on; frames of the failed generation are dropped.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use puma_core::wire;
use puma_core::{Config, Ctx, Error, ErrorKind, Input, Output, PartyId, Session, Stats, Transmit};
use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};

use crate::error::{FfiError, entry, puma_status};
use crate::handle::{self, Handle, Kind};
use crate::model::{SharedModel, puma_model};
use crate::tensor::puma_tensor;

/// Largest frame a session sends or accepts, header included (4 MiB): a frame buffer of
/// this size always suffices for `puma_session_poll`.
pub const PUMA_MAX_FRAME_LEN: usize = 4_194_304;

/// The `peer` of a `PUMA_EVENT_PENDING` event when the session waits for no one party.
pub const PUMA_NO_PARTY: u32 = 0xFFFF_FFFF;

/// What one operation produced at this party.
pub(crate) enum OpResult {
    /// A shared tensor (`rows × cols`).
    Tensor(puma_tensor),
    /// Revealed reals: `Some` at the receiver, `None` at the other parties.
    Values(Option<Vec<f64>>),
    /// A shared model.
    Model(Box<SharedModel>),
    /// Generated token ids (`Some` at the client, `None` at the other parties) and the
    /// finish reason as this party knows it (a `PUMA_FINISH_*` code).
    Ids(Option<Vec<u32>>, u32),
}

type OpFuture = Pin<Box<dyn Future<Output = Result<OpResult, Error>> + Send>>;
/// An operation the host started, waiting for the session's protocol to run it.
type Job = Box<dyn FnOnce(Ctx) -> OpFuture + Send>;

/// What the host and the session's protocol loop hand each other.
#[derive(Default)]
struct Handoff {
    /// The operation to run next.
    job: Option<Job>,
    /// The result of the last operation, until the host takes it.
    result: Option<OpResult>,
    /// The host closed the session: the loop ends once idle.
    close: bool,
}

type Shared = Arc<Mutex<Handoff>>;

fn lock(h: &Shared) -> std::sync::MutexGuard<'_, Handoff> {
    // Every critical section is a single move of a field; a panic cannot leave it torn.
    h.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The protocol of a session: runs the operations the host starts, one after the other,
/// each on its own fork of the root context (so the same tags at every party), until the
/// host closes the session.
async fn serve(mut ctx: Ctx, handoff: Shared) -> Result<(), Error> {
    loop {
        let job = ctx
            .wait_for_host(|| {
                let mut h = lock(&handoff);
                match h.job.take() {
                    Some(job) => Some(Some(job)),
                    None => h.close.then_some(None),
                }
            })
            .await;
        let Some(job) = job else { return Ok(()) };
        // An error fails the whole core session (the peers are aborted): the operation
        // may have stopped half-way, leaving the context out of step with the peers.
        let result = job(ctx.fork()).await?;
        lock(&handoff).result = Some(result);
    }
}

/// Where the host is in its sequence of operations.
enum State {
    /// No operation runs and no result waits.
    Idle,
    /// An operation was started; its result has not been reported yet.
    Running,
    /// The last operation succeeded; its result waits to be taken.
    Ready(OpResult),
    /// `puma_session_close` was called; the protocol ends once its frames are out.
    Closing,
    /// The protocol ended after `puma_session_close` (with the status reported then).
    Closed(puma_status),
}

/// One party's session: create with `puma_session_new`, free with `puma_session_free`.
/// Not thread-safe: use a session from one thread at a time.
pub struct puma_session {
    me: PartyId,
    base_id: u64,
    cfg: Config,
    rng: ChaCha12Rng,
    /// Core sessions created so far; the current one is number `generation`.
    generation: u64,
    core: Session<()>,
    handoff: Shared,
    /// Whether the current core session has failed or finished (its frames are dropped).
    core_over: bool,
    /// Operations started so far.
    ops: u64,
    state: State,
    /// Frames of the next generation, received before it started here.
    early: Vec<(PartyId, Vec<u8>)>,
    early_bytes: usize,
    /// A polled frame the caller's buffer was too short for.
    held: Option<Transmit>,
    /// Counters of the earlier generations.
    totals: Stats,
}

impl Handle for puma_session {
    const KIND: Kind = Kind::Session;
    const NAME: &'static str = "session";
}

/// What `puma_session_poll` reports.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum puma_event_kind {
    /// A frame was copied to the buffer: send its `frame_len` bytes to party `peer`
    /// (frames to one peer must arrive in order).
    PUMA_EVENT_TRANSMIT = 0,
    /// Long local work was split: poll again.
    PUMA_EVENT_YIELDED = 1,
    /// Nothing to do until a frame arrives (from `peer`, or `PUMA_NO_PARTY` if unknown),
    /// or, with no operation running, until the host starts one.
    PUMA_EVENT_PENDING = 2,
    /// The operation finished: take its result (`PUMA_OK`), or the session failed (the
    /// status).
    PUMA_EVENT_DONE = 3,
    /// The session was closed (`puma_session_close`) and has sent its last frames.
    PUMA_EVENT_CLOSED = 4,
}

/// One event of `puma_session_poll`, written to caller-owned memory.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct puma_event {
    /// What happened.
    pub kind: puma_event_kind,
    /// The destination of a frame, or the party waited for.
    pub peer: u32,
    /// The frame's length in bytes (the length needed on `PUMA_ERR_INSUFFICIENT_SIZE`).
    pub frame_len: usize,
}

/// Communication counters of a session, summed over its operations.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct puma_stats {
    /// Operations started.
    pub operations: u64,
    /// Rounds (epochs in which some party sent data), setup rounds not counted.
    pub rounds: u64,
    /// Data frames sent, by destination party.
    pub frames_sent: [u64; 3],
    /// Bytes of data frames sent (headers included), by destination.
    pub bytes_sent: [u64; 3],
    /// Bytes of protocol payload sent, by destination.
    pub payload_bytes_sent: [u64; 3],
    /// Data frames received, by source.
    pub frames_received: [u64; 3],
    /// Bytes of data frames received, by source.
    pub bytes_received: [u64; 3],
    /// Bytes sent by the setup rounds (one when the session is created, and one more
    /// after each failure).
    pub setup_bytes_sent: u64,
}

fn add_stats(total: &mut Stats, s: &Stats) {
    total.rounds += s.rounds;
    total.setup_bytes_sent += s.setup_bytes_sent;
    for i in 0..3 {
        total.frames_sent[i] += s.frames_sent[i];
        total.bytes_sent[i] += s.bytes_sent[i];
        total.payload_bytes_sent[i] += s.payload_bytes_sent[i];
        total.frames_received[i] += s.frames_received[i];
        total.bytes_received[i] += s.bytes_received[i];
    }
}

/// The session id of generation `n` (a SplitMix64 mix of both), the same at every party.
fn generation_id(base: u64, n: u64) -> u64 {
    let mut z = base ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A party index from C.
pub(crate) fn party(i: u32, what: &str) -> Result<PartyId, FfiError> {
    u8::try_from(i)
        .ok()
        .and_then(PartyId::try_from_u8)
        .ok_or_else(|| FfiError::invalid(format!("`{what}` must be 0, 1 or 2, not {i}")))
}

/// A core session of generation `n` running [`serve`], with its handoff.
fn core_session(
    cfg: &Config,
    me: PartyId,
    base: u64,
    n: u64,
    rng: &mut ChaCha12Rng,
) -> Result<(Session<()>, Shared), FfiError> {
    let mut cfg = cfg.clone();
    cfg.session_id = generation_id(base, n);
    let mut entropy = [0u8; 32];
    rng.fill_bytes(&mut entropy);
    let handoff = Shared::default();
    let h = Arc::clone(&handoff);
    let core = Session::new(cfg, me, entropy, move |ctx| serve(ctx, h))?;
    Ok((core, handoff))
}

impl puma_session {
    /// A new session of party `me`; its setup frame goes out on the first poll.
    fn new(me: PartyId, base_id: u64, seed: [u8; 32]) -> Result<puma_session, FfiError> {
        let mut cfg = Config::new(base_id);
        cfg.max_frame_len = PUMA_MAX_FRAME_LEN;
        let mut rng = ChaCha12Rng::from_seed(seed);
        let (core, handoff) = core_session(&cfg, me, base_id, 1, &mut rng)?;
        Ok(puma_session {
            me,
            base_id,
            cfg,
            rng,
            generation: 1,
            core,
            handoff,
            core_over: false,
            ops: 0,
            state: State::Idle,
            early: Vec::new(),
            early_bytes: 0,
            held: None,
            totals: Stats::default(),
        })
    }

    /// This session's party.
    pub(crate) fn me(&self) -> PartyId {
        self.me
    }

    /// The session's configuration.
    pub(crate) fn config(&self) -> &Config {
        &self.cfg
    }

    /// Starts the next operation: `protocol` runs on the session's context once the
    /// session's protocol takes it (at the next poll, or after the epoch ends).
    pub(crate) fn start<F, Fut>(&mut self, protocol: F) -> Result<(), FfiError>
    where
        F: FnOnce(Ctx) -> Fut + Send + 'static,
        Fut: Future<Output = Result<OpResult, Error>> + Send + 'static,
    {
        self.check_idle()?;
        let job: Job = Box::new(move |ctx| Box::pin(protocol(ctx)));
        lock(&self.handoff).job = Some(job);
        self.ops += 1;
        self.state = State::Running;
        Ok(())
    }

    /// Errors unless an operation can start.
    pub(crate) fn check_idle(&self) -> Result<(), FfiError> {
        match self.state {
            State::Idle => Ok(()),
            State::Running => Err(FfiError::wrong_state("an operation is still running")),
            State::Ready(_) => Err(FfiError::wrong_state(
                "the result of the last operation has not been taken",
            )),
            State::Closing | State::Closed(_) => {
                Err(FfiError::wrong_state("the session is closed"))
            }
        }
    }

    /// Replaces a failed core session by a new generation, fed the frames of it that
    /// arrived early. The running operation, if any, is lost.
    fn restart(&mut self) -> Result<(), FfiError> {
        add_stats(&mut self.totals, &self.core.stats());
        let n = self.generation + 1;
        let (core, handoff) = core_session(&self.cfg, self.me, self.base_id, n, &mut self.rng)?;
        self.generation = n;
        self.core = core;
        self.handoff = handoff;
        self.core_over = false;
        self.early_bytes = 0;
        for (from, bytes) in std::mem::take(&mut self.early) {
            // A bad early frame fails the new generation: the abort frames and the error
            // come from the next polls.
            if self
                .core
                .handle_input(Input::Frame {
                    from,
                    bytes: &bytes,
                })
                .is_err()
            {
                self.core_over = true;
                break;
            }
        }
        Ok(())
    }

    fn handle_frame(&mut self, from: PartyId, bytes: &[u8]) -> Result<(), FfiError> {
        if from == self.me {
            return Err(FfiError::invalid(
                "a frame cannot come from this party itself",
            ));
        }
        let id = |n: u64| (n > 0).then(|| generation_id(self.base_id, n));
        let (current, next) = (id(self.generation), id(self.generation + 1));
        let header = wire::decode_header(bytes, from);
        let sid = header.as_ref().ok().map(|h| h.session_id);
        if sid.is_some() && sid == next {
            let total = self.early_bytes.saturating_add(bytes.len());
            if bytes.len() > self.cfg.max_frame_len || total > self.cfg.max_buffered_bytes {
                return Err(FfiError::new(
                    puma_status::PUMA_ERR_PROTOCOL,
                    "too many bytes of the restarted session arrived before it restarted here",
                ));
            }
            self.early_bytes = total;
            self.early.push((from, bytes.to_vec()));
            return Ok(());
        }
        // Late frames (a peer's last END, its abort, data it sent before it learned of the
        // failure) of a generation that is over here, however many generations ago.
        let earlier = |s: u64| (1..self.generation).any(|n| generation_id(self.base_id, n) == s);
        if sid.is_some_and(earlier) || (self.core_over && sid == current) {
            return Ok(());
        }
        if self.core_over {
            // Nothing to fail any more; a malformed frame is still reported.
            return match header {
                Err(e) => Err(e.into()),
                Ok(_) => Err(FfiError::new(
                    puma_status::PUMA_ERR_PROTOCOL,
                    "a frame of another session",
                )),
            };
        }
        match self.core.handle_input(Input::Frame { from, bytes }) {
            Ok(()) => Ok(()),
            // The core session ended (it failed in a poll): a late frame.
            Err(e) if e.kind() == ErrorKind::Misuse => {
                self.core_over = true;
                Ok(())
            }
            Err(e) => {
                self.core_over = true;
                Err(e.into())
            }
        }
    }

    fn handle_timeout(&mut self) -> Result<(), FfiError> {
        if !matches!(self.state, State::Running | State::Closing) || self.core_over {
            return Err(FfiError::wrong_state("no operation is running"));
        }
        let r = self.core.handle_input(Input::Timeout);
        self.core_over = true;
        match r {
            // The core session ended in a poll the host has not seen yet (it closed, or
            // failed): there is no wait left to time out; the next poll reports the end.
            Err(e) if e.kind() == ErrorKind::Misuse => {
                Err(FfiError::wrong_state("no operation is running"))
            }
            r => Ok(r?),
        }
    }

    fn poll(&mut self, buf: *mut u8, buf_len: usize) -> (Result<(), FfiError>, puma_event) {
        let mut ev = puma_event {
            kind: puma_event_kind::PUMA_EVENT_DONE,
            peer: PUMA_NO_PARTY,
            frame_len: 0,
        };
        if let State::Closed(status) = self.state {
            ev.kind = puma_event_kind::PUMA_EVENT_CLOSED;
            return match status {
                puma_status::PUMA_OK => (Ok(()), ev),
                st => (
                    Err(FfiError::new(st, "the session failed as it closed")),
                    ev,
                ),
            };
        }
        let t = match self.held.take() {
            Some(t) => t,
            None => match self.core.poll_output() {
                Output::Transmit(t) => t,
                Output::Yielded => {
                    ev.kind = puma_event_kind::PUMA_EVENT_YIELDED;
                    return (Ok(()), ev);
                }
                Output::Pending { waiting_for } => {
                    if matches!(self.state, State::Running) {
                        if let Some(r) = lock(&self.handoff).result.take() {
                            self.state = State::Ready(r);
                            return (Ok(()), ev);
                        }
                    }
                    ev.kind = puma_event_kind::PUMA_EVENT_PENDING;
                    ev.peer = waiting_for.map_or(PUMA_NO_PARTY, |p| p.index() as u32);
                    return (Ok(()), ev);
                }
                Output::Done(result) => {
                    let r = self.ended(result);
                    if matches!(self.state, State::Closed(_)) {
                        ev.kind = puma_event_kind::PUMA_EVENT_CLOSED;
                    }
                    return (r, ev);
                }
            },
        };
        ev.kind = puma_event_kind::PUMA_EVENT_TRANSMIT;
        ev.peer = t.to.index() as u32;
        ev.frame_len = t.frame.len();
        if t.frame.len() > buf_len {
            let e = FfiError::new(
                puma_status::PUMA_ERR_INSUFFICIENT_SIZE,
                format!(
                    "a frame of {} bytes does not fit the buffer of {buf_len} bytes",
                    t.frame.len()
                ),
            );
            self.held = Some(t);
            return (Err(e), ev);
        }
        // SAFETY: `buf` has room for `buf_len >= frame.len()` bytes by the contract of
        // `puma_session_poll`.
        match unsafe { handle::copy_to(t.frame.as_bytes(), buf, "buf") } {
            Ok(()) => (Ok(()), ev),
            Err(e) => {
                self.held = Some(t);
                (Err(e), ev)
            }
        }
    }

    /// The core session returned `Done`: it was closed, or it failed (then a new
    /// generation starts). Returns the status of the `DONE`/`CLOSED` event to report.
    fn ended(&mut self, result: Result<(), Error>) -> Result<(), FfiError> {
        self.core_over = true;
        if matches!(self.state, State::Closing) {
            let status = match result {
                Ok(()) => puma_status::PUMA_OK,
                Err(e) => e.into(),
            };
            self.state = State::Closed(status);
            return match result {
                Ok(()) => Ok(()),
                Err(e) => Err(e.into()),
            };
        }
        let e = match result {
            Ok(()) => Error::bug("the session's protocol ended without being closed"),
            Err(e) => e,
        };
        if matches!(self.state, State::Running) {
            self.state = State::Idle;
        }
        self.restart()?;
        Err(e.into())
    }

    fn close(&mut self) -> Result<(), FfiError> {
        match self.state {
            State::Running => Err(FfiError::wrong_state("an operation is still running")),
            State::Closing | State::Closed(_) => Ok(()),
            State::Idle | State::Ready(_) => {
                lock(&self.handoff).close = true;
                self.state = State::Closing;
                Ok(())
            }
        }
    }

    fn stats(&self) -> puma_stats {
        let mut s = self.totals.clone();
        add_stats(&mut s, &self.core.stats());
        puma_stats {
            operations: self.ops,
            rounds: u64::from(s.rounds),
            frames_sent: s.frames_sent,
            bytes_sent: s.bytes_sent,
            payload_bytes_sent: s.payload_bytes_sent,
            frames_received: s.frames_received,
            bytes_received: s.bytes_received,
            setup_bytes_sent: s.setup_bytes_sent,
        }
    }

    /// The waiting result, if any.
    pub(crate) fn ready(&self) -> Option<&OpResult> {
        match &self.state {
            State::Ready(r) => Some(r),
            _ => None,
        }
    }

    /// Takes the waiting result if `pick` accepts it (returning it back otherwise).
    fn take_result<R>(
        &mut self,
        pick: impl FnOnce(OpResult) -> Result<R, OpResult>,
        what: &str,
    ) -> Result<R, FfiError> {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Ready(r) => match pick(r) {
                Ok(v) => Ok(v),
                Err(r) => {
                    self.state = State::Ready(r);
                    Err(FfiError::wrong_state(format!(
                        "the last operation's result is not {what}"
                    )))
                }
            },
            other => {
                self.state = other;
                Err(FfiError::wrong_state("no result is waiting"))
            }
        }
    }
}

/// Creates the session of party `party` (0, 1 or 2) and writes it to `*out`.
///
/// All three parties must pass the same `session_id`; `entropy` must point to
/// `entropy_len` = 32 fresh random bytes (from the OS), different at each party and each
/// session (the library draws no randomness of its own). Fixed point has 18 fractional
/// bits; frames are at most `PUMA_MAX_FRAME_LEN` bytes. The session agrees on its keys
/// once, in a setup round whose frame goes out on the first poll; all its operations then
/// share them.
///
/// Ownership: the caller owns the new session and frees it with `puma_session_free`.
/// `entropy` is only read during the call.
///
/// Errors: `PUMA_ERR_NULL_POINTER` / `PUMA_ERR_MISALIGNED_POINTER` for `out` or a null
/// `entropy`; `PUMA_ERR_INVALID_ARGUMENT` for a party above 2 or `entropy_len` ≠ 32.
/// `*out` is written only on `PUMA_OK`.
///
/// # Safety
/// `entropy` must be valid for reading `entropy_len` bytes; `out` must be valid for
/// writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_new(
    party: u32,
    session_id: u64,
    entropy: *const u8,
    entropy_len: usize,
    out: *mut *mut puma_session,
) -> puma_status {
    entry(|| {
        handle::check_out(out, "out")?;
        let me = self::party(party, "party")?;
        // SAFETY: readable for `entropy_len` bytes by the caller's contract.
        let bytes = unsafe { handle::slice(entropy, entropy_len, "entropy") }?;
        let seed: [u8; 32] = bytes
            .try_into()
            .map_err(|_| FfiError::invalid("`entropy_len` must be 32"))?;
        let p = handle::into_raw(puma_session::new(me, session_id, seed)?);
        // SAFETY: `out` was checked non-null and aligned; writable by the caller's contract.
        if let Err(e) = unsafe { handle::write(out, p) } {
            // SAFETY: `p` was just registered and never handed out.
            let _ = unsafe { handle::free(p) };
            return Err(e);
        }
        Ok(())
    })
}

/// Frees a session, with any running operation and untaken result. `NULL` is a no-op.
/// The session's protocol ends at once, without telling the peers: to end it cleanly,
/// call `puma_session_close` and poll until `PUMA_EVENT_CLOSED` first.
///
/// Errors: `PUMA_ERR_INVALID_HANDLE` if `session` is not a live session (e.g. freed
/// already: the second free is detected and does nothing).
///
/// # Safety
/// `session` must be `NULL` or a pointer returned by `puma_session_new`, not in use by
/// another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_free(session: *mut puma_session) -> puma_status {
    // SAFETY: the caller's contract (no other use of the handle during the call).
    entry(|| unsafe { handle::free(session) })
}

/// Ends the session's protocol after its last operation: the next polls return its last
/// frames for the peers (`PUMA_EVENT_TRANSMIT`), then `PUMA_EVENT_CLOSED` (and again on
/// every later poll). A result not taken yet is dropped. Frames that arrive afterwards are
/// dropped silently. Closing twice is a no-op.
///
/// Every party should close after the same last operation: a peer that still waits for
/// this party's data then fails instead of waiting forever.
///
/// Errors: `PUMA_ERR_WRONG_STATE` if an operation runs; handle errors.
///
/// # Safety
/// `session` must be a live session used by no other thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_close(session: *mut puma_session) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow_mut(session) }?;
        s.close()
    })
}

/// Feeds one whole frame received from party `from` (on the authenticated link to it).
/// Hand in every frame as it arrives, also between operations: a faster peer may already
/// run the next operation, whose frames the session keeps until it gets there. Late
/// frames of a session that was closed or has failed here are dropped.
///
/// Ownership: `bytes` is only read during the call.
///
/// Errors: `PUMA_ERR_NULL_POINTER` / `PUMA_ERR_INVALID_HANDLE` for a bad handle or null
/// `bytes`; `PUMA_ERR_INVALID_ARGUMENT` if `from` is not a peer (above 2, or this party);
/// `PUMA_ERR_PROTOCOL` for a malformed or unexpected frame (wrong sender, wrong receiver,
/// another session, out of order) and `PUMA_ERR_ABORTED` for a peer's abort frame: the
/// session then fails, and the next polls return its abort frames for the peers and the
/// error again with `PUMA_EVENT_DONE` (see `puma_session_poll`).
///
/// # Safety
/// `session` must be a live session used by no other thread; `bytes` must be valid for
/// reading `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_handle_frame(
    session: *mut puma_session,
    from: u32,
    bytes: *const u8,
    len: usize,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow_mut(session) }?;
        let from = party(from, "from")?;
        if bytes.is_null() {
            return Err(FfiError::new(
                puma_status::PUMA_ERR_NULL_POINTER,
                "`bytes` is null",
            ));
        }
        // SAFETY: readable for `len` bytes by the caller's contract.
        let bytes = unsafe { handle::slice(bytes, len, "bytes") }?;
        s.handle_frame(from, bytes)
    })
}

/// Tells the running operation that the host's timer for its current wait expired
/// (the library reads no clock). The session fails: this call returns
/// `PUMA_ERR_TIMEOUT`, and the next polls return abort frames for the peers and then
/// `PUMA_EVENT_DONE` with `PUMA_ERR_TIMEOUT`.
///
/// Errors: `PUMA_ERR_TIMEOUT` (the expected result); `PUMA_ERR_WRONG_STATE` if no
/// operation is running (or closing), also when the session's protocol has just ended
/// and the next poll reports it; handle errors.
///
/// # Safety
/// `session` must be a live session used by no other thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_handle_timeout(session: *mut puma_session) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow_mut(session) }?;
        s.handle_timeout()
    })
}

/// Returns the next thing the host must do, in `*out`:
/// - `PUMA_EVENT_TRANSMIT`: the frame was copied to `buf`; send `out->frame_len` bytes to
///   party `out->peer`;
/// - `PUMA_EVENT_YIELDED`: poll again;
/// - `PUMA_EVENT_PENDING`: wait for a frame (from `out->peer`, if not `PUMA_NO_PARTY`)
///   and hand it in; with no operation running, `PUMA_NO_PARTY` means the session waits
///   for a frame or for the host to start an operation;
/// - `PUMA_EVENT_DONE` with `PUMA_OK`: the operation succeeded; take its result with
///   `puma_session_take_tensor`, `_take_values`, `_take_model` or `_take_ids` before
///   starting another;
/// - `PUMA_EVENT_DONE` with an error status: the session failed (also between
///   operations) and the running operation, if any, is lost. The session starts over
///   with a new setup round (its peers fail too, as they are told), and the host can
///   start the next operation;
/// - `PUMA_EVENT_CLOSED`: after `puma_session_close`, the last frames are out.
///
/// A session may have frames for its peers also when no operation runs (the end of the
/// last one's epoch, or a peer's need to move on): keep polling while you hand in frames,
/// e.g. run the loop above whenever a frame arrives.
///
/// Ownership: `buf` (caller-owned, `buf_len` bytes; a buffer of `PUMA_MAX_FRAME_LEN`
/// always suffices) receives a copy of the frame.
///
/// Errors: `PUMA_ERR_INSUFFICIENT_SIZE` if the frame does not fit `buf_len`:
/// `out->frame_len` is the size needed and the same frame is returned by the next poll;
/// the error of a failed session (`PUMA_ERR_PROTOCOL`, `PUMA_ERR_ABORTED`,
/// `PUMA_ERR_TIMEOUT`, ...). `*out` is written on every status but the pointer and
/// handle errors.
///
/// # Safety
/// `session` must be a live session used by no other thread; `buf` must be valid for
/// writing `buf_len` bytes (it may be `NULL` if `buf_len` is 0); `out` must be valid for
/// writing one `puma_event`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_poll(
    session: *mut puma_session,
    buf: *mut u8,
    buf_len: usize,
    out: *mut puma_event,
) -> puma_status {
    entry(|| {
        handle::check_out(out, "out")?;
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow_mut(session) }?;
        if buf.is_null() && buf_len > 0 {
            return Err(FfiError::new(
                puma_status::PUMA_ERR_NULL_POINTER,
                "`buf` is null",
            ));
        }
        let (result, ev) = s.poll(buf, buf_len);
        // SAFETY: `out` was checked non-null and aligned; writable by the caller's contract.
        unsafe { handle::write(out, ev) }?;
        result
    })
}

/// Writes the communication counters of all operations so far (the running one
/// included) to `*out`.
///
/// # Safety
/// `session` must be a live session used by no other thread; `out` must be valid for
/// writing one `puma_stats`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_stats(
    session: *const puma_session,
    out: *mut puma_stats,
) -> puma_status {
    entry(|| {
        handle::check_out(out, "out")?;
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow(session) }?;
        // SAFETY: checked non-null and aligned; writable by the caller's contract.
        unsafe { handle::write(out, s.stats()) }
    })
}

/// Takes the shared tensor an operation produced (share, mul, matmul, trunc, lt, gelu,
/// softmax, layernorm) and writes a new tensor handle to `*out`.
///
/// Ownership: the caller owns the tensor and frees it with `puma_tensor_free`.
///
/// Errors: `PUMA_ERR_WRONG_STATE` if no result waits or it is not a tensor (it is kept).
///
/// # Safety
/// `session` must be a live session used by no other thread; `out` must be valid for
/// writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_take_tensor(
    session: *mut puma_session,
    out: *mut *mut puma_tensor,
) -> puma_status {
    entry(|| {
        handle::check_out(out, "out")?;
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow_mut(session) }?;
        let t = s.take_result(
            |r| match r {
                OpResult::Tensor(t) => Ok(t),
                other => Err(other),
            },
            "a tensor",
        )?;
        let p = handle::into_raw(t);
        // SAFETY: checked non-null and aligned; writable by the caller's contract.
        unsafe { handle::write(out, p) }
    })
}

/// The number of values (reveal, GPT-2 forward) or ids (generation) the waiting result
/// holds at this party (0 at a party that is not the receiver), written to `*out`. The
/// result stays.
///
/// Errors: `PUMA_ERR_WRONG_STATE` if no result waits or it holds neither values nor ids.
///
/// # Safety
/// `session` must be a live session used by no other thread; `out` must be valid for
/// writing one `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_result_len(
    session: *const puma_session,
    out: *mut usize,
) -> puma_status {
    entry(|| {
        handle::check_out(out, "out")?;
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow(session) }?;
        let n = match s.ready() {
            Some(OpResult::Values(v)) => v.as_ref().map_or(0, Vec::len),
            Some(OpResult::Ids(v, _)) => v.as_ref().map_or(0, Vec::len),
            Some(_) => {
                return Err(FfiError::wrong_state(
                    "the last operation's result holds no values",
                ));
            }
            None => return Err(FfiError::wrong_state("no result is waiting")),
        };
        // SAFETY: checked non-null and aligned; writable by the caller's contract.
        unsafe { handle::write(out, n) }
    })
}

/// Takes a waiting result of `T`s that `get` finds (`Some(None)` at a party that receives
/// none): copies them to the caller's `out` (room for `out_len`) and their number to
/// `*written`; on a short buffer only the number needed, and the result stays.
///
/// # Safety
/// `out` must be valid for writing `out_len` values (may be null if `out_len` is 0);
/// `written` valid for writing one `usize`.
unsafe fn take_array<T: Copy>(
    s: &mut puma_session,
    get: fn(&OpResult) -> Option<Option<&Vec<T>>>,
    pick: fn(OpResult) -> Result<Option<Vec<T>>, OpResult>,
    out: *mut T,
    out_len: usize,
    written: *mut usize,
    what: &str,
) -> Result<(), FfiError> {
    let needed = match s.ready() {
        Some(r) => match get(r) {
            Some(v) => v.map_or(0, Vec::len),
            None => {
                return Err(FfiError::wrong_state(format!(
                    "the last operation's result holds no {what}"
                )));
            }
        },
        None => return Err(FfiError::wrong_state("no result is waiting")),
    };
    if needed > out_len {
        // SAFETY: checked non-null and aligned by the caller; writable by its contract.
        unsafe { handle::write(written, needed) }?;
        return Err(FfiError::new(
            puma_status::PUMA_ERR_INSUFFICIENT_SIZE,
            format!("{needed} {what} do not fit a buffer of {out_len}"),
        ));
    }
    if needed > 0 {
        handle::check_out(out, "out")?;
    }
    let values = s.take_result(|r| pick(r).map(Option::unwrap_or_default), what)?;
    // SAFETY: `out` has room for `out_len >= values.len()` values (caller's contract).
    unsafe { handle::copy_to(&values, out, "out") }?;
    // SAFETY: checked non-null and aligned; writable by the caller's contract.
    unsafe { handle::write(written, values.len()) }
}

/// Takes the revealed values of a reveal or GPT-2 forward: copies them to `out` (room for
/// `out_len` doubles) and writes their number to `*written` (0 at a party that is not the
/// receiver, which learns nothing).
///
/// Ownership: `out` is caller-owned; the result is consumed on `PUMA_OK`.
///
/// Errors: `PUMA_ERR_INSUFFICIENT_SIZE` if `out_len` is too small: `*written` is the
/// number needed and the result stays; `PUMA_ERR_WRONG_STATE` if no result waits or it
/// holds no values.
///
/// # Safety
/// `session` must be a live session used by no other thread; `out` must be valid for
/// writing `out_len` doubles (may be `NULL` if `out_len` is 0); `written` must be valid
/// for writing one `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_take_values(
    session: *mut puma_session,
    out: *mut f64,
    out_len: usize,
    written: *mut usize,
) -> puma_status {
    entry(|| {
        handle::check_out(written, "written")?;
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow_mut(session) }?;
        // SAFETY: the caller's contract for `out` and `written`.
        unsafe {
            take_array(
                s,
                |r| match r {
                    OpResult::Values(v) => Some(v.as_ref()),
                    _ => None,
                },
                |r| match r {
                    OpResult::Values(v) => Ok(v),
                    other => Err(other),
                },
                out,
                out_len,
                written,
                "values",
            )
        }
    })
}

/// Takes the token ids of a generation (`puma_session_start_generate`): copies them to
/// `out` (room for `out_len` ids) and writes their number to `*written` (0 at a party
/// that is not the client, which learns nothing).
///
/// Ownership: `out` is caller-owned; the result is consumed on `PUMA_OK`.
///
/// Errors: `PUMA_ERR_INSUFFICIENT_SIZE` if `out_len` is too small: `*written` is the
/// number needed and the result stays; `PUMA_ERR_WRONG_STATE` if no result waits or it
/// holds no ids.
///
/// # Safety
/// `session` must be a live session used by no other thread; `out` must be valid for
/// writing `out_len` values (may be `NULL` if `out_len` is 0); `written` must be valid
/// for writing one `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_take_ids(
    session: *mut puma_session,
    out: *mut u32,
    out_len: usize,
    written: *mut usize,
) -> puma_status {
    entry(|| {
        handle::check_out(written, "written")?;
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow_mut(session) }?;
        // SAFETY: the caller's contract for `out` and `written`.
        unsafe {
            take_array(
                s,
                |r| match r {
                    OpResult::Ids(v, _) => Some(v.as_ref()),
                    _ => None,
                },
                |r| match r {
                    OpResult::Ids(v, _) => Ok(v),
                    other => Err(other),
                },
                out,
                out_len,
                written,
                "ids",
            )
        }
    })
}

/// Takes the shared model of `puma_session_start_model_share` (or
/// `puma_session_start_gpt2_share`) and writes a new model handle to `*out`.
///
/// Ownership: the caller owns the model and frees it with `puma_model_free`.
///
/// Errors: `PUMA_ERR_WRONG_STATE` if no result waits or it is not a model (it is kept).
///
/// # Safety
/// `session` must be a live session used by no other thread; `out` must be valid for
/// writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_take_model(
    session: *mut puma_session,
    out: *mut *mut puma_model,
) -> puma_status {
    entry(|| {
        handle::check_out(out, "out")?;
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow_mut(session) }?;
        let m = s.take_result(
            |r| match r {
                OpResult::Model(m) => Ok(m),
                other => Err(other),
            },
            "a model",
        )?;
        let p = handle::into_raw(puma_model::new(s.me, *m));
        // SAFETY: checked non-null and aligned; writable by the caller's contract.
        unsafe { handle::write(out, p) }
    })
}
