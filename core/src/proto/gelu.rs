//! Piecewise-polynomial activations: GeLU (PUMA) and SiLU (docs/PROTOCOLS.md,
//! GeLU and SiLU).
//!
//! Both share one schedule: the comparisons with the breakpoints run as **one** batched
//! MSB in a narrow ring followed by one B2A of all bits (branch A), concurrently with the
//! power chain and the polynomial pieces (branch B); the pieces are joined by **one** fused
//! sum of products (b_{k+1} − b_k)·P_k, whose selectors are integers 0/1, so the join needs
//! no truncation. Helpers used by the other non-linear protocols of this suite live here
//! too (public-constant encoding, linear combinations, fused sums of products).

use alloc::vec::Vec;

use crate::engine::{Ctx, try_join};
use crate::error::Error;
use crate::ring::Width;
use crate::share::Shares;

use super::msb::{MsbForm, msb_rounds_with};
use super::{mul, reshare, square, trunc};

/// Ring width k' of the comparisons in [`gelu`] and [`silu`]: 32 bits, exact while
/// |x − c| < 2^(k'−1−f) = 8192 for every breakpoint c (f = 18; docs/PROTOCOLS.md,
/// Narrow rings): |x| < 8188 for GeLU, |x| < 8186 for SiLU.
pub const ACTIVATION_RING_BITS: u32 = 32;

/// Extra fractional bits of the polynomial coefficients (f + 6 in total): coefficients at
/// only f bits would cost 1.4e-3 at x ≈ 3 in GeLU (docs/PROTOCOLS.md, GeLU).
const COEFF_EXTRA_BITS: u32 = 6;

/// `round(c · 2^bits)` in two's complement (ties away from zero).
///
/// # Errors
/// `Misuse` if `c` is not finite or the result does not fit in ±2^62.
pub(super) fn encode_at(c: f64, bits: u32) -> Result<u64, Error> {
    const LIMIT: f64 = 4_611_686_018_427_387_904.0; // 2^62
    let scale = pow2(bits).ok_or(Error::misuse("scale 2^bits out of range"))?;
    let v = c * scale;
    if !v.is_finite() || v.abs() >= LIMIT {
        return Err(Error::misuse("constant does not fit the ring"));
    }
    // |v| < 2^62: the cast is exact after adding ½ and truncating toward zero.
    let r = if v < 0.0 {
        -((-v + 0.5) as i64)
    } else {
        (v + 0.5) as i64
    };
    Ok(r as u64)
}

/// 2^bits as an `f64` for bits ≤ 126, without `std`.
pub(super) fn pow2(bits: u32) -> Option<f64> {
    if bits > 126 {
        return None;
    }
    let (hi, lo) = (bits / 2, bits - bits / 2);
    let h = 1u128.checked_shl(hi)? as f64;
    let l = 1u128.checked_shl(lo)? as f64;
    Some(h * l)
}

/// `constant + Σ_k c_k · x_k` for public ring constants `c_k` (local).
///
/// # Errors
/// `Misuse` if `terms` is empty or the lengths differ.
pub(super) fn lincomb(terms: &[(&Shares, u64)], constant: u64) -> Result<Shares, Error> {
    let ((first, c0), rest) = terms
        .split_first()
        .ok_or(Error::misuse("empty linear combination"))?;
    let mut acc = first.scale(*c0);
    for (x, c) in rest {
        acc.add_assign(&x.scale(*c))?;
    }
    Ok(acc.add_public_scalar(constant))
}

/// This party's 3-of-3 part of Σ_k x_k ⊙ y_k: the local cross terms of all products summed,
/// so that one reshare (or one truncation or lift) finishes them all (docs/PROTOCOLS.md,
/// Fused sums of products).
///
/// # Errors
/// `Misuse` if `terms` is empty or the lengths differ.
fn fused_cross_terms(terms: &[(&Shares, &Shares)]) -> Result<Vec<u64>, Error> {
    let (first, _) = terms
        .first()
        .ok_or(Error::misuse("empty sum of products"))?;
    let n = first.len();
    let mut z = alloc::vec![0u64; n];
    for (x, y) in terms {
        if x.len() != n || y.len() != n {
            return Err(Error::misuse("sum of products of different lengths"));
        }
        for (((zk, (xa, xb)), ya), yb) in z
            .iter_mut()
            .zip(x.a().iter().zip(x.b()))
            .zip(y.a())
            .zip(y.b())
        {
            *zk = zk
                .wrapping_add(xa.wrapping_mul(*ya))
                .wrapping_add(xa.wrapping_mul(*yb))
                .wrapping_add(xb.wrapping_mul(*ya));
        }
    }
    Ok(z)
}

/// The final step of [`gelu_chebyshev`] and [`silu_chebyshev`]: Σ_k x_k·y_k + l + u, the
/// products and l at `frac` fractional bits and u at `frac` − `cut`, truncated to f bits
/// into `output`. The second factors y_k and the linear part l are first cut locally by
/// `cut` bits (every component shifted right: sharings mod 2^(64 − cut), off by at most
/// two units of the cut grid), so that the sum, at `frac` − `cut` bits, is summed and sent
/// in Z_2^`sum_bits` (docs/PROTOCOLS.md, Narrow truncation and lift). u, the terms of
/// powers that are only known mod 2^`sum_bits` (first factors and such terms need no
/// more, a cut factor needs `cut` bits above it), is added uncut. The caller keeps the
/// exact sum within ±2^(sum_bits − 2).
///
/// Rounds: 2. Bits per element: 2·sum_bits + m + 4·max(0, m − sum_bits + d), m the
/// output's bits and d = `frac` − `cut` − f.
///
/// # Errors
/// `Misuse` for mismatched lengths or a truncation outside the sum's ring; `Protocol` if
/// a message is malformed.
async fn cut_fused_sum(
    ctx: &mut Ctx,
    products: &[(&Shares, &Shares)],
    (linear, uncut): (&Shares, &Shares),
    frac: u32,
    (cut, sum_bits): (u32, u32),
    output: Width,
) -> Result<Shares, Error> {
    let factors: Vec<Shares> = products
        .iter()
        .map(|(_, y)| shift_components(y, cut))
        .collect();
    let terms: Vec<(&Shares, &Shares)> = products
        .iter()
        .zip(&factors)
        .map(|((x, _), y)| (*x, y))
        .collect();
    let mut z = fused_cross_terms(&terms)?;
    if linear.len() != z.len() || uncut.len() != z.len() {
        return Err(Error::bug("final sum's linear parts of another length"));
    }
    for ((zk, lk), uk) in z
        .iter_mut()
        .zip(shift_components(linear, cut).a())
        .zip(uncut.a())
    {
        *zk = zk.wrapping_add(*lk).wrapping_add(*uk);
    }
    let f = ctx.fixed().frac_bits();
    let d = frac
        .checked_sub(cut + f)
        .ok_or(Error::bug("final sum below f fractional bits"))?;
    let ring = Width::new(sum_bits).ok_or(Error::bug("final sum ring"))?;
    super::reshare_trunc_narrow(ctx, z, ring, d, output).await
}

/// How [`breakpoint_bits`] makes its bits: the comparison's first layer and the B2A's
/// form, each either in fewer rounds or in fewer bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct BitsForm {
    /// The MSB's first layer.
    pub msb: MsbForm,
    /// The B2A in its two-round form (3 words per bit instead of 4).
    pub relay: bool,
}

impl BitsForm {
    /// The fastest form: one-round first layer, one-round B2A.
    pub const FASTEST: BitsForm = BitsForm {
        msb: MsbForm::OneRound,
        relay: false,
    };

    /// Rounds of [`breakpoint_bits`] in this form, comparing in Z_2^`width`.
    pub const fn rounds(self, width: u32) -> u32 {
        msb_rounds_with(width, self.msb) + if self.relay { 2 } else { 1 }
    }

    /// The form with the fewest bits whose rounds fit within `budget` (the rounds of the
    /// branch the bits are made beside), comparing in Z_2^`width` and converting into
    /// Z_2^`ring`; the fastest form if none fits. The two-round first layer saves 4k − 4
    /// bits per element and breakpoint, the two-round B2A saves `ring`.
    pub const fn within(budget: u32, width: u32, ring: u32) -> BitsForm {
        let two = MsbForm::TwoRound;
        let one = MsbForm::OneRound;
        // Both slow forms take the same rounds; the one that saves more comes first.
        let (second, third) = if 4 * width.saturating_sub(1) > ring {
            ((two, false), (one, true))
        } else {
            ((one, true), (two, false))
        };
        let order = [(two, true), second, third];
        let mut i = 0;
        while i < order.len() {
            let form = BitsForm {
                msb: order[i].0,
                relay: order[i].1,
            };
            if form.rounds(width) <= budget {
                return form;
            }
            i += 1;
        }
        BitsForm::FASTEST
    }
}

