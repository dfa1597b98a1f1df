//! Starting operations: sharing an input and the protocols on shared tensors.
//!
//! Every `puma_session_start_*` function starts one operation, which then runs as the host
//! feeds frames and polls (`puma_session_poll` until `PUMA_EVENT_DONE`). All three parties
//! must start the same operations in the same order with the same public arguments
//! (shapes, owners, receivers, methods). Operand tensors are copied when the operation
//! starts: the caller keeps them and may free them at once.

use puma_core::proto::{self, ExpApprox, GeluFit, GeluForm};
use puma_core::{PartyId, Width};

use crate::error::{FfiError, entry, puma_status};
use crate::handle;
use crate::session::{OpResult, party, puma_session};
use crate::tensor::{elements, puma_tensor};

/// GeLU method for `puma_session_start_gelu`: PUMA's piecewise polynomial (8 rounds, max
/// error 0.0199 against exact GeLU).
pub const PUMA_GELU_PUMA: u32 = 0;
/// GeLU method: a minimax refit of PUMA's shape at the same cost (max error 1.75e-3).
pub const PUMA_GELU_MINIMAX: u32 = 1;
/// GeLU method: the precise erf form x·Φ(x) (10 rounds, max error ≤ 1.3e-4).
pub const PUMA_GELU_PRECISE_ERF: u32 = 2;
/// GeLU method: the precise tanh form (10 rounds, max error ≤ 1.3e-4).
pub const PUMA_GELU_PRECISE_TANH: u32 = 3;

/// The exponential inside softmax: the second-order base with 8 squarings (max error
/// 3.5e-6). The models default to the cheaper minimax form since; the C ABI keeps this
/// one so that its documented costs and tolerances stay what callers were promised.
const SOFTMAX_EXP: ExpApprox = ExpApprox::Taylor2 { squarings: 8 };

/// Borrows an operand tensor and checks that it belongs to the session's party.
///
/// # Safety
/// `t` must be null or a tensor pointer not being mutated by another thread.
unsafe fn operand<'a>(
    s: &puma_session,
    t: *const puma_tensor,
) -> Result<&'a puma_tensor, FfiError> {
    // SAFETY: the caller's contract.
    let t = unsafe { handle::borrow(t) }?;
    if t.party != s.me() {
        return Err(FfiError::invalid(
            "the tensor belongs to another party's session",
        ));
    }
    Ok(t)
}

/// Borrows `session`, which must be able to start an operation.
///
/// # Safety
/// `session` must be null or a session pointer used by no other thread.
unsafe fn idle_session<'a>(session: *mut puma_session) -> Result<&'a mut puma_session, FfiError> {
    // SAFETY: the caller's contract.
    let s = unsafe { handle::borrow_mut(session) }?;
    s.check_idle()?;
    Ok(s)
}

/// Starts sharing a `rows × cols` matrix of reals held by party `owner`: the owner passes
/// its `len` = rows · cols values (row-major); the other parties pass `values` = `NULL`
/// (and the same `len`, `rows`, `cols`). Result: a tensor (`puma_session_take_tensor`).
///
/// Cost: 1 round; 8 bytes per element from the owner.
///
/// Ownership: `values` is only read during the call (encoded at once).
///
/// Errors: `PUMA_ERR_INVALID_ARGUMENT` for a bad owner, `len` ≠ rows · cols, values at a
/// non-owner, no values at the owner, or a value that is not finite or does not fit;
/// `PUMA_ERR_WRONG_STATE` if an operation runs or a result waits.
///
/// # Safety
/// `session` must be a live session used by no other thread; `values` must be `NULL` or
/// valid for reading `len` doubles.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_share(
    session: *mut puma_session,
    owner: u32,
    values: *const f64,
    len: usize,
    rows: usize,
    cols: usize,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { idle_session(session) }?;
        let owner = party(owner, "owner")?;
        if elements(rows, cols)? != len {
            return Err(FfiError::invalid("`len` must be rows · cols"));
        }
        let mine = match (s.me() == owner, values.is_null()) {
            (true, true) => {
                // A documented argument error, not a bad pointer: non-owners pass NULL.
                return Err(FfiError::invalid("the owner must pass its values"));
            }
            (true, false) => {
                // SAFETY: readable for `len` doubles by the caller's contract.
                let v = unsafe { handle::slice(values, len, "values") }?;
                Some(s.config().fixed.encode_slice(v)?)
            }
            (false, true) => None,
            (false, false) => {
                return Err(FfiError::invalid("only the owner passes values"));
            }
        };
        s.start(move |mut ctx| async move {
            let x = proto::share_input(&mut ctx, owner, mine.as_deref(), len).await?;
            Ok(OpResult::Tensor(puma_tensor::new(x, rows, cols)))
        })
    })
}

