//! Reciprocal square root: normalisation by the top bit, a table of public powers of √2,
//! and two Newton steps (PROTOCOLS.md §9; Lu, Fang, Huang, Hong 2020, "rSqrt").
//!
//! The normalisation here duplicates the one the reciprocal needs (recip.rs); the two are
//! to be merged into one `normalize` once both land.

use alloc::vec::Vec;

use crate::engine::{Ctx, try_join};
use crate::error::Error;
use crate::ring::Width;
use crate::share::Shares;

use super::gelu::{encode_at, lincomb};
use super::{b2a, lt_public, mul, trunc};

/// Fractional bits of the table entries beyond f (T_j is held at f + 14 bits).
const TABLE_EXTRA_BITS: u32 = 14;

/// Largest `hi` accepted: X·M < 2^(hi+1) must stay below the truncation's 2^62.
const MAX_HI: u32 = 61;

/// The result of normalising a positive X with 2^lo ≤ X < 2^(hi+1).
pub(super) struct Normalized {
    /// u = X / 2^(j+1) ∈ [0.5, 1) at f fractional bits, j the top bit of X.
    pub(super) u: Shares,
    /// Arithmetic bits l_j = `[X < 2^j]` for j = lo+1..=hi, one vector each.
    pub(super) below: Vec<Shares>,
}

impl Normalized {
    /// Σ_j e_j·V_j for public V_lo..V_hi (raw ring values), e the one-hot of the top bit:
    /// with e_j = l_{j+1} − l_j (l_lo = 0, l_{hi+1} = 1) this is
    /// V_hi + Σ_{j=lo+1}^{hi} l_j·(V_{j−1} − V_j). Local.
    pub(super) fn lookup(&self, table: &[u64]) -> Result<Shares, Error> {
        let last = *table.last().ok_or(Error::bug("empty table"))?;
        if table.len() != self.below.len() + 1 {
            return Err(Error::bug("table length does not match the normalisation"));
        }
        let me = self.u.party();
        let mut acc = Shares::zeros(me, self.u.len()).add_public_scalar(last);
        for (l, w) in self.below.iter().zip(table.windows(2)) {
            if let [prev, cur] = w {
                acc.add_assign(&l.scale(prev.wrapping_sub(*cur)))?;
            }
        }
        Ok(acc)
    }
}

/// Normalisation by the top bit (PROTOCOLS.md §9): h_j = `[X ≥ 2^j]` for j = lo+1..hi by one
/// batched comparison with public powers of two in Z_2^(hi+2) — monotone in j, so it is the
/// prefix-OR of X's bits and no A2B is needed — then one B2A, M = Σ e_j·2^(s+f−1−j) and
/// u = trunc(X·M, s) with s = max(1, hi + 1 − f).
///
/// Rounds: R_LT(hi + 2) + 3. Bits per element (summed): (hi − lo)·(LT + 384) + 192 +
/// 64 + 6s.
async fn normalize(ctx: &mut Ctx, x: &Shares, lo: u32, hi: u32) -> Result<Normalized, Error> {
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    let n = x.len();
    let width = Width::new(hi + 2).ok_or(Error::misuse("normalisation range too wide"))?;
    let m = (hi - lo) as usize;
    let below = if m == 0 {
        Vec::new()
    } else {
        let reps: Vec<&Shares> = (0..m).map(|_| x).collect();
        let all = Shares::concat(&reps)?;
        let consts: Vec<u64> = (lo + 1..=hi)
            .flat_map(|j| core::iter::repeat_n(1u64 << j, n))
            .collect();
        let bits = lt_public(&mut ctx, &all, &consts, width).await?;
        let a = b2a(&mut ctx, &bits).await?;
        (0..m)
            .map(|k| a.slice(k * n..(k + 1) * n))
            .collect::<Result<Vec<_>, _>>()?
    };
    let s = (hi + 1).saturating_sub(f).max(1);
    let table: Vec<u64> = (lo..=hi).map(|j| 1u64 << (s + f - 1 - j)).collect();
    let tmp = Normalized {
        u: Shares::zeros(x.party(), n),
        below,
    };
    let scale = tmp.lookup(&table)?;
    let xm = mul(&mut ctx, x, &scale).await?;
    let u = trunc(&mut ctx, &xm, s).await?;
    Ok(Normalized {
        u,
        below: tmp.below,
    })
}

/// round(√(c · 2^(f−1−j)) · 2^tb): entry j of the table T_j = √c · 2^((f−1−j)/2) at tb
/// fractional bits, computed exactly in integers.
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
    u64::try_from(r).map_err(|_| Error::misuse("rsqrt table entry too large"))
}

