//! Protocols built here from public core protocols until they move into
//! `puma_core::proto` (RMSNorm with input scaling, the precise SiLU).

use puma_core::proto::ExpApprox;
use puma_core::{Ctx, Error, Shares, proto};

/// Extra fractional bits of r = 1/√(mean(x²) + ε) (f + 8 in total).
const R_EXTRA_BITS: u32 = 8;

/// Extra fractional bits of xγ (f + 4 in total), so that the final product sits at
/// 2f + 12 bits as in LayerNorm.
const XG_EXTRA_BITS: u32 = 4;

/// Most fractional bits of a square beyond f in `rms_norm_rows`.
const MAX_SQUARE_EXTRA_BITS: u32 = 8;

/// The raw fixed-point encoding of `x` at `bits` fractional bits (round to nearest).
fn encode_bits(x: f64, bits: u32) -> Result<u64, Error> {
    let v = (x * (1u64 << bits) as f64).round();
    if !v.is_finite() || v.abs() >= 9.2e18 {
        return Err(Error::misuse("constant does not fit the ring"));
    }
    Ok(v as i64 as u64)
}

/// How `rms_norm_rows` scales its input for a residual bound `bound` at width `d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmsScaling {
    /// x is scaled by 2^−k before it multiplies x: x·trunc(x, k) stays below 2^61 raw.
    pub k: u32,
    /// Fractional bits g ∈ [f, f + 8] of each square x² (held at raw x²·2^g), chosen so
    /// that a row's sum d·bound²·2^g stays below 2^61.
    pub g: u32,
}

impl RmsScaling {
    /// The scaling for rows of width `d` whose entries stay below `bound` in magnitude, at
    /// `f` fractional bits.
    ///
    /// # Errors
    /// `Misuse` if no scaling fits (bound·√d too large to keep f bits of the squares).
    pub fn new(d: usize, bound: f64, f: u32) -> Result<RmsScaling, Error> {
        if !(bound.is_finite() && bound >= 1.0) || d == 0 {
            return Err(Error::misuse(
                "rmsnorm needs a residual bound >= 1 and d > 0",
            ));
        }
        let lb = bound.log2();
        let k = (2.0 * lb + 2.0 * f as f64 - 61.0).ceil().max(0.0) as u32;
        let g = (61.0 - (d as f64).log2() - 2.0 * lb).floor();
        if g < f as f64 {
            return Err(Error::misuse(
                "rmsnorm: residual bound too large for this width at f fractional bits",
            ));
        }
        // At most the 2f − k bits the product carries, and f + 8 (LayerNorm's square
        // precision; more would only inflate rsqrt's scale c = d·2^(g−f)).
        let g = (g as u32).min(2 * f - k).min(f + MAX_SQUARE_EXTRA_BITS);
        Ok(RmsScaling { k, g })
    }
}

