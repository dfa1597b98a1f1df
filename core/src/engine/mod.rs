//! The sans-IO engine: a [`Session`] runs one protocol for one party.
//!
//! # Run loop
//! ```text
//! session.handle_input(Input::Frame { from, bytes })?;   // or Input::Timeout
//! loop {
//!     match session.poll_output() {
//!         Output::Transmit(t)             => send t.frame to t.to (in order per peer),
//!         Output::Yielded                 => continue,             // long local work was split
//!         Output::Pending { waiting_for } => break,                // wait for a frame
//!         Output::Done(result)            => return result,
//!     }
//! }
//! ```
//!
//! # Epochs (lockstep)
//! The protocol is an `async fn` over a [`Ctx`]. In each epoch the session polls it until
//! every task waits on a receive, then seals every record queued in that epoch into frames
//! for both peers (the last frame of an epoch is marked END, possibly carrying no record).
//! The next epoch starts once both peers' END frames of this epoch have arrived, and a
//! poll only sees records of earlier epochs. Independent sub-protocols joined with
//! [`join`] therefore share rounds, and every frame a party emits is a function of its
//! inputs, seeds and received frames, never of delivery timing.
//!
//! # Rounds
//! END frames say whether their sender sent any record in the epoch, so every party knows
//! which epochs carried data anywhere. [`Stats::rounds`] counts those epochs: the rounds of
//! a run (the simulator reports the maximum over the parties). An epoch in which no party
//! sent anything while some party still waits is a deadlock (peers disagree about the
//! protocol): every party fails at once with a protocol error. The setup round is counted
//! apart.
//!
//! # Cooperative scheduling
//! [`Config::work_budget`] bounds the local work of one poll of the protocol, so that a host
//! running many sessions on one thread stays responsive. Work is counted in work units: one
//! unit is one 64-bit multiply-add of the matrix kernel; a word drawn from a PRSS stream
//! counts 64 and an element packed into or out of a record 16. Long loops (the local
//! products of [`crate::proto::matmul`] and its variants) are cut into blocks and call
//! [`Ctx::spend`] before each block. Other work between two awaits (a PRSS draw, an
//! element-wise loop) runs in one go but is counted, and a task goes on past a receive only
//! while the poll has budget left, so that joined tasks run their stretches in separate
//! polls once the budget is used. When a poll has used its budget, the session returns
//! [`Output::Yielded`] and continues on the next call of [`Session::poll_output`].
//!
//! Yielding only interleaves local work within an epoch: every frame (records are sealed in
//! tag order, not in the order tasks queued them), every result and every round count are
//! the same for any budget. Each poll admits its first block whatever its size, so a tiny
//! budget is exceeded rather than stalling.
//!
//! # Idle sessions
//! A long-running protocol may wait for its host rather than for a peer
//! ([`Ctx::wait_for_host`]: a session that runs the operations its host starts one after
//! the other, each a step). When every task waits so, the session is idle:
//! - when the wait begins, the party ends its epoch, marked IDLE (with ACTIVE if it queued
//!   records), so that the step it just finished completes at its peers without more
//!   input from its host. An epoch whose END frames carry no ACTIVE but some IDLE flag is
//!   not a deadlock (and not a round). Each party counts the IDLE ends of its peers;
//! - a party starts its next step only in an epoch that follows both peers' IDLE end of
//!   the step it finished: all three start every step in the same epoch, whatever the
//!   timing of hosts and links (so rounds stay deterministic). While a peer is behind, the
//!   party ends each epoch once that peer has ended it, and reports
//!   `Pending { waiting_for: Some(peer) }`;
//! - otherwise, until its host provides the input, the party holds its epoch open and does
//!   not end it for nothing (an epoch in which no party sent anything would be a deadlock).
//!   It ends it only once a peer's END frame of the epoch is ACTIVE (the peers exchange
//!   data and need it) or IDLE (a peer finished a step). `poll_output` returns
//!   `Pending { waiting_for: None }`; the host polls again after providing the input or
//!   handing in a frame. Frames of faster peers are buffered as usual (within
//!   [`Config::max_buffered_bytes`]).
//!
//! IDLE ends come once per step and party, so idle parties never exchange empty epochs
//! forever.

pub(crate) mod budget;
pub(crate) mod ctx;
pub(crate) mod join;
pub(crate) mod mailbox;

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::any::Any;
use core::future::Future;
use core::marker::PhantomData;
use core::pin::Pin;
use core::task::{Context, Poll, Waker};

use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};
use spin::Mutex;

pub use ctx::{Ctx, Meter};
pub use join::{join, join_all, try_join, try_join_all};

use crate::error::{Error, ErrorKind};
use crate::fixed::FixedPoint;
use crate::kernel::{DetectedKernel, MatmulKernel};
use crate::party::PartyId;
use crate::prss::{Key, PartyKeys};
use crate::wire::{
    self, CHUNK_HEADER_LEN, FRAME_HEADER_LEN, Frame, FrameHeader, FrameKind, MIN_FRAME_LEN, Reader,
    SEED_LEN,
};
use budget::Budget;
use ctx::Shared;
use mailbox::{Chunk, Mailbox, OutRecord};

