//! The one error type of the engine and its protocols.

use core::fmt;

use crate::party::PartyId;

/// What went wrong, coarsely, for callers that branch on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A peer sent a malformed, unexpected or oversized frame or record.
    Protocol {
        /// The peer whose frame was rejected.
        from: PartyId,
    },
    /// A peer ended the session with an abort frame.
    Aborted {
        /// The peer that aborted.
        by: PartyId,
    },
    /// The host reported that its timer expired while this party waited.
    Timeout {
        /// The first peer whose data was still missing.
        waiting_for: PartyId,
    },
    /// The API was used incorrectly: bad configuration, mismatched shapes, input after
    /// `Done`, or a protocol future polled outside its session.
    Misuse,
    /// An internal invariant failed. Always a bug in this library.
    Bug,
}

/// An error from a session or a protocol.
///
/// The message is a static description of the failed check; it never contains share
/// values or other secret data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    detail: &'static str,
}

impl Error {
    /// An error of the given kind with a static description.
    pub const fn new(kind: ErrorKind, detail: &'static str) -> Error {
        Error { kind, detail }
    }

    /// A malformed or unexpected message from `from`.
    pub const fn protocol(from: PartyId, detail: &'static str) -> Error {
        Error::new(ErrorKind::Protocol { from }, detail)
    }

    /// A caller mistake.
    pub const fn misuse(detail: &'static str) -> Error {
        Error::new(ErrorKind::Misuse, detail)
    }

    /// A broken internal invariant.
    pub const fn bug(detail: &'static str) -> Error {
        Error::new(ErrorKind::Bug, detail)
    }

    /// The coarse kind of this error.
    pub const fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The static description of the failed check.
    pub const fn detail(&self) -> &'static str {
        self.detail
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            ErrorKind::Protocol { from } => {
                write!(f, "protocol error from {from}: {}", self.detail)
            }
            ErrorKind::Aborted { by } => write!(f, "session aborted by {by}: {}", self.detail),
            ErrorKind::Timeout { waiting_for } => {
                write!(f, "timed out waiting for {waiting_for}: {}", self.detail)
            }
            ErrorKind::Misuse => write!(f, "misuse: {}", self.detail),
            ErrorKind::Bug => write!(f, "internal error (please report): {}", self.detail),
        }
    }
}

impl core::error::Error for Error {}