/// Starts the element-wise fixed-point product of two tensors of the same shape.
/// Result: a tensor. Cost: 2 rounds (product and truncation).
///
/// Errors: `PUMA_ERR_INVALID_ARGUMENT` for different shapes or a tensor of another party;
/// handle errors for `a`, `b`; `PUMA_ERR_WRONG_STATE` if an operation runs or a result waits.
///
/// # Safety
/// `session` must be a live session used by no other thread; `a`, `b` live tensors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_mul(
    session: *mut puma_session,
    a: *const puma_tensor,
    b: *const puma_tensor,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { idle_session(session) }?;
        // SAFETY: the caller's contract (live tensors, not mutated meanwhile).
        let (a, b) = unsafe { (operand(s, a)?, operand(s, b)?) };
        if (a.rows, a.cols) != (b.rows, b.cols) {
            return Err(FfiError::invalid("mul needs tensors of the same shape"));
        }
        let (x, y, rows, cols) = (a.shares.clone(), b.shares.clone(), a.rows, a.cols);
        s.start(move |mut ctx| async move {
            let z = proto::mul_fixed(&mut ctx, &x, &y).await?;
            Ok(OpResult::Tensor(puma_tensor::new(z, rows, cols)))
        })
    })
}

/// Starts the fixed-point matrix product `a · b` of an `m × k` and a `k × n` tensor.
/// Result: an `m × n` tensor. Cost: 2 rounds; 8·m·n bytes per party plus the truncation.
///
/// Errors: `PUMA_ERR_INVALID_ARGUMENT` if the inner dimensions differ or a tensor belongs
/// to another party; as `puma_session_start_mul` otherwise.
///
/// # Safety
/// `session` must be a live session used by no other thread; `a`, `b` live tensors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_matmul(
    session: *mut puma_session,
    a: *const puma_tensor,
    b: *const puma_tensor,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { idle_session(session) }?;
        // SAFETY: the caller's contract (live tensors, not mutated meanwhile).
        let (a, b) = unsafe { (operand(s, a)?, operand(s, b)?) };
        if a.cols != b.rows {
            return Err(FfiError::invalid(format!(
                "matmul of {}×{} by {}×{}: inner dimensions differ",
                a.rows, a.cols, b.rows, b.cols
            )));
        }
        let (x, y) = (a.shares.clone(), b.shares.clone());
        let (m, k, n) = (a.rows, a.cols, b.cols);
        s.start(move |mut ctx| async move {
            let z = proto::matmul_fixed(&mut ctx, &x, &y, m, k, n).await?;
            Ok(OpResult::Tensor(puma_tensor::new(z, m, n)))
        })
    })
}

