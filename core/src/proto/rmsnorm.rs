//! RMSNorm over the rows of a matrix (LLaMA's normalisation; docs/PROTOCOLS.md, RMSNorm),
//! with its input scaled down before squaring so that residual streams with massive
//! activations do not wrap the ring.

use alloc::vec::Vec;

use crate::engine::{Ctx, try_join};
use crate::error::Error;
use crate::share::Shares;

use super::gelu::{encode_at, pow2};
use super::layernorm::{R_EXTRA_BITS, SQUARE_EXTRA_BITS, XG_EXTRA_BITS};
use super::mul::{mul_trunc, row_square_sums, square_sum_block};
use super::{mul, rsqrt_scaled, trunc};

/// Top of the raw range of the row sums that feed the rsqrt: X < 2^(RSQRT_HI + 1) = 2^61.
const RSQRT_HI: u32 = 60;

/// How [`rms_norm_rows`] scales its input for a public bound on |x| at row width `d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmsScaling {
    /// Where the squares are taken one by one, x is scaled by 2^−k before it multiplies x:
    /// x·trunc(x, k) stays at most 2^61 raw.
    pub k: u32,
    /// Fractional bits g ∈ [f, f + 8] of each square x² (held at raw x²·2^g), chosen so
    /// that a row's sum d·bound²·2^g stays at most 2^61.
    pub g: u32,
}

impl RmsScaling {
    /// The scaling for rows of width `d` whose entries stay at most `bound` in magnitude,
    /// at `f` fractional bits: k = ⌈log2(bound²·2^(2f)) − 61⌉ (at least 0) and
    /// g = min(⌊61 − log2(d·bound²)⌋, 2f − k, f + 8).
    ///
    /// # Errors
    /// `Misuse` unless bound ≥ 1 is finite, d ≥ 1 and f ≥ 1, or if no scaling keeps f bits
    /// of the squares (d·bound²·2^f > 2^61: at f = 18, bound·√d above 2^21.5).
    pub fn new(d: usize, bound: f64, f: u32) -> Result<RmsScaling, Error> {
        if !(bound.is_finite() && bound >= 1.0) || d == 0 || f == 0 {
            return Err(Error::misuse(
                "rmsnorm needs a finite residual bound >= 1, d > 0 and f > 0",
            ));
        }
        let p = |bits: u32| pow2(bits).ok_or(Error::misuse("rmsnorm: f out of range"));
        let b2 = bound * bound;
        let row = d as f64 * b2;
        // The squares must keep f fractional bits: d·B²·2^f ≤ 2^61. Then B²·2^(2f) ≤
        // 2^(61+f), so some k ≤ f suffices below and 2f − k ≥ f.
        if row * p(f)? > p(61)? {
            return Err(Error::misuse(
                "rmsnorm: residual bound too large for this width at f fractional bits",
            ));
        }
        let mut k = 0;
        while b2 * p(2 * f)? > p(61 + k)? {
            k += 1;
        }
        let mut g = f + SQUARE_EXTRA_BITS;
        while row * p(g)? > p(61)? {
            g -= 1;
        }
        // At most the 2f − k bits the product carries, and f + 8 (LayerNorm's square
        // precision; more would only inflate rsqrt's scale c = d·2^(g−f)).
        Ok(RmsScaling {
            k,
            g: g.min(2 * f - k),
        })
    }
}

