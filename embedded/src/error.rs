//! The error of a run over embedded-io streams.

use core::fmt;

use puma_core::{ErrorKind, PartyId};

use crate::LinkError;

/// Why a run (or one link operation) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The session itself failed: a malformed frame, an abort by a peer
    /// ([`ErrorKind::Aborted`]), no frame within the timeout ([`ErrorKind::Timeout`],
    /// naming the peer waited for), misuse or a bug.
    Core(puma_core::Error),
    /// The stream to `peer` closed or failed while this party still needed it.
    Disconnected {
        /// The peer that went away.
        peer: PartyId,
    },
    /// The stream from `peer` ended in the middle of a frame, while this party still
    /// needed it.
    Truncated {
        /// The peer whose stream ended.
        peer: PartyId,
    },
    /// `peer` announced a frame longer than the frame limit.
    Oversized {
        /// The peer that sent the length.
        peer: PartyId,
        /// The announced length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The buffer for a frame from `peer` could not be allocated.
    OutOfMemory {
        /// The peer whose frame it was.
        peer: PartyId,
        /// The frame's length.
        len: u64,
    },
    /// A send to `peer` made no progress within the send timeout (it stopped reading).
    SendStalled {
        /// The peer.
        peer: PartyId,
    },
}

impl Error {
    /// The peer this error is attributed to, if any: the lost, stalled or misbehaving
    /// peer, the party that aborted, or the one waited for at a timeout.
    pub fn peer(&self) -> Option<PartyId> {
        match self {
            Error::Core(e) => match e.kind() {
                ErrorKind::Protocol { from } => Some(from),
                ErrorKind::Aborted { by } => Some(by),
                ErrorKind::Timeout { waiting_for } => Some(waiting_for),
                _ => None,
            },
            Error::Disconnected { peer }
            | Error::Truncated { peer }
            | Error::Oversized { peer, .. }
            | Error::OutOfMemory { peer, .. }
            | Error::SendStalled { peer } => Some(*peer),
        }
    }
}

impl LinkError for Error {
    fn lost(peer: PartyId, truncated: bool) -> Self {
        if truncated {
            Error::Truncated { peer }
        } else {
            Error::Disconnected { peer }
        }
    }

    fn is_lost(&self, peer: PartyId) -> bool {
        matches!(self, Error::Disconnected { peer: p } if *p == peer)
    }
}

impl From<puma_core::Error> for Error {
    fn from(e: puma_core::Error) -> Self {
        Error::Core(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Core(e) => e.fmt(f),
            Error::Disconnected { peer } => write!(f, "stream to {peer} closed"),
            Error::Truncated { peer } => {
                write!(f, "stream from {peer} ended in the middle of a frame")
            }
            Error::Oversized { peer, len, max } => write!(
                f,
                "bad frame from {peer}: frame of {len} bytes exceeds the limit of {max}"
            ),
            Error::OutOfMemory { peer, len } => {
                write!(f, "no memory for a frame of {len} bytes from {peer}")
            }
            Error::SendStalled { peer } => write!(
                f,
                "{peer} stopped reading: a send made no progress within the timeout"
            ),
        }
    }
}

impl core::error::Error for Error {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Error::Core(e) => Some(e),
            _ => None,
        }
    }
}