/// Arithmetic shares of the bits `[x < c_k]` for every breakpoint `c_k` (raw ring values),
/// as one vector per breakpoint, over Z_2^64 or the narrower `ring`: one batched MSB for
/// all breakpoints ([`super::lt_thresholds_carry`], y input once per element), then one
/// B2A into `ring`.
///
/// Rounds: [`BitsForm::rounds`], R_LT(k') + 1 in the fastest form. Bits per element and
/// breakpoint: those of LT ([`super::msb_with`] in `form.msb`) plus 4·|ring| (256 over
/// Z_2^64); with `form.relay`, one round more and 3·|ring| bits for the B2A
/// ([`super::b2a::b2a_in`]).
pub(super) async fn breakpoint_bits(
    ctx: &mut Ctx,
    x: &Shares,
    breakpoints: &[u64],
    width: Width,
    form: BitsForm,
    ring: Width,
) -> Result<Vec<Shares>, Error> {
    let mut ctx = ctx.fork();
    let n = x.len();
    let bits = super::msb::lt_thresholds_carry(&mut ctx, x, breakpoints, width, form.msb).await?;
    let a = super::b2a::b2a_in(&mut ctx, &bits, ring, form.relay).await?;
    (0..breakpoints.len())
        .map(|k| a.slice(k * n..(k + 1) * n))
        .collect()
}

/// Joins a piecewise function: pieces `p_0, …, p_m` on the intervals cut by the
/// increasing breakpoints whose bits b_k = `[x < c_k]` are given (so b_0 ≤ … ≤ b_{m−1}):
/// Σ_k (b_k − b_{k−1})·p_k with b_{−1} = 0 and b_m = 1, one fused sum of products.
/// A piece `None` is the zero function and costs nothing. Over Z_2^64 the sum is reshared
/// (1 round, 192 bits); with a narrower `ring` (bits and pieces read mod 2^k) it is lifted
/// to Z_2^m, m = `output` (Z_2^64 for a general consumer), by [`super::reshare_lift_into`]
/// (2 rounds, 2k + m + 4·(m − k) bits), which needs the joined value within ±2^(k−2);
/// with `shift` = d > 0 it is truncated by d bits on the way ([`super::reshare_trunc_narrow`],
/// 2k + m + 4·(m − k + d) bits), for pieces that carry guard bits.
pub(super) async fn join_pieces(
    ctx: &mut Ctx,
    bits: &[Shares],
    pieces: &[Option<&Shares>],
    (ring, shift): (Width, u32),
    output: Width,
) -> Result<Shares, Error> {
    if pieces.len() != bits.len() + 1 {
        return Err(Error::bug("one piece per interval"));
    }
    let first = bits.first().ok_or(Error::bug("no breakpoints"))?;
    let me = first.party();
    let n = first.len();
    let zero = Shares::zeros(me, n);
    let mut selectors = Vec::with_capacity(pieces.len());
    for k in 0..pieces.len() {
        let upper = match bits.get(k) {
            Some(b) => b.clone(),
            None => zero.add_public_scalar(1),
        };
        let lower = match k.checked_sub(1).and_then(|j| bits.get(j)) {
            Some(b) => b,
            None => &zero,
        };
        selectors.push(upper.sub(lower)?);
    }
    let terms: Vec<(&Shares, &Shares)> = selectors
        .iter()
        .zip(pieces)
        .filter_map(|(s, p)| p.map(|p| (s, p)))
        .collect();
    let z = fused_cross_terms(&terms)?;
    let mut ctx = ctx.fork();
    if ring == Width::W64 {
        reshare(&mut ctx, z).await
    } else if shift == 0 {
        super::reshare_lift_into(&mut ctx, z, ring, output).await
    } else {
        super::reshare_trunc_narrow(&mut ctx, z, ring, shift, output).await
    }
}

/// A piecewise polynomial for GeLU of PUMA's shape and cost: 0 below `breakpoints[0]`,
/// F0 up to `breakpoints[1]`, F1 up to `breakpoints[2]`, x above; each piece a linear
/// combination of the powers the protocol computes anyway, coefficients of
/// [1, x, x², x³, x⁴, x⁶] in that order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GeluFit {
    /// The three breakpoints, increasing (compared on the fixed-point grid).
    pub breakpoints: [f64; 3],
    /// F0's coefficients of 1, x, x², x³, x⁴, x⁶.
    pub f0: [f64; 6],
    /// F1's coefficients of 1, x, x², x³, x⁴, x⁶.
    pub f1: [f64; 6],
}

impl GeluFit {
    /// PUMA's fit (Dong et al. 2023, §5.2): breakpoints −4, −1.95, 3, F0 a cubic, F1 an even
    /// sextic plus x/2. Max |err| vs exact GeLU 0.0199 (x → 3⁻), mean 0.00143 on [−10, 10].
    pub const PUMA: GeluFit = GeluFit {
        breakpoints: [-4.0, -1.95, 3.0],
        f0: [
            -0.505_403_119_970_817_4,
            -0.422_265_811_519_838_66,
            -0.118_076_129_511_819_53,
            -0.011_034_134_030_615_728,
            0.0,
            0.0,
        ],
        f1: [
            0.008_526_321_541_038_084,
            0.5,
            0.360_329_269_278_962_9,
            0.0,
            -0.037_688_200_365_904_236,
            0.001_806_746_260_614_118_7,
        ],
    };

    /// A refit of the same shape and cost (this crate's; Remez exchange on the absolute
    /// error): breakpoints −T, 0, T with T = 3.275; F1 the minimax combination of
    /// 1, x, x², x³, x⁴, x⁶ for GeLU on [0, T] (x³ is computed for F0 anyway), and
    /// F0(x) = F1(−x) + x, which has the same error on [−T, 0] because
    /// GeLU(−x) = GeLU(x) − x. T balances the fit's error against the tails
    /// T·(1 − Φ(T)) = |GeLU(−T)|. Max |err| vs exact GeLU 1.73e-3 in plaintext and 1.75e-3
    /// through the protocol (coefficient rounding at f + 6 bits against x⁶ ≈ 1250), mean
    /// 4.1e-4 on [−10, 10]: about 11 times smaller than [`GeluFit::PUMA`]. F0 is of degree
    /// 6 here (PUMA's is a cubic), using powers the protocol computes anyway.
    pub const MINIMAX: GeluFit = GeluFit {
        breakpoints: [-3.275, 0.0, 3.275],
        f0: [
            0.001_732_903_439_671_689_7,
            0.540_035_111_889_396_2,
            0.546_679_682_548_432,
            0.188_397_515_562_219_43,
            0.022_226_580_013_306_806,
            -2.900_650_248_230_239_3e-5,
        ],
        f1: [
            0.001_732_903_439_671_689_7,
            0.459_964_888_110_603_76,
            0.546_679_682_548_432,
            -0.188_397_515_562_219_43,
            0.022_226_580_013_306_806,
            -2.900_650_248_230_239_3e-5,
        ],
    };
}

/// GeLU(x) = x·Φ(x) by PUMA's piecewise polynomial (Dong et al. 2023, "PUMA", §5.2;
/// docs/PROTOCOLS.md, GeLU), with comparisons in the narrow ring of
/// [`ACTIVATION_RING_BITS`] = 32 bits:
///
/// ```text
///          0       x < −4
/// GeLU ≈   F0(x)   −4 ≤ x < −1.95      F0 = −0.0110341x³ − 0.1180761x² − 0.4222658x − 0.5054031
///          F1(x)   −1.95 ≤ x < 3       F1 = 0.0018067x⁶ − 0.0376882x⁴ + 0.3603293x² + 0.5x + 0.0085263
///          x       x ≥ 3
/// ```
///
/// (At x = 3 exactly, one grid point, the identity piece is taken: its error there is
/// 0.004, F1's 0.0199.) Breakpoints are compared on the fixed-point grid (c ↦ round(c·2^f)).
///
/// Schedule: branch A, b0 = `[x < −4]`, b1 = `[x < −1.95]`, b2 = `[x < 3]` in one batched MSB
/// (R_LT = 6 at k' = 32), then one B2A of the three bits (1). Branch B, concurrently: x²
/// (mul + trunc), {x³, x⁴} (mul + trunc), x⁶ (mul + trunc), then F0 and F1 as local linear
/// combinations with coefficients at f + 6 fractional bits, truncated together by f + 6
/// (1): 7 rounds. Join: (b1 − b0)·F0 + (b2 − b1)·F1 + (1 − b2)·x as one fused sum of
/// products (1); the selectors are integers, so no truncation follows.
///
/// **Range**: the comparisons are exact while |x − c| < 8192 for c ∈ {−4, −1.95, 3}, i.e.
/// for −8189 < x < 8188 (raw |x − c| < 2^31); beyond that a branch may be wrong. Powers of inputs
/// outside [−4, 3] may wrap the ring; that is harmless since their selectors are exactly 0.
/// **Error** (measured, tests/gelu_layernorm.rs, 100,013 points): within 1.2e-5 of PUMA's
/// polynomials; max |err| vs exact GeLU 0.0199 (x → 3⁻, inherent to F1), mean 0.00143 on
/// [−10, 10].
///
/// [`gelu_with`] with [`GeluFit::MINIMAX`] is a refit of the same cost with an 11 times
/// smaller maximum error (1.75e-3).
///
/// Rounds: 8. Bits per element, summed over the parties: 1085 (three comparisons at 32
/// bits, y input once: 32 + 3·(186 + 165)) + 3·256 (B2A) + 4·192 (products) + 4·136
/// (truncations by f) + 2·160 (truncation by f + 6) + 192 (join) = 3677, i.e. 1225⅔ per
/// party with role rotation; **Bytes**: 3677·n/24 per party ≈ 153.21 per element (exact
/// for n divisible by 24).
///
/// # Errors
/// `Protocol` if a message is malformed.
pub async fn gelu(ctx: &mut Ctx, x: &Shares) -> Result<Shares, Error> {
    gelu_with(ctx, x, &GeluFit::PUMA).await
}

