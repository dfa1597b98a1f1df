//! Tensors: one party's replicated shares of a row-major `rows × cols` matrix of
//! fixed-point reals.

use puma_core::{PartyId, Shares};

use crate::error::{FfiError, entry, puma_status};
use crate::handle::{self, Handle, Kind};
use crate::session::puma_session;

/// One party's shares of a `rows × cols` matrix: produced by operations, or made from
/// public constants with `puma_tensor_from_public`; freed with `puma_tensor_free`.
/// Shares are never readable from C: values leave only through `puma_session_start_reveal`.
pub struct puma_tensor {
    pub(crate) party: PartyId,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    pub(crate) shares: Shares,
}

impl Handle for puma_tensor {
    const KIND: Kind = Kind::Tensor;
    const NAME: &'static str = "tensor";
}

impl puma_tensor {
    /// A tensor of `shares` shaped `rows × cols` (whose product is their length).
    pub(crate) fn new(shares: Shares, rows: usize, cols: usize) -> puma_tensor {
        puma_tensor {
            party: shares.party(),
            rows,
            cols,
            shares,
        }
    }

    /// Number of elements.
    pub(crate) fn len(&self) -> usize {
        self.shares.len()
    }
}

/// `rows · cols`, if both are positive and the product fits.
pub(crate) fn elements(rows: usize, cols: usize) -> Result<usize, FfiError> {
    match rows.checked_mul(cols) {
        Some(n) if n > 0 => Ok(n),
        _ => Err(FfiError::invalid(
            "`rows` and `cols` must be positive and their product must fit",
        )),
    }
}

/// Makes a tensor of public constants: every party passes the same `rows × cols` reals
/// (row-major, `len` = rows · cols) and gets its shares of them, with no communication.
///
/// Ownership: `values` is only read during the call; the caller owns the new tensor and
/// frees it with `puma_tensor_free`. It belongs to `session`'s party and may be used with
/// that party's session only.
///
/// Errors: `PUMA_ERR_INVALID_ARGUMENT` if `len` ≠ rows · cols, a dimension is 0, or a value
/// is not finite or does not fit the fixed-point format.
///
/// # Safety
/// `session` must be a live session used by no other thread; `values` must be valid for
/// reading `len` doubles; `out` must be valid for writing one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_tensor_from_public(
    session: *const puma_session,
    values: *const f64,
    len: usize,
    rows: usize,
    cols: usize,
    out: *mut *mut puma_tensor,
) -> puma_status {
    entry(|| {
        handle::check_out(out, "out")?;
        // SAFETY: the caller's contract.
        let s = unsafe { handle::borrow(session) }?;
        if elements(rows, cols)? != len {
            return Err(FfiError::invalid("`len` must be rows · cols"));
        }
        // SAFETY: readable for `len` doubles by the caller's contract.
        let values = unsafe { handle::slice(values, len, "values") }?;
        let encoded = s.config().fixed.encode_slice(values)?;
        let t = puma_tensor::new(Shares::from_public(s.me(), &encoded), rows, cols);
        let p = handle::into_raw(t);
        // SAFETY: checked non-null and aligned; writable by the caller's contract.
        unsafe { handle::write(out, p) }
    })
}

/// Writes the tensor's shape to `*rows` and `*cols`.
///
/// # Safety
/// `tensor` must be a live tensor; `rows` and `cols` must be valid for writing a `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_tensor_shape(
    tensor: *const puma_tensor,
    rows: *mut usize,
    cols: *mut usize,
) -> puma_status {
    entry(|| {
        handle::check_out(rows, "rows")?;
        handle::check_out(cols, "cols")?;
        // SAFETY: the caller's contract.
        let t = unsafe { handle::borrow(tensor) }?;
        // SAFETY: both checked non-null and aligned; writable by the caller's contract.
        unsafe {
            handle::write(rows, t.rows)?;
            handle::write(cols, t.cols)
        }
    })
}

/// Frees a tensor. `NULL` is a no-op.
///
/// Errors: `PUMA_ERR_INVALID_HANDLE` if `tensor` is not a live tensor (e.g. freed already:
/// the second free is detected and does nothing).
///
/// # Safety
/// `tensor` must be `NULL` or a tensor pointer from this library, not in use by another
/// thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_tensor_free(tensor: *mut puma_tensor) -> puma_status {
    // SAFETY: the caller's contract.
    entry(|| unsafe { handle::free(tensor) })
}