/// RMSNorm of each of `rows` rows of length `d` (row-major `x`), with shared `gamma` of
/// length `d` broadcast over the rows: y = γ ⊙ x/√(mean(x²) + ε) (Zhang and Sennrich
/// 2019; docs/PROTOCOLS.md, RMSNorm). `bound` is a public bound on every |x|.
///
/// **Scaling.** At f fractional bits a product x·x carries 2f bits: a residual entry of
/// 2.5e4 (SmolLM2's massive activations) gives 2.5e4²·2^36 ≈ 2^65 and wraps Z_2^64. The
/// row's sum of squares is therefore taken by limbs (docs/PROTOCOLS.md, Sums of squares
/// by limbs): S = ⌊Σx²/2^(2f−g)⌋ at g fractional bits, exact up to one truncation per
/// block, with g from [`RmsScaling`] so that a whole row's sum d·bound²·2^g ≤ 2^61 fits
/// the rsqrt's range. Where not even one element's cross part
/// fits below 2^62 (large f with a large bound), each square is x·trunc(x, k) instead, the
/// second factor scaled down by 2^k (bound²·2^(2f−k) ≤ 2^61), truncated to g bits one by
/// one (one round more, and the second factor rounded to 2^−(f−k)). The mean and ε enter
/// rsqrt through its public scale c = d·2^(g−f): √(c/X) with X = (Σx² + dε)·2^(g−f) is
/// 1/√(mean(x²) + ε).
///
/// Schedule (all rows share every round):
/// 1. Branch A: S by limbs (2 rounds: the high parts' sums reshared beside the cross parts'
///    sums, reshared and truncated by 2f − g in blocks below 2^62: one block for d = 576,
///    25 of 170 elements for LLaMA-7B's d = 4096, both at bound 2^15), + dε (local),
///    r = 1/√(mean(x²) + ε) by [`rsqrt_scaled`] with c = d·2^(g−f) at f + 8 fractional
///    bits (6 rounds, lo = ⌊log2(dε·2^g)⌋, hi = 60). Branch B, concurrently:
///    xg = trunc(x·γ, f − 4) at f + 4 bits (2 rounds).
/// 2. y = trunc(xg·r, f + 12) (2 rounds), at f bits.
///
/// **Range** (contract): |x| ≤ `bound` for every entry (which also sizes the blocks of the
/// sum of squares); |x·γ| < 2^(62−2f) (2^26 at f = 18); |γ|·√d < 2^14 (the final product
/// xg·r at 2f + 12 bits stays below 2^62);
/// ε > 0 with d·ε·2^g ≥ 1. **Error** (measured, tests/norm_activations.rs, f = 18, rows of
/// 576, ε = 1e-5, bound 2^15): |y − y_ref| ≤ 1e-3·max(|y_ref|, 1) elementwise, y_ref the
/// f64 RMSNorm of the decoded fixed-point inputs: worst 1.1e-5 on LLaMA-like rows with
/// massive activations up to ±2^15, 5.7e-6 on rows without outliers (the output grid 2^−f is
/// 3.8e-6), 7.7e-5 on rows of tiny values (RMS 1e-3 to 2e-2, the worst at RMS 1e-3, where
/// ε dominates; 7.7e-4 with the squares taken one by one as x·trunc(x, 5)); 3.8e-6 on rows
/// of 4096 (25 blocks).
///
/// Rounds: 2 + 6 + 2 = **10** (11 when the squares are taken one by one with k > 0).
/// Bits per row (summed over the parties): the sum of squares, 3·(64 − c) plus
/// ⌈d/block⌉·(192 + 4c) with c = 2f − g, then d·(192 + 4(f − 4)) for xg and
/// d·(192 + 4(f + 12)) for the final product, plus rsqrt's bits for one row
/// ([`super::rsqrt_bits`]: 2(hi − lo + 1) − 1 thresholds of one [`super::lt_thresholds`]
/// on keys cut by lo − 9 bits); f = 18, d = 576, bound 2^15 (g = 21, c = 15, one block),
/// ε = 1e-5 (lo = 13, 95 thresholds in Z_2^58): 147 + 252 + 576·(248 + 312) = 322,959 + 155,026 (103,058 of it for the
/// comparisons) = **477,985 bits per row** (59.7 KB; 659,602 with the squares one by one).
/// **Bytes** per party: roles rotate over three blocks of rows and of elements, so with the
/// number of rows divisible by 24 each party sends exactly 477985·rows/24 bytes; a single
/// row sends (21224, 18476, 20294) bytes.
///
/// # Errors
/// `Misuse` for mismatched lengths, rows·d overflow, d = 0, a bound with no scaling
/// ([`RmsScaling::new`]), f ≤ 4, or ε outside the contract; `Protocol` if a message is
/// malformed.
pub async fn rms_norm_rows(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    d: usize,
    gamma: &Shares,
    eps: f64,
    bound: f64,
) -> Result<Shares, Error> {
    if gamma.len() != d {
        return Err(Error::misuse("rmsnorm shapes do not match"));
    }
    rms_norm_impl(ctx, x, rows, d, Some(gamma), eps, bound).await
}

/// RMSNorm without its weight: y = x/√(mean(x²) + ε) for each of `rows` rows of length `d`
/// (row-major `x`), `bound` a public bound on every |x|. For models whose normalised rows
/// feed linear layers only (LLaMA's blocks), γ folds into those layers' weights
/// (W' = diag(γ)·W) before sharing, which removes the γ product.
///
/// Schedule: as [`rms_norm_rows`] without branch B; the last step is y = trunc(x·r, f + 8)
/// (r at f + 8 fractional bits, |x·r| ≤ √d).
///
/// **Range** (contract): as [`rms_norm_rows`] without the conditions on γ, and
/// √d·2^(2f+8) < 2^61 (x·r at 2f + 8 bits, with room for r's error; d < 2^34 at f = 18).
/// **Error** (measured, tests/norm_activations.rs): within [`rms_norm_rows`]'s bound,
/// |y − y_ref| ≤ 1e-3·max(|y_ref|, 1): worst 1.2e-5 on rows with massive activations,
/// 8.7e-6 on rows of tiny values (x keeps all f bits up to the final product).
///
/// Rounds: 10 (as [`rms_norm_rows`]). Bits per row (summed over the parties): the sum of
/// squares, then d·(192 + 4(f + 8)) for the product (its truncation fused into the
/// reshare), plus rsqrt's; f = 18, d = 576, bound 2^15, ε = 1e-5: 399 + 576·296 + 155,026
/// = **325,921 bits per row** (40.7 KB, against 477,985 with γ). **Bytes** per party:
/// 325921·rows/24 for a number of rows divisible by 24.
///
/// # Errors
/// As [`rms_norm_rows`], and `Misuse` for rows too long for the product's range.
pub async fn rms_norm_rows_unscaled(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    d: usize,
    eps: f64,
    bound: f64,
) -> Result<Shares, Error> {
    rms_norm_impl(ctx, x, rows, d, None, eps, bound).await
}