/// Settings of one session; all three parties must use the same `session_id`.
#[derive(Clone)]
pub struct Config {
    /// Identifies the run; frames of another session are rejected.
    pub session_id: u64,
    /// Largest frame this party sends or accepts, header included.
    pub max_frame_len: usize,
    /// Most bytes of received, not yet consumed records held at once.
    pub max_buffered_bytes: usize,
    /// The fixed-point format protocols use.
    pub fixed: FixedPoint,
    /// The local matrix kernel.
    pub kernel: Arc<dyn MatmulKernel>,
    /// Local work one poll of the protocol may do before [`Session::poll_output`] returns
    /// [`Output::Yielded`], in work units (one unit is one 64-bit multiply-add of the
    /// matrix kernel; see the [module docs](self), "Cooperative scheduling"). Frames,
    /// results and rounds do not depend on it; `u64::MAX` never yields for lack of budget.
    pub work_budget: u64,
}

impl core::fmt::Debug for Config {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Config")
            .field("session_id", &self.session_id)
            .field("max_frame_len", &self.max_frame_len)
            .field("max_buffered_bytes", &self.max_buffered_bytes)
            .field("fixed", &self.fixed)
            .field("work_budget", &self.work_budget)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// Default frame limit: 4 MiB.
    pub const DEFAULT_MAX_FRAME_LEN: usize = 4 << 20;
    /// Default receive buffer limit: 16 GiB on 64-bit hosts, 1 GiB otherwise.
    pub const DEFAULT_MAX_BUFFERED: usize = if usize::BITS >= 64 { 1 << 34 } else { 1 << 30 };
    /// Default work budget: 2^24 work units (about 16.8 million multiply-adds): 1 to 3 ms
    /// of the AVX-512 kernel on a shared x86-64 server core, well below the longest local
    /// stretches between two receives that protocols do not split yet (tens of ms for a
    /// GPT-2 base block's GELU at 32 rows; `cargo run --release -p puma-core --example
    /// yield_latency` measures them).
    pub const DEFAULT_WORK_BUDGET: u64 = 1 << 24;

    /// Defaults for session `session_id`.
    pub fn new(session_id: u64) -> Config {
        Config {
            session_id,
            max_frame_len: Self::DEFAULT_MAX_FRAME_LEN,
            max_buffered_bytes: Self::DEFAULT_MAX_BUFFERED,
            fixed: FixedPoint::default(),
            kernel: Arc::new(DetectedKernel::new()),
            work_budget: Self::DEFAULT_WORK_BUDGET,
        }
    }
}

/// One input from the host.
pub enum Input<'a> {
    /// One whole frame received from `from`, on the authenticated link to that party.
    Frame {
        /// The peer the frame came from.
        from: PartyId,
        /// The frame's bytes.
        bytes: &'a [u8],
    },
    /// The host's timer for the current wait expired: the session fails with `Timeout`.
    Timeout,
}

impl core::fmt::Debug for Input<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            // Frame bytes are protocol messages (masked shares); print only their size.
            Input::Frame { from, bytes } => {
                write!(f, "Frame {{ from: {from}, {} bytes }}", bytes.len())
            }
            Input::Timeout => f.write_str("Timeout"),
        }
    }
}

/// A frame the host must deliver to `to`; frames to one peer must arrive in order.
#[derive(Debug)]
pub struct Transmit {
    /// The destination.
    pub to: PartyId,
    /// The frame.
    pub frame: Frame,
}

/// What the host must do next.
#[derive(Debug)]
#[must_use]
pub enum Output<T> {
    /// Send this frame.
    Transmit(Transmit),
    /// Long local work was split; call `poll_output` again.
    Yielded,
    /// Nothing to do until a frame arrives (from `waiting_for`, if known), or, for an idle
    /// session (`waiting_for: None`, see the module docs), until the host gives the
    /// protocol the input it waits for.
    Pending {
        /// The first peer whose data is missing.
        waiting_for: Option<PartyId>,
    },
    /// The protocol finished, successfully or not. Returned once.
    Done(Result<T, Error>),
}

/// Communication counters of one party.
///
/// Everything a party sends (and `rounds`) is a deterministic function of the protocol and
/// its input sizes. The received counters are not quite: a party that finishes before a
/// peer's last (empty) END frame arrives stops counting, so they may miss one header-only
/// frame per link.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Epochs in which some party sent data, as seen by this party (see the module docs);
    /// the setup round is not counted.
    pub rounds: u32,
    /// Data frames sent, by destination party index.
    pub frames_sent: [u64; 3],
    /// Bytes of data frames sent (headers included), by destination.
    pub bytes_sent: [u64; 3],
    /// Bytes of record payloads sent (the protocol's own messages), by destination.
    pub payload_bytes_sent: [u64; 3],
    /// Data frames received, by source.
    pub frames_received: [u64; 3],
    /// Bytes of data frames received, by source.
    pub bytes_received: [u64; 3],
    /// Bytes sent by the setup round.
    pub setup_bytes_sent: u64,
}

