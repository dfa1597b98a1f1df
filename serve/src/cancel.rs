//! Ending one request's session from outside it: when its client goes away or its
//! deadline passes, the session stops at its next wait and aborts, so the other two
//! servers end it too (with an abort frame) while every other session goes on.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use puma_core::PartyId;
use puma_transports::{Link, Recv, TransportError};

/// Why a request was ended from outside.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// Its client closed the connection.
    ClientGone,
    /// The server is shutting down.
    Shutdown,
}

/// A request's deadline and its way to be ended from outside; shared between the task
/// that watches the client's connection and the thread that runs the session.
#[derive(Debug)]
pub struct Cancel {
    deadline: Instant,
    ended: AtomicU8,
}

const RUNNING: u8 = 0;

impl Cancel {
    /// A request that may run until `deadline`.
    pub fn until(deadline: Instant) -> Cancel {
        Cancel {
            deadline,
            ended: AtomicU8::new(RUNNING),
        }
    }

    /// Ends the request at its next wait.
    pub fn end(&self, why: Ended) {
        let code = match why {
            Ended::ClientGone => 1,
            Ended::Shutdown => 2,
        };
        let _ = self
            .ended
            .compare_exchange(RUNNING, code, Ordering::SeqCst, Ordering::SeqCst);
    }

    /// Why the request must stop now, if it must.
    pub fn check(&self) -> Result<(), TransportError> {
        match self.ended.load(Ordering::SeqCst) {
            1 => Err(TransportError::Local("the client went away".into())),
            2 => Err(TransportError::Local("the server is shutting down".into())),
            _ if Instant::now() >= self.deadline => Err(TransportError::Local(
                "the request's deadline passed".into(),
            )),
            _ => Ok(()),
        }
    }
}

/// How often a waiting session looks at its [`Cancel`].
const POLL: Duration = Duration::from_millis(100);

/// A [`Link`] that ends its session when its [`Cancel`] says so; otherwise it is `inner`.
pub struct Guarded<'a, L> {
    inner: L,
    cancel: &'a Cancel,
    /// Until a first frame from this party arrives, waits for it last until this instant
    /// rather than the driver's idle timeout (see [`Guarded::awaiting`]).
    awaiting: Option<(PartyId, Instant)>,
}

impl<'a, L: Link> Guarded<'a, L> {
    /// `inner`, watched by `cancel`.
    pub fn new(inner: L, cancel: &'a Cancel) -> Self {
        Guarded {
            inner,
            cancel,
            awaiting: None,
        }
    }

    /// Until the first frame from `leader` arrives, waits for it until `until` (or the
    /// cancel) instead of timing out after the driver's idle timeout: the leader admits
    /// requests in its own order and may keep this one in its queue that long.
    pub fn awaiting(self, leader: PartyId, until: Instant) -> Self {
        Guarded {
            awaiting: Some((leader, until)),
            ..self
        }
    }
}

impl<L: Link> Link for Guarded<'_, L> {
    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), TransportError> {
        // Sends always go through: the abort frames that end the peers' sessions too are
        // sent after the cancel.
        self.inner.send(to, frame)
    }

    fn recv(&mut self, timeout: Duration) -> Result<Recv, TransportError> {
        // The driver's idle timeout still holds (or, before the leader's first frame, the
        // leader's queue wait): wait in slices until it has passed.
        let idle = Instant::now() + timeout;
        loop {
            self.cancel.check()?;
            let until = match self.awaiting {
                Some((_, first)) => first.max(idle),
                None => idle,
            };
            let left = until.saturating_duration_since(Instant::now());
            match self.inner.recv(left.min(POLL))? {
                Recv::TimedOut if !left.is_zero() && left > POLL => continue,
                Recv::Frame { from, bytes } => {
                    if self.awaiting.is_some_and(|(leader, _)| leader == from) {
                        self.awaiting = None;
                    }
                    return Ok(Recv::Frame { from, bytes });
                }
                other => return Ok(other),
            }
        }
    }
}
