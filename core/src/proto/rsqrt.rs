//! Reciprocal square root: normalisation by the top bit, a table of public powers of √2,
//! a quadratic initial guess and one Newton step (docs/PROTOCOLS.md, Reciprocal square
//! root; Lu, Fang, Huang, Hong 2020, "rSqrt").
//!
//! The normalisation is the crate's shared [`normalize`] (recip.rs), which delivers u, u²
//! and u·T together; that is what lets the initial guess be quadratic at no extra round.

use alloc::vec::Vec;

use crate::engine::{Ctx, try_join};
use crate::error::Error;
use crate::share::Shares;

use super::gelu::{encode_at, lincomb};
use super::recip::normalize;
use super::{mul, trunc};

/// Fractional bits of the table entries beyond f (T_j is held at f + 14 bits).
const TABLE_EXTRA_BITS: u32 = 14;

/// Internal guard bits of Y = y·T and y·uT beyond the output's f + `extra` (fewer if the
/// ring's headroom is smaller): with `extra` = 0 they halve the error at outputs near 2^−4.
const GUARD_BITS: u32 = 4;

/// Largest `hi` accepted (that of [`normalize`]).
const MAX_HI: u32 = 61;

/// Relative minimax fit of u^(−1/2) on [0.5, 1] by c0 + c1·u + c2·u² (Remez exchange on the
/// relative error): max |y0·√u − 1| = 3.1876e-3.
const Y0: [f64; 3] = [
    2.233_947_030_527_881,
    -2.066_206_532_863_237,
    0.835_447_147_727_109_6,
];

/// One Newton step turns a relative error e into −1.5e² − 0.5e³ ∈ [−1.53e-5, 0]: the table
/// carries the factor 1 + 7.62e-6 (this constant times 2^−32) to centre it.
const CENTRE: u128 = 32_727;

/// round(√(c · 2^(f−1−j)) · 2^tb)·(1 + 7.62e-6): entry j of the table
/// T_j = √c · 2^((f−1−j)/2) at tb fractional bits (exact integer square root), with the
/// centring factor of the Newton step.
fn table_entry(c: u64, f: u32, j: u32, tb: u32) -> Result<u64, Error> {
    let e = (f + 2 * tb)
        .checked_sub(1 + j)
        .ok_or(Error::misuse("rsqrt table exponent underflows"))?;
    let bits = 64 - c.leading_zeros();
    if bits + e > 126 {
        return Err(Error::misuse("rsqrt scale too large"));
    }
    let big = u128::from(c) << e;
    let s = big.isqrt();
    // Round half up: (s + ½)² ≤ N ⇔ s² + s < N for integer N.
    let r = if s * s + s < big { s + 1 } else { s };
    // Centre the one-signed Newton error: r·(1 + CENTRE/2^32), rounded.
    let r = r + ((r * CENTRE + (1 << 31)) >> 32);
    u64::try_from(r).map_err(|_| Error::misuse("rsqrt table entry too large"))
}

/// 1/√x for positive fixed-point x with 2^lo ≤ x·2^f < 2^(hi+1) (raw range), with the
/// output at f + `extra` fractional bits. See [`rsqrt_scaled`] (with c = 1) for the
/// method, costs and error.
///
/// Rounds: 9 whenever lo < hi (e.g. lo = 8, hi = 38, i.e. x ∈ [2^−10, 2^20]). Bytes:
/// those of [`rsqrt_scaled`].
///
/// # Errors
/// As [`rsqrt_scaled`].
pub async fn rsqrt(
    ctx: &mut Ctx,
    x: &Shares,
    lo: u32,
    hi: u32,
    extra: u32,
) -> Result<Shares, Error> {
    rsqrt_scaled(ctx, x, lo, hi, extra, 1).await
}