impl Stats {
    /// Payload bytes sent to both peers.
    pub fn payload_bytes_total(&self) -> u64 {
        self.payload_bytes_sent.iter().sum()
    }

    /// Data-frame bytes sent to both peers.
    pub fn bytes_total(&self) -> u64 {
        self.bytes_sent.iter().sum()
    }
}

/// A protocol's future, boxed: what the model layer's entry points return. An `async fn`
/// awaited from another crate is compiled again in that crate, with every `async fn` it
/// awaits in turn; a boxed future's body is compiled once, in the crate that defines it.
pub type BoxedProtocol<'a, T> = Pin<Box<dyn Future<Output = Result<T, Error>> + Send + 'a>>;

/// A protocol's result with its type erased: the engine ([`Engine`]) is compiled once, in
/// this crate, instead of once per result type in every crate that runs protocols (the
/// typed [`Session`] only boxes and unboxes).
pub(crate) type Erased = Box<dyn Any + Send>;
type BoxFuture = Pin<Box<dyn Future<Output = Result<Erased, Error>> + Send>>;
/// Builds a party's protocol once its keys are agreed.
pub(crate) type Start = Box<dyn FnOnce(Ctx) -> BoxFuture + Send>;

/// `protocol` with its result boxed as [`Erased`].
pub(crate) fn erase<T, F, Fut>(protocol: F) -> Start
where
    T: Send + 'static,
    F: FnOnce(Ctx) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, Error>> + Send + 'static,
{
    Box::new(move |ctx| Box::pin(async move { protocol(ctx).await.map(|v| Box::new(v) as Erased) }))
}

/// An [`Erased`] result as the type its protocol returned.
pub(crate) fn unerase<T: 'static>(result: Result<Erased, Error>) -> Result<T, Error> {
    result.and_then(|v| {
        v.downcast::<T>()
            .map(|v| *v)
            .map_err(|_| Error::bug("a session's result has another type"))
    })
}

/// [`Output`] with the result's type restored.
fn unerase_output<T: 'static>(output: Output<Erased>) -> Output<T> {
    match output {
        Output::Transmit(t) => Output::Transmit(t),
        Output::Yielded => Output::Yielded,
        Output::Pending { waiting_for } => Output::Pending { waiting_for },
        Output::Done(result) => Output::Done(unerase(result)),
    }
}

enum Phase {
    /// Waiting for the seed of `next`.
    Setup {
        start: Start,
        next_seed: Option<Key>,
    },
    Running {
        fut: BoxFuture,
    },
    /// Finished; queued frames are flushed before `Done` is returned.
    Ending(Result<Erased, Error>),
    Finished,
}

/// What [`Session::poll_output`] does with a running protocol.
enum Hold {
    /// Poll it.
    Poll,
    /// Not now: this epoch ended; go round again.
    Again,
    /// Not now: wait for a frame (from this peer, if known).
    Wait(Option<PartyId>),
    /// The session failed.
    Fail(Error),
}

/// What this party knows of one peer's progress.
#[derive(Clone, Copy, Default)]
struct PeerProgress {
    /// The last epoch whose END frame arrived.
    ended: u32,
    /// The epoch in which the peer finished, if it has.
    finished: Option<u32>,
    /// ACTIVE flags of the END frames of epochs `ended - 1` and `ended`
    /// (a peer runs at most one epoch ahead).
    active: [bool; 2],
    /// IDLE flags of the same END frames.
    idle: [bool; 2],
    /// END frames with IDLE so far: steps the peer finished.
    steps: u64,
}

impl PeerProgress {
    /// Whether the peer's part of `epoch` is complete (ended or finished before).
    fn has_ended(&self, epoch: u32) -> bool {
        self.ended >= epoch || self.finished.is_some_and(|f| f < epoch)
    }

    /// Whether the peer sent any record in `epoch` (which it has ended).
    fn was_active(&self, epoch: u32) -> bool {
        Self::flag(&self.active, self.ended, epoch)
    }

    /// Whether the peer ended `epoch` because its protocol waits for its host.
    fn was_idle(&self, epoch: u32) -> bool {
        Self::flag(&self.idle, self.ended, epoch)
    }

    fn flag(flags: &[bool; 2], ended: u32, epoch: u32) -> bool {
        if epoch == ended {
            flags[1]
        } else if epoch + 1 == ended {
            flags[0]
        } else {
            false
        }
    }
}

/// One party's run of one protocol, whose result is a `T`. See the [module docs](self)
/// for the run loop.
pub struct Session<T> {
    engine: Engine,
    result: PhantomData<fn() -> T>,
}

