//! Opaque handles: boxes handed to C, with a registry of the live ones so that a freed,
//! foreign or mistyped pointer is reported instead of dereferenced.
//!
//! The registry maps each live handle's address to its type. A handle is checked against it
//! on every use, so freeing twice, using after free, or passing a tensor where a session is
//! expected returns `PUMA_ERR_INVALID_HANDLE`. (If the allocator has since reused the
//! address for a new handle of the same type, the stale pointer names that new handle: the
//! registry cannot tell them apart.)

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use crate::error::{FfiError, puma_status};

/// The types of handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Session,
    Tensor,
    Model,
    #[cfg(feature = "service")]
    ServiceClient,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Session => "session",
            Kind::Tensor => "tensor",
            Kind::Model => "model",
            #[cfg(feature = "service")]
            Kind::ServiceClient => "service client",
        }
    }
}

/// A type handed to C behind an opaque pointer.
pub(crate) trait Handle: Sized {
    /// Its entry in the registry.
    const KIND: Kind;
    /// Its name in error messages.
    const NAME: &'static str;
}

static LIVE: LazyLock<Mutex<HashMap<usize, Kind>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn live() -> std::sync::MutexGuard<'static, HashMap<usize, Kind>> {
    // The map stays consistent whatever panicked while it was held (inserts and removes
    // are single operations), so a poisoned lock is still usable.
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Moves `value` to the heap, registers it and returns the pointer C will hold.
pub(crate) fn into_raw<T: Handle>(value: T) -> *mut T {
    let p = Box::into_raw(Box::new(value));
    live().insert(p as usize, T::KIND);
    p
}

/// Checks that `p` is a live handle of type `T`.
pub(crate) fn check<T: Handle>(p: *const T) -> Result<(), FfiError> {
    if p.is_null() {
        return Err(FfiError::new(
            puma_status::PUMA_ERR_NULL_POINTER,
            format!("the {} handle is null", T::NAME),
        ));
    }
    if !p.is_aligned() {
        return Err(FfiError::new(
            puma_status::PUMA_ERR_MISALIGNED_POINTER,
            format!("the {} handle is misaligned", T::NAME),
        ));
    }
    match live().get(&(p as usize)) {
        Some(k) if *k == T::KIND => Ok(()),
        Some(k) => Err(FfiError::new(
            puma_status::PUMA_ERR_INVALID_HANDLE,
            format!("expected a {} handle, got a {} handle", T::NAME, k.name()),
        )),
        None => Err(FfiError::new(
            puma_status::PUMA_ERR_INVALID_HANDLE,
            format!(
                "not a live {} handle (already freed, or never created by this library)",
                T::NAME
            ),
        )),
    }
}

/// Borrows the handle `p`.
///
/// # Safety
/// If `p` is registered, no `&mut` to it may be alive (the C API's rule: one thread at a
/// time per handle).
pub(crate) unsafe fn borrow<'a, T: Handle>(p: *const T) -> Result<&'a T, FfiError> {
    check(p)?;
    // SAFETY: `p` came from `into_raw::<T>` and is still registered, so it points to a live,
    // aligned `T`; the caller guarantees no mutable borrow is alive.
    Ok(unsafe { &*p })
}

/// Borrows the handle `p` mutably.
///
/// # Safety
/// If `p` is registered, no other borrow of it may be alive (one thread at a time per
/// handle).
pub(crate) unsafe fn borrow_mut<'a, T: Handle>(p: *mut T) -> Result<&'a mut T, FfiError> {
    check(p)?;
    // SAFETY: as in `borrow`, and the caller guarantees the borrow is unique.
    Ok(unsafe { &mut *p })
}

