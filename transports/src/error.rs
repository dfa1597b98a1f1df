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