/// [`Session`] with the protocol's result type erased ([`Erased`]).
pub(crate) struct Engine {
    me: PartyId,
    cfg: Config,
    mailbox: Arc<Mutex<Mailbox>>,
    phase: Phase,
    own_seed: Key,
    private_key: Key,
    out: VecDeque<Transmit>,
    next_in_seq: [u64; 3],
    next_out_seq: [u64; 3],
    peers: [PeerProgress; 3],
    /// The current epoch (from 1 once running).
    epoch: u32,
    /// Whether this epoch's frames were sealed and the session waits for the peers' ENDs.
    sealed: bool,
    /// Whether this party sent a record in the current epoch.
    active: bool,
    /// Whether this party ended the current epoch as IDLE (module docs, "Idle sessions").
    idle_end: bool,
    /// Whether the protocol waited for its host, and only for it, when last polled.
    host_waiting: bool,
    /// Epochs this party ended as IDLE: steps it finished.
    steps: u64,
    stats: Stats,
}

impl Drop for Engine {
    fn drop(&mut self) {
        // A session dropped before its setup finished still holds its seeds.
        zeroize::Zeroize::zeroize(&mut self.own_seed);
        zeroize::Zeroize::zeroize(&mut self.private_key);
    }
}

impl<T> core::fmt::Debug for Session<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.engine.fmt(f)
    }
}

impl core::fmt::Debug for Engine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "Session {{ me: {}, session_id: {}, epoch: {} }}",
            self.me, self.cfg.session_id, self.epoch
        )
    }
}

impl<T: Send + 'static> Session<T> {
    /// Starts a session for party `me`: queues the setup frame and, once keys are agreed,
    /// runs `protocol` on the root context.
    ///
    /// `entropy` must be 32 fresh random bytes from the host (the core draws no OS
    /// randomness); it seeds this party's pairwise key and private stream.
    ///
    /// # Errors
    /// `Misuse` if `max_frame_len` is below [`wire::MIN_FRAME_LEN`].
    pub fn new<F, Fut>(
        cfg: Config,
        me: PartyId,
        entropy: [u8; 32],
        protocol: F,
    ) -> Result<Self, Error>
    where
        F: FnOnce(Ctx) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
    {
        Ok(Self::typed(Engine::new(cfg, me, entropy, erase(protocol))?))
    }

    /// [`Session::new`] with this party's pairwise seed (the one it sends `P_{i-1}`) and
    /// private key given instead of drawn from entropy: for tests that fix what one party
    /// knows and vary only what it does not (key replay in `core/tests/leakage.rs`). Keys that are
    /// not fresh and secret break every protocol's privacy.
    ///
    /// # Errors
    /// As [`Session::new`].
    #[cfg(feature = "dev")]
    pub fn from_keys<F, Fut>(
        cfg: Config,
        me: PartyId,
        own_seed: [u8; 32],
        private_key: [u8; 32],
        protocol: F,
    ) -> Result<Self, Error>
    where
        F: FnOnce(Ctx) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
    {
        let engine = Engine::with_keys(cfg, me, own_seed, private_key, erase(protocol))?;
        Ok(Self::typed(engine))
    }

    fn typed(engine: Engine) -> Self {
        Session {
            engine,
            result: PhantomData,
        }
    }
}

impl<T: 'static> Session<T> {
    /// This session's party.
    pub fn me(&self) -> PartyId {
        self.engine.me
    }

    /// The session's configuration.
    pub fn config(&self) -> &Config {
        &self.engine.cfg
    }

    /// Communication counters so far.
    pub fn stats(&self) -> Stats {
        self.engine.stats()
    }

    /// Whether `Done` has been returned.
    pub fn is_finished(&self) -> bool {
        self.engine.is_finished()
    }

    /// Feeds one input. Never blocks and performs no IO.
    ///
    /// # Errors
    /// `Misuse` after `Done` or for a frame "from" this party itself. Any other error means
    /// the session has failed: abort frames for the peers and `Done(Err)` follow from
    /// [`Session::poll_output`], and the same error is returned here for convenience.
    pub fn handle_input(&mut self, input: Input<'_>) -> Result<(), Error> {
        self.engine.handle_input(input)
    }

    /// Returns the next thing the host must do. See the [module docs](self).
    pub fn poll_output(&mut self) -> Output<T> {
        unerase_output(self.engine.poll_output())
    }
}

impl Engine {
    /// [`Session::new`] for an erased protocol.
    pub(crate) fn new(
        cfg: Config,
        me: PartyId,
        entropy: [u8; 32],
        start: Start,
    ) -> Result<Self, Error> {
        let mut rng = ChaCha12Rng::from_seed(entropy);
        let mut own_seed = [0u8; 32];
        let mut private_key = [0u8; 32];
        rng.fill_bytes(&mut own_seed);
        rng.fill_bytes(&mut private_key);
        Self::with_keys(cfg, me, own_seed, private_key, start)
    }

