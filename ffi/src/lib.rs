//! # puma-ffi
//!
//! The C ABI of puma-rs; its header is `ffi/include/puma.h`. For now it offers the version
//! string and fixed-point encoding; sessions (create, feed frames, poll frames and outputs,
//! as in the core's sans-IO contract) come next, behind opaque handles.
//!
//! Conventions, as in rustls-ffi:
//! - every fallible function returns a [`puma_status`]; `PUMA_OK` is 0;
//! - outputs go to caller-owned memory through pointers that are checked for null;
//! - no panic unwinds across the boundary: each entry point catches panics and returns
//!   `PUMA_ERR_PANIC`.

// This is the one crate of the workspace allowed `unsafe` (the workspace denies it): a C
// ABI must dereference caller pointers and export unmangled symbols. Every unsafe block
// carries a `// SAFETY:` comment.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char};
use std::panic::{UnwindSafe, catch_unwind};

use puma_core::{ErrorKind, FixedPoint};

/// Status codes returned by every fallible function of the C API.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum puma_status {
    /// Success.
    PUMA_OK = 0,
    /// A required pointer argument was null.
    PUMA_ERR_NULL_POINTER = 1,
    /// An argument was out of range or the API was misused (core `Misuse`).
    PUMA_ERR_INVALID_ARGUMENT = 2,
    /// A peer sent a malformed or unexpected frame (core `Protocol`).
    PUMA_ERR_PROTOCOL = 3,
    /// A peer aborted the session (core `Aborted`).
    PUMA_ERR_ABORTED = 4,
    /// The host's timer expired while waiting for a peer (core `Timeout`).
    PUMA_ERR_TIMEOUT = 5,
    /// An internal invariant failed: a bug in puma-rs (core `Bug`).
    PUMA_ERR_BUG = 6,
    /// A panic was caught at the boundary: a bug in puma-rs.
    PUMA_ERR_PANIC = 7,
}

impl From<ErrorKind> for puma_status {
    fn from(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::Protocol { .. } => puma_status::PUMA_ERR_PROTOCOL,
            ErrorKind::Aborted { .. } => puma_status::PUMA_ERR_ABORTED,
            ErrorKind::Timeout { .. } => puma_status::PUMA_ERR_TIMEOUT,
            ErrorKind::Misuse => puma_status::PUMA_ERR_INVALID_ARGUMENT,
            ErrorKind::Bug => puma_status::PUMA_ERR_BUG,
            _ => puma_status::PUMA_ERR_BUG,
        }
    }
}

impl From<puma_core::Error> for puma_status {
    fn from(e: puma_core::Error) -> Self {
        e.kind().into()
    }
}

/// Runs `f`, turning a panic into `PUMA_ERR_PANIC`.
fn guard(f: impl FnOnce() -> puma_status + UnwindSafe) -> puma_status {
    catch_unwind(f).unwrap_or(puma_status::PUMA_ERR_PANIC)
}

const VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => c"unknown",
    };

/// The library version as a static NUL-terminated string, e.g. `"0.1.0"`. Never null;
/// the caller must not free it.
#[unsafe(no_mangle)]
pub extern "C" fn puma_version() -> *const c_char {
    VERSION.as_ptr()
}

/// A static NUL-terminated name for a status code, e.g. `"PUMA_ERR_NULL_POINTER"`, or
/// `"PUMA_UNKNOWN_STATUS"` for a code that is not one. Never null; do not free.
#[unsafe(no_mangle)]
pub extern "C" fn puma_status_name(status: u32) -> *const c_char {
    let name: &CStr = match status {
        0 => c"PUMA_OK",
        1 => c"PUMA_ERR_NULL_POINTER",
        2 => c"PUMA_ERR_INVALID_ARGUMENT",
        3 => c"PUMA_ERR_PROTOCOL",
        4 => c"PUMA_ERR_ABORTED",
        5 => c"PUMA_ERR_TIMEOUT",
        6 => c"PUMA_ERR_BUG",
        7 => c"PUMA_ERR_PANIC",
        _ => c"PUMA_UNKNOWN_STATUS",
    };
    name.as_ptr()
}

/// Encodes `x` as a fixed-point ring element with `frac_bits` fractional bits,
/// round(x · 2^frac_bits) in two's complement, and writes it to `*out`.
///
/// Returns `PUMA_ERR_NULL_POINTER` if `out` is null, `PUMA_ERR_INVALID_ARGUMENT` if
/// `frac_bits` is not in 1..=40 or `x` is not finite or does not fit; `*out` is written
/// only on `PUMA_OK`.
///
/// # Safety
/// `out` must be null or valid for writing one `u64` (suitably aligned).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_fixed_encode(x: f64, frac_bits: u32, out: *mut u64) -> puma_status {
    if out.is_null() {
        return puma_status::PUMA_ERR_NULL_POINTER;
    }
    guard(
        || match FixedPoint::new(frac_bits).and_then(|fx| fx.encode(x)) {
            Ok(v) => {
                // SAFETY: `out` is non-null (checked above) and the caller guarantees that it
                // is valid and aligned for writing one u64.
                unsafe { out.write(v) };
                puma_status::PUMA_OK
            }
            Err(e) => e.into(),
        },
    )
}

/// Decodes a fixed-point ring element with `frac_bits` fractional bits (two's complement)
/// and writes the real to `*out`.
///
/// Returns `PUMA_ERR_NULL_POINTER` if `out` is null and `PUMA_ERR_INVALID_ARGUMENT` if
/// `frac_bits` is not in 1..=40; `*out` is written only on `PUMA_OK`.
///
/// # Safety
/// `out` must be null or valid for writing one `double` (suitably aligned).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_fixed_decode(v: u64, frac_bits: u32, out: *mut f64) -> puma_status {
    if out.is_null() {
        return puma_status::PUMA_ERR_NULL_POINTER;
    }
    guard(|| match FixedPoint::new(frac_bits) {
        Ok(fx) => {
            // SAFETY: `out` is non-null (checked above) and the caller guarantees that it
            // is valid and aligned for writing one f64.
            unsafe { out.write(fx.decode(v)) };
            puma_status::PUMA_OK
        }
        Err(e) => e.into(),
    })
}