/// RMSNorm of each of `rows` rows of length `d`: y = γ ⊙ x / √(mean(x²) + ε).
///
/// **Range.** At f fractional bits a product x·x carries 2f bits: a residual entry of
/// 2.5e4 (SmolLM2's massive activations) gives 2.5e4²·2^36 ≈ 2^65 and wraps Z_2^64. The
/// norm is scale invariant, RMSNorm(x) = RMSNorm(x/s) with ε replaced by ε/s², so the
/// squares are taken of a scaled-down copy: with the public bound B on |x|,
/// [`RmsScaling`] picks k (x·trunc(x, k) ≤ B²·2^(2f−k) < 2^61) and g, the fractional bits
/// of each square after one truncation by 2f − k − g, such that a whole row's sum
/// d·B²·2^g < 2^61 fits the rsqrt's range. The sum is that of x² (no rescaling error),
/// only the second factor of each square is rounded at 2^−(f−k); the rounding is
/// stochastic, so it averages over the row. The mean and ε enter rsqrt through its public
/// scale c = d·2^(g−f): √(c/X) with X = (Σx² + dε)·2^(g−f) is 1/√(mean(x²) + ε), at
/// f + 8 fractional bits.
///
/// **Range** (contract): |x| ≤ bound for every entry; |γ|·√d < 2^14 (the final product
/// xγ·r sits at 2f + 12 bits below 2^62).
///
/// Schedule (all rows share every round): branch A: trunc(x, k) (1), x·trunc(x, k) (1),
/// truncation to g bits (1), row sums plus dε (local), rsqrt (R_LT + 7); branch B:
/// xγ (1), trunc to f + 4 bits (1); then y = trunc(xγ·r, f + 12) (2).
///
/// # Errors
/// `Misuse` for mismatched lengths or a bound/width with no scaling; `Protocol` on a
/// malformed message.
pub async fn rms_norm_rows(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    d: usize,
    gamma: &Shares,
    eps: f64,
    bound: f64,
) -> Result<Shares, Error> {
    let total = rows
        .checked_mul(d)
        .ok_or(Error::misuse("rows·d overflows"))?;
    if d == 0 || x.len() != total || gamma.len() != d {
        return Err(Error::misuse("rmsnorm shapes do not match"));
    }
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    let RmsScaling { k, g } = RmsScaling::new(d, bound, f)?;
    let eps_total = encode_bits(eps * d as f64, g)?;
    if eps <= 0.0 || eps_total == 0 {
        return Err(Error::misuse("rmsnorm needs eps > 0 with d·eps·2^g >= 1"));
    }
    let lo = 63 - eps_total.leading_zeros();
    let hi = 60;
    let c = (d as u64) << (g - f);
    let row_of: Vec<usize> = (0..total).map(|i| i / d).collect();
    let col_of: Vec<usize> = (0..total).map(|i| i % d).collect();

    let (mut ca, mut cb) = (ctx.fork(), ctx.fork());
    let branch_a = async {
        let c_ = &mut ca;
        let xs = if k > 0 {
            proto::trunc(c_, x, k).await?
        } else {
            x.clone()
        };
        let sq = proto::mul(c_, x, &xs).await?;
        let t = (2 * f - k) - g;
        let sq = if t > 0 {
            proto::trunc(c_, &sq, t).await?
        } else {
            sq
        };
        let s = sq.sum_chunks(d)?.add_public_scalar(eps_total);
        proto::rsqrt_scaled(c_, &s, lo, hi, R_EXTRA_BITS, c).await
    };
    let branch_b = async {
        let c_ = &mut cb;
        let p = proto::mul(c_, x, &gamma.gather(&col_of)?).await?;
        proto::trunc(c_, &p, f - XG_EXTRA_BITS).await
    };
    let (r, xg) = puma_core::try_join(branch_a, branch_b).await?;
    let y = proto::mul(&mut ctx, &xg, &r.gather(&row_of)?).await?;
    proto::trunc(&mut ctx, &y, f + XG_EXTRA_BITS + R_EXTRA_BITS).await
}

/// SiLU(x) = x·σ(x) with the logistic σ(x) = e^x/(e^x + e^0): the first entry of a
/// softmax over the pair [x, 0], so that the exponential, its range reduction (the pair's
/// maximum) and the reciprocal of the sum in [1, 2] are those of the softmax protocol
/// ([`proto::softmax_rows_with`], all elements batched as rows of two), then one product
/// with x and a truncation. Built here from public core protocols because
/// [`proto::silu`]'s polynomial is off by 0.014 even at x = 0.
///
/// # Errors
/// As [`proto::softmax_rows_with`]; `Protocol` on a malformed message.
pub async fn silu_precise(ctx: &mut Ctx, x: &Shares, exp: ExpApprox) -> Result<Shares, Error> {
    let n = x.len();
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    let zero = Shares::zeros(x.party(), n);
    // Rows [x_i, 0]: interleave x with zeros.
    let both = Shares::concat(&[x, &zero])?;
    let idx: Vec<usize> = (0..n).flat_map(|i| [i, n + i]).collect();
    let pairs = both.gather(&idx)?;
    let valid = vec![2usize; n];
    let probs = proto::softmax_rows_with(&mut ctx, &pairs, n, 2, &valid, exp).await?;
    let first: Vec<usize> = (0..n).map(|i| 2 * i).collect();
    let sigma = probs.gather(&first)?;
    let y = proto::mul(&mut ctx, x, &sigma).await?;
    proto::trunc(&mut ctx, &y, f).await
}
