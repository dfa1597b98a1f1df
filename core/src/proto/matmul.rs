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
    let (mk, kn, mn) = match (m.checked_mul(k), k.checked_mul(n), m.checked_mul(n)) {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => return Err(Error::misuse("matrix dimensions overflow")),
    };
    if x.len() != mk || y.len() != kn {
        return Err(Error::misuse(
            "matrix lengths do not match their dimensions",
        ));
    }
    let mut ctx = ctx.fork();
    let y_sum: Vec<u64> = y
        .a()
        .iter()
        .zip(y.b())
        .map(|(a, b)| a.wrapping_add(*b))
        .collect();
    let mut z = vec![0u64; mn];
    let kernel = ctx.kernel();
    kernel.matmul_acc(x.a(), &y_sum, &mut z, m, k, n);
    kernel.matmul_acc(x.b(), y.a(), &mut z, m, k, n);
    reshare(&mut ctx, z).await
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