/// [`gelu`] with another fit of the same shape and cost, e.g. [`GeluFit::MINIMAX`] (max
/// |err| vs exact GeLU 1.75e-3 and mean 4.1e-4 measured, against PUMA's 0.0199 and
/// 0.00143).
///
/// **Range**: the comparisons are exact while |x − c| < 8192 for every breakpoint c.
///
/// Rounds and Bytes: those of [`gelu`].
///
/// # Errors
/// `Misuse` if the breakpoints are not increasing on the fixed-point grid or a
/// coefficient does not fit the ring at f + 6 (or 2f + 6) fractional bits; `Protocol` if a
/// message is malformed.
pub async fn gelu_with(ctx: &mut Ctx, x: &Shares, fit: &GeluFit) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let fx = ctx.fixed();
    let f = fx.frac_bits();
    let width = Width::new(ACTIVATION_RING_BITS).ok_or(Error::bug("activation width"))?;
    let [q0, q1, q2] = fit.breakpoints;
    let breakpoints = [encode_at(q0, f)?, encode_at(q1, f)?, encode_at(q2, f)?];
    let signed = breakpoints.map(|v| v as i64);
    if !(signed[0] < signed[1] && signed[1] < signed[2]) {
        return Err(Error::misuse("GeLU breakpoints must increase"));
    }
    let cb = f + COEFF_EXTRA_BITS; // coefficient scale; products land at f + cb
    // Constant terms at 2f + 6 bits, the others at f + 6 (they multiply f-bit powers).
    let enc = |c: &[f64; 6]| -> Result<[u64; 6], Error> {
        let mut out = [0u64; 6];
        for (k, (o, v)) in out.iter_mut().zip(c).enumerate() {
            *o = encode_at(*v, if k == 0 { f + cb } else { cb })?;
        }
        Ok(out)
    };
    let (k0, k1) = (enc(&fit.f0)?, enc(&fit.f1)?);

    let (mut ca, mut cb_ctx) = (ctx.fork(), ctx.fork());
    let branch_a = breakpoint_bits(
        &mut ca,
        x,
        &breakpoints,
        width,
        BitsForm::FASTEST,
        Width::W64,
    );
    let branch_b = async {
        let c = &mut cb_ctx;
        let n = x.len();
        // x²
        let x2 = square(c, x).await?;
        let x2 = trunc(c, &x2, f).await?;
        // x³ and x⁴ together
        let both = mul(
            c,
            &Shares::concat(&[&x2, &x2])?,
            &Shares::concat(&[x, &x2])?,
        )
        .await?;
        let both = trunc(c, &both, f).await?;
        let (x3, x4) = both.split_at(n)?;
        // x⁶
        let x6 = mul(c, &x4, &x2).await?;
        let x6 = trunc(c, &x6, f).await?;
        // F0 and F1 at 2f + 6 fractional bits, truncated together by f + 6.
        let powers = [x, &x2, &x3, &x4, &x6];
        let piece = |k: &[u64; 6]| -> Result<Shares, Error> {
            let terms: Vec<(&Shares, u64)> = powers
                .iter()
                .zip(k.iter().skip(1))
                .map(|(p, c)| (*p, *c))
                .collect();
            lincomb(&terms, k.first().copied().unwrap_or(0))
        };
        let (p0, p1) = (piece(&k0)?, piece(&k1)?);
        let p = trunc(c, &Shares::concat(&[&p0, &p1])?, cb).await?;
        p.split_at(n)
    };
    let (bits, (p0, p1)) = try_join(branch_a, branch_b).await?;
    join_pieces(
        &mut ctx,
        &bits,
        &[None, Some(&p0), Some(&p1), Some(x)],
        (Width::W64, 0),
        Width::W64,
    )
    .await
}

/// Which GeLU a model uses: the exact x·Φ(x) (`"gelu"`) or the tanh form of GPT-2
/// (`"gelu_new"`), 0.5x(1 + tanh(√(2/π)(x + 0.044715x³))).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GeluForm {
    /// x·Φ(x), with the error function.
    Erf,
    /// GPT-2's tanh approximation.
    Tanh,
}

/// Even minimax coefficients e_0 … e_8 of h(x) = GeLU(x) − x/2 on [−4, 4] in powers of x²
/// (h is even: x·(Φ(x) − ½)); fitted here by iteratively reweighted least squares.
const PRECISE_ERF: [f64; 9] = [
    3.379_340_683_269_526_5e-5,
    0.398_557_587_611_831_9,
    -0.065_779_594_476_583_76,
    0.009_461_000_440_287_29,
    -0.000_996_943_053_623_707_2,
    7.369_843_081_975_552e-5,
    -3.577_704_188_242_707e-6,
    1.013_114_864_466_258e-7,
    -1.258_268_544_912_510_8e-9,
];

/// As [`PRECISE_ERF`] for the tanh form.
const PRECISE_TANH: [f64; 9] = [
    4.187_240_805_612_512e-5,
    0.398_475_514_321_268_8,
    -0.065_966_948_423_587_47,
    0.009_600_515_597_250_827,
    -0.001_031_755_672_321_154_8,
    7.802_417_243_442_402e-5,
    -3.869_787_692_213_199_5e-6,
    1.115_950_333_356_596_8e-7,
    -1.406_499_472_444_977_5e-9,
];

/// Fractional bits of the powers t^(2i) in [`gelu_precise`] (|t| ≤ 1 in range).
const POWER_BITS: u32 = 28;
/// Fractional bits of the scaled coefficients in [`gelu_precise`].
const PRECISE_COEFF_BITS: u32 = 20;

/// Fractional bits kept for the breakpoint comparisons of [`gelu_precise`]: x is cut to
/// 8 fractional bits locally before comparing (see [`gelu_precise`]).
const PRECISE_CMP_FRAC_BITS: u32 = 8;
/// Ring width of [`gelu_precise`]'s comparisons: with 8 fractional bits, exact branch
/// choice for |x| < 2^(22−1−8) − 4 = 8188, the same range as [`gelu`].
const PRECISE_CMP_RING_BITS: u32 = 22;

/// `[x]` with every component shifted right (logically) by `d` bits: a sharing of
/// ⌊x/2^d⌋ − e, e ∈ {0, 1, 2}, **modulo 2^(64−d)** (the wraps of the component sum vanish
/// there). Only valid in a ring of at most 64 − d bits (a comparison, or the high parts of
/// the sums of squares by limbs).
pub(super) fn shift_components(x: &Shares, d: u32) -> Shares {
    if d == 0 {
        return x.clone();
    }
    x.map(|v| v >> d)
}

