//! Reciprocal of positive fixed-point values: normalisation by the top bit, then
//! Goldschmidt iterations (docs/PROTOCOLS.md, Reciprocal; Catrina, Saxena, "Secure Computation with
//! Fixed-Point Numbers", FC 2010).
//!
//! Also home of [`normalize`], the normalisation step shared with other functions of the
//! same shape (rsqrt).

use alloc::vec::Vec;

use crate::engine::{Ctx, try_join, try_join_all};
use crate::error::Error;
use crate::ring::Width;
use crate::share::Shares;

use super::maxpool::fused_sums;
use super::{lt_thresholds, mul, square, trunc};

/// Fractional bits of u in [`reciprocal_extra`] at most: 15·u² must stay below 2^62.
const MAX_U_BITS: u32 = 29;

/// The result of [`normalize`]: for each element, with j the index of X's top bit
/// (2^j ≤ X < 2^(j+1)) and u = X / 2^(j+1) ∈ [0.5, 1):
pub(crate) struct Normalized {
    /// u at `u_bits` fractional bits (see [`normalize`] for its rounding).
    pub(crate) u: Shares,
    /// u² at 2·`u_bits` fractional bits — the exact square of the `u` above — if asked.
    pub(crate) u_sq: Option<Shares>,
    /// u·V_j (raw products, `u_bits` + the table's own fractional bits) for each table V
    /// passed to [`normalize`], in order.
    pub(crate) u_times: Vec<Shares>,
    /// Arithmetic bits l_j = [X < 2^j] for j = lo+1..=hi, one vector each.
    pub(crate) below: Vec<Shares>,
    /// Length of every vector.
    n: usize,
}

impl Normalized {
    /// Σ_j e_j·V_j for a public table V_lo..=V_hi (raw ring values, `hi − lo + 1` entries),
    /// e the one-hot of the top bit. With e_j = l_{j+1} − l_j (l_lo = 0, l_{hi+1} = 1) this
    /// is V_hi + Σ_{j=lo+1}^{hi} l_j·(V_{j−1} − V_j): local, exact (mod 2^64).
    ///
    /// # Errors
    /// `Misuse` if the table has the wrong length.
    pub(crate) fn lookup(&self, table: &[u64]) -> Result<Shares, Error> {
        lookup(&self.below, table, self.u.party(), self.n)
    }
}

fn lookup(
    below: &[Shares],
    table: &[u64],
    me: crate::party::PartyId,
    n: usize,
) -> Result<Shares, Error> {
    if table.len() != below.len() + 1 {
        return Err(Error::misuse(
            "table length does not match the normalisation",
        ));
    }
    let last = *table.last().ok_or(Error::misuse("empty table"))?;
    let mut acc = Shares::zeros(me, n).add_public_scalar(last);
    for (l, w) in below.iter().zip(table.windows(2)) {
        if let [prev, cur] = w {
            let d = prev.wrapping_sub(*cur);
            if d != 0 {
                acc.add_assign(&l.scale(d))?;
            }
        }
    }
    Ok(acc)
}

/// 2^e as a ring value for 0 ≤ e ≤ 63 (else 0: callers check their exponents).
fn pow2(e: i64) -> u64 {
    u32::try_from(e)
        .ok()
        .and_then(|e| 1u64.checked_shl(e))
        .unwrap_or(0)
}