/// Unregisters and drops the handle `p`; a null `p` is a no-op.
///
/// # Safety
/// If `p` is registered, no borrow of it may be alive.
pub(crate) unsafe fn free<T: Handle>(p: *mut T) -> Result<(), FfiError> {
    if p.is_null() {
        return Ok(());
    }
    check(p)?;
    {
        let mut map = live();
        map.remove(&(p as usize));
        // With no handle left, the registry gives its memory back, so that a host that
        // freed everything leaks nothing (hashbrown's table would look "possibly lost" to
        // leak checkers).
        if map.is_empty() {
            *map = HashMap::new();
        }
    }
    // SAFETY: `p` came from `Box::into_raw` in `into_raw::<T>` and was registered until
    // just now, so this is the one reclaiming of that box.
    drop(unsafe { Box::from_raw(p) });
    Ok(())
}

/// Writes `value` through the out-pointer `out`, which was checked with [`check_out`].
///
/// # Safety
/// `out` must be valid for writing one `T` (the caller's contract for out-pointers).
pub(crate) unsafe fn write<T>(out: *mut T, value: T) -> Result<(), FfiError> {
    check_out(out, "out")?;
    // SAFETY: non-null and aligned (checked); valid for writes by the caller's contract.
    unsafe { out.write(value) };
    Ok(())
}

/// Checks that an out-pointer is non-null and aligned.
pub(crate) fn check_out<T>(out: *mut T, what: &str) -> Result<(), FfiError> {
    check_ptr(out.cast_const(), what)
}

fn check_ptr<T>(p: *const T, what: &str) -> Result<(), FfiError> {
    if p.is_null() {
        return Err(FfiError::new(
            puma_status::PUMA_ERR_NULL_POINTER,
            format!("`{what}` is null"),
        ));
    }
    if !p.is_aligned() {
        return Err(FfiError::new(
            puma_status::PUMA_ERR_MISALIGNED_POINTER,
            format!("`{what}` is misaligned"),
        ));
    }
    Ok(())
}

fn check_len<T>(len: usize, what: &str) -> Result<(), FfiError> {
    match len.checked_mul(size_of::<T>()) {
        Some(b) if b <= isize::MAX as usize => Ok(()),
        _ => Err(FfiError::invalid(format!("`{what}` length is too large"))),
    }
}

/// The caller's array `p[0..len]`; `p` may be null when `len` is 0.
///
/// # Safety
/// If `len > 0`, `p` must be valid for reading `len` values of `T` for `'a`.
pub(crate) unsafe fn slice<'a, T>(
    p: *const T,
    len: usize,
    what: &str,
) -> Result<&'a [T], FfiError> {
    if len == 0 {
        return Ok(&[]);
    }
    check_ptr(p, what)?;
    check_len::<T>(len, what)?;
    // SAFETY: non-null, aligned, length within isize (checked); readable by the caller's
    // contract.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Copies `src` to the caller's array at `dst` (room for at least `src.len()` values, which
/// the caller of this function has checked against the length C passed); `dst` may be null
/// when `src` is empty.
///
/// # Safety
/// If `src` is not empty, `dst` must be valid for writing `src.len()` values of `T` and must
/// not overlap `src`.
pub(crate) unsafe fn copy_to<T: Copy>(src: &[T], dst: *mut T, what: &str) -> Result<(), FfiError> {
    if src.is_empty() {
        return Ok(());
    }
    check_ptr(dst.cast_const(), what)?;
    // SAFETY: `dst` is non-null and aligned (checked) and valid for `src.len()` writes by
    // the caller's contract; a Rust-owned `src` cannot overlap the caller's buffer. No
    // reference to the (possibly uninitialised) destination is formed.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
    Ok(())
}

/// The caller's NUL-terminated UTF-8 string `p`, named `what` in errors.
///
/// # Safety
/// `p` must be null or a NUL-terminated string that stays valid for `'a`.
pub(crate) unsafe fn c_str<'a>(
    p: *const std::ffi::c_char,
    what: &str,
) -> Result<&'a str, FfiError> {
    if p.is_null() {
        return Err(FfiError::new(
            puma_status::PUMA_ERR_NULL_POINTER,
            format!("`{what}` is null"),
        ));
    }
    // SAFETY: non-null, NUL-terminated and valid for 'a by the caller's contract.
    let s = unsafe { std::ffi::CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| FfiError::invalid(format!("`{what}` is not UTF-8")))
}