/// GeLU to about 1e-4: 0 for x < −4, x/2 + E(x) on [−4, 4), x for x ≥ 4, where
/// E(x) = Σ_{i≤8} e_i x^(2i) is an even degree-16 minimax fit of GeLU(x) − x/2 =
/// x·(Φ(x) − ½) (an even function, so no |x| is needed). Same shape as PUMA's GeLU and
/// the polynomial SiLU (docs/PROTOCOLS.md, SiLU); this crate's design, for models whose
/// logits must match plaintext closely.
///
/// Schedule: branch A, the breakpoint bits b0 = `[x < −4 − 2^-7]`, b1 = `[x < 4]` in one
/// batched MSB in a 22-bit ring (6 rounds) and one B2A in its two-round form (2: R2
/// sends R1 its missing term, 192 bits instead of 256; branch A still ends before
/// branch B). The comparisons see x cut to 8
/// fractional bits by a local shift of every component (a sharing of ⌊x·2^8⌋ − e,
/// e ∈ {0, 1, 2}, exact modulo 2^(64−f+8)), so each cut moves outwards by less than
/// 3·2^-8 = 0.012, where E is still within 7e-5 of GeLU. Branch B, with u = (x/4)² at 28
/// fractional bits and E = A(u) + u⁴·B(u) (Paterson–Stockmeyer, A of degree 3, B of
/// degree 4): u (square + truncation fused into the reshare, 2), u² (2), {u³, u⁴} (2),
/// B truncated to 20 fractional bits (1), then u⁴·B with A and x/2 added to the local
/// parts and one fused reshare + truncation to f bits (2): 9 rounds. Join: (b1 − b0)·P +
/// (1 − b1)·x, one fused sum of products (1).
///
/// **Error** (measured, tests/gelu_layernorm.rs): max |err| vs the exact form ≤ 1.3e-4 on
/// [−10, 10] (the cut at ±4 costs 4·Φ(−4) = 1.27e-4 for `Erf`, 7e-5 for `Tanh`). **Range**:
/// as [`gelu`], |x| < 8188.
///
/// Rounds: 10. Bits per element, summed over the parties (f = 18): 484 (two comparisons at
/// 22 bits, y input once: 22 + 2·(126 + 105)) +
/// 2·192 (B2A) + 4 fused products (128 + 64 + 4d each, d = 12, 28, 28, 28: 240 + 3·304) +
/// B's truncation by 28 (176) + the final fused product truncated by 30 (312) + 192
/// (join) = 2700 (5328 as first built, before the fused truncations, the 22-bit
/// comparisons, Paterson–Stockmeyer, the two-round B2A, the 64 + 4d-bit truncation, the
/// OT pad drawn as the generate bits' components and y input once); **Bytes**:
/// 2700·n/24 per party = 112.5 per element (exact for n divisible by 24).
///
/// # Errors
/// `Protocol` if a message is malformed.
pub async fn gelu_precise(ctx: &mut Ctx, x: &Shares, form: GeluForm) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    let cut = f.saturating_sub(PRECISE_CMP_FRAC_BITS);
    let cf = f - cut; // fractional bits seen by the comparisons
    let width =
        Width::new(PRECISE_CMP_RING_BITS.min(64 - cut)).ok_or(Error::bug("activation width"))?;
    // b0: the lower cut sits 2 ulps (of the cut grid) below −4, so an x ≥ −4 is never
    // zeroed; b1: x < 4 always reads as below.
    let lo = encode_at(-4.0, cf)?.wrapping_sub(2);
    let breakpoints = [lo, encode_at(4.0, cf)?];
    let e = match form {
        GeluForm::Erf => PRECISE_ERF,
        GeluForm::Tanh => PRECISE_TANH,
    };
    let (p, q) = (POWER_BITS, PRECISE_COEFF_BITS);
    if 2 * f + 4 < p {
        return Err(Error::misuse(
            "gelu_precise needs at least 12 fractional bits",
        ));
    }
    let mut k = Vec::with_capacity(e.len());
    let mut scale = 1.0;
    for (i, c) in e.iter().enumerate() {
        // k_i = e_i·16^i multiplies u^i = (x/4)^(2i). The constant term sits at p + q bits,
        // the others multiply p-bit powers.
        k.push(encode_at(c * scale, if i == 0 { p + q } else { q })?);
        scale *= 16.0;
    }
    let kk = |i: usize| k.get(i).copied().unwrap_or(0);
    let half = 1u64 << (p + q - f - 1);

    let (mut ca, mut cbx) = (ctx.fork(), ctx.fork());
    let shifted = shift_components(x, cut);
    let branch_a = breakpoint_bits(
        &mut ca,
        &shifted,
        &breakpoints,
        width,
        BitsForm {
            msb: MsbForm::OneRound,
            relay: true,
        },
        Width::W64,
    );
    let branch_b = async {
        let c = &mut cbx;
        let n = x.len();
        // u = x²/16 at p bits: x² has 2f bits.
        let u = super::mul::square_trunc(c, x, 2 * f + 4 - p).await?;
        let u2 = super::mul::square_trunc(c, &u, p).await?;
        let lvl3 = super::mul::mul_trunc(
            c,
            &Shares::concat(&[&u2, &u2])?,
            &Shares::concat(&[&u, &u2])?,
            p,
        )
        .await?;
        let (u3, u4) = lvl3.split_at(n)?;
        // B = k4 + k5·u + k6·u² + k7·u³ + k8·u⁴ at p + q bits, cut to q bits so that
        // u⁴·B lands at p + q bits like A (|B| < 2^8, so the product stays far below 2^62).
        let b = lincomb(
            &[(&u, kk(5)), (&u2, kk(6)), (&u3, kk(7)), (&u4, kk(8))],
            kk(4) << p, // a constant: at p + q bits like the products
        )?;
        let b = trunc(c, &b, p).await?;
        // A = k0 + k1·u + k2·u² + k3·u³ and x/2, all at p + q bits, join u⁴·B's local parts
        // before the one reshare + truncation to f bits.
        let a = lincomb(&[(x, half), (&u, kk(1)), (&u2, kk(2)), (&u3, kk(3))], kk(0))?;
        let mut z = super::mul::cross_terms(&u4, &b);
        for (zk, ak) in z.iter_mut().zip(a.a()) {
            *zk = zk.wrapping_add(*ak);
        }
        super::reshare_trunc(c, z, p + q - f).await
    };
    let (bits, poly) = try_join(branch_a, branch_b).await?;
    join_pieces(
        &mut ctx,
        &bits,
        &[None, Some(&poly), Some(x)],
        (Width::W64, 0),
        Width::W64,
    )
    .await
}

/// [`gelu_chebyshev`]'s coefficients k_0 … k_7 of E(x) = GeLU(x) − x/2 in the basis
/// 1, w, T_2, Q, w·T_2, w·Q, T_2·Q, Q² (w = K·x²/2^S − 1 ([`CHEB_SCALE`]), T_2 = 2w² − 1,
/// Q = T_2·(T_2 + a·w), a = [`CHEB_A8_ERF`]/8), fitted for |x| ≤ 4.1875 by
/// scripts/fit-gelu-cheb.py (max |err| 6.2e-5 in plaintext).
const CHEB_ERF: [f64; 8] = [
    1.411_497_224_712_575_9,
    0.902_786_644_756_351_3,
    -0.195_353_264_001_029_7,
    -0.055_440_346_711_072_59,
    0.096_385_753_638_373_16,
    0.030_921_607_872_407_58,
    -0.019_843_662_126_674_93,
    -0.005_055_811_876_076_02,
];
/// 8·a for the erf form: Q² ≈ 16(w⁸ + a·w⁷ + …) carries the w⁷ coefficient that the
/// unrestricted degree-8 fit has, relative to its w⁸ coefficient (tuned by a scan).
const CHEB_A8_ERF: i64 = -7;

/// As [`CHEB_ERF`] for the tanh form (max |err| 7.3e-5 in plaintext).
const CHEB_TANH: [f64; 8] = [
    1.411_456_221_683_308_4,
    0.902_920_946_256_785_2,
    -0.197_222_307_639_944_7,
    -0.057_155_092_869_598_495,
    0.102_332_113_746_836_07,
    0.031_866_782_857_411_52,
    -0.020_596_069_313_332_875,
    -0.005_576_098_723_083_68,
];
/// As [`CHEB_A8_ERF`] for the tanh form.
const CHEB_A8_TANH: i64 = -6;

/// (S, K) of [`gelu_chebyshev`]'s variable w = K·x²/2^S − 1 = 2x²/T² − 1 with
/// T² = 2^(S+1)/K = 19.69 (T = 4.437 ≥ 4.1875, the widest input that can take the
/// polynomial piece). K is a small integer, so w is exact before its one truncation.
const CHEB_SCALE: (u32, u64) = (7, 13);
/// Fractional bits of w, T_2 and Q in [`gelu_chebyshev`].
const CHEB_POWER_BITS: u32 = 18;
/// Fractional bits of [`gelu_chebyshev`]'s coefficients k_4 … k_7 (second factors of
/// the final products); k_1 … k_3 get 18 more, k_0 36 more.
const CHEB_COEFF_BITS: u32 = 20;
/// Bits that [`gelu_chebyshev`] cuts locally from its final products' second factors
/// (from p + q = 38 to 20 fractional bits) and from its linear part (56 to 38). Each cut
/// factor is off by at most 2·2^−20 and multiplies Q (within [−1, 1.9]) or T_2 (within
/// ±1), so the piece moves by at most 2^−19·2.9 = 5.5e-6.
const GELU_FINAL_CUT: u32 = 18;
/// The ring in which [`gelu_chebyshev`] makes its powers w, T_2 and Q: the final sum
/// reads them mod 2^(`GELU_FINAL_SUM_BITS` + `GELU_FINAL_CUT`) = 2^61 only, through
/// its cut factors and linear part, and they stay far inside it (T_2 and Q are products
/// below 2^40 raw before their truncation, within ±2^59). Each bit below 64 saves 5 bits
/// of a product's output and costs 2 of its input.
const GELU_POWER_RING_BITS: u32 = GELU_FINAL_SUM_BITS + GELU_FINAL_CUT;
/// The ring of [`gelu_chebyshev`]'s final sum, at 56 − `GELU_FINAL_CUT` = 38 fractional
/// bits: the piece x/2 + E(x) stays within ±8 wherever it is selected (|x| < 4.1875), so
/// 38 + 3 bits and the truncation's two spare bits suffice. The sum is known mod
/// 2^(64 − cut) = 2^46, more than it needs.
const GELU_FINAL_SUM_BITS: u32 = 43;
/// The ring of [`gelu_chebyshev`]'s T_2: its truncation by p − 1 from the power ring leaves
/// a wrap of weight 2^(61 − 17) = 2^44, which vanishes here, so it sends no strings. T_2 is
/// only read as a first factor and a linear term of the final sum (mod 2^43) and by Q's
/// product (below 2^40 raw), never through a cut factor.
const GELU_T2_RING_BITS: u32 = GELU_POWER_RING_BITS - (CHEB_POWER_BITS - 1);
/// Rounds of [`gelu_chebyshev`]'s polynomial branch: w, T_2, Q and the final sum, two
/// each. Its breakpoint bits take the cheapest [`BitsForm`] that fits beside it.
const GELU_POLY_ROUNDS: u32 = 8;
/// Fractional bits that the comparisons of [`gelu_chebyshev`] and [`silu_chebyshev`] keep
/// (x cut locally).
const CHEB_CMP_FRAC_BITS: u32 = 4;
/// Ring width of [`gelu_chebyshev`]'s comparisons: the cut x (⌊16x⌋ − e, e ≤ 2) minus
/// either breakpoint (−66 or 64 on that grid) must stay in [−2^16, 2^16), i.e.
/// |x| < 4091.875. 17 bits rather than 18 (|x| < 8187.875) take one tree level fewer,
/// which lets both the two-round first layer and the two-round B2A fit beside the
/// polynomial: 77 bits per element fewer, for a range still far beyond the activations
/// of real models (`puma-layers` checks it in plaintext, `nn::range`).
const CHEB_CMP_RING_BITS: u32 = 17;
/// Bits above the f fractional bits of [`gelu_chebyshev`]'s join ring Z_2^(f+14): the
/// bits, the polynomial piece and x are multiplied there and the sum lifted to Z_2^64,
/// which needs the joined value (x itself above 4, |x| < 4091.875 < 2^12) within
/// ±2^(f+12).
const CHEB_JOIN_HEADROOM_BITS: u32 = 14;