/// Normalisation of positive raw values X with 2^lo ≤ X < 2^(hi+1) (docs/PROTOCOLS.md,
/// Normalisation by the top bit):
/// finds the top bit j of X and returns u = X/2^(j+1) ∈ [0.5, 1) at `u_bits` fractional
/// bits, optionally u², products u·V with public tables V indexed by j, and the bits
/// needed for further table look-ups ([`Normalized::lookup`], local).
///
/// Method. Branch A: arithmetic l_j = [X < 2^j] for j = lo+1..=hi by **one**
/// [`lt_thresholds`] with the public thresholds 2^j in Z_2^(hi+2) (3 rounds, no B2A);
/// h_j = 1 − l_j = [X ≥ 2^j] is monotone in j, so it already is the prefix-OR of X's bits
/// from the top and no A2B or OR scan is needed, and e_j = l_{j+1} − l_j is the one-hot of
/// the top bit.
/// Branch B, concurrently: the versions of X that the look-ups select. For j < `u_bits`,
/// u = X·2^(u_bits−1−j) is exact; for j ≥ `u_bits` it needs a right shift by
/// k = j + 1 − `u_bits`, so X_k = trunc(X, k) for k = max(1, lo + 1 − u_bits)..=hi + 1 −
/// u_bits are computed in one round (and their squares in a second one if asked). Then
/// **one** fused round: u = X·A + Σ_k X_k·e_{u_bits−1+k} (A the look-up of the exact
/// scalings), u² = X²·A² + Σ_k X_k²·e_{u_bits−1+k}, u·V = X·(A·V) + Σ_k X_k·(e·V) — sums of
/// products of shares with look-ups, each reshared once. Products whose selector is 0 may
/// wrap (X² for large X): they are exact zeros in the ring.
///
/// Rounding: u is exact for X < 2^`u_bits`; otherwise u = ⌊X/2^k⌋ + {0, 1} (relative
/// error ≤ 2^(1−u_bits); u may reach 1.0). u² is the exact square of that u.
///
/// **Range** (contract): 2^lo ≤ X < 2^(hi+1). Below 2^lo the top bit is taken as lo; at or
/// above 2^(hi+1) the comparisons in Z_2^(hi+2) wrap: both give wrong results silently.
///
/// Rounds: max(R_A, R_B) + 1 with R_A = 3 ([`super::LT_THRESHOLDS_ROUNDS`]; 0 if lo = hi)
/// and R_B = [some X_k needed] + [square] ≤ 2: 3 + 1 = 4 whenever lo < hi, whatever the
/// range (lo = 8, hi = 38: 4, where the carry tree and its B2A took 7 + 1 + 1 = 9).
/// Bits per element (summed over the parties), m = hi − lo, k' = hi + 2:
/// [`super::lt_thresholds_bits`]`(k', m)` = 2k' + (k' − 1)·W + m·(2k'·W + 384), W the bits
/// of the smallest prime above k' (comparisons; 26234 at k' = 40, m = 30) + Σ_k (64 + 4k)
/// (shifted versions) + 192·(number of versions) if squared + 192·(1 + [square] + tables).
///
/// # Errors
/// `Misuse` unless lo ≤ hi ≤ 61, 1 ≤ u_bits ≤ 31 and every table has hi − lo + 1 entries;
/// `Protocol` if a message is malformed.
pub(crate) async fn normalize(
    ctx: &mut Ctx,
    x: &Shares,
    lo: u32,
    hi: u32,
    u_bits: u32,
    want_square: bool,
    tables: &[&[u64]],
) -> Result<Normalized, Error> {
    if lo > hi || hi > 61 {
        return Err(Error::misuse("normalisation needs lo <= hi <= 61"));
    }
    if !(1..=31).contains(&u_bits) {
        return Err(Error::misuse("u needs 1..=31 fractional bits"));
    }
    let entries = (hi - lo + 1) as usize;
    if tables.iter().any(|t| t.len() != entries) {
        return Err(Error::misuse(
            "table length does not match the normalisation",
        ));
    }
    let mut ctx = ctx.fork();
    let me = x.party();
    let n = x.len();
    let width = Width::new(hi + 2).ok_or(Error::misuse("normalisation range too wide"))?;
    let m = (hi - lo) as usize;
    // Shifts k = j + 1 − u_bits needed by some j in lo..=hi.
    let k_first = (lo + 1).saturating_sub(u_bits).max(1);
    let k_last = (hi + 1).saturating_sub(u_bits);
    let shifts: Vec<u32> = (k_first..=k_last).collect();
    let exact_used = lo < u_bits;

    let (mut ca, mut cb) = (ctx.fork(), ctx.fork());
    let branch_a = async {
        if m == 0 {
            return Ok(Vec::new());
        }
        let powers: Vec<u64> = (lo + 1..=hi).map(|j| 1u64 << j).collect();
        lt_thresholds(&mut ca, x, &powers, width).await
    };
    let branch_b = async {
        let mut forks: Vec<Ctx> = shifts.iter().map(|_| cb.fork()).collect();
        let futs: Vec<_> = forks
            .iter_mut()
            .zip(&shifts)
            .map(|(c, &k)| trunc(c, x, k))
            .collect();
        let versions = try_join_all(futs).await?;
        let squares = if want_square {
            let mut parts: Vec<&Shares> = Vec::with_capacity(versions.len() + 1);
            if exact_used {
                parts.push(x);
            }
            parts.extend(versions.iter());
            if parts.is_empty() {
                Vec::new()
            } else {
                let sq = square(&mut cb, &Shares::concat(&parts)?).await?;
                (0..parts.len())
                    .map(|k| sq.slice(k * n..(k + 1) * n))
                    .collect::<Result<Vec<_>, _>>()?
            }
        } else {
            Vec::new()
        };
        Ok::<_, Error>((versions, squares))
    };
    let (below, (versions, squares)) = try_join(branch_a, branch_b).await?;

    // Look-up tables per version: A_j = 2^(u_bits−1−j) for j < u_bits (exact version),
    // E^k_j = [j = u_bits − 1 + k] for the shifted version X_k.
    let js: Vec<u32> = (lo..=hi).collect();
    let a_table: Vec<u64> = js
        .iter()
        .map(|&j| {
            if j < u_bits {
                1u64 << (u_bits - 1 - j)
            } else {
                0
            }
        })
        .collect();
    let e_table =
        |k: u32| -> Vec<u64> { js.iter().map(|&j| u64::from(j + 1 == u_bits + k)).collect() };
    let mul_tables = |t: &[u64], v: &[u64]| -> Vec<u64> {
        t.iter().zip(v).map(|(a, b)| a.wrapping_mul(*b)).collect()
    };
    let look = |t: &[u64]| lookup(&below, t, me, n);

    // Outputs: u, then u² (if asked), then u·V for each table.
    let mut left: Vec<Shares> = Vec::new();
    let mut right: Vec<Shares> = Vec::new();
    let mut out_of: Vec<usize> = Vec::new();
    let mut push = |l: &Shares, r: Shares, o: usize| {
        left.push(l.clone());
        right.push(r);
        out_of.extend((0..n).map(|i| o * n + i));
    };
    let mut n_out = 0usize;
    // u
    if exact_used {
        push(x, look(&a_table)?, n_out);
    }
    for (v, &k) in versions.iter().zip(&shifts) {
        push(v, look(&e_table(k))?, n_out);
    }
    n_out += 1;
    // u²
    if want_square {
        let mut sq = squares.iter();
        if exact_used {
            let x2 = sq.next().ok_or(Error::bug("missing square"))?;
            push(x2, look(&mul_tables(&a_table, &a_table))?, n_out);
        }
        for &k in &shifts {
            let v2 = sq.next().ok_or(Error::bug("missing square"))?;
            push(v2, look(&e_table(k))?, n_out);
        }
        n_out += 1;
    }
    // u·V
    for t in tables {
        if exact_used {
            push(x, look(&mul_tables(&a_table, t))?, n_out);
        }
        for (v, &k) in versions.iter().zip(&shifts) {
            push(v, look(&mul_tables(&e_table(k), t))?, n_out);
        }
        n_out += 1;
    }
    let lrefs: Vec<&Shares> = left.iter().collect();
    let rrefs: Vec<&Shares> = right.iter().collect();
    let all = fused_sums(
        &mut ctx,
        &Shares::concat(&lrefs)?,
        &Shares::concat(&rrefs)?,
        &out_of,
        n_out * n,
    )
    .await?;
    let mut outs = (0..n_out)
        .map(|o| all.slice(o * n..(o + 1) * n))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter();
    let u = outs.next().ok_or(Error::bug("missing u"))?;
    let u_sq = if want_square {
        Some(outs.next().ok_or(Error::bug("missing u²"))?)
    } else {
        None
    };
    Ok(Normalized {
        u,
        u_sq,
        u_times: outs.collect(),
        below,
        n,
    })
}