/// 1/√x for positive fixed-point x with 2^lo ≤ x·2^f < 2^(hi+1) (raw range), with the
/// output at f + `extra` fractional bits. See [`rsqrt_scaled`] (with c = 1) for the
/// method, costs and error.
///
/// Rounds: R_LT(hi + 2) + 12 (lo = 8, hi = 38, i.e. x ∈ [2^−10, 2^20]: 19). Bytes: those
/// of [`rsqrt_scaled`].
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
/// and a public integer c ≥ 1 folded into the table for free (LayerNorm uses c = d, so
/// that √(d/(S + dε)) = 1/√(var + ε)). Output at f + `extra` fractional bits.
///
/// Method (PROTOCOLS.md §9; Lu et al. 2020): normalise X = u·2^(j+1) with u ∈ [0.5, 1) and
/// the one-hot e of the top bit j (comparisons with public powers of two, no A2B); the
/// table T = Σ e_j·T_j, T_j = √c·2^((f−1−j)/2) (√2 for odd f−1−j) at f + 14 fractional
/// bits, gives √(c/x) = T/√u. Initial guess y0 = 1.787 − 0.809u (relative error 0.0224,
/// one truncation); Newton y ← y(3 − u·y²)/2 twice:
/// step 1 {y², u·y} (mul + trunc), y²·(uy) (mul), trunc(3y·2^f − y²·uy, f + 1) — the
/// halving is folded into that truncation; uT = trunc(u·T) runs alongside;
/// step 2 with T folded in: {y², y·uT, Y = y·T} (mul + trunc), then
/// trunc(3Y·2^f − y²·(y·uT), f + 1). Errors 0.0224 → 7.5e-4 → ~1e-6 before rounding.
///
/// **Range** (documented contract): 2^lo ≤ X < 2^(hi+1); a violated bound gives a wrong
/// normalisation (X below 2^lo is treated as if its top bit were lo).
/// **Error** (measured, tests/gelu_layernorm.rs): relative error ≤ 1e-4 over
/// x ∈ [2^−10, 2^20] with `extra` = 12; with `extra` = 0 the output grid 2^−f alone limits
/// small outputs (relative 2^−f/out).
///
/// Rounds: R_LT(hi + 2) + 12, where R_LT(k) = 1 + ⌈log2(k − 1)⌉ (k = 40: 19; k = 55: 19).
/// Bits per element, summed over the parties, with m = hi − lo, k' = hi + 2,
/// L = ⌈log2(k' − 1)⌉, s = max(1, hi + 1 − f), tb = f + 14:
/// m·(14k' − 19 − 3L) (comparisons) + 384·m (B2A) + 9·192 (products) +
/// 10·64 + 6·(s + 7f + 2 + 2·(tb − extra)) (ten truncations);
/// lo = 8, hi = 38, extra = 0: 30856 bits; per party a third of that with role rotation
/// (**Bytes** 30856·n/24 per party, exact for n divisible by 24).
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
    let td = tb - extra; // truncation turning T-products into f + extra bits
    let table = (lo..=hi)
        .map(|j| table_entry(c, f, j, tb))
        .collect::<Result<Vec<_>, _>>()?;
    // Overflow contracts: u·T and y·T (u < 1, y < 2) below 2^62, and 3Y·2^f with
    // Y < 1.5·T_max at f + extra bits below 2^62.
    let t_max = u128::from(table.first().copied().unwrap_or(0));
    let overflow = || Error::misuse("rsqrt would overflow the ring: raise lo or lower c or extra");
    let lim1 = 61u32.checked_sub(f).ok_or_else(overflow)?;
    let lim2 = (62 + tb).checked_sub(2 * f + extra).ok_or_else(overflow)?;
    if t_max >= 1u128 << lim1 || 5 * t_max >= 1u128 << lim2 {
        return Err(overflow());
    }
    let norm = normalize(&mut ctx, x, lo, hi).await?;
    let t = norm.lookup(&table)?;
    let u = &norm.u;
    let n = u.len();
    let neg = |v: u64| v.wrapping_neg();

    let (mut c_ut, mut c_y) = (ctx.fork(), ctx.fork());
    let ut_fut = async {
        let p = mul(&mut c_ut, u, &t).await?;
        trunc(&mut c_ut, &p, td).await
    };
    let y1_fut = async {
        let c = &mut c_y;
        // y0 = 1.787 − 0.809u at 2f bits, one truncation by f.
        let y0 = lincomb(&[(u, neg(encode_at(0.809, f)?))], encode_at(1.787, 2 * f)?)?;
        let y0 = trunc(c, &y0, f).await?;
        // Newton step 1: {y0², u·y0}, then y0²·(u·y0), then (3y0 − u·y0³)/2.
        let sq = mul(
            c,
            &Shares::concat(&[&y0, u])?,
            &Shares::concat(&[&y0, &y0])?,
        )
        .await?;
        let sq = trunc(c, &sq, f).await?;
        let (y0sq, uy0) = sq.split_at(n)?;
        let p = mul(c, &y0sq, &uy0).await?;
        let y1 = lincomb(&[(&y0, 3u64 << f), (&p, neg(1))], 0)?;
        trunc(c, &y1, f + 1).await
    };
    let (ut, y1) = try_join(ut_fut, y1_fut).await?;

    // Newton step 2 with T folded in: {y1², y1·uT, Y = y1·T}, then (3Y − y1²·(y1·uT))/2.
    let prod = mul(
        &mut ctx,
        &Shares::concat(&[&y1, &y1, &y1])?,
        &Shares::concat(&[&y1, &ut, &t])?,
    )
    .await?;
    let (pf, pt) = prod.split_at(2 * n)?;
    let (mut c1, mut c2) = (ctx.fork(), ctx.fork());
    let (pf, big_y) = try_join(trunc(&mut c1, &pf, f), trunc(&mut c2, &pt, td)).await?;
    let (y1sq, w) = pf.split_at(n)?;
    let p2 = mul(&mut ctx, &y1sq, &w).await?;
    let out = lincomb(&[(&big_y, 3u64 << f), (&p2, neg(1))], 0)?;
    trunc(&mut ctx, &out, f + 1).await
}
