use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::share::Shares;

use super::{reshare, trunc};

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
    let z: Vec<u64> = x
        .a()
        .iter()
        .zip(x.b())
        .zip(y.a().iter().zip(y.b()))
        .map(|((xa, xb), (ya, yb))| {
            xa.wrapping_mul(*ya)
                .wrapping_add(xa.wrapping_mul(*yb))
                .wrapping_add(xb.wrapping_mul(*ya))
        })
        .collect();
    reshare(&mut ctx, z).await
}

/// Elementwise square `x ⊙ x`: `z_i = x_i² + 2·x_i·x_{i+1}`. Exact.
///
/// Rounds: 1. Bytes: 8·n per party.
///
/// # Errors
/// `Protocol` if a message is malformed.
pub async fn square(ctx: &mut Ctx, x: &Shares) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let z: Vec<u64> = x
        .a()
        .iter()
        .zip(x.b())
        .map(|(a, b)| {
            a.wrapping_mul(*a)
                .wrapping_add(a.wrapping_mul(*b).wrapping_mul(2))
        })
        .collect();
    reshare(&mut ctx, z).await
}

/// Fixed-point product: [`mul`] then [`trunc`] by the session's fractional bits.
///
/// Output within {0, +1} ulp of ⌊x·y / 2^f⌋ while |x·y| < 2^62 in raw ring units.
///
/// Rounds: 2. Bytes: 8·n + ⌈172·n/3/8⌉ per party (n divisible by 3, f = 18).
///
/// # Errors
/// As [`mul`] and [`trunc`].
pub async fn mul_fixed(ctx: &mut Ctx, x: &Shares, y: &Shares) -> Result<Shares, Error> {
    let f = ctx.fixed().frac_bits();
    let z = mul(ctx, x, y).await?;
    trunc(ctx, &z, f).await
}

/// Fixed-point square: [`square`] then [`trunc`].
///
/// Rounds: 2.
///
/// # Errors
/// As [`square`] and [`trunc`].
pub async fn square_fixed(ctx: &mut Ctx, x: &Shares) -> Result<Shares, Error> {
    let f = ctx.fixed().frac_bits();
    let z = square(ctx, x).await?;
    trunc(ctx, &z, f).await
}
