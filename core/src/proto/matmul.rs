use alloc::vec;
use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::share::Shares;

use super::{reshare, reshare_trunc};

/// Matrix product `X·Y` of an `m×k` and a `k×n` shared matrix (row-major), over Z_2^64.
///
/// Party i computes `Z_i = X_i·(Y_i + Y_{i+1}) + X_{i+1}·Y_i` with two local products and
/// reshares the `m×n` result: communication is proportional to the output, independent of
/// `k`. Exact.
///
/// Rounds: 1. Bytes: 8·m·n per party.
///
/// # Errors
/// `Misuse` if the lengths do not match the dimensions; `Protocol` if a message is
/// malformed.
pub async fn matmul(
    ctx: &mut Ctx,
    x: &Shares,
    y: &Shares,
    m: usize,
    k: usize,
    n: usize,
) -> Result<Shares, Error> {
    matmul_batch(ctx, x, y, 1, (m, k, n)).await
}

/// Fixed-point matrix product: [`matmul`] and a truncation by the session's fractional
/// bits fused into the reshare (see [`super::mul_fixed`]).
///
/// Rounds: 2. Bits per output element, summed over the parties: 300 at f = 18 (a reshare
/// and a separate truncation: 364).
///
/// # Errors
/// As [`matmul`] and [`trunc`](super::trunc()).
pub async fn matmul_fixed(
    ctx: &mut Ctx,
    x: &Shares,
    y: &Shares,
    m: usize,
    k: usize,
    n: usize,
) -> Result<Shares, Error> {
    matmul_batch_fixed(ctx, x, y, 1, (m, k, n)).await
}

/// [`matmul_batch`] with the truncation by the session's fractional bits fused into the
/// reshare, as [`matmul_fixed`].
///
/// Rounds: 2. Bits per output element: those of [`matmul_fixed`].
///
/// # Errors
/// As [`matmul_batch`].
pub async fn matmul_batch_fixed(
    ctx: &mut Ctx,
    x: &Shares,
    y: &Shares,
    batch: usize,
    dims: (usize, usize, usize),
) -> Result<Shares, Error> {
    let f = ctx.fixed().frac_bits();
    let z = batch_terms(ctx, x, y, batch, dims)?;
    reshare_trunc(ctx, z, f).await
}

/// A batch of independent matrix products `X_b·Y_b` (b < `batch`), each `m×k` by `k×n`,
/// stored back to back: all outputs are reshared together, so attention heads (or any
/// other batch) cost one round together.
///
/// Rounds: 1. Bytes: 8·batch·m·n per party.
///
/// # Errors
/// `Misuse` if the lengths do not match the dimensions; `Protocol` if a message is
/// malformed.
pub async fn matmul_batch(
    ctx: &mut Ctx,
    x: &Shares,
    y: &Shares,
    batch: usize,
    (m, k, n): (usize, usize, usize),
) -> Result<Shares, Error> {
    let z = batch_terms(ctx, x, y, batch, (m, k, n))?;
    let mut ctx = ctx.fork();
    reshare(&mut ctx, z).await
}

/// This party's 3-of-3 parts of a batch of matrix products.
fn batch_terms(
    ctx: &Ctx,
    x: &Shares,
    y: &Shares,
    batch: usize,
    (m, k, n): (usize, usize, usize),
) -> Result<Vec<u64>, Error> {
    let dims = (
        m.checked_mul(k).and_then(|v| v.checked_mul(batch)),
        k.checked_mul(n).and_then(|v| v.checked_mul(batch)),
        m.checked_mul(n),
    );
    let (xl, yl, mn) = match dims {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => return Err(Error::misuse("matrix dimensions overflow")),
    };
    if x.len() != xl || y.len() != yl {
        return Err(Error::misuse(
            "matrix lengths do not match their dimensions",
        ));
    }
    let mut z = vec![0u64; mn * batch];
    let kernel = ctx.kernel();
    let (mk, kn) = (m * k, k * n);
    for b in 0..batch {
        let xa = x
            .a()
            .get(b * mk..(b + 1) * mk)
            .ok_or(Error::bug("batch out of range"))?;
        let xb = x
            .b()
            .get(b * mk..(b + 1) * mk)
            .ok_or(Error::bug("batch out of range"))?;
        let ya = y
            .a()
            .get(b * kn..(b + 1) * kn)
            .ok_or(Error::bug("batch out of range"))?;
        let yb = y
            .b()
            .get(b * kn..(b + 1) * kn)
            .ok_or(Error::bug("batch out of range"))?;
        let zb = z
            .get_mut(b * mn..(b + 1) * mn)
            .ok_or(Error::bug("batch out of range"))?;
        // x_a·y_a + x_a·y_b + x_b·y_a with one sum of halves: of the smaller operand, so
        // that a weight matrix (e.g. the 50257-row embedding) is never copied.
        if mk <= kn {
            let x_sum: Vec<u64> = xa.iter().zip(xb).map(|(a, b)| a.wrapping_add(*b)).collect();
            kernel.matmul_acc(&x_sum, ya, zb, m, k, n);
            kernel.matmul_acc(xa, yb, zb, m, k, n);
        } else {
            let y_sum: Vec<u64> = ya.iter().zip(yb).map(|(a, b)| a.wrapping_add(*b)).collect();
            kernel.matmul_acc(xa, &y_sum, zb, m, k, n);
            kernel.matmul_acc(xb, ya, zb, m, k, n);
        }
    }
    Ok(z)
}
