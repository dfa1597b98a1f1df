//! In-memory transport: three parties on three OS threads, joined by `std::sync::mpsc`.
//!
//! Each party owns one receiver that carries `(from, frame)` messages from both peers, and
//! a sender to each peer. Dropping a [`MemLink`] (a party finished, or its thread
//! unwound) tells both peers with a close marker, after all frames it sent, so a party
//! that waits for a vanished peer fails with [`TransportError::Disconnected`] at once
//! instead of waiting for its timeout.
//!
//! [`run3`] is the one-call entry point; [`links`] gives the raw links for custom set-ups
//! (fault tests, a party driven by hand).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, TryRecvError, channel};
use std::thread;
use std::time::{Duration, Instant};

use puma_core::{Config, Ctx, Error, PartyId, Session, Stats};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::driver::{self, DEFAULT_TIMEOUT, Link, Recv};
use crate::error::TransportError;

/// A frame (`Some`) or the close marker (`None`) from a peer, and when it may be
/// delivered (shaped links only).
type Message = (PartyId, Option<Vec<u8>>, Option<Instant>);

/// Network shaping for the in-memory links, to measure protocols as if on a network.
///
/// Each directed link is a wire of `bits_per_sec` with a one-way `latency`: a frame
/// starts once the frames sent before it on the same link have gone out, takes
/// `len × 8 / bits_per_sec` to go out, and is delivered `latency` after that. The
/// delivery time depends only on when frames were sent and on their sizes (the sender
/// never blocks, as with a deep send buffer), so the effect is deterministic up to the
/// accuracy of the receiving thread's sleep. Framing overhead of a real network (TCP/IP,
/// TLS) is not added: the bytes are the session's frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Bandwidth of each directed link in bits per second (0: unlimited).
    pub bits_per_sec: u64,
    /// One-way latency (half the round-trip time).
    pub latency: Duration,
}

impl Shape {
    /// A LAN as in PUMA's evaluation setting: 5 Gbit/s, 0.5 ms one way (1 ms RTT).
    pub const LAN: Shape = Shape {
        bits_per_sec: 5_000_000_000,
        latency: Duration::from_micros(500),
    };

    /// A wide-area network between data centres: 1 Gbit/s, 10 ms one way (20 ms RTT), where
    /// latency per token is set by rounds rather than bytes.
    pub const WAN: Shape = Shape {
        bits_per_sec: 1_000_000_000,
        latency: Duration::from_millis(10),
    };