/// GeLU to 1.3e-4 (`Erf`) or 9.3e-5 (`Tanh`) for 59 % of [`gelu_precise`]'s bits and in as many rounds: the same
/// piecewise shape (0 for x < −4, x/2 + E(x) on [−4, 4), x for x ≥ 4, E(x) = GeLU(x) − x/2
/// even), E a degree-8 polynomial in w = 2x²/T² − 1 (T = 4.437) evaluated with one product
/// fewer, powers at 18 fractional bits, comparisons on x cut to 4 fractional bits in a
/// 17-bit ring. This crate's design (docs/PROTOCOLS.md, GeLU).
///
/// The polynomial: from the shares w, T_2 = 2w² − 1 and Q = T_2·(T_2 + a·w), the final
/// fused sum of products gives every polynomial
/// k_0 + k_1·w + k_2·T_2 + k_3·Q + k_4·w·T_2 + k_5·w·Q + k_6·T_2·Q + k_7·Q²: all of degree
/// ≤ 6 in w, and a degree-8 part whose w⁷ coefficient is a times its w⁸ coefficient.
/// With a (in eighths, per form) taken from the unrestricted degree-8 fit, this costs no
/// accuracy (6.2e-5 in plaintext for `Erf`, 7.3e-5 for `Tanh`), and T_3 and T_4, which the Chebyshev
/// recurrence would need, are never formed. All
/// shares stay within [−1, 1.9] and the k_i within [−0.2, 1.5], so 18 fractional bits
/// suffice ([`gelu_precise`]'s monomial coefficients reach 77 and need 28).
///
/// Schedule: branch A, b0 = `[x < −4 − 2^-3]`, b1 = `[x < 4]` in one comparison with two
/// thresholds in Z_2^17 with its two-round first layer (6 rounds,
/// [`super::lt_thresholds_carry`], [`super::MsbForm::TwoRound`]) on x cut to 4 fractional
/// bits by a local shift of every component (a sharing of ⌊16x⌋ − e, e ∈ {0, 1, 2}):
/// x ≥ −4 is never zeroed and x < −4.125 always is; x < 4 always takes the polynomial and
/// x ≥ 4.1875 never does, so the polynomial piece is only taken on [−4.125, 4.1875),
/// where the fit holds. Then one B2A in its two-round form into the join ring
/// Z_2^(f+14) (2): 8 rounds (`BitsForm::within`, in this module). Branch B: w = 13·x²/2^7 − 1
/// (x·(13x) with the truncation by 25 fused into the reshare, 2), T_2 (2), Q (2), then the
/// products Q·(k_5·w + k_7·Q) and T_2·(k_4·w + k_6·Q) as local cross terms, plus the
/// linear part and x/2, at 2·18 + 20 = 56 fractional bits, reshared and truncated to f
/// bits at once, into the join ring (2): 8 rounds. Grouped so, T_2 is never a second
/// factor, which the final sum cuts by 18 bits and so reads mod 2^61: T_2 is read mod
/// 2^43 only (its linear term joins the sum uncut), and is made in Z_2^44, where its
/// truncation's wrap vanishes and no strings are sent. Join: (b1 − b0)·P + (1 − b1)·x, one
/// fused sum of products in Z_2^(f+14), lifted to Z_2^64 (2; |x| < 2^12 keeps every joined
/// value within the lift's ±2^(f+12)). The narrow join costs a round and saves 318 bits:
/// the B2A's words, the final truncation's strings and word all shrink to 32 bits or
/// fewer, and the lift costs 64 bits more than a reshare.
///
/// **Error** (measured, tests/gelu_layernorm.rs, 140,587 points: [−16, 16] in steps of
/// 5e-4, [−8, 8] in steps of 2^-12, the cuts, values out to ±4091.8): max |err| vs the
/// exact form 1.24e-4 for `Erf` (bounded by the cut at ±4, 4·Φ(−4) = 1.27e-4; fit 6.2e-5)
/// and 9.2e-5 for `Tanh` (fit 7.3e-5, cut 7e-5; the final sum's cut factors add at most
/// 5.5e-6, `GELU_FINAL_CUT`). Outputs are exactly 0 for x < −4.125
/// and exactly x for x ≥ 4.1875. **Range**: |x| < 4091.875 (the comparisons in Z_2^17;
/// [`gelu_precise`]'s is |x| < 8188); powers of inputs outside
/// [−4.125, 4.1875) may wrap the ring, harmlessly, since their selector is exactly 0.
///
/// Rounds: 10. Bits per element, summed over the parties (f = 18): 237 (the two
/// comparisons at 17 bits with the two-round first layer, y input once: 17 + 2·(32 + 78)),
/// 2·96 (two-round B2A into Z_2^32), w (summed in Z_2^64, truncated into Z_2^61: 128 + 61 +
/// 4·22 = 277), T_2 (from Z_2^61 into Z_2^44: 122 + 44 = 166, `GELU_T2_RING_BITS`), Q
/// (summed in Z_2^44, into Z_2^61: 88 + 61 + 4·38 = 301; `GELU_POWER_RING_BITS`), the
/// final fused products, their second factors and the linear part cut locally by 18
/// bits, summed in Z_2^43 and truncated by 20 into Z_2^32 (2·43 + 32 + 4·9 = 154) and the
/// join's lift (2·32 + 64 + 4·32 = 256): **1583** (1634 with T_2 in Z_2^61, 1842 with two
/// separate one-round comparisons in Z_2^18 and the join in Z_2^33 as well, 1905 with the
/// powers and the final sum over Z_2^64, 2184 with the join over Z_2^64 in 9 rounds; 2700
/// for [`gelu_precise`]); **Bytes**: 1583·n/24 per party = 65 23⁄24 per element (exact
/// for n divisible by 24).
///
/// # Errors
/// `Misuse` unless the session has 12 to 26 fractional bits; `Protocol` if a message is
/// malformed.
pub async fn gelu_chebyshev(ctx: &mut Ctx, x: &Shares, form: GeluForm) -> Result<Shares, Error> {
    gelu_chebyshev_into(ctx, x, form, (Width::W64, Width::W64)).await
}

/// The narrowest ring, 2f + 10 bits, in which [`gelu_chebyshev_into`] accepts its input at
/// f fractional bits: x·(13x) at 2f bits stays below 2^(2f+8) wherever the polynomial
/// piece is taken (|x| < 4.1875), and that product is the only use of x that needs more
/// than its comparisons' f + 13 bits or the join's f + 14.
pub const fn gelu_chebyshev_input_bits(f: u32) -> u32 {
    2 * f + 10
}