/// 1/x for positive fixed-point x with 2^lo ≤ X < 2^(hi+1), X = x·2^f the raw value,
/// output at f fractional bits. See [`reciprocal_extra`] (with `extra` = 0).
///
/// Rounds: 9 whenever lo < hi (e.g. lo = 8, hi = 38, i.e. x ∈ [2^−10, 2^20]).
///
/// # Errors
/// As [`reciprocal_extra`].
pub async fn reciprocal(ctx: &mut Ctx, x: &Shares, lo: u32, hi: u32) -> Result<Shares, Error> {
    reciprocal_extra(ctx, x, lo, hi, 0).await
}

/// The internal precisions of [`reciprocal_extra`] for one (f, lo, hi, extra).
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Fractional bits of u.
    u_bits: u32,
    /// Fractional bits of the Goldschmidt errors e0, e1.
    e_bits: u32,
    /// Guard bits of Y beyond the output's f + extra (0: the last step adds a truncated
    /// correction to Y1 instead of truncating Y1 itself).
    guard: u32,
    /// Y0 = 15·(1.5 − u)·T' / 2^y_shift when positive; T' = 2^(hi−j)·2^t_exp.
    y_shift: u32,
    /// Exponent offset of the table T'.
    t_exp: u32,
}

fn plan(f: u32, lo: u32, hi: u32, extra: u32) -> Result<Plan, Error> {
    if lo > hi || hi > 61 {
        return Err(Error::misuse("reciprocal needs lo <= hi <= 61"));
    }
    let d = i64::from(hi - lo);
    if d > 32 {
        return Err(Error::misuse("reciprocal range wider than 2^32"));
    }
    let (f, hi_i, extra_i) = (i64::from(f), i64::from(hi), i64::from(extra));
    let u_bits = (i64::from(MAX_U_BITS)).min(58 - d);
    // Precision of Y (and of the output) at the smallest outputs (j = hi), in bits.
    let p_y = f + extra_i + f - 1 - hi_i;
    // The products Y·e must stay below 2^62: with Y < 2^(p_y + d + 1) and |e| ≤ 2^−4 this
    // is p_y + guard + e_bits ≤ 64 − d; with Y·(1 + e) in one truncation, ≤ 61 − d.
    let budget = 61 - d - p_y;
    let (guard, e_bits) = if budget >= 24 {
        let g = (budget - 20).min(8);
        (g, (budget - g).min(28))
    } else {
        (0, (64 - d - p_y).min(28))
    };
    if e_bits < 16 {
        return Err(Error::misuse(
            "reciprocal: too many extra output bits for this range",
        ));
    }
    // Y0 = (15/8)(1.5 − u)·2^(p_y + guard + hi − j) = 15·(1.5 − u)_raw·T'_j / 2^(u_bits + 3).
    let shift = p_y + guard - u_bits - 3;
    let (t_exp, y_shift) = if shift >= 0 { (shift, 0) } else { (0, -shift) };
    // Output and intermediate magnitudes: 2^(t_exp + d) tables, Y0 below 2^62.
    if t_exp + d + u_bits + 4 > 62 || y_shift > 62 || p_y + guard + d + 1 > 62 {
        return Err(Error::misuse("reciprocal output does not fit the ring"));
    }
    let to_u32 = |v: i64| u32::try_from(v).map_err(|_| Error::bug("reciprocal plan"));
    Ok(Plan {
        u_bits: to_u32(u_bits)?,
        e_bits: to_u32(e_bits)?,
        guard: to_u32(guard)?,
        y_shift: to_u32(y_shift)?,
        t_exp: to_u32(t_exp)?,
    })
}

