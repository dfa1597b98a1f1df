//! LayerNorm over the rows of a matrix (PUMA; docs/PROTOCOLS.md, LayerNorm): one rsqrt per row.

use alloc::vec::Vec;

use crate::engine::{Ctx, try_join, try_join_all};
use crate::error::Error;
use crate::share::Shares;

use super::gelu::encode_at;
use super::mul::{mul_trunc, row_square_sums, square_sum_block, square_trunc};
use super::{rsqrt_scaled, trunc};

/// Extra fractional bits of r = 1/√(var + ε) (f + 8 in total).
pub(super) const R_EXTRA_BITS: u32 = 8;

/// Extra fractional bits of xg = (x − μ)·γ (f + 4 in total). With r at f + 8 the final
/// product sits at 2f + 12 bits, as in the baseline plan (f + 12 bits of r, xg at f;
/// docs/PROTOCOLS.md, Baseline plan).
pub(super) const XG_EXTRA_BITS: u32 = 4;

/// Extra fractional bits of μ and x − μ on the γ branch (f + 6 in total).
const CENTER_EXTRA_BITS: u32 = 6;

/// Extra fractional bits of each row's sum of squares Σ(x − μ)² (f + 8 in total, fewer
/// for d ≥ 2^(f−8)): the resolution rsqrt sees on rows of tiny variance, where
/// 1/√(σ² + ε) reaches 1/√ε and amplifies it.
pub(super) const SQUARE_EXTRA_BITS: u32 = 8;

/// Raw magnitude bound of x − μ in bits (the contract |x − μ| < 2^31 raw), which sizes
/// the blocks of the sums of squares ([`row_square_sums`]).
const CENTERED_BITS: u32 = 31;

/// Fractional bits of 1/d beyond f: C = round(2^(f+10)/d) (1/d at only f bits would bias μ
/// by 0.1% for d = 768).
const MEAN_EXTRA_BITS: u32 = 10;

/// Bits of the low part of 1/d: C_lo = round((2^(f+10)/d − C)·2^12), so that μ's error does
/// not grow with |μ| (C alone is off by up to d·2^−(f+11) relative).
const MEAN_LOW_BITS: u32 = 12;

