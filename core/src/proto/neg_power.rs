//! Negative powers of positive values, (c·2^e / X)^a for a = 1 (reciprocal) and a = 1/2
//! (reciprocal square root), by one polynomial per segment of the magnitude
//! (docs/PROTOCOLS.md, Negative powers by segments).
//!
//! The segments are found by comparisons with public thresholds while every segment's
//! polynomial is evaluated, so the comparisons cost no rounds of their own: one fused round
//! at the end keeps the segment that holds X.

use alloc::vec::Vec;

use crate::engine::{Ctx, try_join, try_join_all};
use crate::error::Error;
use crate::ring::Width;
use crate::share::Shares;

use super::gelu::{encode_at, lincomb, pow2};
use super::maxpool::fused_sums;
use super::mul::{cross_terms, square_trunc};
use super::{lt_thresholds, reshare_trunc, trunc};

/// Fractional bits of u = X/2^j ∈ [1, 2) and of t = u − 3/2 and t². With the fused sum
/// scaled so that its largest term reaches 2^61, the coefficients of the t² factor keep
/// 2^(61 − 2·21) = 2^19 units of their own size, so their rounding stays below 2^−19
/// relative; 2^−21 of u moves u^(−a) by at most 2^−21 relative.
const T_BITS: u32 = 21;

/// Smallest `lo` accepted: from octave 2 on the integer thresholds ⌈2^(i/S)·2^j⌉ and the
/// octave bounds are distinct (in octave 1, ⌈2^(2/3)·2⌉ = 4 = 2^2). Uncut, the integer
/// thresholds put every X in its exact sub-segment; cut keys (lo ≥ 10) blur a bound by at
/// most 2^−9 relative, inside the fits' widening of 2^−8.
const MIN_LO: u32 = 2;

/// Largest `hi` accepted: the comparisons run in Z_2^(hi+2) at most.
const MAX_HI: u32 = 61;

/// The comparisons read X truncated by lo − 9 bits: the truncation's unit is then at most
/// 2^−9 of any X in range, so a misread segment is off by at most 2^−9 relative (plus
/// 2^−lo for the integer thresholds), inside the fits' widening of 2^−8, and every
/// threshold of the lowest octave still has 9 bits.
const CUT_MARGIN_BITS: u32 = 9;

/// The exponent −a of a [`NegPower`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exponent {
    /// X^(−1): three sub-segments per octave.
    One,
    /// X^(−1/2): two sub-segments per octave.
    Half,
}

/// Degree-4 polynomials in t = u − 3/2 of least maximum relative error to u^(−1) on the
/// sub-segments [2^(i/3), 2^((i+1)/3)] of [1, 2), each widened by 2^−8 (fitted offline by
/// `python3 scripts/fit-neg-powers.py`, Lawson's algorithm): worst relative error 1.54e-6.
const RECIP_COEFFS: [[f64; 5]; 3] = [
    [
        0.6688370742534405,
        -0.4144758946635977,
        0.4548970247573373,
        0.1952542873463592,
        0.5537122618851972,
    ],
    [
        0.6666673322834629,
        -0.4444687288703474,
        0.2958964902028702,
        -0.1944677457807286,
        0.174366759920457,
    ],
    [
        0.6666318758457338,
        -0.4435707621421102,
        0.28828691662838996,
        -0.16279831055852162,
        0.05491172924220938,
    ],
];

/// As [`RECIP_COEFFS`] for u^(−1/2) on [1, √2] and [√2, 2]: worst relative error 2.75e-6.
const RSQRT_COEFFS: [[f64; 5]; 2] = [
    [
        0.8165702926841886,
        -0.270415608043153,
        0.15055822255241397,
        -0.023547057226727452,
        0.12220155479603712,
    ],
    [
        0.8164977620731692,
        -0.2722047955080596,
        0.1358417163055216,
        -0.07082050672589618,
        0.025678011100060634,
    ],
];

/// y = (c·2^e / X)^a for raw positive X: the raw output of a reciprocal or reciprocal
/// square root at the caller's scale.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NegPower {
    /// −a.
    pub(crate) exponent: Exponent,
    /// Public integer factor c ≥ 1.
    pub(crate) c: u64,
    /// Power of two e.
    pub(crate) e: i32,
}