    fn with_keys(
        cfg: Config,
        me: PartyId,
        own_seed: Key,
        private_key: Key,
        start: Start,
    ) -> Result<Self, Error> {
        if cfg.max_frame_len < MIN_FRAME_LEN {
            return Err(Error::misuse("max_frame_len is too small"));
        }
        let mut s = Engine {
            me,
            cfg,
            mailbox: Arc::new(Mutex::new(Mailbox::default())),
            phase: Phase::Setup {
                start,
                next_seed: None,
            },
            own_seed,
            private_key,
            out: VecDeque::new(),
            next_in_seq: [0; 3],
            next_out_seq: [0; 3],
            peers: [PeerProgress::default(); 3],
            epoch: 0,
            sealed: false,
            active: false,
            idle_end: false,
            host_waiting: false,
            steps: 0,
            stats: Stats::default(),
        };
        // Setup: each Pi sends its fresh seed to P_{i-1}.
        let to = me.prev();
        let mut bytes = Vec::with_capacity(FRAME_HEADER_LEN + SEED_LEN);
        let header = s.header(FrameKind::Setup, to, 0, 0, 0);
        wire::encode_header(&header, &mut bytes);
        bytes.extend_from_slice(&s.own_seed);
        s.stats.setup_bytes_sent = bytes.len() as u64;
        s.out.push_back(Transmit {
            to,
            frame: wire::frame_from_bytes(bytes),
        });
        Ok(s)
    }

    /// Communication counters so far.
    pub(crate) fn stats(&self) -> Stats {
        self.stats.clone()
    }

