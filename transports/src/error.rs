//! The error of a driven session: the core's error or a transport failure.

use std::fmt;

use puma_core::{Error, ErrorKind, PartyId};

/// Why a party's run over a transport failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum TransportError {
    /// The session itself failed: a protocol error, an abort by a peer, a timeout
    /// ([`ErrorKind::Timeout`]), misuse or a bug.
    Core(Error),
    /// The link to `peer` is gone (the peer's end was closed or dropped) while this party
    /// still needed it.
    Disconnected {
        /// The peer that went away.
        peer: PartyId,
    },
    /// The thread running `party` panicked (a bug in the protocol code it ran).
    Panicked {
        /// The party whose thread panicked.
        party: PartyId,
    },
    /// `peer` sent bytes that are not a well-formed frame on the wire (for example a
    /// length prefix above the frame limit).
    BadFrame {
        /// The peer that sent them.
        peer: PartyId,
        /// What was wrong.
        reason: FrameError,
    },
    /// The link to `peer` could not be set up before the deadline (unreachable, refused,
    /// or it never connected).
    Connect {
        /// The peer.
        peer: PartyId,
        /// Why, for the log.
        reason: String,
    },
    /// The TLS handshake with `peer` (or with an unidentified connection, `None`) failed:
    /// for example the certificate presented is not the pinned one.
    Tls {
        /// The peer, when known.
        peer: Option<PartyId>,
        /// Why, for the log.
        reason: String,
    },
    /// A local resource failed: a socket could not be bound, a runtime not started, a
    /// key or certificate not read.
    Local(String),
    /// Sending to `peer` made no progress within the timeout (it stopped reading).
    SendStalled {
        /// The peer.
        peer: PartyId,
    },
    /// Frames received while sends were blocked exceeded the receive budget.
    Overloaded {
        /// The peer whose frame went over the budget.
        peer: PartyId,
    },
}

/// What was wrong with a frame on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// The announced length exceeds the frame limit.
    Oversized {
        /// The announced length.
        len: u64,
        /// The limit.
        max: u64,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Oversized { len, max } => {
                write!(f, "frame of {len} bytes exceeds the limit of {max}")
            }
        }
    }
}

impl TransportError {
    /// The core error, if this is one.
    pub fn core(&self) -> Option<&Error> {
        match self {
            TransportError::Core(e) => Some(e),
            _ => None,
        }
    }

    /// The core error's kind, if this is a core error.
    pub fn core_kind(&self) -> Option<ErrorKind> {
        self.core().map(Error::kind)
    }

    /// The peer this error is attributed to, if any: the lost, stalled, misbehaving or
    /// refused peer, the sender of a bad frame, or the party that aborted.
    pub fn peer(&self) -> Option<PartyId> {
        match self {
            TransportError::Core(e) => match e.kind() {
                ErrorKind::Protocol { from } => Some(from),
                ErrorKind::Aborted { by } => Some(by),
                ErrorKind::Timeout { waiting_for } => Some(waiting_for),
                _ => None,
            },
            TransportError::Disconnected { peer }
            | TransportError::BadFrame { peer, .. }
            | TransportError::Connect { peer, .. }
            | TransportError::SendStalled { peer }
            | TransportError::Overloaded { peer } => Some(*peer),
            TransportError::Panicked { party } => Some(*party),
            TransportError::Tls { peer, .. } => *peer,
            TransportError::Local(_) => None,
        }
    }
}

impl From<Error> for TransportError {
    fn from(e: Error) -> Self {
        TransportError::Core(e)
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::Core(e) => e.fmt(f),
            TransportError::Disconnected { peer } => write!(f, "link to {peer} disconnected"),
            TransportError::Panicked { party } => write!(f, "the thread of {party} panicked"),
            TransportError::BadFrame { peer, reason } => {
                write!(f, "bad frame from {peer}: {reason}")
            }
            TransportError::Connect { peer, reason } => {
                write!(f, "cannot connect with {peer}: {reason}")
            }
            TransportError::Tls {
                peer: Some(p),
                reason,
            } => {
                write!(f, "TLS handshake with {p} failed: {reason}")
            }
            TransportError::Tls { peer: None, reason } => {
                write!(
                    f,
                    "TLS handshake with an unidentified peer failed: {reason}"
                )
            }
            TransportError::Local(reason) => write!(f, "local failure: {reason}"),
            TransportError::SendStalled { peer } => {
                write!(
                    f,
                    "{peer} stopped reading: a send made no progress within the timeout"
                )
            }
            TransportError::Overloaded { peer } => write!(
                f,
                "frames from {peer} held while sending exceed the receive budget"
            ),
        }
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TransportError::Core(e) => Some(e),
            _ => None,
        }
    }
}