impl NegPower {
    /// The sub-segment polynomials of this exponent.
    fn coeffs(&self) -> &'static [[f64; 5]] {
        match self.exponent {
            Exponent::One => &RECIP_COEFFS,
            Exponent::Half => &RSQRT_COEFFS,
        }
    }

    /// The scales K_lo..=K_hi of the octaves, after checking the parameters (errors name
    /// the public functions, which are what callers see).
    fn check(&self, lo: u32, hi: u32) -> Result<Vec<f64>, Error> {
        if lo < MIN_LO || lo > hi || hi > MAX_HI {
            return Err(Error::misuse(
                "reciprocal and rsqrt need 2 <= lo <= hi <= 61 for inputs 2^lo <= X < 2^(hi+1)",
            ));
        }
        if self.c == 0 {
            return Err(Error::misuse("rsqrt_scaled needs a scale c >= 1"));
        }
        let scales = (lo..=hi)
            .map(|j| self.octave_scale(j))
            .collect::<Result<Vec<f64>, Error>>()?;
        // u ≥ 1 − 2^−8 on every widened sub-segment, so u^(−a) < 1.01 and the largest
        // output is below 1.01·K_lo.
        if scales
            .first()
            .is_none_or(|k| *k * 1.01 >= (1u64 << 60) as f64)
        {
            return Err(Error::misuse(
                "reciprocal or rsqrt output for X = 2^lo does not fit the ring: raise lo or lower extra (or c)",
            ));
        }
        Ok(scales)
    }

    /// K_j = (c·2^(e − j))^a, the output for u = 1 in octave j.
    fn octave_scale(&self, j: u32) -> Result<f64, Error> {
        let shift = self.e - i32::try_from(j).map_err(|_| Error::bug("octave index"))?;
        let too_big = || Error::misuse("negative power: scale out of range");
        match self.exponent {
            Exponent::One => Ok(self.c as f64 * pow2_signed(shift).ok_or_else(too_big)?),
            Exponent::Half => {
                // √c to 2^−30 absolute from the exact integer square root of c·2^60.
                let root = (u128::from(self.c) << 60).isqrt() as f64 / (1u64 << 30) as f64;
                let half = pow2_signed(shift.div_euclid(2)).ok_or_else(too_big)?;
                let odd = if shift.rem_euclid(2) == 1 {
                    core::f64::consts::SQRT_2
                } else {
                    1.0
                };
                Ok(root * half * odd)
            }
        }
    }
}

/// 2^e as an `f64` for |e| ≤ 126.
fn pow2_signed(e: i32) -> Option<f64> {
    let p = pow2(e.unsigned_abs())?;
    Some(if e < 0 { 1.0 / p } else { p })
}

/// `round(v · 2^e)` as a ring value, for any sign of e.
fn encode_signed(v: f64, e: i32) -> Result<u64, Error> {
    let scaled = v * pow2_signed(e).ok_or(Error::misuse("negative power: scale out of range"))?;
    encode_at(scaled, 0)
}