/// [`gelu_chebyshev`] between narrow rings: x read mod 2^k, k = `input` (bits above are
/// ignored, so a producer may truncate into Z_2^k, 5 bits per element cheaper per bit
/// below 64), and the result made mod 2^m, m = `output`, for a consumer that reads it
/// there (a product in Z_2^m, such as the MLP's output projection in `puma-layers`): the
/// join's lift ends in Z_2^m, and its strings shrink by 4 bits per bit below 64. The
/// result is GeLU(x) as a signed value mod 2^m.
///
/// Rounds: 10. Bits per element, summed over the parties (f = 18): those of
/// [`gelu_chebyshev`] with w's product summed in Z_2^k (2k + 61 + 4·(86 − k) instead of
/// 277) and the lift at 2·32 + m + 4·(m − 32): 1543 for k = 64 and m = 56, 1579 for
/// k = 46 ([`gelu_chebyshev_input_bits`] at f = 18) and m = 56.
///
/// # Errors
/// As [`gelu_chebyshev`], and `Misuse` unless 2f + 10 ≤ k and m is above the join ring's
/// f + 14 bits.
pub async fn gelu_chebyshev_into(
    ctx: &mut Ctx,
    x: &Shares,
    form: GeluForm,
    (input, output): (Width, Width),
) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    let (p, q) = (CHEB_POWER_BITS, CHEB_COEFF_BITS);
    let (s, k_scale) = CHEB_SCALE;
    // f ≥ 12 keeps w's truncation (by 2f + S − p) positive and the comparisons' cut
    // (by f − 4) meaningful; f ≤ 26 keeps 13·x² at 2f bits below 2^62 for |x| ≤ 4.1875
    // and the final shift of x/2 to 2p + q bits non-negative.
    if !(12..=26).contains(&f) {
        return Err(Error::misuse(
            "gelu_chebyshev needs 12 to 26 fractional bits",
        ));
    }
    if input.bits() < gelu_chebyshev_input_bits(f) {
        return Err(Error::misuse(
            "gelu_chebyshev's input ring is narrower than 2f + 10 bits",
        ));
    }
    let cut = f.saturating_sub(CHEB_CMP_FRAC_BITS);
    let cf = f - cut;
    let width =
        Width::new(CHEB_CMP_RING_BITS.min(64 - cut)).ok_or(Error::bug("activation width"))?;
    // b0: the lower cut sits 2 ulps (of the cut grid) below −4, so an x ≥ −4 is never
    // zeroed; b1: x < 4 always reads as below.
    let lo = encode_at(-4.0, cf)?.wrapping_sub(2);
    let breakpoints = [lo, encode_at(4.0, cf)?];
    let (k, a8) = match form {
        GeluForm::Erf => (CHEB_ERF, CHEB_A8_ERF),
        GeluForm::Tanh => (CHEB_TANH, CHEB_A8_TANH),
    };
    let big = 2 * p + q; // fractional bits of the fused sum before the final truncation
    // The constant at 2p + q bits, the linear terms at p + q (they multiply p-bit
    // shares), the products' second factors at q (their products land at 2p + q).
    let enc = |i: usize, bits: u32| encode_at(k.get(i).copied().unwrap_or(0.0), bits);
    // k_0, k_1 and k_3 (T_2's k_2 joins the sum uncut, below).
    let ka = [enc(0, big)?, enc(1, p + q)?, enc(3, p + q)?];
    let kb = [enc(4, q)?, enc(5, q)?, enc(6, q)?, enc(7, q)?];
    let one = 1u64 << p;
    let half_x = 1u64 << (big - f - 1); // x (f bits) ↦ x/2 at 2p + q bits

    let (mut ca, mut cbx) = (ctx.fork(), ctx.fork());
    let shifted = shift_components(x, cut);
    // The join's narrow ring: |x| < 4091.875 < 2^12 keeps every joined value, x itself
    // where it is taken, within ±2^(f+12) = ±2^(k−2).
    let ring = Width::new(f + CHEB_JOIN_HEADROOM_BITS).ok_or(Error::bug("join ring"))?;
    // The bits take the cheapest form that is ready when the polynomial is.
    let bits_form = BitsForm::within(GELU_POLY_ROUNDS, width.bits(), ring.bits());
    let branch_a = breakpoint_bits(&mut ca, &shifted, &breakpoints, width, bits_form, ring);
    let branch_b = async {
        let c = &mut cbx;
        // w + 1 = K·x²/2^S at p bits: x·(K·x) at 2f bits, truncated by 2f + S − p.
        // The powers are only read mod 2^GELU_POWER_RING_BITS (see there).
        let pr = Width::new(GELU_POWER_RING_BITS).ok_or(Error::bug("power ring"))?;
        let w =
            super::mul::mul_trunc_in(c, x, &x.scale(k_scale), 2 * f + s - p, (input, pr)).await?;
        let w = w.add_public_scalar(one.wrapping_neg());
        // 2w² at p bits, then T_2 = 2w² − 1, made where the truncation's wrap vanishes
        // (`GELU_T2_RING_BITS`): no strings.
        let t2_ring = Width::new(GELU_T2_RING_BITS).ok_or(Error::bug("T_2 ring"))?;
        let t2 = super::mul::square_trunc_in(c, &w, p - 1, (pr, t2_ring)).await?;
        let t2 = t2.add_public_scalar(one.wrapping_neg());
        // Q = T_2·(8T_2 + 8a·w)/8 at p bits (8a is an integer), summed in T_2's ring.
        let q_share = super::mul::mul_trunc_in(
            c,
            &t2,
            &lincomb(&[(&t2, 8), (&w, a8 as u64)], 0)?,
            p + 3,
            (t2_ring, pr),
        )
        .await?;
        // Σ k_i·(basis)_i at 2p + q bits: the products' local cross terms, grouped as
        // Q·(k_5·w + k_7·Q) + T_2·(k_4·w + k_6·Q) so that T_2 is never a cut factor, then
        // the linear part and x/2, all reshared and truncated to f bits at once; T_2's
        // linear term joins uncut, its coefficient at the sum's 2p + q − cut bits.
        let bq = lincomb(&[(&w, kb[1]), (&q_share, kb[3])], 0)?;
        let bt = lincomb(&[(&w, kb[0]), (&q_share, kb[2])], 0)?;
        let a_part = lincomb(&[(x, half_x), (&w, ka[1]), (&q_share, ka[2])], ka[0])?;
        let t2_part = t2.scale(enc(2, big - GELU_FINAL_CUT - p)?);
        let cut = (GELU_FINAL_CUT, GELU_FINAL_SUM_BITS);
        let products = [(&q_share, &bq), (&t2, &bt)];
        cut_fused_sum(c, &products, (&a_part, &t2_part), big, cut, ring).await
    };
    let (bits, poly) = try_join(branch_a, branch_b).await?;
    join_pieces(
        &mut ctx,
        &bits,
        &[None, Some(&poly), Some(x)],
        (ring, 0),
        output,
    )
    .await
}

/// SiLU(x) = x·σ(x) by a piecewise polynomial of GeLU's shape (docs/PROTOCOLS.md, SiLU;
/// the verified alternative to PUMA's appendix; LLaMA's activation), comparisons in the
/// narrow ring of [`ACTIVATION_RING_BITS`] = 32 bits:
///
/// ```text
///          0             x < −6
/// SiLU ≈   x/2 + E(x)    −6 ≤ x < 6
///          x             x ≥ 6
/// E(x) = 0.014143238 + 0.22023987x² − 0.0099673197x⁴ + 2.7655659e-4x⁶ − 2.9513366e-6x⁸
/// ```
///
/// E is evaluated in t = x/8 (t² = trunc(x·x, f + 6), coefficients scaled by 8^(2i) and
/// held at f + 6 fractional bits) so that coefficient rounding stays small.
///
/// Schedule: branch A, b0 = `[x < −6]`, b1 = `[x < 6]` in one batched MSB (6 rounds at
/// k' = 32) and one B2A (1). Branch B: t² (mul + trunc by f + 6), t⁴ (mul + trunc),
/// {t⁶, t⁸} (mul + trunc), then x/2 + E as one linear combination truncated by f + 6 (1):
/// 7 rounds. Join: (b1 − b0)·(x/2 + E) + (1 − b1)·x, one fused sum of products (1).
///
/// **Range**: exact branch choice while |x ∓ 6| < 8192, i.e. |x| < 8186; powers of inputs
/// outside [−6, 6) may wrap, harmlessly (their selector is 0). **Error** (measured,
/// tests/gelu_layernorm.rs): max |err| vs exact SiLU 0.0148 on [−20, 20] (at x = 6,
/// inherent to the fit), mean 0.0036; [`silu_chebyshev`] is accurate to 1.5e-4 for about
/// twice the rounds and 92 % of the bits.
///
/// Rounds: 8. Bits per element, summed over the parties: 734 (two comparisons at 32
/// bits, y input once: 32 + 2·(186 + 165)) + 2·256 (B2A) + 4·192 (products) + 3·136
/// (truncations by f) + 2·160 (truncations by f + 6) + 192 (join) = 2934, i.e. 978 per
/// party with role rotation; **Bytes**: 2934·n/24 per party = 122.25 per element (exact
/// for n divisible by 24).
///
/// # Errors
/// `Protocol` if a message is malformed.
pub async fn silu(ctx: &mut Ctx, x: &Shares) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    let width = Width::new(ACTIVATION_RING_BITS).ok_or(Error::bug("activation width"))?;
    let breakpoints = [encode_at(-6.0, f)?, encode_at(6.0, f)?];
    let cb = f + COEFF_EXTRA_BITS;
    // E(x) = Σ e_{2i} x^{2i} = Σ e_{2i}·8^{2i} t^{2i}.
    let e = [
        0.014_143_238,
        0.220_239_87,
        -0.009_967_319_7,
        2.765_565_9e-4,
        -2.951_336_6e-6,
    ];
    let g = |i: usize, s: f64| e.get(i).copied().unwrap_or(0.0) * s;
    let k = [
        encode_at(g(0, 1.0), f + cb)?,
        encode_at(g(1, 64.0), cb)?,
        encode_at(g(2, 4096.0), cb)?,
        encode_at(g(3, 262_144.0), cb)?,
        encode_at(g(4, 16_777_216.0), cb)?,
    ];
    let half = encode_at(0.5, cb)?;

    let (mut ca, mut cb_ctx) = (ctx.fork(), ctx.fork());
    let branch_a = breakpoint_bits(
        &mut ca,
        x,
        &breakpoints,
        width,
        BitsForm::FASTEST,
        Width::W64,
    );
    let branch_b = async {
        let c = &mut cb_ctx;
        let n = x.len();
        // t² = x²/64 at f bits.
        let t2 = square(c, x).await?;
        let t2 = trunc(c, &t2, f + 6).await?;
        let t4 = square(c, &t2).await?;
        let t4 = trunc(c, &t4, f).await?;
        let both = mul(
            c,
            &Shares::concat(&[&t4, &t4])?,
            &Shares::concat(&[&t2, &t4])?,
        )
        .await?;
        let both = trunc(c, &both, f).await?;
        let (t6, t8) = both.split_at(n)?;
        let p = lincomb(
            &[
                (x, half),
                (&t2, k[1]),
                (&t4, k[2]),
                (&t6, k[3]),
                (&t8, k[4]),
            ],
            k[0],
        )?;
        trunc(c, &p, cb).await
    };
    let (bits, p) = try_join(branch_a, branch_b).await?;
    join_pieces(
        &mut ctx,
        &bits,
        &[None, Some(&p), Some(x)],
        (Width::W64, 0),
        Width::W64,
    )
    .await
}