/// Starts dividing every element by 2^`bits` (secure truncation of the ring values: the
/// result is ⌊x / 2^bits⌋ or one unit above, never a large error). Result: a tensor of the
/// same shape. Cost: 1 round.
///
/// Errors: `PUMA_ERR_INVALID_ARGUMENT` unless 1 ≤ `bits` ≤ 62; as `puma_session_start_mul`.
///
/// # Safety
/// `session` must be a live session used by no other thread; `a` a live tensor.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_trunc(
    session: *mut puma_session,
    a: *const puma_tensor,
    bits: u32,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { idle_session(session) }?;
        // SAFETY: the caller's contract (a live tensor, not mutated meanwhile).
        let a = unsafe { operand(s, a) }?;
        if !(1..=62).contains(&bits) {
            return Err(FfiError::invalid("`bits` must be in 1..=62"));
        }
        let (x, rows, cols) = (a.shares.clone(), a.rows, a.cols);
        s.start(move |mut ctx| async move {
            let z = proto::trunc(&mut ctx, &x, bits).await?;
            Ok(OpResult::Tensor(puma_tensor::new(z, rows, cols)))
        })
    })
}

/// Starts the element-wise comparison `a < b`: the result tensor holds 1.0 where
/// `a < b` and 0.0 elsewhere (shared). Exact for any operands (compared in the full
/// 64-bit ring). Cost: 7 rounds for the comparison, 1 to turn bits into arithmetic shares.
///
/// Errors: as `puma_session_start_mul`.
///
/// # Safety
/// `session` must be a live session used by no other thread; `a`, `b` live tensors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_lt(
    session: *mut puma_session,
    a: *const puma_tensor,
    b: *const puma_tensor,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { idle_session(session) }?;
        // SAFETY: the caller's contract (live tensors, not mutated meanwhile).
        let (a, b) = unsafe { (operand(s, a)?, operand(s, b)?) };
        if (a.rows, a.cols) != (b.rows, b.cols) {
            return Err(FfiError::invalid("lt needs tensors of the same shape"));
        }
        let (x, y, rows, cols) = (a.shares.clone(), b.shares.clone(), a.rows, a.cols);
        let one = s.config().fixed.one();
        s.start(move |mut ctx| async move {
            let bits = proto::lt(&mut ctx, &x, &y, Width::W64).await?;
            let z = proto::b2a(&mut ctx, &bits).await?.scale(one);
            Ok(OpResult::Tensor(puma_tensor::new(z, rows, cols)))
        })
    })
}

/// Starts GeLU of every element with `method` (`PUMA_GELU_PUMA`, `PUMA_GELU_MINIMAX`,
/// `PUMA_GELU_PRECISE_ERF`, `PUMA_GELU_PRECISE_TANH`). Inputs must satisfy |x| < 8000.
/// Result: a tensor of the same shape.
///
/// Errors: `PUMA_ERR_INVALID_ARGUMENT` for an unknown method; as `puma_session_start_mul`.
///
/// # Safety
/// `session` must be a live session used by no other thread; `a` a live tensor.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_gelu(
    session: *mut puma_session,
    a: *const puma_tensor,
    method: u32,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { idle_session(session) }?;
        // SAFETY: the caller's contract (a live tensor, not mutated meanwhile).
        let a = unsafe { operand(s, a) }?;
        enum Method {
            Fit(GeluFit),
            Precise(GeluForm),
        }
        let m = match method {
            PUMA_GELU_PUMA => Method::Fit(GeluFit::PUMA),
            PUMA_GELU_MINIMAX => Method::Fit(GeluFit::MINIMAX),
            PUMA_GELU_PRECISE_ERF => Method::Precise(GeluForm::Erf),
            PUMA_GELU_PRECISE_TANH => Method::Precise(GeluForm::Tanh),
            _ => return Err(FfiError::invalid(format!("unknown GeLU method {method}"))),
        };
        let (x, rows, cols) = (a.shares.clone(), a.rows, a.cols);
        s.start(move |mut ctx| async move {
            let z = match m {
                Method::Fit(fit) => proto::gelu_with(&mut ctx, &x, &fit).await?,
                Method::Precise(form) => proto::gelu_chebyshev(&mut ctx, &x, form).await?,
            };
            Ok(OpResult::Tensor(puma_tensor::new(z, rows, cols)))
        })
    })
}