/// √(c/x) for positive fixed-point x with 2^lo ≤ X < 2^(hi+1), X = x·2^f the raw value,
/// and a public integer c ≥ 1 folded into the table for free (LayerNorm uses c = d·2^8 on
/// a sum of squares kept at f + 8 bits, so that the result is 1/√(var + ε)). Output at
/// f + `extra` fractional bits.
///
/// Method (docs/PROTOCOLS.md, Reciprocal square root; Lu et al. 2020): normalise
/// X = u·2^(j+1) with u ∈ [0.5, 1), j the top bit, by the crate's shared normalisation
/// (one [`super::lt_thresholds`] with the public thresholds 2^j, whose arithmetic bits
/// need no B2A, and one fused round that returns u at f bits, its exact square u² and
/// u·T); T = Σ e_j·T_j with
/// T_j = √c·2^((f−1−j)/2) (√2 for odd f−1−j) at f + 14 fractional bits gives
/// √(c/x) = T/√u. Then, in one round, the
/// initial guess y0 = 2.23395 − 2.06621u + 0.83545u² (relative minimax fit on [0.5, 1],
/// relative error 3.19e-3: one truncation of a linear combination of u and u²) and
/// uT = trunc(u·T); then one Newton step y ← y(3 − u·y²)/2 with T folded in:
/// {y², y·uT, Y = y·T} (mul + trunc), then trunc(3Y·2^f − y²·(y·uT), f + 1 + g) — the
/// halving folded into that truncation (g guard bits, below). The step leaves
/// −1.5e² ∈ [−1.53e-5, 0]; the table carries 1 + 7.62e-6 to centre it (±7.6e-6 before
/// rounding).
///
/// Departure from the baseline plan (docs/PROTOCOLS.md, Baseline plan), which starts from
/// the linear y0 = 1.787 − 0.809u (error 0.0224) and needs two Newton steps: R_LT + 12
/// rounds there (19 at k' = 40), 9 here (R_LT + 7 with the carry-tree comparison and its
/// B2A, 4 + 5 with [`super::lt_thresholds`]), with a smaller error; the shared
/// normalisation costs more bits (its shifted versions of X), so as first built its total
/// bits were about those of the baseline (36798 against 37240 at k' = 40, with the 384-bit
/// B2A and the 64 + 6d-bit truncation); 32194 with the carry tree and the 256-bit B2A,
/// 35058 now.
///
/// **Range** (documented contract): 2^lo ≤ X < 2^(hi+1); a violated bound gives a wrong
/// normalisation (X below 2^lo is treated as if its top bit were lo).
/// **Error** (measured, tests/gelu_layernorm.rs): relative error ≤ 1.2e-5 over
/// x ∈ [2^−10, 2^20] with `extra` = 12; with `extra` = 0, ≤ 5.7e-5 where the output is
/// ≥ 2^−4 (the baseline plan: 8.1e-5), below which the output grid 2^−f dominates (relative
/// 2^−f/out). Y and y·uT keep 4 guard bits beyond f + `extra` (fewer if the overflow
/// budget requires), dropped by the final truncation.
///
/// Rounds: 4 for the normalisation (3 for its comparisons, [`super::LT_THRESHOLDS_ROUNDS`],
/// then the fused round) + 5 = 9 whenever lo < hi, whatever the range: 9 at k' = 40 and
/// 63 alike (14 with the carry-tree comparison and its B2A).
/// Bits per element, summed over the parties, with m = hi − lo, k' = hi + 2,
/// tb = f + 14, g the guard bits (4 unless the overflow budget allows fewer),
/// td = tb − extra − g, the normalisation's shifts k = max(1, lo + 1 − f) ..= hi + 1 − f
/// and v = their number, plus one if lo < f: [`super::lt_thresholds_bits`]`(k', m)` =
/// 2k' + (k' − 1)·W + m·(2k'·W + 384) for the comparisons (W the bits of the smallest
/// prime above k'), Σ_k (64 + 4k) for the shifted versions of X, 192·v for their
/// squares, 3·192 for the fused u, u², uT, 64 + 8f for y0, 2·(64 + 4·td) for uT and Y,
/// 4·192 for the products and 2·(64 + 4f) + 64 + 4(f + 1 + g) for the other truncations.
/// At lo = 8, hi = 38, extra = 0 (k' = 40, W = 6, k = 1..=21, v = 22, g = 4, td = 28):
/// 26234 + 2268 + 4224 + 576 + 208 + 352 + 768 + 272 + 156 = 35058 bits (**Bytes**
/// 35058·n/24 per party with role rotation, exact for n divisible by 24). LayerNorm's
/// lo = 18, hi = 61, extra = 8, c = 768·2^8: 72490 (54998 for the 43 comparisons);
/// RMSNorm's lo = 13, hi = 60, extra = 8, c = 576·2^3: 76647 (59395 for 47).
///
/// # Errors
/// `Misuse` unless lo ≤ hi ≤ 61, c ≥ 1 and extra ≤ 14, or if the table or the output
/// would overflow the ring (too large c or extra for this lo); `Protocol` if a message is
/// malformed.
pub async fn rsqrt_scaled(
    ctx: &mut Ctx,
    x: &Shares,
    lo: u32,
    hi: u32,
    extra: u32,
    c: u64,
) -> Result<Shares, Error> {
    if lo > hi || hi > MAX_HI {
        return Err(Error::misuse("rsqrt needs lo <= hi <= 61"));
    }
    if c == 0 {
        return Err(Error::misuse("rsqrt scale must be at least 1"));
    }
    if extra > TABLE_EXTRA_BITS {
        return Err(Error::misuse("rsqrt keeps at most 14 extra output bits"));
    }
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    let tb = f + TABLE_EXTRA_BITS;
    let table = (lo..=hi)
        .map(|j| table_entry(c, f, j, tb))
        .collect::<Result<Vec<_>, _>>()?;
    // Overflow contracts: u·T and y·T (u ≤ 1, y < 2) below 2^62, and 3Y·2^f with
    // Y < 1.5·T_max at f + extra + guard bits below 2^62.
    let t_max = u128::from(table.first().copied().unwrap_or(0));
    let overflow = || Error::misuse("rsqrt would overflow the ring: raise lo or lower c or extra");
    let lim1 = 61u32.checked_sub(f).ok_or_else(overflow)?;
    let fits = |e: u32| {
        (62 + tb)
            .checked_sub(2 * f + e)
            .is_some_and(|lim| 5 * t_max < 1u128 << lim)
    };
    if t_max >= 1u128 << lim1 || !fits(extra) {
        return Err(overflow());
    }
    // Y and y·uT keep up to GUARD_BITS more bits, dropped by the final truncation.
    let guard = (0..=GUARD_BITS)
        .rev()
        .find(|g| fits(extra + g))
        .unwrap_or(0);
    let ex = extra + guard; // fractional bits of Y and y·uT beyond f
    let td = tb - ex; // truncation turning T-products into f + ex bits
    let norm = normalize(&mut ctx, x, lo, hi, f, true, &[&table]).await?;
    let t = norm.lookup(&table)?;
    let u = &norm.u;
    let u2 = norm
        .u_sq
        .as_ref()
        .ok_or(Error::bug("normalisation without u²"))?;
    let ut_raw = norm
        .u_times
        .first()
        .ok_or(Error::bug("normalisation without u·T"))?;
    let n = u.len();

    // y0 = c0 + c1·u + c2·u² at 3f bits, truncated by 2f; uT = trunc(u·T, td), both at once.
    let y0 = lincomb(
        &[(u, encode_at(Y0[1], 2 * f)?), (u2, encode_at(Y0[2], f)?)],
        encode_at(Y0[0], 3 * f)?,
    )?;
    let (mut c1, mut c2) = (ctx.fork(), ctx.fork());
    let (y0, ut) = try_join(trunc(&mut c1, &y0, 2 * f), trunc(&mut c2, ut_raw, td)).await?;

    // Newton with T folded in: {y0², y0·uT, Y = y0·T}, then (3Y − y0²·(y0·uT))/2.
    let prod = mul(
        &mut ctx,
        &Shares::concat(&[&y0, &y0, &y0])?,
        &Shares::concat(&[&y0, &ut, &t])?,
    )
    .await?;
    let (pf, pt) = prod.split_at(2 * n)?;
    let (mut c3, mut c4) = (ctx.fork(), ctx.fork());
    let (pf, big_y) = try_join(trunc(&mut c3, &pf, f), trunc(&mut c4, &pt, td)).await?;
    let (y0sq, w) = pf.split_at(n)?;
    let p2 = mul(&mut ctx, &y0sq, &w).await?;
    let out = lincomb(&[(&big_y, 3u64 << f), (&p2, 1u64.wrapping_neg())], 0)?;
    trunc(&mut ctx, &out, f + 1 + guard).await
}
