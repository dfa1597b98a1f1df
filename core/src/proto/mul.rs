use alloc::vec::Vec;

use crate::engine::{Ctx, try_join};
use crate::error::Error;
use crate::ring::Width;
use crate::share::{Shares, Summands, chunk_sums};

use super::{reshare, reshare_in, reshare_trunc, reshare_trunc_narrow};

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

/// This party's summand of the elementwise product `x ⊙ y`, before any message (see
/// [`matmul_summands`](super::matmul_summands)). Local.
///
/// Rounds: 0. Bytes: 0.
///
/// # Errors
/// `Misuse` for mismatched lengths.
pub fn mul_summands(x: &Shares, y: &Shares) -> Result<Summands, Error> {
    if x.len() != y.len() {
        return Err(Error::misuse("mul of vectors of different lengths"));
    }
    Ok(Summands::new(x.party(), cross_terms(x, y)))
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

/// [`mul_trunc`] between chosen rings: the product summed in Z_2^k (k = `input`; the
/// factors need only be known mod 2^k) and truncated into Z_2^m (m = `output`), for a
/// chain of products whose values need fewer than 64 bits ([`super::gelu`]'s powers):
/// within {0, +1} of ⌊x·y/2^d⌋ mod 2^m while |x·y| < 2^(k−2) raw.
///
/// Rounds: 2. Bits per element (three parties): 2k + m + 4·max(0, m − k + d).
pub(crate) async fn mul_trunc_in(
    ctx: &mut Ctx,
    x: &Shares,
    y: &Shares,
    d: u32,
    (input, output): (Width, Width),
) -> Result<Shares, Error> {
    if x.len() != y.len() {
        return Err(Error::misuse("mul of vectors of different lengths"));
    }
    reshare_trunc_narrow(ctx, cross_terms(x, y), input, d, output).await
}

/// [`square_trunc`] between chosen rings, as [`mul_trunc_in`].
pub(crate) async fn square_trunc_in(
    ctx: &mut Ctx,
    x: &Shares,
    d: u32,
    (input, output): (Width, Width),
) -> Result<Shares, Error> {
    reshare_trunc_narrow(ctx, square_terms(x), input, d, output).await
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

/// Elements per block of [`row_square_sums`] for values below 2^`x_bits` in magnitude
/// (raw) and a truncation by `c` bits: the most whose cross part Σ l·(2x − l), with the low
/// parts l < 3·2^c, stays below 2^62 in magnitude, at most `d`; `None` if not even one
/// element's does (then the squares must be truncated one by one).
pub(crate) fn square_sum_block(d: usize, c: u32, x_bits: u32) -> Option<usize> {
    if c >= 62 || x_bits >= 62 {
        return None;
    }
    // |l·(2x − l)| < 3·2^c·(2^(x_bits+1) + 3·2^c) per element.
    let low = 3u128 << c;
    let per = low.checked_mul((2u128 << x_bits) + low)?;
    let block = ((1u128 << 62) - 1) / per;
    (block >= 1).then(|| usize::try_from(block).map_or(d, |b| b.min(d)))
}

/// The sum of the squares of each row of `d` elements of `x`, truncated by `c` bits:
/// ⌊Σx²/2^c⌋ + δ, 0 ≤ δ ≤ ⌈d/`block`⌉ (docs/PROTOCOLS.md, Sums of squares by limbs). Each
/// element is split locally into its high part H = 2^c·h (every component with its low
/// c bits cleared) and its low part l (those bits, 0 ≤ l < 3·2^c, no wrap), so that
/// x² = 2^(2c)·h² + l·(2x − l). The high parts' sum 2^c·Σh² is exact from h's shares
/// mod 2^(64−c), reshared in that ring and scaled by 2^c; the cross parts are summed over
/// blocks of `block` elements ([`square_sum_block`]), each block reshared and truncated
/// by c once. Every square is thus summed in 3-of-3 form before any message: two words
/// per row (and per extra block) cross the network instead of one truncated product per
/// element. Requires |x| < 2^x_bits raw with `block` from [`square_sum_block`] for
/// x_bits, and the true sum below 2^62 after the truncation.
///
/// Rounds: 2 (1 if c = 0). Bits per row, summed over the parties: 3·(64 − c) +
/// ⌈d/block⌉·(192 + 4c) (192 when c = 0).
///
/// # Errors
/// `Misuse` if `d` or `block` is 0 or `d` does not divide the length, or c ≥ 62;
/// `Protocol` if a message is malformed.
pub(crate) async fn row_square_sums(
    ctx: &mut Ctx,
    x: &Shares,
    d: usize,
    c: u32,
    block: usize,
) -> Result<Shares, Error> {
    if d == 0 || block == 0 || x.len() % d != 0 {
        return Err(Error::misuse("square sums need rows of d > 0 elements"));
    }
    let mut ctx = ctx.fork();
    if c == 0 {
        return reshare(&mut ctx, chunk_sums(&square_terms(x), d)).await;
    }
    let ring = Width::new(64 - c).ok_or(Error::misuse("square sums truncate by c < 62"))?;
    let low_mask = (1u64 << c) - 1;
    let high = super::gelu::shift_components(x, c);
    let low = x.map(|v| v & low_mask);
    let big = x.map(|v| v & !low_mask);
    let cross: Vec<u64> = cross_terms(&big, &low)
        .into_iter()
        .zip(square_terms(&low))
        .map(|(hl, ll)| hl.wrapping_mul(2).wrapping_add(ll))
        .collect();
    // Blocks never straddle rows: each row is cut into ⌈d/block⌉ blocks.
    let blocks_per_row = d.div_ceil(block);
    let cross_blocks: Vec<u64> = cross
        .chunks(d)
        .flat_map(|row| chunk_sums(row, block))
        .collect();
    let (mut ch, mut cl) = (ctx.fork(), ctx.fork());
    let (high_sum, low_sum) = try_join(
        reshare_in(&mut ch, chunk_sums(&square_terms(&high), d), ring),
        reshare_trunc(&mut cl, cross_blocks, c),
    )
    .await?;
    high_sum
        .scale(1u64 << c)
        .add(&low_sum.sum_chunks(blocks_per_row)?)
}