/// [`silu_chebyshev`]'s coefficients of G ≈ g(t) = t·σ(−t) in the shares it forms, in the
/// order k_0 … k_5 (of 1, z, T_2, a_3, T_4, Q), m_1 … m_3 (of T_4·z, T_4·T_2, T_4·a_3),
/// n_1 … n_4 (of Q·z, Q·T_2, Q·a_3, Q·T_4), where z = 11t/64 − 1, T_2 = 2z² − 1,
/// a_3 = z·T_2, T_4 = 2T_2² − 1 and Q = T_4²: a degree-12 polynomial in t fitted on
/// [−3/16, 185/16] by scripts/fit-silu-cheb.py (max |err| 1.41e-4 in plaintext).
const SILU_CHEB: [f64; 13] = [
    0.068_088_546_277_797_48,
    -0.108_036_386_716_593_46,
    0.026_419_309_518_453_265,
    0.020_284_959_423_949_84,
    -0.061_146_844_995_886_51,
    0.001_874_435_019_309_263_2,
    0.071_752_006_359_118_19,
    -0.038_849_258_433_279_75,
    0.023_992_943_345_959_045,
    -0.005_305_729_996_441_39,
    0.003_746_390_643_305_126_7,
    -0.002_814_269_144_203_959,
    -0.000_393_178_664_644_784_6,
];
/// [`silu_chebyshev`]'s variable z = 11t/64 − 1: 11 over 2^6, exact at f + 6 fractional
/// bits; z = 1 at t = 128/11 = 11.64, beyond the widest t that takes the polynomial.
const SILU_Z_SCALE: (u64, u32) = (11, 6);
/// 2·(11/64)² = 121/2^11: v = 121·x²/2^11 = 2(11t/64)², so T_2 = 2z² − 1 = v − 4z − 3
/// needs no product once t is known.
const SILU_V_SCALE: (u64, u32) = (121, 11);
/// Fractional bits of a_3, T_4 and Q in [`silu_chebyshev`].
const SILU_POWER_BITS: u32 = 18;
/// Fractional bits of [`silu_chebyshev`]'s coefficients of the p-bit shares in the final
/// products (those of the (f + 6)-bit shares get f + 6 − p fewer).
const SILU_COEFF_BITS: u32 = 24;
/// The range test of [`silu_chebyshev`]: t < 183/16 on t cut to 4 fractional bits.
const SILU_RANGE_CUT: u64 = 183;
/// Ring width of [`silu_chebyshev`]'s two comparisons: x and t = |x| cut to 4 fractional
/// bits (⌊16x⌋ − e, e ≤ 2) minus 0 or 183 must stay in [−2^16, 2^16), i.e. |x| < 4095.875;
/// 17 bits keep each comparison at 5 rounds (R_LT(17) = 5).
const SILU_CMP_RING_BITS: u32 = 17;
/// Bits that [`silu_chebyshev`] cuts locally from its final products' second factors
/// (from p + q = 42 to 22 fractional bits) and from its linear part (60 to 40): the
/// final sum, at 40 fractional bits with |G| < 1, is then summed and sent in Z_2^42
/// (`SILU_FINAL_SUM_BITS`) instead of Z_2^64. Each cut factor is off by at most
/// 2·2^−22 and multiplies T_4 or Q (both within ±1), so G moves by at most 2^−20 = 9.5e-7.
const SILU_FINAL_CUT: u32 = 20;
/// The ring of [`silu_chebyshev`]'s final sum (see `SILU_FINAL_CUT`).
const SILU_FINAL_SUM_BITS: u32 = 42;
/// The ring in which [`silu_chebyshev`] makes v and {a_3, T_2²}: the final sum reads
/// them mod 2^(`SILU_FINAL_SUM_BITS` + `SILU_FINAL_CUT`) = 2^62 only, and they stay
/// far inside it (every product below 2^50 raw before its truncation). Q, never a cut
/// factor, is made in the final sum's ring.
const SILU_POWER_RING_BITS: u32 = SILU_FINAL_SUM_BITS + SILU_FINAL_CUT;
/// Bits above the f fractional bits of [`silu_chebyshev`]'s join ring Z_2^(f+2), in which
/// r·G is taken before its lift to Z_2^64: |G| < 0.3 wherever r = 1, within ±2^f.
const SILU_JOIN_HEADROOM_BITS: u32 = 2;

/// SiLU(x) = x·σ(x) to 1.5e-4 in 16 rounds and 2282 bits per element (the softmax-based
/// SiLU it replaced, σ as a softmax over [x, 0]: 36 rounds, 13,176 bits, 1.4e-5·max(|x|, 1)): SiLU(x) = ReLU(x) − g(|x|) with g(t) = t·σ(−t) = t/(1 + e^t), smooth on
/// t ≥ 0 and below 1.3e-4 beyond t = 11.44, replaced by a degree-12 polynomial G on
/// [0, 11.44) and by 0 beyond. This crate's design (docs/PROTOCOLS.md, Chebyshev SiLU).
///
/// Why |x| rather than GeLU's even form: E(x) = SiLU(x) − x/2 = (x/2)·tanh(x/2) has poles
/// at x = ±iπ, so a polynomial in x² on [−11.5, 11.5] needs degree 16 in x² to reach
/// 1.6e-4, while g needs degree 12 in t on [0, 11.5] (the interval no longer straddles
/// the poles).
///
/// Schedule: the sign s = `[x < 0]` on x cut to 4 fractional bits by a local shift of
/// every component (a sharing of ⌊16x⌋ − e, e ∈ {0, 1, 2}) in Z_2^17 (5 rounds) and its
/// B2A in the two-round form (2); then s·x (1, exact: s is an integer), t = x − 2s·x and
/// ReLU = x − s·x, all at 8 rounds. The cut may read x ∈ [0, 3/16) as negative; then t = −x and the result
/// −G(−x) ≈ −g(−x) = SiLU(x) is still right, since G is fitted on [−3/16, 185/16].
/// Concurrently with the sign, v = 121·x²/2^11 = 2(11t/64)² (x·(121x) with the truncation
/// by f + 5 fused, 2). From t: z = 11t/64 − 1 and T_2 = 2z² − 1 = v − 4z − 3 locally, at
/// f + 6 fractional bits; {a_3 = z·T_2, T_2²} (2, truncated to 18 bits), T_4 = 2T_2² − 1;
/// Q = T_4² (2); then G = Σ k·(1, z, T_2, a_3, T_4, Q) + T_4·(m·(z, T_2, a_3)) +
/// Q·(n·(z, T_2, a_3, T_4)) as the local cross terms of two products plus the linear part,
/// the second factors cut locally to 22 fractional bits and the linear part to 40
/// (`SILU_FINAL_CUT`; Q's linear term joins uncut), summed in Z_2^42 and truncated to f
/// bits at once (2): rounds 9 to 14. v, a_3 and T_2² are made in Z_2^62
/// (`SILU_POWER_RING_BITS`), all the final sum reads through its cut factors; Q, only a
/// first factor, in Z_2^42, where its truncation's wrap vanishes. G is truncated into
/// the join ring Z_2^(f+2), where its 2^(42−22)-weighted wrap vanishes, so the truncation
/// sends no strings. Concurrently, r = `[t < 183/16]` on t cut to 4 fractional bits in
/// Z_2^17 (5) and its B2A into Z_2^(f+2) (1): rounds 9 to 14.
/// Join: y = ReLU − r·G, the product taken in Z_2^(f+2) (|G| < 0.3 where r = 1) and lifted
/// to Z_2^64 (2): rounds 15 and 16.
/// The range test reads every t < 11.4375 as in range and every t ≥ 11.5625 as out.
///
/// **Error** (measured, tests/norm_activations.rs, 240,374 points: [−30, 30] in steps of
/// 5e-4, [−12, 12] in steps of 2^-12, LLaMA-like gate inputs, the cuts, values out to
/// ±4095.8): max |y − SiLU(x)| 1.46e-4 (fit 1.41e-4 on [−3/16, 185/16]; the cut at 11.4375
/// costs g(11.4375) = 1.23e-4; the final sum's cut factors at most 9.5e-7). Outputs are
/// exactly 0 for x ≤ −11.5625 and exactly x for x ≥ 11.5625. **Range**: |x| < 4095.875
/// (the comparisons in Z_2^17; the softmax-based SiLU's was |x| < 4096); powers of t
/// outside the fit may wrap the ring, harmlessly, since r is exactly 0 there.
///
/// Rounds: **16**. Bits per element, summed over the parties (f = 18): 2·191 (LT in
/// Z_2^17), 192 (the sign's two-round B2A) + 80 (the range bit's, into Z_2^20), 192
/// (s·x), v (from Z_2^64 into Z_2^62: 128 + 62 + 4·21 = 274), {a_3, T_2²} (in Z_2^62:
/// 2·(124 + 62 + 4·30) = 612), Q (from Z_2^62 into the final sum's Z_2^42, where its
/// truncation's wrap vanishes: 124 + 42 = 166; Q is only a first factor and a linear term
/// there, which joins uncut), the final fused products summed
/// in Z_2^42 and truncated by 22 into Z_2^20 (2·42 + 20 = 104) and the join's lift
/// (2·20 + 64 + 4·44 = 280): **2282** (2374 with Q in Z_2^62, 2510 in 15 rounds with the
/// one-round B2A and the powers and final sum over Z_2^64, 2746 with the join over
/// Z_2^64; 13,176 for the softmax-based SiLU); **Bytes**: 2282·n/24 per party = 95 1⁄12
/// per element (exact for n divisible by 24). Its comparisons keep the one-round first
/// layer: the sign is on the critical path, and the range test has no round to spare
/// beside the powers.
///
/// # Errors
/// `Misuse` unless the session has 12 to 21 fractional bits; `Protocol` if a message is
/// malformed.
pub async fn silu_chebyshev(ctx: &mut Ctx, x: &Shares) -> Result<Shares, Error> {
    silu_chebyshev_into(ctx, x, Width::W64).await
}

