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

use std::future::Future;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread;
use std::time::Duration;

use puma_core::{Config, Ctx, Error, PartyId, Session, Stats};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::driver::{self, DEFAULT_TIMEOUT, Link, Recv};
use crate::error::TransportError;

/// A frame (`Some`) or the close marker (`None`) from a peer.
type Message = (PartyId, Option<Vec<u8>>);

/// One party's end of the in-memory network.
#[derive(Debug)]
pub struct MemLink {
    me: PartyId,
    /// Senders to the peers, by party index; `None` at this party's own index.
    peers: [Option<Sender<Message>>; 3],
    inbox: Receiver<Message>,
    /// Peers whose close this link has already reported.
    reported: [bool; 3],
}

impl MemLink {
    /// The party this link belongs to.
    pub fn me(&self) -> PartyId {
        self.me
    }
}

/// Three connected links, by party index.
pub fn links() -> [MemLink; 3] {
    let (tx0, rx0) = channel();
    let (tx1, rx1) = channel();
    let (tx2, rx2) = channel();
    let mk = |me: PartyId, peers: [Option<Sender<Message>>; 3], inbox| MemLink {
        me,
        peers,
        inbox,
        reported: [false; 3],
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
        tx.send((self.me, Some(frame)))
            .map_err(|_| TransportError::Disconnected { peer: to })
    }

    fn recv(&mut self, timeout: Duration) -> Result<Recv, TransportError> {
        match self.inbox.recv_timeout(timeout) {
            Ok((from, Some(bytes))) => Ok(Recv::Frame { from, bytes }),
            Ok((peer, None)) => {
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

impl Drop for MemLink {
    fn drop(&mut self) {
        for tx in self.peers.iter().flatten() {
            // A peer that is gone already needs no marker.
            let _ = tx.send((self.me, None));
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
        let handles = sessions.into_iter().zip(links()).map(|(session, link)| {
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