/// 1/x for positive fixed-point x with 2^lo ≤ X < 2^(hi+1) (X = x·2^f raw), output at
/// f + `extra` fractional bits.
///
/// Method (docs/PROTOCOLS.md, Reciprocal; Catrina–Saxena 2010 with Goldschmidt's iteration):
/// 1. normalisation (`normalize`, crate-internal): X = u·2^(j+1), u ∈ [0.5, 1), with u, u² and u·T' (T'_j a power of two
///    that carries 2^(f−1−j)) from one fused round after the comparisons (one
///    [`lt_thresholds`] with the thresholds 2^j, 3 rounds).
/// 2. Initial guess y0 = (15/8)(1.5 − u) (|e0| ≤ 1/16 on [0.5, 1]), so that
///    e0 = 1 − u·y0 = 1 − (15/8)(1.5u − u²) and Y0 = y0·T = (15/8)(1.5·T' − u·T')
///    are **linear** in (u, u², u·T'): one truncation each, in one round.
/// 3. Goldschmidt: {Y1 = Y0 + Y0·e0, e1 = e0²} (mul + trunc), then
///    Y2 = Y1·(1 + e1 + c) (mul + trunc). Y2 = (T/u)·(1 − e0⁴) + c·(T/u)(1 − e0²), and
///    c = 2^−17 (half of max e0⁴ = 2^−16) centres the one-sided error: ±7.7e-6.
///
/// Internal precisions are chosen from (lo, hi, extra) so that every truncated value stays
/// below 2^62: u at min(29, 58 − (hi − lo)) bits, e at up to 28 bits, Y with up to 8 guard
/// bits (the last step then truncates Y1·(2^e + e1 + c) once), table entries exact powers
/// of two.
///
/// **Range** (contract): 2^lo ≤ X < 2^(hi+1); hi − lo ≤ 32.
/// **Error** (measured, tests/max_recip.rs, 10^5 points log-uniform over
/// x ∈ [2^−10, 2^20] and the powers of two with their neighbours, lo = 8, hi = 38):
/// relative error ≤ 1e-4 everywhere with `extra` = 20 (2.3e-5 measured); with
/// `extra` = 0 the f = 18 output grid limits small outputs (≤ 1e-4 relative where
/// 1/x ≥ 2^−4). Analytically: ±7.7e-6 from the iteration plus at most a few units of
/// 2^−(e bits) and of the last place of Y.
///
/// Rounds: 4 (the normalisation) + 5 = **9** whenever lo < hi, whatever the range —
/// lo = 8, hi = 38 (k' = 40) and the softmax sums, lo = 17, hi = 23 (k' = 25), alike (14
/// and 13 with the carry-tree comparison and its B2A).
/// **Bits** per element, summed over the parties (role rotation: a third each), with
/// m = hi − lo, k' = hi + 2, trunc(d) = 64 + 4d bits, u, e, g the bits chosen above:
/// - comparisons: [`super::lt_thresholds_bits`]`(k', m)` = 2k' + (k' − 1)·W +
///   m·(2k'·W + 384), W the bits of the smallest prime above k';
/// - X versions: trunc(k) for each shift k = max(1, lo + 1 − u)..=hi + 1 − u, and one
///   square (192) per version, X itself included when lo < u;
/// - fused round (u, u², u·T'): 3·192; trunc(2u + 3 − e) for e0, trunc(u + 3 − p) for Y0
///   when positive (p = 2f + extra − 1 − hi + g);
/// - Goldschmidt: 2·192 + 2·trunc(e), then 192 + trunc(e + g).
///
/// lo = 8, hi = 38, extra = 20 (u = 28, e = 17, g = 0; k' = 40, W = 6): 26234 +
/// (64·11 + 4·66) + 12·192 + 3·192 + 232 + 120 + (384 + 264) + 324 = **31406 bits**
/// (= 1308.58 bytes per party and element); lo = 17, hi = 23, extra = 12 (u = 29, e = 23,
/// g = 8, softmax sums of rows of 32): **6034 bits**, of which 3974 for the comparisons
/// (k' = 25, W = 5). Both pinned in tests/max_recip.rs.
///
/// # Errors
/// `Misuse` unless lo ≤ hi ≤ 61 with hi − lo ≤ 32, or if `extra` leaves fewer than 16
/// bits for the iteration or the output would not fit the ring; `Protocol` if a message is
/// malformed.
pub async fn reciprocal_extra(
    ctx: &mut Ctx,
    x: &Shares,
    lo: u32,
    hi: u32,
    extra: u32,
) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    let p = plan(f, lo, hi, extra)?;
    let ub = p.u_bits;
    let eb = p.e_bits;
    // T'_j = 2^(t_exp + hi − j).
    let t_table: Vec<u64> = (lo..=hi)
        .map(|j| pow2(i64::from(p.t_exp + hi - j)))
        .collect();
    let norm = normalize(&mut ctx, x, lo, hi, ub, true, &[&t_table]).await?;
    let u = &norm.u;
    let u_sq = norm.u_sq.as_ref().ok_or(Error::bug("missing u²"))?;
    let ut = norm.u_times.first().ok_or(Error::bug("missing u·T"))?;

    // e0 = 1 − (15/8)(1.5u − u²): 15·(3·u·2^(ub−1) − u²) carries 2^(2ub + 3).
    let e_num = u.scale(3u64 << (ub - 1)).sub(u_sq)?.scale(15);
    // Y0 = (15/8)(1.5 − u)·T: 15·(3·T'·2^(ub−1) − u·T') carries 2^(ub + 3 + y_shift).
    let t15 = norm.lookup(
        &t_table
            .iter()
            .map(|t| t.wrapping_mul(45u64 << (ub - 1)))
            .collect::<Vec<_>>(),
    )?;
    let y_num = t15.sub(&ut.scale(15))?;
    let (mut c1, mut c2) = (ctx.fork(), ctx.fork());
    let e_fut = trunc(&mut c1, &e_num, 2 * ub + 3 - eb);
    let y_fut = async {
        if p.y_shift > 0 {
            trunc(&mut c2, &y_num, p.y_shift).await
        } else {
            Ok(y_num.clone())
        }
    };
    let (be0, y0) = try_join(e_fut, y_fut).await?;
    let one_e = 1u64 << eb;
    let e0 = be0.neg().add_public_scalar(one_e);

    // {Y1 = Y0 + Y0·e0, e1 = e0²}.
    let n = x.len();
    let prod = mul(
        &mut ctx,
        &Shares::concat(&[&y0, &e0])?,
        &Shares::concat(&[&e0, &e0])?,
    )
    .await?;
    let prod = trunc(&mut ctx, &prod, eb).await?;
    let (ye0, e1) = prod.split_at(n)?;
    let y1 = y0.add(&ye0)?;

    // Y2 = Y1·(1 + e1 + c), c = 2^−17 at e bits (rounded).
    let c = if eb >= 17 { 1u64 << (eb - 17) } else { 1 };
    if p.guard > 0 {
        let factor = e1.add_public_scalar(one_e.wrapping_add(c));
        let y2 = mul(&mut ctx, &y1, &factor).await?;
        trunc(&mut ctx, &y2, eb + p.guard).await
    } else {
        let corr = mul(&mut ctx, &y1, &e1.add_public_scalar(c)).await?;
        let corr = trunc(&mut ctx, &corr, eb).await?;
        y1.add(&corr)
    }
}

/// The internal plan of [`reciprocal_extra`], for tests of its bit formula.
#[cfg(test)]
mod tests {
    use super::plan;

    #[test]
    fn plans_fit_the_ring() {
        let p = plan(18, 8, 38, 20).unwrap();
        assert_eq!((p.u_bits, p.e_bits, p.guard), (28, 17, 0));
        let p = plan(18, 8, 38, 0).unwrap();
        assert!(p.guard > 0 && p.e_bits >= 20);
        let p = plan(18, 17, 23, 12).unwrap();
        assert_eq!((p.u_bits, p.guard), (29, 8));
        assert!(plan(18, 8, 38, 30).is_err());
        assert!(plan(18, 0, 40, 0).is_err());
        assert!(plan(18, 9, 8, 0).is_err());
    }
}