/// LayerNorm of each of `rows` rows of length `d` (row-major `x`), with shared `gamma` and
/// `beta` of length `d` broadcast over the rows:
/// y = γ ⊙ (x − μ)/√(σ² + ε) + β, μ and σ² the row's mean and (biased) variance
/// (Ba et al. 2016; PUMA, Dong et al. 2023, §5.3; docs/PROTOCOLS.md, LayerNorm).
///
/// Schedule (all rows share every round):
/// 1. μ from the row sum s with 1/d split into C = round(2^(f+10)/d) and a low part C_lo
///    at 12 more bits, four truncations of s·C and s·C_lo in one round: μ at f bits
///    (trunc(s·C, f + 10) + trunc(s·C_lo, f + 22)) and μ' at f + 6 bits (the same by
///    6 bits less). xc = x − μ at f bits and xc' = 2^6·x − μ' at f + 6 bits (local).
/// 2. Branch A: S = ⌊Σ xc²/2^(f−8)⌋ per row at f + 8 bits, by limbs (2 rounds): a plain
///    2f-bit sum of squares would reach 2^68 with GPT-2's residual values near 3000 and
///    wrap, so each xc is split locally into a high part, whose squares are summed exactly
///    mod 2^(64−c) (c = f − 8), and a low part, whose cross terms stay far below 2^62;
///    one reshare per row for each, no message per element (docs/PROTOCOLS.md, Sums of
///    squares by limbs). Then
///    r = √(d·2^8)/√((S + d·ε)·2^8) = 1/√(σ² + ε) by [`rsqrt_scaled`] with c = d·2^8 folded
///    into its segments' scales, at f + 8 fractional bits (6 rounds; lo =
///    ⌊log2(d·ε·2^(f+8))⌋ and hi = 61 − f + bitlen(d) + 8, i.e. 18 and 61 for d = 768,
///    ε = 1e-5: 44 octaves of two sub-segments, 87 thresholds of one
///    [`super::lt_thresholds`] on keys cut by 9 bits, in Z_2^54). Branch B, concurrently:
///    xg = trunc(xc'·γ, f + 2) at f + 4 bits.
/// 3. y = trunc(xg·r, f + 12) + β (2 rounds).
///
/// Departures from the baseline plan (docs/PROTOCOLS.md, Baseline plan). Rounds:
/// [`rsqrt_scaled`] takes 6 rounds instead of R_LT + 12 = 19 (one polynomial per
/// sub-segment of the magnitude, evaluated beside the comparisons that find it; see
/// docs/PROTOCOLS.md, Negative powers by segments), so LayerNorm takes 11 rounds instead
/// of 24. Precision, all for
/// rows of tiny variance, where r reaches 1/√ε ≈ 316 and amplifies every rounding of x − μ:
/// the sum of squares keeps 8 extra bits and is exact up to its one truncation (squares
/// truncated to f bits one by one, as first built, put 2 ulp on each square of a row of
/// standard deviation 3e-3 and moved r by 0.2%); the γ branch keeps μ and x − μ at
/// f + 6 bits and xg at f + 4 bits; r keeps 8 extra bits instead of 12, so the product xg·r
/// sits at 2f + 12 bits as in the baseline and the overflow budget is unchanged; 1/d
/// carries a low part, so μ's error does not grow with |μ|. Measured on the tests'
/// tiny-variance rows: 3.1e-3 with the baseline's precision, 8.0e-5 with these. Cost: four
/// truncations per row instead of one, xg truncated by f + 2 instead of f (+8 bits per
/// element); the sum of squares costs 394 bits per row of 768 where the baseline's squares
/// cost 264 per element.
///
/// **Range** (contract): |x − μ| < 8192 per element (raw 2^31, which sizes the blocks of
/// the sum of squares: one block for rows up to 2^13 at f = 18); |μ| < 2^16; |γ|·|x − μ| < 2^20 and |γ|·√d < 2^14 (products below 2^62);
/// d < 2^f; ε > 0 with d·ε·2^f ≥ 1 and d·ε small against d·2^13.
/// **Error** (measured, tests/gelu_layernorm.rs): |y − y_ref| ≤ 1e-3·max(|y_ref|, 1)
/// elementwise, y_ref the f64 LayerNorm of the decoded fixed-point inputs: worst 3.8e-6
/// on rows of 768 with outliers of ±3000 (the output grid 2^−f is 3.8e-6), 8.0e-5 on rows
/// of tiny variance (standard deviation 1e-3 to 1e-2, offsets up to 12).
///
/// Rounds: 1 + 2 + 6 + 2 = **11** for d = 768 (rsqrt's 6 whenever hi > 21).
/// Bits per row (summed over the parties): 4 truncations for μ (64·4 + 4·(28 + 40 + 22 +
/// 34) = 752) + the sum of squares (3·54 for the high parts + 192 + 4·10 for the cross
/// parts = 394, one block) + d·(272 + 312) (xc'·γ with its truncation by f + 2, final
/// product with its truncation by f + 12, each truncation fused into its product's
/// reshare: 128 + 64 + 4d bits) + rsqrt's bits ([`super::rsqrt_bits`]: 138,230 at
/// lo = 18, hi = 61, extra = 8, of which 90,210 for the 87 comparisons,
/// [`super::lt_thresholds_bits`]`(54, 87)`); d = 768, ε = 1e-5: **587,888 bits per row
/// (73.5 KB)**, against 765,670 with the squares truncated one by one and the baseline
/// plan's 946.7 kbit. **Bytes** per party: roles rotate over three blocks of rows and of
/// elements, so with the number of rows divisible by 24 each party sends exactly
/// 587888·rows/24 bytes; a single row sends (25673, 23326, 24732) bytes (its per-row work
/// falls to one party per role).
///
/// # Errors
/// `Misuse` for mismatched lengths, rows·d overflow, d = 0 or d ≥ 2^f, or ε outside the
/// contract; `Protocol` if a message is malformed.
pub async fn layernorm_rows(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    d: usize,
    gamma: &Shares,
    beta: &Shares,
    eps: f64,
) -> Result<Shares, Error> {
    if gamma.len() != d || beta.len() != d {
        return Err(Error::misuse("layernorm shapes do not match"));
    }
    layernorm_impl(ctx, x, rows, d, Some((gamma, beta)), eps).await
}

/// LayerNorm without its affine part: y = (x − μ)/√(σ² + ε) for each of `rows` rows of
/// length `d` (row-major `x`). For models whose normalised rows feed a linear layer only
/// (GPT-2's pre-LN blocks), γ and β fold into that layer's weights and bias
/// (`W' = diag(γ)·W`, `b' = βW + b`) before sharing, which removes the γ product.
///
/// Schedule: as [`layernorm_rows`] without branch B; the last step is
/// y = trunc(xc'·r, f + 14) with xc' = x − μ at f + 6 fractional bits and r at f + 8.
///
/// **Range** (contract): as [`layernorm_rows`] without the conditions on γ. **Error**
/// (measured, tests/gelu_layernorm.rs): the same bound as [`layernorm_rows`],
/// |y − y_ref| ≤ 1e-3·max(|y_ref|, 1).
///
/// Rounds: 11 for d = 768 (as [`layernorm_rows`]). Bits per row (summed over the
/// parties): 752 for μ + 394 for the sum of squares + d·320 (final product with its
/// truncation by f + 14 fused into the reshare) + rsqrt's 138,230; d = 768, ε = 1e-5:
/// **385,136 bits per row** (48.1 KB, against 587,888 with γ). **Bytes** per party:
/// 385136·rows/24 for a number of rows divisible by 24.
///
/// # Errors
/// As [`layernorm_rows`].
pub async fn layernorm_rows_unscaled(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    d: usize,
    eps: f64,
) -> Result<Shares, Error> {
    layernorm_impl(ctx, x, rows, d, None, eps).await
}