/// [`silu_chebyshev`] for a consumer that reads its result mod 2^m only, m = `output`
/// (the gated MLP's product with its up projection in `puma-layers`): the join's lift
/// ends in Z_2^m, and its strings shrink by 4 bits per bit below 64. The result is
/// SiLU(x) as a signed value mod 2^m.
///
/// Rounds: 16. Bits per element, summed over the parties (f = 18): those of
/// [`silu_chebyshev`] with the lift at 2·20 + m + 4·(m − 20): 2242 for m = 56.
///
/// # Errors
/// As [`silu_chebyshev`], and `Misuse` unless m is above the join ring's f + 2 bits.
pub async fn silu_chebyshev_into(
    ctx: &mut Ctx,
    x: &Shares,
    output: Width,
) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    // f ≥ 12 keeps the comparisons' cut (by f − 4) and every truncation positive; f ≤ 21
    // keeps 121·x² at 2f bits below 2^62 for |x| ≤ 11.6, and the coefficients that
    // multiply the (f + 6)-bit z and T_2 in the final products' second factors (held at
    // p + q − f − 6 = 36 − f bits) fine enough: at f = 22 and 23 their rounding alone
    // took the error to 2.3e-4 and 2.1e-4 (core/tests/norm_activations.rs).
    if !(12..=21).contains(&f) {
        return Err(Error::misuse(
            "silu_chebyshev needs 12 to 21 fractional bits",
        ));
    }
    let (p, q) = (SILU_POWER_BITS, SILU_COEFF_BITS);
    let pz = f + SILU_Z_SCALE.1; // fractional bits of z and T_2
    let big = 2 * p + q; // fractional bits of the fused sum before the final truncation
    let cut = f - CHEB_CMP_FRAC_BITS;
    let width =
        Width::new(SILU_CMP_RING_BITS.min(64 - cut)).ok_or(Error::bug("activation width"))?;
    let c = |i: usize| SILU_CHEB.get(i).copied().unwrap_or(0.0);
    // The linear part at 2p + q bits; second factors of the products at p + q bits once
    // multiplied by their share (z and T_2 carry pz bits, the others p).
    let kl = [
        encode_at(c(0), big)?,
        encode_at(c(1), big - pz)?,
        encode_at(c(2), big - pz)?,
        encode_at(c(3), p + q)?,
        encode_at(c(4), p + q)?,
        // Q's term joins the sum uncut, at its 2p + q − cut bits.
        encode_at(c(5), big - SILU_FINAL_CUT - p)?,
    ];
    let km = [
        encode_at(c(6), p + q - pz)?,
        encode_at(c(7), p + q - pz)?,
        encode_at(c(8), q)?,
    ];
    let kn = [
        encode_at(c(9), p + q - pz)?,
        encode_at(c(10), p + q - pz)?,
        encode_at(c(11), q)?,
        encode_at(c(12), q)?,
    ];
    let one_z = 1u64 << pz;
    let one_p = 1u64 << p;

    // The sign and, concurrently, v = 2(11t/64)² from x² (no sign needed).
    let (mut cs, mut cv) = (ctx.fork(), ctx.fork());
    let sign = async {
        let c = &mut cs;
        // The two-round B2A: 64 bits fewer for one round more on the critical path.
        let bits = breakpoint_bits(
            c,
            &shift_components(x, cut),
            &[0],
            width,
            BitsForm {
                msb: MsbForm::OneRound,
                relay: true,
            },
            Width::W64,
        )
        .await?;
        let s = bits.first().ok_or(Error::bug("one sign bit"))?;
        mul(c, s, x).await
    };
    let (vk, vs) = SILU_V_SCALE;
    let x_vk = x.scale(vk);
    // The powers are only read mod 2^SILU_POWER_RING_BITS (see there).
    let pr = Width::new(SILU_POWER_RING_BITS).ok_or(Error::bug("power ring"))?;
    let v = super::mul::mul_trunc_in(&mut cv, x, &x_vk, 2 * f + vs - pz, (Width::W64, pr));
    let (sx, v) = try_join(sign, v).await?;
    let relu = x.sub(&sx)?;
    let t = relu.sub(&sx)?;

    let (mut cr, mut cp) = (ctx.fork(), ctx.fork());
    let t_cut = shift_components(&t, cut);
    // r·G is taken in a narrow ring and lifted: |G| < 0.3 where r = 1 (g(t) on the fit's
    // interval), so r·G stays within ±2^f = ±2^(k−2).
    let ring = Width::new(f + SILU_JOIN_HEADROOM_BITS).ok_or(Error::bug("join ring"))?;
    let range = breakpoint_bits(
        &mut cr,
        &t_cut,
        &[SILU_RANGE_CUT],
        width,
        BitsForm::FASTEST,
        ring,
    );
    let poly = async {
        let c = &mut cp;
        let n = t.len();
        // z = 11t/64 − 1 and T_2 = v − 4z − 3, at pz bits, exact but for v's truncation.
        let z = t
            .scale(SILU_Z_SCALE.0)
            .add_public_scalar(one_z.wrapping_neg());
        let t2 = lincomb(
            &[(&v, 1), (&z, 4u64.wrapping_neg())],
            (3 * one_z).wrapping_neg(),
        )?;
        // a_3 = z·T_2 and T_2² together, at p bits.
        let both = super::mul::mul_trunc_in(
            c,
            &Shares::concat(&[&z, &t2])?,
            &Shares::concat(&[&t2, &t2])?,
            2 * pz - p,
            (pr, pr),
        )
        .await?;
        let (a3, sq) = both.split_at(n)?;
        let t4 = sq.scale(2).add_public_scalar(one_p.wrapping_neg());
        // Q is only a first factor and a linear term of the final sum, so it is made in
        // the sum's ring, where its truncation's wrap vanishes: no strings.
        let sum_ring = Width::new(SILU_FINAL_SUM_BITS).ok_or(Error::bug("final sum ring"))?;
        let q4 = super::mul::square_trunc_in(c, &t4, p, (pr, sum_ring)).await?;
        // G at 2p + q bits: the two products' local cross terms plus the linear part, then
        // one reshare with the truncation to f bits.
        let lin = lincomb(
            &[(&z, kl[1]), (&t2, kl[2]), (&a3, kl[3]), (&t4, kl[4])],
            kl[0],
        )?;
        let q_part = q4.scale(kl[5]);
        let bm = lincomb(&[(&z, km[0]), (&t2, km[1]), (&a3, km[2])], 0)?;
        let bn = lincomb(&[(&z, kn[0]), (&t2, kn[1]), (&a3, kn[2]), (&t4, kn[3])], 0)?;
        let cut = (SILU_FINAL_CUT, SILU_FINAL_SUM_BITS);
        cut_fused_sum(
            c,
            &[(&t4, &bm), (&q4, &bn)],
            (&lin, &q_part),
            big,
            cut,
            ring,
        )
        .await
    };
    let (bits, g) = try_join(range, poly).await?;
    let r = bits.first().ok_or(Error::bug("one range bit"))?;
    let rg =
        super::reshare_lift_into(&mut ctx, super::mul::cross_terms(r, &g), ring, output).await?;
    relu.sub(&rg)
}
