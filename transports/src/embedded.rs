//! A blocking [`Link`] over `embedded-io` byte streams: the `std` face of
//! [`puma_embedded`].
//!
//! The framing, back-pressure and run loop live in the `#![no_std]` crate
//! [`puma_embedded`], which a host without an operating system uses directly (with its own
//! [`Clock`]). This adapter supplies the `std` clock and a short sleep as the idle hook, so
//! the same streams can be driven by [`drive`](crate::drive) like any other link. Frames
//! carry the same 4-byte little-endian length prefix as TCP ([`crate::net`]), so a `no_std`
//! party and a `std` one can share a byte pipe.

use std::time::{Duration, Instant};

use embedded_io::{Read, ReadReady, Write, WriteReady};
use puma_core::PartyId;
use puma_embedded::{Clock, Event};

use crate::driver::{Link, Recv, millis};
use crate::error::{FrameError, TransportError};

/// The `std` host: a monotonic clock, and a short sleep when no stream is ready.
#[derive(Debug)]
pub struct StdClock {
    start: Instant,
}

impl Default for StdClock {
    fn default() -> Self {
        StdClock {
            start: Instant::now(),
        }
    }
}

impl Clock for StdClock {
    fn now_ms(&mut self) -> u64 {
        millis(self.start.elapsed())
    }

    fn idle(&mut self) {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// One party's streams to its two peers, as a [`Link`].
pub struct StreamLink<S> {
    inner: puma_embedded::StreamLink<S, StdClock>,
}

impl<S> std::fmt::Debug for StreamLink<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.inner.fmt(f)
    }
}

impl<S: Read + ReadReady + Write + WriteReady> StreamLink<S> {
    /// A link for `me` with the stream to `me.next()` and the one to `me.prev()`, accepting
    /// frames up to [`Config::DEFAULT_MAX_FRAME_LEN`](puma_core::Config::DEFAULT_MAX_FRAME_LEN)
    /// and failing a send that makes no progress for 30 seconds.
    pub fn new(me: PartyId, to_next: S, to_prev: S) -> StreamLink<S> {
        StreamLink {
            inner: puma_embedded::StreamLink::new(me, to_next, to_prev, StdClock::default()),
        }
    }

    /// Sets the largest frame accepted (the session's `max_frame_len`).
    pub fn with_max_frame_len(self, max: usize) -> Self {
        StreamLink {
            inner: self.inner.with_max_frame_len(max),
        }
    }

    /// Sets how long a send may wait for a peer to read.
    pub fn with_send_timeout(self, timeout: Duration) -> Self {
        StreamLink {
            inner: self.inner.with_send_timeout_ms(millis(timeout)),
        }
    }

    /// The `no_std` link inside, e.g. for [`puma_embedded::run`].
    pub fn into_inner(self) -> puma_embedded::StreamLink<S, StdClock> {
        self.inner
    }
}

impl From<puma_embedded::Error> for TransportError {
    fn from(e: puma_embedded::Error) -> Self {
        use puma_embedded::Error as E;
        match e {
            E::Core(e) => TransportError::Core(e),
            E::Disconnected { peer } | E::Truncated { peer } => {
                TransportError::Disconnected { peer }
            }
            E::Oversized { peer, len, max } => TransportError::BadFrame {
                peer,
                reason: FrameError::Oversized { len, max },
            },
            E::SendStalled { peer } => TransportError::SendStalled { peer },
            other => TransportError::Local(other.to_string()),
        }
    }
}

impl<S: Read + ReadReady + Write + WriteReady> Link for StreamLink<S> {
    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), TransportError> {
        Ok(self.inner.send(to, &frame)?)
    }

    fn recv(&mut self, timeout: Duration) -> Result<Recv, TransportError> {
        Ok(match self.inner.recv(millis(timeout))? {
            Event::Frame { from, bytes } => Recv::Frame { from, bytes },
            Event::Closed { peer, .. } => Recv::Closed { peer },
            Event::TimedOut => Recv::TimedOut,
        })
    }
}
