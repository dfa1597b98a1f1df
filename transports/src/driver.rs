//! The blocking run loop that drives one [`Session`] over a [`Link`].
//!
//! The loop itself is [`puma_embedded::run`], shared with hosts without `std`; this module
//! is its `std` face: the [`Link`] trait in [`Duration`]s, and [`drive`], which runs the
//! loop over any such link on the monotonic clock.
//!
//! The timeout is an idle timeout: each wait for data may last up to `timeout`, and the
//! clock restarts whenever a frame arrives. When it expires the session ends with
//! [`ErrorKind::Timeout`](puma_core::ErrorKind::Timeout), after sending abort frames to
//! its peers. A link to a peer that closes is an error only when the session still needs
//! that peer: a party that has finished its part may leave while the other two go on.

use std::time::Duration;

use puma_core::{PartyId, Session};
use puma_embedded::{Clock, Event, LinkError};

use crate::embedded::StdClock;
use crate::error::TransportError;

/// The timeout [`mem::run3`](crate::mem::run3) uses: 30 seconds without any frame.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// What a [`Link`] delivers while the session waits.
#[derive(Debug, PartialEq, Eq)]
pub enum Recv {
    /// One whole frame from `from`, authenticated as coming from that party.
    Frame {
        /// The sender.
        from: PartyId,
        /// The frame's bytes.
        bytes: Vec<u8>,
    },
    /// The link from `peer` was closed after all of its frames were delivered.
    Closed {
        /// The peer whose link closed.
        peer: PartyId,
    },
    /// Nothing arrived before the timeout.
    TimedOut,
}

/// A party's connections to its two peers, as the driver sees them.
///
/// Implementations move whole frames, keep them in order per peer, and tell the sender of
/// each frame truthfully (over a network: from the authenticated connection it came on).
pub trait Link {
    /// Sends one frame to `to`; frames to one peer must arrive in the order sent.
    ///
    /// # Errors
    /// [`TransportError::Disconnected`] if the link to `to` is gone (the frame is dropped
    /// and the run goes on); any other error, such as [`TransportError::SendStalled`],
    /// ends the run.
    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), TransportError>;

    /// Waits at most `timeout` for the next frame or close from either peer.
    ///
    /// # Errors
    /// A transport failure that is not attributable to a single closed peer.
    fn recv(&mut self, timeout: Duration) -> Result<Recv, TransportError>;
}

impl<L: Link + ?Sized> Link for &mut L {
    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), TransportError> {
        (**self).send(to, frame)
    }

    fn recv(&mut self, timeout: Duration) -> Result<Recv, TransportError> {
        (**self).recv(timeout)
    }
}

/// Runs `session` to completion over `link`, waiting at most `timeout` for each frame.
///
/// The session is borrowed so that the caller can read [`Session::stats`] afterwards.
/// Time is counted in whole milliseconds (a fraction of one is rounded up).
///
/// # Errors
/// - [`TransportError::Core`] when the session fails: a malformed frame, an abort by a
///   peer, or [`ErrorKind::Timeout`](puma_core::ErrorKind::Timeout) when no frame came
///   within `timeout`.
/// - [`TransportError::Disconnected`] when the session waits for a peer whose link is
///   gone. Frames that cannot be delivered to a peer that has left are dropped: a session
///   that still completes has everything it needed.
/// - Any error of [`Link::recv`], and any error of [`Link::send`] but
///   [`TransportError::Disconnected`]: for example [`TransportError::SendStalled`] when a
///   peer stopped reading.
///
/// Before returning a transport error the driver makes the session abort, so the
/// surviving peer receives an abort frame (best effort) and fails fast.
pub fn drive<T: 'static>(
    session: &mut Session<T>,
    link: impl Link,
    timeout: Duration,
) -> Result<T, TransportError> {
    let mut link = StdLink {
        link,
        clock: StdClock::default(),
    };
    puma_embedded::run(session, &mut link, millis(timeout))
}

/// A [`Link`] with the monotonic clock, as [`puma_embedded::run`] needs it.
struct StdLink<L> {
    link: L,
    clock: StdClock,
}

impl<L: Link> puma_embedded::Link for StdLink<L> {
    type Error = TransportError;

    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), TransportError> {
        self.link.send(to, frame)
    }

    fn recv(&mut self, timeout_ms: u64) -> Result<Event, TransportError> {
        Ok(match self.link.recv(Duration::from_millis(timeout_ms))? {
            Recv::Frame { from, bytes } => Event::Frame { from, bytes },
            Recv::Closed { peer } => Event::Closed {
                peer,
                truncated: false,
            },
            Recv::TimedOut => Event::TimedOut,
        })
    }

    fn now_ms(&mut self) -> u64 {
        self.clock.now_ms()
    }
}

impl LinkError for TransportError {
    fn lost(peer: PartyId, _truncated: bool) -> Self {
        TransportError::Disconnected { peer }
    }

    fn is_lost(&self, peer: PartyId) -> bool {
        matches!(self, TransportError::Disconnected { peer: p } if *p == peer)
    }
}

/// `d` in whole milliseconds, a fraction of one rounded up (so that a short timeout is
/// not zero), saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}