/// (c·2^e / X)^a for raw X with 2^lo ≤ X < 2^(hi+1), a raw output (docs/PROTOCOLS.md,
/// Negative powers by segments).
///
/// Method. The range splits into octaves [2^j, 2^(j+1)), j = lo..=hi, and each octave into
/// S sub-segments [2^(j + i/S), 2^(j + (i+1)/S)) (S = 3 for a = 1, 2 for a = 1/2). With
/// u = X/2^j ∈ [1, 2) and t = u − 3/2, the output on sub-segment (j, i) is
/// K_j·P_i(t), K_j = (c·2^(e−j))^a, P_i the degree-4 fit of u^(−a) on that sub-segment
/// (relative error ≤ 1.54e-6 for a = 1, ≤ 2.75e-6 for a = 1/2).
/// - Branch A: X cut by lo − 9 bits (one truncation; none for lo ≤ 9), then arithmetic
///   bits [X < θ] for the S·(hi − lo + 1) − 1 thresholds θ (the octave bounds 2^j and
///   ⌈2^(i/S)·2^j⌉, on the cut scale) by one [`lt_thresholds`] in Z_2^(hi+2−cut)
///   (3 rounds); consecutive differences are the one-hot e_s of X's sub-segment. The cut
///   moves a segment's bounds by at most 2^−9 relative, inside the fits' widening.
/// - Branch B, concurrently: per octave, u at 21 fractional bits (exact left shift for
///   j ≤ 21, else one truncation of X by j − 21), t = u − 3/2 (local) and t² (product and
///   truncation fused, 2 rounds; one call for all octaves). Per sub-segment, one fused
///   product truncated to the output: K(c_0 + c_1·t) + t²·K(c_2 + c_3·t + c_4·t²), the
///   linear part added to the product's local cross terms, at a scale 2^D chosen per
///   segment so that K_j·2^D < 2^61 (2 rounds).
/// - Join: Σ_s e_s·y_s, one fused sum of products (1 round, exact: e_s are integers).
///
/// Products for segments that do not hold X may wrap the ring; their selector is 0, so
/// they vanish exactly.
///
/// **Range** (contract): 2^lo ≤ X < 2^(hi+1); below 2^lo the lowest segment's polynomial
/// is used, at or above 2^(hi+1) the comparisons wrap: both give wrong results silently.
/// **Error**: relative error of the fit, plus 2^−21·a from u's rounding, plus a few units
/// of the output's last place (the fused truncation, the rounding of K·c_0).
///
/// Rounds: 1 (the key's cut) + 3 (comparisons) beside 1 (u, when some octave lies above
/// 2^21) + 2 (t²) + 2 (each segment's value), then 1 (the selection): **6**, or 5 when
/// hi ≤ 21. Bits per element, summed over the parties, with trunc(d) = 64 + 4d, cut =
/// max(0, lo − 9) and m = S·(hi − lo + 1) − 1 thresholds: trunc(cut) if cut > 0 +
/// [`super::lt_thresholds_bits`]`(hi + 2 − cut, m)` + Σ_(j > 21) trunc(j − 21) (u) +
/// (hi − lo + 1)·(128 + trunc(21)) (t²) + S·Σ_j (128 + trunc(D_j)) (segments) + 192
/// (join), D_j the largest D ≤ 62 with K_j·2^D < 2^61 ([`reciprocal_bits`],
/// [`rsqrt_bits`]).
///
/// # Errors
/// `Misuse` unless 2 ≤ lo ≤ hi ≤ 61 and c ≥ 1, or if the output for X = 2^lo would not fit
/// below 2^60; `Protocol` if a message is malformed.
pub(crate) async fn neg_power(
    ctx: &mut Ctx,
    x: &Shares,
    lo: u32,
    hi: u32,
    power: NegPower,
) -> Result<Shares, Error> {
    let scales = power.check(lo, hi)?;
    let coeffs = power.coeffs();
    let subs = coeffs.len();
    let octaves: Vec<u32> = (lo..=hi).collect();
    // The comparisons read X cut by `cut` bits, in a ring as much narrower.
    let cut = lo.saturating_sub(CUT_MARGIN_BITS);
    let thresholds = thresholds(lo, hi, subs, cut)?;
    let width = Width::new(hi + 2 - cut).ok_or(Error::bug("comparison width"))?;
    let mut ctx = ctx.fork();
    let me = x.party();
    let n = x.len();

    let (mut ca, mut cb) = (ctx.fork(), ctx.fork());
    let branch_a = async {
        if cut == 0 {
            return lt_thresholds(&mut ca, x, &thresholds, width).await;
        }
        let key = trunc(&mut ca, x, cut).await?;
        lt_thresholds(&mut ca, &key, &thresholds, width).await
    };
    let branch_b = async {
        let c = &mut cb;
        // u_j at T_BITS fractional bits, then t_j = u_j − 3/2.
        let mut forks: Vec<Ctx> = octaves.iter().map(|_| c.fork()).collect();
        let futs = forks.iter_mut().zip(&octaves).map(|(cj, &j)| async move {
            if j <= T_BITS {
                Ok(x.scale(1u64 << (T_BITS - j)))
            } else {
                trunc(cj, x, j - T_BITS).await
            }
        });
        let us = try_join_all(futs.collect::<Vec<_>>()).await?;
        let three_halves = 3u64 << (T_BITS - 1);
        let ts: Vec<Shares> = us
            .iter()
            .map(|u| u.add_public_scalar(three_halves.wrapping_neg()))
            .collect();
        let t_refs: Vec<&Shares> = ts.iter().collect();
        let t2_all = square_trunc(c, &Shares::concat(&t_refs)?, T_BITS).await?;
        let t2s = (0..ts.len())
            .map(|o| t2_all.slice(o * n..(o + 1) * n))
            .collect::<Result<Vec<_>, _>>()?;
        // One fused product per sub-segment, truncated to the raw output.
        let mut parts = Vec::with_capacity(octaves.len() * subs);
        for ((t, t2), &k) in ts.iter().zip(&t2s).zip(&scales) {
            for p in coeffs {
                parts.push(segment_terms(t, t2, k, p)?);
            }
        }
        let mut forks: Vec<Ctx> = parts.iter().map(|_| c.fork()).collect();
        let futs = forks
            .iter_mut()
            .zip(parts)
            .map(|(cs, (z, d))| reshare_trunc(cs, z, d));
        try_join_all(futs.collect::<Vec<_>>()).await
    };
    let (below, values) = try_join(branch_a, branch_b).await?;

    // e_0 = l_0, e_s = l_s − l_(s−1), e_last = 1 − l_last: the one-hot of X's sub-segment.
    let segments = values.len();
    if below.len() + 1 != segments {
        return Err(Error::bug("segment count"));
    }
    let one = Shares::zeros(me, n).add_public_scalar(1);
    let upper = below.iter().chain(core::iter::once(&one));
    let lower = core::iter::once(None).chain(below.iter().map(Some));
    let selectors = upper
        .zip(lower)
        .map(|(u, l)| match l {
            Some(l) => u.sub(l),
            None => Ok(u.clone()),
        })
        .collect::<Result<Vec<Shares>, Error>>()?;
    let sel_refs: Vec<&Shares> = selectors.iter().collect();
    let val_refs: Vec<&Shares> = values.iter().collect();
    let out_of: Vec<usize> = (0..segments).flat_map(|_| 0..n).collect();
    fused_sums(
        &mut ctx,
        &Shares::concat(&sel_refs)?,
        &Shares::concat(&val_refs)?,
        &out_of,
        n,
    )
    .await
}