/// [`rms_norm_rows`] and [`rms_norm_rows_unscaled`]: with γ if `gamma` is given.
async fn rms_norm_impl(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    d: usize,
    gamma: Option<&Shares>,
    eps: f64,
    bound: f64,
) -> Result<Shares, Error> {
    let total = rows
        .checked_mul(d)
        .ok_or(Error::misuse("rows·d overflows"))?;
    if d == 0 || x.len() != total {
        return Err(Error::misuse("rmsnorm shapes do not match"));
    }
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    if f <= XG_EXTRA_BITS {
        return Err(Error::misuse("rmsnorm needs more than 4 fractional bits"));
    }
    // Without γ, y = x·r at 2f + 8 bits with |x·r| ≤ √d < 2^⌈bitlen(d)/2⌉.
    let half_bits = (usize::BITS - d.leading_zeros()).div_ceil(2);
    if gamma.is_none() && 2 * f + R_EXTRA_BITS + half_bits > 61 {
        return Err(Error::misuse(
            "unscaled rmsnorm rows too long for this fixed-point format",
        ));
    }
    let RmsScaling { k, g } = RmsScaling::new(d, bound, f)?;
    let eps_total = encode_at(eps * d as f64, g)?;
    if eps <= 0.0 || eps_total == 0 {
        return Err(Error::misuse("rmsnorm needs eps > 0 with d·eps·2^g >= 1"));
    }
    // X ≥ d·ε·2^g: lo = ⌊log2 of that⌋.
    let lo = 63 - eps_total.leading_zeros();
    if lo > RSQRT_HI {
        return Err(Error::misuse("rmsnorm eps too large"));
    }
    let c = (d as u64) << (g - f);
    let row_of: Vec<usize> = (0..total).map(|i| i / d).collect();

    let (mut ca, mut cb) = (ctx.fork(), ctx.fork());
    // Raw bits of the bound on |x|, one more for the rounding of the encoding: the
    // smallest b with bound·2^f < 2^(b−1) (RmsScaling keeps bound·2^f below 2^61).
    let p = |bits: u32| pow2(bits).ok_or(Error::misuse("rmsnorm: f out of range"));
    let raw = bound * p(f)?;
    let mut x_bits = 1;
    while x_bits < 64 && p(x_bits - 1)? <= raw {
        x_bits += 1;
    }
    let square_block = square_sum_block(d, 2 * f - g, x_bits);
    let branch_a = async {
        let c_ = &mut ca;
        if let Some(block) = square_block {
            let s = row_square_sums(c_, x, d, 2 * f - g, block).await?;
            let s = s.add_public_scalar(eps_total);
            return rsqrt_scaled(c_, &s, lo, RSQRT_HI, R_EXTRA_BITS, c).await;
        }
        let xs = if k > 0 {
            trunc(c_, x, k).await?
        } else {
            x.clone()
        };
        let t = 2 * f - k - g;
        let sq = if t > 0 {
            mul_trunc(c_, x, &xs, t).await?
        } else {
            mul(c_, x, &xs).await?
        };
        let s = sq.sum_chunks(d)?.add_public_scalar(eps_total);
        rsqrt_scaled(c_, &s, lo, RSQRT_HI, R_EXTRA_BITS, c).await
    };
    let Some(gamma) = gamma else {
        // y = trunc(x·r, f + 8), below 2^61 raw by the check above.
        let r = branch_a.await?;
        return mul_trunc(&mut ctx, x, &r.gather(&row_of)?, f + R_EXTRA_BITS).await;
    };
    let col_of: Vec<usize> = (0..total).map(|i| i % d).collect();
    let branch_b =
        async { mul_trunc(&mut cb, x, &gamma.gather(&col_of)?, f - XG_EXTRA_BITS).await };
    let (r, xg) = try_join(branch_a, branch_b).await?;
    mul_trunc(
        &mut ctx,
        &xg,
        &r.gather(&row_of)?,
        f + XG_EXTRA_BITS + R_EXTRA_BITS,
    )
    .await
}
