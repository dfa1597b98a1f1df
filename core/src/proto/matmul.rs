use alloc::vec;
use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::share::Shares;

use super::{reshare, trunc};

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

/// Fixed-point matrix product: [`matmul`] then [`trunc`] by the session's fractional bits.
///
/// Rounds: 2. Bytes: 8·m·n + ⌈172·m·n/3/8⌉ per party (m·n divisible by 3, f = 18).
///
/// # Errors
/// As [`matmul`] and [`trunc`].
pub async fn matmul_fixed(
    ctx: &mut Ctx,
    x: &Shares,
    y: &Shares,
    m: usize,
    k: usize,
    n: usize,
) -> Result<Shares, Error> {
    let f = ctx.fixed().frac_bits();
    let z = matmul(ctx, x, y, m, k, n).await?;
    trunc(ctx, &z, f).await
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
    let mut ctx = ctx.fork();
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
        let y_sum: Vec<u64> = ya.iter().zip(yb).map(|(a, b)| a.wrapping_add(*b)).collect();
        let zb = z
            .get_mut(b * mn..(b + 1) * mn)
            .ok_or(Error::bug("batch out of range"))?;
        kernel.matmul_acc(xa, &y_sum, zb, m, k, n);
        kernel.matmul_acc(xb, ya, zb, m, k, n);
    }
    reshare(&mut ctx, z).await
}