    /// When a frame of `len` bytes sent `now` on a link free from `free_at` has gone out.
    fn sent_by(&self, now: Instant, free_at: Option<Instant>, len: usize) -> Instant {
        let start = free_at.map_or(now, |f| f.max(now));
        if self.bits_per_sec == 0 {
            return start;
        }
        let nanos = (len as u128 * 8 * 1_000_000_000) / u128::from(self.bits_per_sec);
        start + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

/// One party's end of the in-memory network.
#[derive(Debug)]
pub struct MemLink {
    me: PartyId,
    /// Senders to the peers, by party index; `None` at this party's own index.
    peers: [Option<Sender<Message>>; 3],
    inbox: Receiver<Message>,
    /// Peers whose close this link has already reported.
    reported: [bool; 3],
    /// Shaping of this party's outgoing links, if any.
    shape: Option<Shape>,
    /// When each outgoing link has sent everything queued so far (shaped links).
    free_at: [Option<Instant>; 3],
    /// Messages received but not yet due, per sender (shaped links).
    due: [VecDeque<(Instant, Option<Vec<u8>>)>; 3],
}

impl MemLink {
    /// The party this link belongs to.
    pub fn me(&self) -> PartyId {
        self.me
    }
}

/// Three connected links, by party index.
pub fn links() -> [MemLink; 3] {
    links_shaped(None)
}

/// Three connected links whose frames are delayed as by `shape` (see [`Shape`]).
pub fn links_shaped(shape: Option<Shape>) -> [MemLink; 3] {
    let (tx0, rx0) = channel();
    let (tx1, rx1) = channel();
    let (tx2, rx2) = channel();
    let mk = |me: PartyId, peers: [Option<Sender<Message>>; 3], inbox| MemLink {
        me,
        peers,
        inbox,
        reported: [false; 3],
        shape,
        free_at: [None; 3],
        due: Default::default(),
    };
    [
        mk(
            PartyId::P0,
            [None, Some(tx1.clone()), Some(tx2.clone())],
            rx0,
        ),
        mk(PartyId::P1, [Some(tx0.clone()), None, Some(tx2)], rx1),
        mk(PartyId::P2, [Some(tx0), Some(tx1), None], rx2),
    ]
}

impl Link for MemLink {
    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), TransportError> {
        let tx =
            self.peers
                .get(to.index())
                .and_then(Option::as_ref)
                .ok_or(TransportError::Core(Error::misuse(
                    "a party cannot send to itself",
                )))?;
        let at = self.shape.map(|sh| {
            let slot = self.free_at.get_mut(to.index());
            let done = sh.sent_by(
                Instant::now(),
                slot.as_deref().copied().flatten(),
                frame.len(),
            );
            if let Some(f) = slot {
                *f = Some(done);
            }
            done + sh.latency
        });
        tx.send((self.me, Some(frame), at))
            .map_err(|_| TransportError::Disconnected { peer: to })
    }

    fn recv(&mut self, timeout: Duration) -> Result<Recv, TransportError> {
        if self.shape.is_some() {
            return self.recv_shaped(timeout);
        }
        match self.inbox.recv_timeout(timeout) {
            Ok((from, Some(bytes), _)) => Ok(Recv::Frame { from, bytes }),
            Ok((peer, None, _)) => {
                if let Some(r) = self.reported.get_mut(peer.index()) {
                    *r = true;
                }
                Ok(Recv::Closed { peer })
            }
            Err(RecvTimeoutError::Timeout) => Ok(Recv::TimedOut),
            // Every sender is gone, yet a close marker was not seen (a link was leaked):
            // report a peer not reported before, if any.
            Err(RecvTimeoutError::Disconnected) => {
                let peer = [self.me.next(), self.me.prev()]
                    .into_iter()
                    .find(|p| !self.reported.get(p.index()).copied().unwrap_or(true))
                    .unwrap_or(self.me.next());
                if let Some(r) = self.reported.get_mut(peer.index()) {
                    *r = true;
                }
                Ok(Recv::Closed { peer })
            }
        }
    }
}

impl MemLink {
    /// `recv` on shaped links: hold each message until it is due.
    fn recv_shaped(&mut self, timeout: Duration) -> Result<Recv, TransportError> {
        let deadline = Instant::now() + timeout;
        let mut senders_gone = false;
        loop {
            // Move everything that has arrived into the per-sender queues.
            loop {
                match self.inbox.try_recv() {
                    Ok((from, m, at)) => {
                        if let Some(q) = self.due.get_mut(from.index()) {
                            q.push_back((at.unwrap_or_else(Instant::now), m));
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        senders_gone = true;
                        break;
                    }
                }
            }
            let now = Instant::now();
            let next = PartyId::ALL
                .into_iter()
                .filter_map(|p| self.due.get(p.index())?.front().map(|(t, _)| (*t, p)))
                .min_by_key(|(t, _)| *t);
            if let Some((t, p)) = next {
                if t <= now {
                    let m = self.due.get_mut(p.index()).and_then(VecDeque::pop_front);
                    return match m {
                        Some((_, Some(bytes))) => Ok(Recv::Frame { from: p, bytes }),
                        _ => {
                            if let Some(r) = self.reported.get_mut(p.index()) {
                                *r = true;
                            }
                            Ok(Recv::Closed { peer: p })
                        }
                    };
                }
            }
            if now >= deadline {
                return Ok(Recv::TimedOut);
            }
            if senders_gone && next.is_none() {
                let peer = [self.me.next(), self.me.prev()]
                    .into_iter()
                    .find(|p| !self.reported.get(p.index()).copied().unwrap_or(true))
                    .unwrap_or(self.me.next());
                if let Some(r) = self.reported.get_mut(peer.index()) {
                    *r = true;
                }
                return Ok(Recv::Closed { peer });
            }
            let until = next.map_or(deadline, |(t, _)| t.min(deadline));
            let wait = until.saturating_duration_since(now);
            if senders_gone {
                thread::sleep(wait);
                continue;
            }
            match self.inbox.recv_timeout(wait) {
                Ok((from, m, at)) => {
                    if let Some(q) = self.due.get_mut(from.index()) {
                        q.push_back((at.unwrap_or_else(Instant::now), m));
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => senders_gone = true,
            }
        }
    }
}

impl Drop for MemLink {
    fn drop(&mut self) {
        let me = self.me;
        for p in [me.next(), me.prev()] {
            let Some(tx) = self.peers.get(p.index()).and_then(Option::as_ref) else {
                continue;
            };
            // The close follows the frames sent before it on the shaped wire.
            let at = self.shape.map(|sh| {
                let free = self.free_at.get(p.index()).copied().flatten();
                sh.sent_by(Instant::now(), free, 0) + sh.latency
            });
            // A peer that is gone already needs no marker.
            let _ = tx.send((me, None, at));
        }
    }
}

/// The outcome of [`run3`].
#[derive(Debug)]
pub struct Outcome<T> {
    /// Each party's result, by index.
    pub results: [Result<T, TransportError>; 3],
    /// Each party's counters, by index (default for a party whose session never started
    /// or whose thread panicked).
    pub stats: [Stats; 3],
}

impl<T> Outcome<T> {
    /// The three results, or the first error in party order.
    ///
    /// # Errors
    /// The first failed party's error.
    pub fn into_results(self) -> Result<[T; 3], TransportError> {
        let [a, b, c] = self.results;
        Ok([a?, b?, c?])
    }

    /// Critical-path rounds of the run: the maximum over the parties.
    pub fn rounds(&self) -> u32 {
        self.stats.iter().map(|s| s.rounds).max().unwrap_or(0)
    }
}

/// The 32-byte session entropy of each party, derived from `seed`.
///
/// The derivation is the one of `puma_core::sim::Sim` (ChaCha8 seeded by `seed`, 32 bytes
/// per party in index order), so a threaded run and a simulated run with the same seed and
/// configuration exchange the very same frames.
///
/// **For tests and demos only**: a real party draws its entropy from the operating system.
pub fn entropy_from_seed(seed: u64) -> [[u8; 32]; 3] {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = [[0u8; 32]; 3];
    for e in &mut out {
        rng.fill_bytes(e);
    }
    out
}

/// Runs one protocol at three parties on three threads over in-memory channels, each
/// waiting at most [`DEFAULT_TIMEOUT`] for a frame. `make(p)` builds party `p`'s protocol,
/// as for `puma_core::sim::Sim::run`; entropy comes from [`entropy_from_seed`].
///
/// Never hangs on a fault: failures surface in [`Outcome::results`].
pub fn run3<T, G, Fut>(cfg: Config, entropy_seed: u64, make: impl FnMut(PartyId) -> G) -> Outcome<T>
where
    T: Send + 'static,
    G: FnOnce(Ctx) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, Error>> + Send + 'static,
{
    run3_with_timeout(cfg, entropy_seed, DEFAULT_TIMEOUT, make)
}

/// [`run3`] with a chosen idle `timeout` per wait.
pub fn run3_with_timeout<T, G, Fut>(
    cfg: Config,
    entropy_seed: u64,
    timeout: Duration,
    make: impl FnMut(PartyId) -> G,
) -> Outcome<T>
where
    T: Send + 'static,
    G: FnOnce(Ctx) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, Error>> + Send + 'static,
{
    run3_shaped(cfg, entropy_seed, timeout, None, make)
}

/// [`run3_with_timeout`] over links shaped by `shape` (bandwidth and latency, see
/// [`Shape`]); `None` is [`run3_with_timeout`]. The frames, bytes and results are those
/// of the unshaped run; only the timing changes.
pub fn run3_shaped<T, G, Fut>(
    cfg: Config,
    entropy_seed: u64,
    timeout: Duration,
    shape: Option<Shape>,
    mut make: impl FnMut(PartyId) -> G,
) -> Outcome<T>
where
    T: Send + 'static,
    G: FnOnce(Ctx) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, Error>> + Send + 'static,
{
    let entropy = entropy_from_seed(entropy_seed);
    let sessions = PartyId::ALL.map(|p| {
        let e = entropy.get(p.index()).copied().unwrap_or_default();
        Session::new(cfg.clone(), p, e, make(p))
    });
    let joined: [Option<(Result<T, TransportError>, Stats)>; 3] = thread::scope(|scope| {
        let handles = sessions
            .into_iter()
            .zip(links_shaped(shape))
            .map(|(session, link)| {
                let party = link.me();
                let handle = thread::Builder::new()
                    .name(format!("puma-{party}"))
                    .spawn_scoped(scope, move || run_party(session, link, timeout));
                (party, handle)
            });
        // Spawn all three before joining any.
        let handles: Vec<_> = handles.collect();
        let mut out: [Option<(Result<T, TransportError>, Stats)>; 3] = [None, None, None];
        for (party, handle) in handles {
            let r = match handle {
                Ok(h) => h.join().unwrap_or_else(|_| panicked(party)),
                // The OS refused a thread: its link was dropped, so its peers see a close.
                Err(_) => (
                    Err(TransportError::Disconnected { peer: party }),
                    Stats::default(),
                ),
            };
            if let Some(slot) = out.get_mut(party.index()) {
                *slot = Some(r);
            }
        }
        out
    });
    let [a, b, c] = joined;
    let fill = |r: Option<(Result<T, TransportError>, Stats)>, p: PartyId| {
        r.unwrap_or_else(|| panicked(p))
    };
    let (r0, s0) = fill(a, PartyId::P0);
    let (r1, s1) = fill(b, PartyId::P1);
    let (r2, s2) = fill(c, PartyId::P2);
    Outcome {
        results: [r0, r1, r2],
        stats: [s0, s1, s2],
    }
}

fn panicked<T>(party: PartyId) -> (Result<T, TransportError>, Stats) {
    (Err(TransportError::Panicked { party }), Stats::default())
}

fn run_party<T: 'static>(
    session: Result<Session<T>, Error>,
    mut link: MemLink,
    timeout: Duration,
) -> (Result<T, TransportError>, Stats) {
    match session {
        Ok(mut s) => {
            let r = driver::drive(&mut s, &mut link, timeout);
            (r, s.stats())
        }
        Err(e) => (Err(e.into()), Stats::default()),
    }
}

#[cfg(test)]
mod shape_tests {
    use super::*;

    #[test]
    fn a_wan_frame_goes_out_at_its_bandwidth_after_the_link_is_free() {
        let now = Instant::now();
        // 1.25 MB at 1 Gbit/s: 10 ms on the wire.
        let out = Shape::WAN.sent_by(now, None, 1_250_000);
        assert_eq!(out - now, Duration::from_millis(10));
        // Queued behind a frame still going out.
        let busy = now + Duration::from_millis(3);
        assert_eq!(
            Shape::WAN.sent_by(now, Some(busy), 125_000) - now,
            Duration::from_millis(4)
        );
        assert_eq!(Shape::WAN.latency * 2, Duration::from_millis(20));
    }
}
