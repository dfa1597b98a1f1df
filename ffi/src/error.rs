//! Status codes, the thread-local last-error message and the panic boundary.

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use puma_core::ErrorKind;

/// Status codes returned by every fallible function of the C API; `PUMA_OK` is 0.
///
/// After a failing call, `puma_last_error()` describes what went wrong.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum puma_status {
    /// Success.
    PUMA_OK = 0,
    /// A required pointer argument was null.
    PUMA_ERR_NULL_POINTER = 1,
    /// An argument was out of range, had the wrong length or shape, or the API was
    /// misused (core `Misuse`).
    PUMA_ERR_INVALID_ARGUMENT = 2,
    /// A peer sent a malformed or unexpected frame (core `Protocol`); the operation failed.
    PUMA_ERR_PROTOCOL = 3,
    /// A peer aborted the operation (core `Aborted`).
    PUMA_ERR_ABORTED = 4,
    /// The host's timer expired while waiting for a peer (core `Timeout`).
    PUMA_ERR_TIMEOUT = 5,
    /// An internal invariant failed: a bug in puma-rs (core `Bug`).
    PUMA_ERR_BUG = 6,
    /// A panic was caught at the boundary: a bug in puma-rs.
    PUMA_ERR_PANIC = 7,
    /// A caller-supplied buffer is too short; the size needed is reported and nothing
    /// was consumed, so the call can be repeated with a larger buffer.
    PUMA_ERR_INSUFFICIENT_SIZE = 8,
    /// The call is not allowed in the session's current state (e.g. starting an
    /// operation while one runs, polling when none runs, taking a result of another kind).
    PUMA_ERR_WRONG_STATE = 9,
    /// The pointer is not a live handle of the expected type (freed twice, used after
    /// free, or a handle of another type). Detection is best effort: see `puma.h`'s
    /// introduction.
    PUMA_ERR_INVALID_HANDLE = 10,
    /// A pointer was not aligned for its type.
    PUMA_ERR_MISALIGNED_POINTER = 11,
    /// A file could not be read or parsed (e.g. a model checkpoint).
    PUMA_ERR_IO = 12,
}

impl puma_status {
    /// Every status, in code order.
    pub const ALL: [puma_status; 13] = [
        puma_status::PUMA_OK,
        puma_status::PUMA_ERR_NULL_POINTER,
        puma_status::PUMA_ERR_INVALID_ARGUMENT,
        puma_status::PUMA_ERR_PROTOCOL,
        puma_status::PUMA_ERR_ABORTED,
        puma_status::PUMA_ERR_TIMEOUT,
        puma_status::PUMA_ERR_BUG,
        puma_status::PUMA_ERR_PANIC,
        puma_status::PUMA_ERR_INSUFFICIENT_SIZE,
        puma_status::PUMA_ERR_WRONG_STATE,
        puma_status::PUMA_ERR_INVALID_HANDLE,
        puma_status::PUMA_ERR_MISALIGNED_POINTER,
        puma_status::PUMA_ERR_IO,
    ];
}

impl From<ErrorKind> for puma_status {
    fn from(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::Protocol { .. } => puma_status::PUMA_ERR_PROTOCOL,
            ErrorKind::Aborted { .. } => puma_status::PUMA_ERR_ABORTED,
            ErrorKind::Timeout { .. } => puma_status::PUMA_ERR_TIMEOUT,
            ErrorKind::Misuse => puma_status::PUMA_ERR_INVALID_ARGUMENT,
            _ => puma_status::PUMA_ERR_BUG,
        }
    }
}

impl From<puma_core::Error> for puma_status {
    fn from(e: puma_core::Error) -> Self {
        e.kind().into()
    }
}

/// A failed call: its status and the message `puma_last_error()` returns.
#[derive(Debug)]
pub(crate) struct FfiError {
    pub(crate) status: puma_status,
    pub(crate) message: String,
}

impl FfiError {
    pub(crate) fn new(status: puma_status, message: impl Into<String>) -> FfiError {
        FfiError {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> FfiError {
        FfiError::new(puma_status::PUMA_ERR_INVALID_ARGUMENT, message)
    }

    pub(crate) fn wrong_state(message: impl Into<String>) -> FfiError {
        FfiError::new(puma_status::PUMA_ERR_WRONG_STATE, message)
    }
}

impl From<puma_core::Error> for FfiError {
    fn from(e: puma_core::Error) -> Self {
        // Core messages are static descriptions of the failed check, never secret data.
        FfiError::new(e.into(), e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // An interior NUL would cut the C string short; it cannot come from our messages,
    // but is replaced rather than trusted.
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = text);
}

/// The last error message of this thread (empty after a successful call).
pub(crate) fn last_error_ptr() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// Runs one entry point: clears the last error, catches panics, and turns an error into
/// its status and message.
pub(crate) fn entry(f: impl FnOnce() -> Result<(), FfiError>) -> puma_status {
    set_last_error("");
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => puma_status::PUMA_OK,
        Ok(Err(e)) => {
            set_last_error(&e.message);
            e.status
        }
        Err(_) => {
            set_last_error("a panic was caught at the C boundary (a bug in puma-rs)");
            puma_status::PUMA_ERR_PANIC
        }
    }
}