/// [`layernorm_rows`] with an optional affine part (γ, β).
async fn layernorm_impl(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    d: usize,
    affine: Option<(&Shares, &Shares)>,
    eps: f64,
) -> Result<Shares, Error> {
    let total = rows
        .checked_mul(d)
        .ok_or(Error::misuse("rows·d overflows"))?;
    if d == 0 || x.len() != total {
        return Err(Error::misuse("layernorm shapes do not match"));
    }
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    let bitlen = usize::BITS - d.leading_zeros();
    // Squares keep `sb` extra bits: S < d·2^(62−f+sb) raw when every |x − μ| < 2^(31−f),
    // so the rsqrt range tops at hi = 61 − f + bitlen(d) + sb ≤ 61.
    let sb = f
        .checked_sub(bitlen)
        .ok_or(Error::misuse("layernorm rows longer than 2^f"))?
        .min(SQUARE_EXTRA_BITS);
    let hi = (61 + bitlen + sb)
        .checked_sub(f)
        .ok_or(Error::misuse("layernorm needs f <= 61"))?;
    // rsqrt of X = (S + dε)·2^sb at f bits is √(d·2^sb / X) = 1/√(σ² + ε).
    let c_scale = (d as u64) << sb;
    let eps_total = encode_at(eps * d as f64, f + sb)?;
    if eps <= 0.0 || eps_total == 0 || eps_total >> 62 != 0 {
        return Err(Error::misuse("layernorm needs eps > 0 with d·eps·2^f >= 1"));
    }
    // X ≥ d·ε·2^(f+sb): lo = ⌊log2 of that⌋.
    let lo = 63 - eps_total.leading_zeros();
    if lo > hi {
        return Err(Error::misuse("layernorm eps too large"));
    }
    let (a, b) = (CENTER_EXTRA_BITS, MEAN_LOW_BITS);

    let row_of: Vec<usize> = (0..total).map(|i| i / d).collect();

    // 1. Mean, at f bits (squares) and f + a bits (γ branch), in one round.
    let inv_d = 1.0 / d as f64;
    let c_hi = encode_at(inv_d, f + MEAN_EXTRA_BITS)?;
    let hi_val = (c_hi as i64) as f64 / (1u64 << (f + MEAN_EXTRA_BITS)) as f64;
    let c_lo = encode_at(inv_d - hi_val, f + MEAN_EXTRA_BITS + b)?;
    let sums = x.sum_chunks(d)?;
    let (p_hi, p_lo) = (sums.scale(c_hi), sums.scale(c_lo));
    let m = f + MEAN_EXTRA_BITS;
    let jobs = [
        (&p_hi, m),
        (&p_lo, m + b),
        (&p_hi, m - a),
        (&p_lo, m + b - a),
    ];
    let mut forks: Vec<Ctx> = jobs.iter().map(|_| ctx.fork()).collect();
    let futs: Vec<_> = forks
        .iter_mut()
        .zip(jobs)
        .map(|(c, (v, t))| trunc(c, v, t))
        .collect();
    let mut parts = try_join_all(futs).await?.into_iter();
    let mut next = || parts.next().ok_or(Error::bug("missing mean part"));
    let (m_hi, m_lo, ma_hi, ma_lo) = (next()?, next()?, next()?, next()?);
    let mu = m_hi.add(&m_lo)?;
    let mu_a = ma_hi.add(&ma_lo)?;
    let xc = x.sub(&mu.gather(&row_of)?)?;
    let xc_a = x.scale(1u64 << a).sub(&mu_a.gather(&row_of)?)?;

    // 2. Branch A: variance and rsqrt; branch B: xc'·γ.
    let (mut ca, mut cb) = (ctx.fork(), ctx.fork());
    let branch_a = async {
        let c = &mut ca;
        let s = match square_sum_block(d, f - sb, CENTERED_BITS) {
            Some(block) => row_square_sums(c, &xc, d, f - sb, block).await?,
            None => square_trunc(c, &xc, f - sb).await?.sum_chunks(d)?,
        };
        let s = s.add_public_scalar(eps_total);
        rsqrt_scaled(c, &s, lo, hi, R_EXTRA_BITS, c_scale).await
    };
    let Some((gamma, beta)) = affine else {
        // 3'. y = trunc(xc'·r, f + 14): |xc'·r| ≤ √d, so the product stays far below 2^62.
        let r = branch_a.await?;
        return mul_trunc(&mut ctx, &xc_a, &r.gather(&row_of)?, f + a + R_EXTRA_BITS).await;
    };
    let col_of: Vec<usize> = (0..total).map(|i| i % d).collect();
    let branch_b = async {
        let c = &mut cb;
        mul_trunc(c, &xc_a, &gamma.gather(&col_of)?, f + a - XG_EXTRA_BITS).await
    };
    let (r, xg) = try_join(branch_a, branch_b).await?;

    // 3. y = trunc(xg·r, f + 12) + β.
    let y = mul_trunc(
        &mut ctx,
        &xg,
        &r.gather(&row_of)?,
        f + XG_EXTRA_BITS + R_EXTRA_BITS,
    )
    .await?;
    y.add(&beta.gather(&col_of)?)
}