/// The thresholds of [`neg_power`] on keys cut by `cut` bits, ascending: for each octave
/// j, ⌈2^(i/S)·2^(j − cut)⌉ for i = 1..S, then 2^(j + 1 − cut) unless j = hi.
fn thresholds(lo: u32, hi: u32, subs: usize, cut: u32) -> Result<Vec<u64>, Error> {
    let mut out = Vec::with_capacity(subs * (hi - lo + 1) as usize);
    for j in lo - cut..=hi - cut {
        let base = pow2(j).ok_or(Error::bug("octave"))?;
        for i in 1..subs {
            // 2^(i/S) for the two sub-segment counts in use.
            let ratio = match (subs, i) {
                (2, _) => core::f64::consts::SQRT_2,
                (3, 1) => 1.259_921_049_894_873_2,
                (3, _) => 1.587_401_051_968_199_4,
                _ => return Err(Error::bug("sub-segments per octave")),
            };
            let v = ratio * base;
            // Ceiling; v < 2^62 so the cast is exact for the integer part.
            let fl = v as u64;
            out.push(if (fl as f64) < v { fl + 1 } else { fl });
        }
        if j < hi - cut {
            out.push(1u64 << (j + 1));
        }
    }
    if out.windows(2).any(|w| w.first() >= w.get(1)) {
        return Err(Error::bug("thresholds not increasing"));
    }
    Ok(out)
}

/// One sub-segment's 3-of-3 terms and truncation: K(c_0 + c_1·t) + t²·K(c_2 + c_3·t +
/// c_4·t²) at 2^D with D the largest scale keeping K·2^D below 2^61 (at most 62), t and t²
/// at [`T_BITS`].
fn segment_terms(t: &Shares, t2: &Shares, k: f64, p: &[f64; 5]) -> Result<(Vec<u64>, u32), Error> {
    let [c0, c1, c2, c3, c4] = *p;
    let d = segment_scale(k);
    let tb = T_BITS as i32;
    // G = K(c_2 + c_3 t + c_4 t²) at D − T_BITS; the linear part at D.
    let g = lincomb(
        &[
            (t, encode_signed(k * c3, d - 2 * tb)?),
            (t2, encode_signed(k * c4, d - 2 * tb)?),
        ],
        encode_signed(k * c2, d - tb)?,
    )?;
    let linear = t
        .scale(encode_signed(k * c1, d - tb)?)
        .add_public_scalar(encode_signed(k * c0, d)?);
    let mut z = cross_terms(t2, &g);
    for (zk, lk) in z.iter_mut().zip(linear.a()) {
        *zk = zk.wrapping_add(*lk);
    }
    let d = u32::try_from(d).map_err(|_| Error::bug("segment scale"))?;
    Ok((z, d))
}

