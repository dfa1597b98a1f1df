use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::share::Shares;

use super::{reshare, reshare_trunc};

/// Elementwise product `x ⊙ y` over Z_2^64 (ABY3 §2).
///
/// Party i computes `z_i = x_i·y_i + x_i·y_{i+1} + x_{i+1}·y_i` (the nine cross terms of
/// `xy` split three ways), adds a zero sharing and reshares. Exact.
///
/// Rounds: 1. Bytes: 8·n per party.
///
/// # Errors
/// `Misuse` for mismatched lengths; `Protocol` if a message is malformed.
pub async fn mul(ctx: &mut Ctx, x: &Shares, y: &Shares) -> Result<Shares, Error> {
    if x.len() != y.len() {
        return Err(Error::misuse("mul of vectors of different lengths"));
    }
    let mut ctx = ctx.fork();
    reshare(&mut ctx, cross_terms(x, y)).await
}

/// This party's 3-of-3 part of `x ⊙ y`: `x_i·y_i + x_i·y_{i+1} + x_{i+1}·y_i`.
pub(super) fn cross_terms(x: &Shares, y: &Shares) -> Vec<u64> {
    x.a()
        .iter()
        .zip(x.b())
        .zip(y.a().iter().zip(y.b()))
        .map(|((xa, xb), (ya, yb))| {
            xa.wrapping_mul(*ya)
                .wrapping_add(xa.wrapping_mul(*yb))
                .wrapping_add(xb.wrapping_mul(*ya))
        })
        .collect()
}

/// This party's 3-of-3 part of `x ⊙ x`: `x_i² + 2·x_i·x_{i+1}`.
fn square_terms(x: &Shares) -> Vec<u64> {
    x.a()
        .iter()
        .zip(x.b())
        .map(|(a, b)| {
            a.wrapping_mul(*a)
                .wrapping_add(a.wrapping_mul(*b).wrapping_mul(2))
        })
        .collect()
}

/// `x ⊙ y` truncated by `d` bits, the truncation fused into the reshare
/// ([`reshare_trunc`]): within {0, +1} of ⌊x·y/2^d⌋ while |x·y| < 2^62 raw.
///
/// Rounds: 2. Bits per element (three parties): 192 + 4·d.
pub(crate) async fn mul_trunc(
    ctx: &mut Ctx,
    x: &Shares,
    y: &Shares,
    d: u32,
) -> Result<Shares, Error> {
    if x.len() != y.len() {
        return Err(Error::misuse("mul of vectors of different lengths"));
    }
    reshare_trunc(ctx, cross_terms(x, y), d).await
}

/// `x ⊙ x` truncated by `d` bits, fused as [`mul_trunc`]. Rounds: 2.
pub(crate) async fn square_trunc(ctx: &mut Ctx, x: &Shares, d: u32) -> Result<Shares, Error> {
    reshare_trunc(ctx, square_terms(x), d).await
}

/// Elementwise square `x ⊙ x`: `z_i = x_i² + 2·x_i·x_{i+1}`. Exact.
///
/// Rounds: 1. Bytes: 8·n per party.
///
/// # Errors
/// `Protocol` if a message is malformed.
pub async fn square(ctx: &mut Ctx, x: &Shares) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    reshare(&mut ctx, square_terms(x)).await
}

/// Fixed-point product: [`mul`] and a truncation by the session's fractional bits, the
/// truncation fused into the reshare (the product is never reshared on its own).
///
/// Output within {0, +1} ulp of ⌊x·y / 2^f⌋ while |x·y| < 2^62 in raw ring units.
///
/// Rounds: 2. Bits per element, summed over the parties: 128 + 64 + 4f = 264 at f = 18;
/// Bytes per party 16·n/3 + those of [`super::trunc`] (n divisible by 3).
///
/// # Errors
/// As [`mul`] and [`trunc`](super::trunc()).
pub async fn mul_fixed(ctx: &mut Ctx, x: &Shares, y: &Shares) -> Result<Shares, Error> {
    let f = ctx.fixed().frac_bits();
    mul_trunc(ctx, x, y, f).await
}

/// Fixed-point square: [`square`] with the truncation fused into the reshare, as
/// [`mul_fixed`].
///
/// Rounds: 2. Bytes: those of [`mul_fixed`].
///
/// # Errors
/// As [`square`] and [`trunc`](super::trunc()).
pub async fn square_fixed(ctx: &mut Ctx, x: &Shares) -> Result<Shares, Error> {
    let f = ctx.fixed().frac_bits();
    square_trunc(ctx, x, f).await
}