/// Starts the softmax of every row of `a` (each row over its `cols` entries), with the
/// second-order exponential of the secure GPT-2 (max error of exp 3.5e-6). Inputs must
/// satisfy |x| < 4096. Result: a tensor of the same shape.
///
/// Errors: as `puma_session_start_mul`.
///
/// # Safety
/// `session` must be a live session used by no other thread; `a` a live tensor.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_softmax(
    session: *mut puma_session,
    a: *const puma_tensor,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { idle_session(session) }?;
        // SAFETY: the caller's contract (a live tensor, not mutated meanwhile).
        let a = unsafe { operand(s, a) }?;
        let (x, rows, cols) = (a.shares.clone(), a.rows, a.cols);
        s.start(move |mut ctx| async move {
            let valid = vec![cols; rows];
            let z = proto::softmax_rows_with(&mut ctx, &x, rows, cols, &valid, SOFTMAX_EXP).await?;
            Ok(OpResult::Tensor(puma_tensor::new(z, rows, cols)))
        })
    })
}

/// Starts LayerNorm of every row of `x` (`rows × d`): (x − mean) / √(var + `eps`) · γ + β,
/// with `gamma` and `beta` tensors of `d` elements (any shape). Needs d < 2^18 and
/// |x − mean| < 8192. Result: a tensor shaped like `x`.
///
/// Errors: `PUMA_ERR_INVALID_ARGUMENT` if `gamma` or `beta` do not hold `d` elements or
/// `eps` is not positive and finite; as `puma_session_start_mul`.
///
/// # Safety
/// `session` must be a live session used by no other thread; `x`, `gamma`, `beta` live
/// tensors.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_layernorm(
    session: *mut puma_session,
    x: *const puma_tensor,
    gamma: *const puma_tensor,
    beta: *const puma_tensor,
    eps: f64,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { idle_session(session) }?;
        // SAFETY: the caller's contract (live tensors, not mutated meanwhile).
        let (x, g, b) = unsafe { (operand(s, x)?, operand(s, gamma)?, operand(s, beta)?) };
        if g.len() != x.cols || b.len() != x.cols {
            return Err(FfiError::invalid(
                "gamma and beta must hold one element per column of x",
            ));
        }
        if !(eps.is_finite() && eps > 0.0) {
            return Err(FfiError::invalid("`eps` must be positive and finite"));
        }
        let (xs, gs, bs) = (x.shares.clone(), g.shares.clone(), b.shares.clone());
        let (rows, d) = (x.rows, x.cols);
        s.start(move |mut ctx| async move {
            let z = proto::layernorm_rows(&mut ctx, &xs, rows, d, &gs, &bs, eps).await?;
            Ok(OpResult::Tensor(puma_tensor::new(z, rows, d)))
        })
    })
}

/// Starts revealing `a` to party `to` only. Result: values (`puma_session_take_values`),
/// the `rows · cols` reals (row-major) at `to` and none at the other parties.
/// Cost: 1 round; 8 bytes per element from one party.
///
/// Errors: `PUMA_ERR_INVALID_ARGUMENT` for a bad `to`; as `puma_session_start_mul`.
///
/// # Safety
/// `session` must be a live session used by no other thread; `a` a live tensor.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn puma_session_start_reveal(
    session: *mut puma_session,
    a: *const puma_tensor,
    to: u32,
) -> puma_status {
    entry(|| {
        // SAFETY: the caller's contract.
        let s = unsafe { idle_session(session) }?;
        // SAFETY: the caller's contract (a live tensor, not mutated meanwhile).
        let a = unsafe { operand(s, a) }?;
        let to: PartyId = party(to, "to")?;
        let x = a.shares.clone();
        let fx = s.config().fixed;
        s.start(move |mut ctx| async move {
            let v = proto::reveal_to(&mut ctx, &x, to).await?;
            Ok(OpResult::Values(v.map(|raw| fx.decode_slice(&raw))))
        })
    })
}