/// D of a segment with output scale K: the largest D ≤ 62 with K·2^D < 2^61, so that the
/// fused sum (at most 1.01·K·2^D) stays below 2^62.
fn segment_scale(k: f64) -> i32 {
    let mut d = 62i32;
    while d > 1 && k * pow2_signed(d).unwrap_or(f64::INFINITY) >= (1u64 << 61) as f64 {
        d -= 1;
    }
    d
}

/// Bits per element of [`neg_power`], summed over the parties (the formula of its doc).
fn neg_power_bits(lo: u32, hi: u32, power: NegPower) -> Result<u64, Error> {
    let scales = power.check(lo, hi)?;
    let trunc_bits = |d: u32| 64 + 4 * u64::from(d);
    let subs = power.coeffs().len() as u64;
    let octaves = u64::from(hi - lo + 1);
    let cut = lo.saturating_sub(CUT_MARGIN_BITS);
    let mut bits = if cut > 0 { trunc_bits(cut) } else { 0 };
    bits += super::lt_thresholds_bits(hi + 2 - cut, subs * octaves - 1);
    bits += (lo..=hi)
        .filter(|&j| j > T_BITS)
        .map(|j| trunc_bits(j - T_BITS))
        .sum::<u64>();
    bits += octaves * (128 + trunc_bits(T_BITS));
    for &k in &scales {
        let d = segment_scale(k);
        let d = u32::try_from(d).map_err(|_| Error::bug("segment scale"))?;
        bits += subs * (128 + trunc_bits(d));
    }
    Ok(bits + 192)
}

/// Bits per element of [`reciprocal_extra`] at f fractional bits, summed over the three
/// parties (a third each with role rotation over many elements).
///
/// # Errors
/// As [`reciprocal_extra`]'s parameter checks.
pub fn reciprocal_bits(f: u32, lo: u32, hi: u32, extra: u32) -> Result<u64, Error> {
    neg_power_bits(lo, hi, reciprocal_power(f, extra)?)
}

/// Bits per element of [`rsqrt_scaled`] at f fractional bits, summed over the three
/// parties (a third each with role rotation over many elements).
///
/// # Errors
/// As [`rsqrt_scaled`]'s parameter checks.
pub fn rsqrt_bits(f: u32, lo: u32, hi: u32, extra: u32, c: u64) -> Result<u64, Error> {
    neg_power_bits(lo, hi, rsqrt_power(f, extra, c)?)
}

/// The [`NegPower`] of [`reciprocal_extra`]: 2^(2f + extra)/X.
fn reciprocal_power(f: u32, extra: u32) -> Result<NegPower, Error> {
    let e = i32::try_from(2 * u64::from(f) + u64::from(extra))
        .map_err(|_| Error::misuse("reciprocal: extra too large"))?;
    Ok(NegPower {
        exponent: Exponent::One,
        c: 1,
        e,
    })
}

/// The [`NegPower`] of [`rsqrt_scaled`]: √(c·2^(3f + 2·extra)/X).
fn rsqrt_power(f: u32, extra: u32, c: u64) -> Result<NegPower, Error> {
    let e = i32::try_from(3 * u64::from(f) + 2 * u64::from(extra))
        .map_err(|_| Error::misuse("rsqrt: extra too large"))?;
    Ok(NegPower {
        exponent: Exponent::Half,
        c,
        e,
    })
}

/// 1/x for positive fixed-point x with 2^lo ≤ X < 2^(hi+1), X = x·2^f the raw value,
/// output at f fractional bits. See [`reciprocal_extra`] (with `extra` = 0).
///
/// Rounds: 6 (5 when hi ≤ 21).
///
/// # Errors
/// As [`reciprocal_extra`].
pub async fn reciprocal(ctx: &mut Ctx, x: &Shares, lo: u32, hi: u32) -> Result<Shares, Error> {
    reciprocal_extra(ctx, x, lo, hi, 0).await
}