    /// Whether `Done` has been returned.
    pub(crate) fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished)
    }

    fn header(
        &mut self,
        kind: FrameKind,
        to: PartyId,
        flags: u16,
        epoch: u32,
        n_records: u32,
    ) -> FrameHeader {
        let idx = to.index();
        let seq = self.next_out_seq[idx];
        self.next_out_seq[idx] += 1;
        FrameHeader {
            kind,
            from: self.me,
            to,
            flags,
            session_id: self.cfg.session_id,
            seq,
            epoch,
            n_records,
        }
    }

    /// The first peer whose END frame of the current epoch is missing.
    fn lagging_peer(&self) -> Option<PartyId> {
        [self.me.next(), self.me.prev()]
            .into_iter()
            .find(|p| !self.peers[p.index()].has_ended(self.epoch))
    }

    /// [`Session::handle_input`].
    pub(crate) fn handle_input(&mut self, input: Input<'_>) -> Result<(), Error> {
        if matches!(self.phase, Phase::Ending(_) | Phase::Finished) {
            return Err(Error::misuse("input to a finished session"));
        }
        match input {
            Input::Timeout => {
                let waiting_for = match &self.phase {
                    Phase::Setup { .. } => Some(self.me.next()),
                    _ => self
                        .lagging_peer()
                        .or_else(|| self.mailbox.lock().first_wanted()),
                }
                .unwrap_or(self.me.next());
                let e = Error::new(
                    ErrorKind::Timeout { waiting_for },
                    "no data before the deadline",
                );
                self.fail(e, None);
                Err(e)
            }
            Input::Frame { from, bytes } => {
                if from == self.me {
                    return Err(Error::misuse("a frame cannot come from this party itself"));
                }
                match self
                    .accept_frame(from, bytes)
                    .and_then(|()| self.try_advance())
                {
                    Ok(()) => Ok(()),
                    Err(e) => {
                        let aborter = match e.kind() {
                            ErrorKind::Aborted { by } => Some(by),
                            _ => None,
                        };
                        self.fail(e, aborter);
                        Err(e)
                    }
                }
            }
        }
    }

    fn accept_frame(&mut self, from: PartyId, bytes: &[u8]) -> Result<(), Error> {
        if bytes.len() > self.cfg.max_frame_len {
            return Err(Error::protocol(from, "oversized frame"));
        }
        let h = wire::decode_header(bytes, from)?;
        if h.to != self.me {
            return Err(Error::protocol(from, "frame addressed to another party"));
        }
        if h.session_id != self.cfg.session_id {
            return Err(Error::protocol(from, "frame of another session"));
        }
        let idx = from.index();
        if h.seq != self.next_in_seq[idx] {
            return Err(Error::protocol(from, "out-of-order or duplicate frame"));
        }
        self.next_in_seq[idx] += 1;
        let mut r = Reader::new(bytes, from);
        r.take(FRAME_HEADER_LEN)?;
        // The first frame from `next` must be its seed; `prev` never sends one.
        let expect_setup = from == self.me.next() && h.seq == 0;
        match h.kind {
            FrameKind::Abort => Err(Error::new(ErrorKind::Aborted { by: from }, "peer aborted")),
            FrameKind::Setup => {
                if !expect_setup
                    || h.n_records != 0
                    || h.epoch != 0
                    || h.flags != 0
                    || r.remaining() != SEED_LEN
                {
                    return Err(Error::protocol(from, "unexpected setup frame"));
                }
                let mut seed = [0u8; SEED_LEN];
                seed.copy_from_slice(r.take(SEED_LEN)?);
                match &mut self.phase {
                    Phase::Setup { next_seed, .. } if next_seed.is_none() => {
                        *next_seed = Some(seed);
                        Ok(())
                    }
                    _ => Err(Error::protocol(from, "unexpected setup frame")),
                }
            }
            FrameKind::Data => {
                if expect_setup {
                    return Err(Error::protocol(from, "data frame before the setup frame"));
                }
                let peer = self.peers[idx];
                if peer.finished.is_some() {
                    return Err(Error::protocol(from, "data frame after the peer finished"));
                }
                if h.epoch != peer.ended + 1 {
                    return Err(Error::protocol(from, "data frame of an unexpected epoch"));
                }
                let end = h.flags & wire::FLAG_END != 0;
                if !end && h.flags != 0 {
                    return Err(Error::protocol(
                        from,
                        "epoch flags on a frame that does not end it",
                    ));
                }
                self.stats.frames_received[idx] += 1;
                self.stats.bytes_received[idx] += bytes.len() as u64;
                {
                    let mut mb = self.mailbox.lock();
                    for _ in 0..h.n_records {
                        let tag = r.u64()?;
                        let total = r.u64()?;
                        let offset = r.u64()?;
                        let len = r.u32()? as usize;
                        let chunk = Chunk {
                            tag,
                            total,
                            offset,
                            bytes: r.take(len)?,
                            epoch: h.epoch,
                        };
                        mb.add_chunk(from, chunk, self.cfg.max_buffered_bytes)?;
                    }
                }
                if r.remaining() != 0 {
                    return Err(Error::protocol(
                        from,
                        "trailing bytes after the last record",
                    ));
                }
                if end {
                    let p = &mut self.peers[idx];
                    p.ended = h.epoch;
                    p.active = [p.active[1], h.flags & wire::FLAG_ACTIVE != 0];
                    p.idle = [p.idle[1], h.flags & wire::FLAG_IDLE != 0];
                    p.steps += u64::from(h.flags & wire::FLAG_IDLE != 0);
                    if h.flags & wire::FLAG_FINISHED != 0 {
                        p.finished = Some(h.epoch);
                    }
                }
                Ok(())
            }
        }
    }

    /// After this epoch is sealed and both peers ended it: start the next epoch, or fail if
    /// no party sent anything in it (nobody can make progress any more).
    fn try_advance(&mut self) -> Result<(), Error> {
        if !self.sealed || self.lagging_peer().is_some() {
            return Ok(());
        }
        let e = self.epoch;
        let (n, p) = (
            self.peers[self.me.next().index()],
            self.peers[self.me.prev().index()],
        );
        if self.active || n.was_active(e) || p.was_active(e) {
            self.stats.rounds += 1;
        } else if self.idle_end || n.was_idle(e) || p.was_idle(e) {
            // A step ended somewhere with nothing left to send: no round, no deadlock.
        } else {
            let from = self.mailbox.lock().first_wanted().unwrap_or(self.me.next());
            return Err(Error::protocol(
                from,
                "deadlock: no party sent anything while this party waits",
            ));
        }
        self.epoch += 1;
        self.sealed = false;
        self.active = false;
        self.idle_end = false;
        self.mailbox.lock().visible = e;
        Ok(())
    }

    /// Ends the session with `e`: drops queued frames and tells the peers (but `skip`).
    fn fail(&mut self, e: Error, skip: Option<PartyId>) {
        // Unsent frames are dropped so that peers learn of the failure at once; their
        // sequence numbers are handed back so that the abort frame is the next one each
        // peer expects (a gap would make the peer report a protocol error instead).
        for t in self.out.drain(..) {
            let seq = &mut self.next_out_seq[t.to.index()];
            *seq = seq.saturating_sub(1);
        }
        for to in [self.me.next(), self.me.prev()] {
            if Some(to) == skip || self.peers[to.index()].finished.is_some() {
                continue;
            }
            let mut bytes = Vec::with_capacity(FRAME_HEADER_LEN + 1);
            let header = self.header(FrameKind::Abort, to, 0, 0, 0);
            wire::encode_header(&header, &mut bytes);
            bytes.push(abort_code(e.kind()));
            self.out.push_back(Transmit {
                to,
                frame: wire::frame_from_bytes(bytes),
            });
        }
        self.phase = Phase::Ending(Err(e));
    }

    /// [`Session::poll_output`], with the result erased.
    pub(crate) fn poll_output(&mut self) -> Output<Erased> {
        loop {
            if let Some(t) = self.out.pop_front() {
                return Output::Transmit(t);
            }
            match core::mem::replace(&mut self.phase, Phase::Finished) {
                Phase::Finished => {
                    return Output::Done(Err(Error::misuse("session polled after Done")));
                }
                Phase::Ending(result) => return Output::Done(result),
                Phase::Setup { start, next_seed } => match next_seed {
                    None => {
                        self.phase = Phase::Setup { start, next_seed };
                        return Output::Pending {
                            waiting_for: Some(self.me.next()),
                        };
                    }
                    Some(next) => {
                        let keys = PartyKeys::new(self.me, self.own_seed, next, self.private_key);
                        let shared = Arc::new(Shared {
                            me: self.me,
                            mailbox: self.mailbox.clone(),
                            keys,
                            kernel: self.cfg.kernel.clone(),
                            fixed: self.cfg.fixed,
                            budget: Budget::new(self.cfg.work_budget),
                        });
                        zeroize::Zeroize::zeroize(&mut self.own_seed);
                        zeroize::Zeroize::zeroize(&mut self.private_key);
                        self.phase = Phase::Running {
                            fut: start(Ctx::root(shared)),
                        };
                        self.epoch = 1;
                    }
                },
                Phase::Running { mut fut } => {
                    match self.hold() {
                        Hold::Poll => {}
                        held => {
                            self.phase = Phase::Running { fut };
                            match held {
                                Hold::Wait(waiting_for) => return Output::Pending { waiting_for },
                                Hold::Fail(e) => self.fail(e, None),
                                Hold::Poll | Hold::Again => {}
                            }
                            continue;
                        }
                    }
                    {
                        let mut mb = self.mailbox.lock();
                        mb.wanted.clear();
                        mb.yield_requested = false;
                        mb.host_wait = false;
                        mb.host_wait_began = false;
                    }
                    let mut cx = Context::from_waker(Waker::noop());
                    match fut.as_mut().poll(&mut cx) {
                        Poll::Ready(Ok(v)) => {
                            drop(fut);
                            match self.leftover() {
                                None => {
                                    self.seal(true);
                                    if self.active {
                                        self.stats.rounds += 1;
                                    }
                                    self.phase = Phase::Ending(Ok(v));
                                }
                                Some(e) => self.fail(e, None),
                            }
                        }
                        Poll::Ready(Err(e)) => self.fail(e, None),
                        Poll::Pending => {
                            let (yielded, any_wanted, host_wait, began) = {
                                let mb = self.mailbox.lock();
                                let wait = (mb.host_wait, mb.host_wait_began);
                                (mb.yield_requested, !mb.wanted.is_empty(), wait.0, wait.1)
                            };
                            self.phase = Phase::Running { fut };
                            if yielded {
                                return Output::Yielded;
                            }
                            self.host_waiting = host_wait && !any_wanted;
                            if self.host_waiting {
                                match self.idle(began) {
                                    Ok(true) => return Output::Pending { waiting_for: None },
                                    Ok(false) => {}
                                    Err(e) => self.fail(e, None),
                                }
                                continue;
                            }
                            if !any_wanted {
                                self.fail(
                                    Error::bug("protocol is pending without waiting for data"),
                                    None,
                                );
                                continue;
                            }
                            self.seal(false);
                            if let Err(e) = self.try_advance() {
                                self.fail(e, None);
                            }
                        }
                    }
                }
            }
        }
    }

    /// Whether the protocol may be polled in this epoch: not once the epoch is sealed, and
    /// not while the next step must wait for a peer to finish the last one (module docs,
    /// "Idle sessions"; meanwhile this party ends every epoch that peer ends).
    fn hold(&mut self) -> Hold {
        if self.sealed {
            return Hold::Wait(self.lagging_peer());
        }
        if !self.host_waiting {
            return Hold::Poll;
        }
        let Some(behind) = self.peer_behind() else {
            return Hold::Poll;
        };
        if !self.peer_ended(!0) {
            return Hold::Wait(Some(behind));
        }
        self.seal(false);
        match self.try_advance() {
            Ok(()) => Hold::Again,
            Err(e) => Hold::Fail(e),
        }
    }

    /// Every task waits for the host (module docs, "Idle sessions"). Ends the epoch (as
    /// IDLE when the wait `began` in this poll; else only for records this party queued or
    /// a peer's ACTIVE or IDLE END of it) and returns `false`, or returns `true` to stay
    /// idle with the epoch open.
    fn idle(&mut self, began: bool) -> Result<bool, Error> {
        let queued = self.mailbox.lock().outbound.iter().any(|q| !q.is_empty());
        if !began && !queued && !self.peer_ended(wire::FLAG_ACTIVE | wire::FLAG_IDLE) {
            return Ok(true);
        }
        self.idle_end = began;
        self.steps += u64::from(began);
        self.seal(false);
        self.try_advance()?;
        Ok(false)
    }

    /// Whether a peer has ended the current epoch with an END frame carrying one of
    /// `flags` (ACTIVE, IDLE; `!0`: any END).
    fn peer_ended(&self, flags: u16) -> bool {
        let e = self.epoch;
        [self.me.next(), self.me.prev()].into_iter().any(|p| {
            let peer = &self.peers[p.index()];
            peer.ended >= e
                && (flags == !0
                    || (flags & wire::FLAG_ACTIVE != 0 && peer.was_active(e))
                    || (flags & wire::FLAG_IDLE != 0 && peer.was_idle(e)))
        })
    }

    /// A peer (still running) that had finished fewer steps than this party before the
    /// current epoch: the next step must not start in this epoch.
    fn peer_behind(&self) -> Option<PartyId> {
        let e = self.epoch;
        [self.me.next(), self.me.prev()].into_iter().find(|p| {
            let peer = &self.peers[p.index()];
            let this_epoch = u64::from(peer.ended >= e && peer.was_idle(e));
            peer.finished.is_none() && peer.steps.saturating_sub(this_epoch) < self.steps
        })
    }

    /// A visible record that was never received means the peers disagree on the protocol.
    fn leftover(&self) -> Option<Error> {
        let mb = self.mailbox.lock();
        let visible = mb.visible;
        let key = mb
            .inbound
            .iter()
            .find(|(_, r)| r.epoch <= visible)
            .map(|(k, _)| *k)
            .or_else(|| {
                mb.partial
                    .iter()
                    .find(|(_, p)| p.epoch <= visible)
                    .map(|(k, _)| *k)
            })?;
        let from = PartyId::try_from_u8(key.0).unwrap_or(self.me.next());
        Some(Error::protocol(
            from,
            "record that the protocol never received",
        ))
    }

    /// Seals the records queued in this epoch into frames for both live peers; the last
    /// frame to each peer carries END (and ACTIVE, and FINISHED when `finished`).
    fn seal(&mut self, finished: bool) {
        let (mut queues, payload) = {
            let mut mb = self.mailbox.lock();
            (
                core::mem::take(&mut mb.outbound),
                core::mem::take(&mut mb.payload_queued),
            )
        };
        // Tasks joined in one epoch queue their records in an order that depends on where
        // they yielded; tags (unique in an epoch) give an order that does not.
        for q in &mut queues {
            q.sort_unstable_by_key(|r| r.tag);
        }
        self.active = queues.iter().any(|q| !q.is_empty());
        let mut flags = wire::FLAG_END;
        if self.active {
            flags |= wire::FLAG_ACTIVE;
        }
        if self.idle_end {
            flags |= wire::FLAG_IDLE;
        }
        if finished {
            flags |= wire::FLAG_FINISHED;
        }
        for (idx, records) in queues.into_iter().enumerate() {
            let to = PartyId::from_index(idx);
            // A peer that finished in an earlier epoch no longer listens; whether one that
            // finishes in this same epoch has said so yet depends on timing, so it still
            // gets this epoch's END frame.
            let gone = self.peers[idx].finished.is_some_and(|f| f < self.epoch);
            if to == self.me || (records.is_empty() && gone) {
                continue;
            }
            self.stats.payload_bytes_sent[idx] += payload[idx];
            self.frame_records(to, records, flags);
        }
        self.sealed = true;
    }

    fn frame_records(&mut self, to: PartyId, records: Vec<OutRecord>, end_flags: u16) {
        let max = self.cfg.max_frame_len;
        // Bytes still to frame if all fit one frame: each record's payload and one chunk
        // header. Sizes the frame buffers, which are built in place (header first).
        let mut left: usize = records
            .iter()
            .map(|r| r.bytes.len().saturating_add(CHUNK_HEADER_LEN))
            .fold(0, usize::saturating_add);
        let mut body = frame_buffer(max, left);
        let mut chunks: u32 = 0;
        for rec in records {
            let total = rec.bytes.len();
            let mut off = 0usize;
            loop {
                let space = max - body.len();
                // Start a new frame when not even a chunk header and one byte fit (or,
                // for an empty record, not even a header).
                let need = CHUNK_HEADER_LEN + usize::from(total > off);
                if space < need {
                    self.flush_frame(to, &mut body, &mut chunks, 0);
                    body = frame_buffer(max, left);
                    continue;
                }
                let take = (total - off).min(space - CHUNK_HEADER_LEN);
                body.extend_from_slice(&rec.tag.to_le_bytes());
                body.extend_from_slice(&(total as u64).to_le_bytes());
                body.extend_from_slice(&(off as u64).to_le_bytes());
                body.extend_from_slice(&(take as u32).to_le_bytes());
                body.extend_from_slice(rec.bytes.get(off..off + take).unwrap_or(&[]));
                chunks += 1;
                off += take;
                left = left.saturating_sub(take);
                if off >= total {
                    left = left.saturating_sub(CHUNK_HEADER_LEN);
                    break;
                }
            }
        }
        self.flush_frame(to, &mut body, &mut chunks, end_flags);
    }

    /// Sends `frame` (a [`frame_buffer`] with records appended) after writing its header.
    fn flush_frame(&mut self, to: PartyId, frame: &mut Vec<u8>, chunks: &mut u32, flags: u16) {
        let header = self.header(FrameKind::Data, to, flags, self.epoch, *chunks);
        let mut head = Vec::with_capacity(FRAME_HEADER_LEN);
        wire::encode_header(&header, &mut head);
        for (d, s) in frame.iter_mut().zip(&head) {
            *d = *s;
        }
        let bytes = core::mem::take(frame);
        *chunks = 0;
        let idx = to.index();
        self.stats.frames_sent[idx] += 1;
        self.stats.bytes_sent[idx] += bytes.len() as u64;
        self.out.push_back(Transmit {
            to,
            frame: wire::frame_from_bytes(bytes),
        });
    }
}

/// An empty data frame: room for the header (written when the frame is sent), with capacity
/// for `left` more bytes up to the frame limit `max`.
fn frame_buffer(max: usize, left: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(max.min(FRAME_HEADER_LEN.saturating_add(left)));
    v.resize(FRAME_HEADER_LEN, 0);
    v
}

fn abort_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Protocol { .. } => 1,
        ErrorKind::Aborted { .. } => 2,
        ErrorKind::Timeout { .. } => 3,
        ErrorKind::Misuse => 4,
        ErrorKind::Bug => 5,
    }
}