/// 1/x for positive fixed-point x with 2^lo ≤ X < 2^(hi+1) (X = x·2^f raw), output at
/// f + `extra` fractional bits: the raw 2^(2f + extra)/X by the segment method of the
/// module (docs/PROTOCOLS.md, Negative powers by segments), three sub-segments per octave.
///
/// **Range** (contract): 2^lo ≤ X < 2^(hi+1); lo ≥ 2.
/// **Error** (measured, tests/max_recip.rs, 10^5 points log-uniform over
/// x ∈ [2^−10, 2^20] and the powers of two with their neighbours, lo = 8, hi = 38):
/// relative error **5.4e-6** with `extra` = 20 (1.54e-6 from the fit, plus 2^−21 from u's
/// rounding, plus a few units of the output's last place); with `extra` = 0, 5.3e-5 where
/// 1/x ≥ 2^−4, below which the f-bit output grid dominates.
///
/// Rounds: 6 whenever hi > 21 (5 otherwise). **Bits** per element, summed over the
/// parties (role rotation: a third each): [`reciprocal_bits`]; lo = 8, hi = 38,
/// extra = 20: **118,150** (79,802 for the 92 comparisons); lo = 17, hi = 22, extra = 12
/// (the softmax's sums of rows of 32): **17,091**. Both pinned in tests/max_recip.rs.
///
/// # Errors
/// `Misuse` unless 2 ≤ lo ≤ hi ≤ 61, or if 2^(2f + extra − lo) does not fit below 2^60;
/// `Protocol` if a message is malformed.
pub async fn reciprocal_extra(
    ctx: &mut Ctx,
    x: &Shares,
    lo: u32,
    hi: u32,
    extra: u32,
) -> Result<Shares, Error> {
    let power = reciprocal_power(ctx.fixed().frac_bits(), extra)?;
    neg_power(ctx, x, lo, hi, power).await
}

/// 1/√x for positive fixed-point x with 2^lo ≤ x·2^f < 2^(hi+1) (raw range), with the
/// output at f + `extra` fractional bits. See [`rsqrt_scaled`] (with c = 1).
///
/// Rounds: 6 (5 when hi ≤ 21).
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
/// and a public integer c ≥ 1 folded into the segments' scales for free (LayerNorm uses
/// c = d·2^8 on a sum of squares kept at f + 8 bits, so that the result is 1/√(var + ε)).
/// Output at f + `extra` fractional bits: the raw √(c·2^(3f + 2·extra)/X) by the segment
/// method of the module (docs/PROTOCOLS.md, Negative powers by segments), two
/// sub-segments per octave.
///
/// **Range** (contract): 2^lo ≤ X < 2^(hi+1); lo ≥ 2.
/// **Error** (measured, tests/gelu_layernorm.rs, 10^5 points of x ∈ [2^−10, 2^20]):
/// relative error **3.4e-6** with `extra` = 12 (2.75e-6 from the fit, plus 2^−22 from u's
/// rounding, plus a few units of the output's last place); with `extra` = 0, 4.4e-5 where
/// the output is ≥ 2^−4, below which the f-bit output grid dominates.
///
/// Rounds: 6 whenever hi > 21 (5 otherwise). **Bits** per element, summed over the
/// parties: [`rsqrt_bits`]; lo = 8, hi = 38, extra = 0: **86,466**; LayerNorm's (lo = 18,
/// hi = 61, extra = 8, c = 768·2^8): 138,230; RMSNorm's (lo = 13, hi = 60, extra = 8,
/// c = 576·2^3): 155,026. Pinned in tests/gelu_layernorm.rs, tests/norm_activations.rs and
/// tests/cost_report.rs.
///
/// # Errors
/// `Misuse` unless 2 ≤ lo ≤ hi ≤ 61 and c ≥ 1, or if the output for X = 2^lo does not fit
/// below 2^60; `Protocol` if a message is malformed.
pub async fn rsqrt_scaled(
    ctx: &mut Ctx,
    x: &Shares,
    lo: u32,
    hi: u32,
    extra: u32,
    c: u64,
) -> Result<Shares, Error> {
    let power = rsqrt_power(ctx.fixed().frac_bits(), extra, c)?;
    neg_power(ctx, x, lo, hi, power).await
}
