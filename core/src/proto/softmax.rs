//! negExp and softmax over the rows of a matrix (PUMA, Dong et al. 2023, §5.2;
//! docs/PROTOCOLS.md, negExp and Softmax), with public masks (causal attention) that drop
//! masked positions.

use alloc::vec;
use alloc::vec::Vec;

use crate::engine::{Ctx, try_join};
use crate::error::Error;
use crate::ring::Width;
use crate::share::{Shares, Summands};

use super::gelu::{BitsForm, encode_at, lincomb};
use super::maxpool::{Compare, MaxMethod, max_segments, max_segments_of_keys};
use super::mul::{cross_terms, mul_trunc, mul_trunc_in, square_trunc, square_trunc_in};
use super::{reciprocal_extra, reshare_in, reshare_trunc_narrow, reshare_trunc_summands, trunc_in};

/// Ring width k' of the comparisons in [`neg_exp_with`] and in the row maxima of the
/// softmax functions: 32 bits. [`neg_exp_with`] is exact on its branch while
/// |x + 14| < 2^(k'−1−f) = 8192 (f = 18); the softmax functions need |x| < 4096 for every
/// entry, so that row differences stay below 8192.
pub const SOFTMAX_RING_BITS: u32 = 32;
/// Fractional bits of x that [`neg_exp_with`]'s cutoff test keeps: x is cut locally, and
/// the test runs in Z_2^(32 − (f − 4)) (Z_2^18 at f = 18) over the same range.
const NEG_EXP_CUT_FRAC_BITS: u32 = 4;

/// Fractional bits inside the squaring chain of [`neg_exp_with`]: values in [0, 1] at 30
/// bits, so that squares stay below 2^62 and the {0, +1}-ulp truncations, doubled by every
/// later squaring, stay far below the approximation error (2^9 · 2^−30 ≈ 5e-7 at t = 9).
const NEG_EXP_BITS: u32 = 30;

/// Guard bits of [`neg_exp_with`]'s last square below its output grid: the square is cut
/// locally (its three parts shifted right, [`super::reshare_cut`]), which errs by up to 2
/// units of its grid, and the join's lift truncates these bits away with a stochastic
/// rounding. With 6 the cut adds at most 2^−5 output ulp to the rounding's 1.
const EXP_GUARD_BITS: u32 = 6;

/// Bits above the guarded square's fractional bits of [`neg_exp_with`]'s join ring: the
/// selected value e^x ≤ 1 (and its roundings) must stay within the lift's ±2^(k−2), so
/// k = out + 6 + 3 (31 bits inside the softmax at f = 18, 27 for [`neg_exp_with`]).
const EXP_JOIN_HEADROOM_BITS: u32 = 3;

/// Fractional bits of [`ExpApprox::Minimax`]'s powers and polynomial (f + 3 if that is
/// more, so that u = x/8 + 7/8 stays a left shift of x). No squaring chain amplifies them:
/// P's at most 16 units of 2^−25 (the truncations and the coefficients' rounding) move
/// P² by at most 2·16·2^−25 = 9.5e-7, a quarter of an output ulp at f = 18, and typically
/// far less; each bit fewer saves 36 bits per element over the nine truncations. (The
/// softmax tests cannot rank 24 against 25 bits: their adversarial figure, the stochastic
/// roundings of up to 1023 exponentials summed, moves between 2e-5 and 8e-5 with the
/// randomness alone; 25 keeps a quarter-ulp worst case.)
const MINIMAX_BITS: u32 = 25;

/// Fractional bits of the keys the softmax's row maxima compare: x is cut locally to
/// 4 fractional bits (a sharing of ⌊x·2^4⌋ − e, e ∈ {0, 1, 2}), compared in Z_2^(k'−f+5),
/// k' = [`SOFTMAX_RING_BITS`], where differences of entries within the range contract
/// stay below half the ring. Each bit fewer saves 17 bits per comparison (W = 5 at these
/// widths) and 7 per selected key; the maximum found may then sit 3·2^−4 below the row's,
/// so the slack subtracted before negExp grows to 3·2^−4 + 2^−12: the largest exponential
/// stays above e^−0.19 = 0.83 and the row sum above 1/2, the reciprocal's lower end (at 2
/// bits it would not). The minimax exponential's relative error is uniform, so the softmax
/// does not see the difference (tests/softmax.rs: 5.5e-6 either way).
const MAX_KEY_FRAC_BITS: u32 = 4;

/// Extra fractional bits of the row reciprocal inside the softmax functions (f + 12).
const SOFTMAX_RECIP_EXTRA: u32 = 12;

/// Extra fractional bits of the exponentials inside the softmax functions (f + 4): their
/// row sum adds up one stochastic rounding per entry, and at f bits that noise (σ ≈
/// √n·2^−f/√12 on a row of n) is the softmax's largest error on long rows of small
/// entries; 4 more bits divide it by 16 for no bytes (negExp's last truncation is 4 bits
/// shorter, the product that normalises 4 bits longer).
const SUM_EXTRA_BITS: u32 = 4;

/// How [`neg_exp_with`] and [`softmax_rows_with`] approximate e^x on [−14, 0].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpApprox {
    /// PUMA's (1 + x/2^t)^(2^t), t = `squarings` (PUMA uses 5). Relative error
    /// ≈ −x²/2^(t+1): max |out − e^x| = 8.55e-3 (t = 5), 1.05e-3 (t = 8), 5.3e-4 (t = 9).
    /// Rounds 2t + 1.
    Puma {
        /// t, 3 ≤ t ≤ 12.
        squarings: u32,
    },
    /// (1 + y + y²/2)^(2^t) with y = x/2^t: the second-order Taylor base cancels the x²
    /// term, relative error ≈ x³/(6·4^t): max |out − e^x| = 1.0e-3 (t = 4), 3.5e-6
    /// (t = 8). Two more rounds than PUMA's at the same t (y² first), so t = 4 costs the
    /// rounds of PUMA's t = 5 and t = 8 those of PUMA's t = 9, at 8× and 150× lower error.
    Taylor2 {
        /// t, 4 ≤ t ≤ 12.
        squarings: u32,
    },
    /// P(u)² with u = x/8 + 7/8 ∈ [−7/8, 7/8] and P the degree-12 polynomial of least
    /// maximum relative error to e^(x/2) on x ∈ [−14, 0] ([`ExpApprox::MINIMAX_COEFFS`]):
    /// relative error ≤ 4.1e-7 for P, ≤ 8.2e-7 for P² (max |P² − e^x| = 7.0e-7), uniform
    /// over the range, where Taylor2 t = 8's grows to 7e-3 at x = −14. Rounds 11: P by
    /// Paterson–Stockmeyer in 8, one squaring (1), the join (2).
    Minimax,
}

impl ExpApprox {
    /// Rounds of [`neg_exp_with`] for f ≤ 18 (its cutoff comparison, in Z_2^(36−f), takes
    /// 6 rounds with the one-round first layer; fewer above): the approximation's own
    /// rounds, or the cutoff branch's if they are fewer (7 in its fastest form; it takes
    /// the cheapest form that fits beside the chain), plus the join's 2.
    pub const fn rounds(self) -> u32 {
        // The cutoff's comparison width at f = 18: 32 − (18 − 4) = 18 bits.
        let width = SOFTMAX_RING_BITS - (18 - NEG_EXP_CUT_FRAC_BITS);
        let own = self.chain_rounds();
        let ring = 18 + EXP_GUARD_BITS + EXP_JOIN_HEADROOM_BITS;
        let cutoff = BitsForm::within(own, width, ring).rounds(width);
        if own > cutoff { own + 2 } else { cutoff + 2 }
    }

    /// Rounds of the approximation alone (branch (b) of [`neg_exp_with`]), its last
    /// squaring reshared in one round after a local cut.
    const fn chain_rounds(self) -> u32 {
        match self {
            ExpApprox::Puma { squarings } => 2 * squarings - 1,
            ExpApprox::Taylor2 { squarings } => 2 * squarings + 1,
            ExpApprox::Minimax => 9,
        }
    }

    /// Coefficients c_0 … c_12 of [`ExpApprox::Minimax`]'s P(u) = Σ c_k u^k ≈ e^(4u − 7/2)
    /// = e^(x/2) for u = x/8 + 7/8 ∈ [−7/8, 7/8].
    ///
    /// Fitted offline (`python3 scripts/fit-neg-exp.py`, numpy) by Lawson's iteratively
    /// reweighted least squares on the relative error P(u)/e^(4u − 7/2) − 1, on 20001
    /// Chebyshev points of [−7/8, 7/8] in the Chebyshev basis of u/(7/8), 400 iterations,
    /// then converted to powers of u; max relative error 4.09e-7, equioscillating.
    pub const MINIMAX_COEFFS: [f64; 13] = [
        0.030197383785751986,
        0.12078970737266707,
        0.24157968097487428,
        0.3221002509597722,
        0.3220855455984173,
        0.25771477999882075,
        0.17195373513227824,
        0.09815927325186782,
        0.04856581033936297,
        0.021530159273003585,
        0.009373234215424457,
        0.0037652086138913804,
        0.0008577219464864283,
    ];
}

/// e^x for x ≤ 0 (PUMA's negExp, Dong et al. 2023, §5.2; docs/PROTOCOLS.md, negExp): 0 if
/// x < −14, else the chosen approximation ([`ExpApprox`]), output at f fractional bits.
///
/// Schedule, two concurrent branches:
/// - (a) b = [x < −14] by one comparison on x cut locally to 4 fractional bits (a sharing
///   of ⌊16x⌋ − e, e ∈ {0, 1, 2}) in Z_2^(32−f+4) (Z_2^18 at f = 18): x < −14 always
///   reads as below and x ≥ −14 + 3/16 never does; between them e^x < 1.0e-6 (a quarter
///   of an output ulp at f = 18) may be zeroed. Then B2A into the join's ring Z_2^J,
///   J = f + 9 (below): the two-round B2A (R_LT + 2 = 8 rounds, 3J bits) whenever (b)
///   takes at least 8 rounds, i.e. for every approximation but Puma t = 3, so that (a)
///   stays hidden behind (b); for Puma t = 3 (5 rounds in (b)) the one-round B2A
///   (R_LT + 1 = 7 rounds, 4J bits);
/// - (b) [`ExpApprox::Puma`]: the squaring chain at 30 internal fractional bits: with
///   B = x + 2^t (local), y1 = trunc(B², 2f + 2t − 30) = (1 + x/2^t)² — the division by 2^t
///   is folded into that truncation —, then t − 2 squarings truncated by 30, and the last
///   one cut (below): t products, 2t − 1 rounds.
///   [`ExpApprox::Taylor2`] first computes the base B = 1 + y + y²/2 (y = x/2^t) at 30
///   fractional bits — y is a local shift of x, y²/2 = trunc(x², 2f + 2t + 1 − 30) costs
///   one product and one truncation — and then squares it t times (t − 1 truncations by
///   30, the last one cut). [`ExpApprox::Minimax`] evaluates its degree-12 polynomial
///   P(u), u = x/8 + 7/8 (a local shift), at 25 fractional bits (f + 3 for f > 22) by
///   Paterson–Stockmeyer,
///   A + u⁴·B1 + u⁸·B2, the truncations fused into the reshares: u² (2 rounds), {u³, u⁴}
///   (2), u⁸ (2) alongside the truncation of B1 and B2 (1), the fused sum u⁴·B1 + u⁸·B2 + A
///   (2), then P² cut (1). The last square is not truncated by a protocol: each party
///   shifts its part of the product right, to f + g fractional bits (g = 6 guard bits),
///   and reshares it in Z_2^J (one round, no strings; docs/PROTOCOLS.md, Narrow
///   truncation and lift). With a constant unit added it lies within (−2, 1] units of
///   2^−(f+g) of the exact square, −½ unit on average;
/// - join: (1 − b)·y + b·(−1), one fused product (no truncation: b is an integer) in
///   Z_2^J, truncated by g and lifted to Z_2^64 in one step (2; docs/PROTOCOLS.md,
///   Narrow truncation and lift): the selected e^x ≤ 1 at f + g bits stays within the
///   lift's ±2^(J−2). The −1 below the cutoff (one unit of the guard grid) is rounded up
///   to exactly 0 by the truncation, whose carry cannot occur for low bits all ones; a 0
///   would come out as one output ulp once in 2^g. Against a truncated last square and a
///   join over Z_2^64: the B2A and the square send J bits instead of 64, the square
///   needs no halves, strings nor second round, and the lift costs 2J + 64 + 4(64 − J + g)
///   instead of a 192-bit reshare.
///
/// **Range** (contract): x ≤ 0 (positive inputs overflow the chain) and
/// |x + 14| < 8191.8125 (the narrow comparison of the cut x); inputs below −2^(t+1) give garbage in branch (b) that b
/// zeroes exactly. **Error** (measured, tests/softmax.rs, 2·10^5 points on [−50, 0]):
/// Puma t = 5: ≤ 8.56e-3, t = 8: ≤ 1.07e-3 — the approximation's own maxima
/// max |(1 + x/2^t)^(2^t) − e^x| = 8.55e-3 and 1.05e-3 (near x = −2) — and at most 4e-6
/// from the protocol; Taylor2 t = 4: ≤ 1.1e-3, t = 8: ≤ 1e-5 (7.2e-6: approximation
/// 3.5e-6 plus protocol); Minimax ≤ 5e-6 (4.3e-6: approximation 7.0e-7, the rest the
/// output's stochastic rounding at f = 18, 1 ulp = 3.8e-6, and the cut's 2^−5 ulp at most).
///
/// Rounds: [`ExpApprox::rounds`]: Puma 2t + 1 for 4 ≤ t ≤ 12 (t = 5: **11**; t = 8: 17;
/// t = 9: 19), 9 for t = 3; Taylor2 2t + 3 (t = 4: **11**, t = 8: 19); Minimax **11**.
/// Bits per element, summed over the parties, with trunc(d) = 64 + 4d, J = f + 9 and
/// g = 6: Puma 133 (comparison in Z_2^18 with the two-round first layer; 201 with the
/// one-round one for t = 3, whose chain is too short to hide it; 383 in Z_2^32 on the
/// uncut x) + 3J (two-round B2A; 4J for t = 3) + 128·(t − 1) (squares, each truncation fused into the square's
/// reshare) + trunc(2f + 2t − 30) + (t − 2)·trunc(30) + 3J (the last square, cut) + 2J +
/// 64 + 4(64 − J + g) (the join's truncating lift); f = 18: t = 5 **1777 bits** (≈ 74
/// bytes per party and element with role rotation), t = 8 2737, t = 9 3057 (t = 3: 1232).
/// Taylor2 133 + 3J + 128 (x², fused truncation) + trunc(2f + 2t − 29) + 128·(t − 1) +
/// (t − 1)·trunc(30) + 3J + 2J + 64 + 4(64 − J + g): t = 4: **1773 bits**, t = 8: 3053;
/// Minimax 133 + 3J + 5·(3·53 + 4·25) (u², u³, u⁴, u⁸ and P, each product's truncation by
/// 25 fused into its reshare, all in Z_2^53) + 2·(53 + 4·25) (B1, B2) + 3J (P², cut) +
/// 2J + 64 + 4(64 − J + g) = **2186 bits** at f = 18 (≈ 91 bytes per party and element
/// with role rotation; Taylor2 t = 8: 127; 2460 with P² truncated and the join over
/// Z_2^64, 2625 with the chain there too). The cutoff's first layer and B2A take the
/// cheapest form that the chain's rounds hide (`BitsForm::within`).
///
/// # Errors
/// `Misuse` unless 3 ≤ t ≤ 12 (Puma) or 4 ≤ t ≤ 12 (Taylor2), 15 ≤ f + t ≤ 30 (Taylor2;
/// 16 ≤ f + t ≤ 31 for Puma) and f ≤ 30, or f ≤ 27 (Minimax); `Protocol` if a message is
/// malformed.
pub async fn neg_exp_with(ctx: &mut Ctx, x: &Shares, approx: ExpApprox) -> Result<Shares, Error> {
    neg_exp_at(ctx, x, approx, 0).await
}

/// [`neg_exp_with`] with its output at f + `extra` fractional bits (the last truncation
/// `extra` bits shorter: 4·`extra` bits fewer per element).
async fn neg_exp_at(
    ctx: &mut Ctx,
    x: &Shares,
    approx: ExpApprox,
    extra: u32,
) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    let chain = Chain::new(approx, f)?;
    let out = f + extra;
    // The cutoff is compared on x cut to 4 fractional bits, in a ring as much narrower as
    // the cut (the same range): x < −14 is always zeroed, x ≥ −14 + 3/16 never is, and
    // between them e^x < 1.0e-6, a quarter of an output ulp at f = 18.
    let cut = f.saturating_sub(NEG_EXP_CUT_FRAC_BITS);
    let width = SOFTMAX_RING_BITS
        .checked_sub(cut)
        .and_then(Width::new)
        .ok_or(Error::bug("softmax ring width"))?;
    let cutoff = (14u64 << (f - cut)).wrapping_neg();
    // The join's narrow ring: the selected square, e^x ≤ 1 (plus its roundings) at
    // `out` + g bits, is within the lift's ±2^(out+g+1).
    let guard = EXP_GUARD_BITS;
    let ring =
        Width::new(out + guard + EXP_JOIN_HEADROOM_BITS).ok_or(Error::bug("negExp join ring"))?;
    let form = BitsForm::within(approx.chain_rounds(), width.bits(), ring.bits());
    let (mut ca, mut cb) = (ctx.fork(), ctx.fork());
    let cut_x = super::gelu::shift_components(x, cut);
    let cutoffs = [cutoff];
    let branch_a = super::gelu::breakpoint_bits(&mut ca, &cut_x, &cutoffs, width, form, ring);
    let branch_b = async {
        // The chains end one squaring short: y² is e^x.
        let (y, chain_ring, y_frac) = match chain {
            Chain::Squarings {
                t,
                taylor,
                first_shift,
                y_shift,
            } => squaring_chain(&mut cb, x, f, t, taylor, (first_shift, y_shift)).await?,
            Chain::Minimax => minimax_chain(&mut cb, x, f).await?,
        };
        // The last square, cut locally to out + g bits and reshared into the join's ring.
        let d = (2 * y_frac)
            .checked_sub(out + guard)
            .ok_or(Error::bug("negExp's square below its output grid"))?;
        super::reshare_cut(&mut cb, cross_terms(&y, &y), chain_ring, d, ring).await
    };
    let (below, y) = try_join(branch_a, branch_b).await?;
    // Below the cutoff the piece is −1 on the guard grid, not 0: the lift's truncation
    // rounds a value ≡ −1 mod 2^g up with certainty (its low bits cannot carry), so those
    // outputs are exactly 0, where a 0 would come out as one output ulp once in 2^g.
    let minus_one = Shares::zeros(y.party(), y.len()).add_public_scalar(u64::MAX);
    let pieces = [Some(&minus_one), Some(&y)];
    super::gelu::join_pieces(&mut ctx, &below, &pieces, (ring, guard), Width::W64).await
}

/// Branch (b) of [`neg_exp_with`], its parameters checked before any message is sent.
enum Chain {
    /// PUMA's or the Taylor base, then squarings.
    Squarings {
        t: u32,
        taylor: bool,
        /// Truncation of the first square.
        first_shift: u32,
        /// Left shift of x to y = x/2^t at 30 bits (Taylor2).
        y_shift: u32,
    },
    /// [`ExpApprox::Minimax`].
    Minimax,
}

impl Chain {
    fn new(approx: ExpApprox, f: u32) -> Result<Chain, Error> {
        let (t, taylor) = match approx {
            ExpApprox::Puma { squarings } => (squarings, false),
            ExpApprox::Taylor2 { squarings } => (squarings, true),
            ExpApprox::Minimax => {
                // u = x/8 + 7/8 at max(25, f + 3) ≤ 30 bits is a left shift of x.
                return if f + 3 <= NEG_EXP_BITS {
                    Ok(Chain::Minimax)
                } else {
                    Err(Error::misuse("neg_exp: at most 27 fractional bits"))
                };
            }
        };
        let t_min = if taylor { 4 } else { 3 };
        let ft_max = if taylor {
            NEG_EXP_BITS
        } else {
            NEG_EXP_BITS + 1
        };
        if !(t_min..=12).contains(&t) || f + t > ft_max || f > NEG_EXP_BITS {
            return Err(Error::misuse(
                "neg_exp: squarings out of range for this fixed-point format",
            ));
        }
        // Truncation of the first square: (1 + x/2^t)² from 2f + 2t to 30 bits (PUMA), or
        // x²/2^(2t+1) from 2f to 30 bits (Taylor2); both must be a right shift.
        let misuse = || Error::misuse("neg_exp needs more fractional bits (f + t too small)");
        let first_shift = if taylor {
            (2 * f + 2 * t + 1).checked_sub(NEG_EXP_BITS)
        } else {
            (2 * f + 2 * t).checked_sub(NEG_EXP_BITS)
        }
        .filter(|&d| d >= 1)
        .ok_or_else(misuse)?;
        let y_shift = NEG_EXP_BITS.checked_sub(f + t).ok_or_else(misuse)?;
        Ok(Chain::Squarings {
            t,
            taylor,
            first_shift,
            y_shift,
        })
    }
}

/// (1 + x/2^t)^(2^(t−1)) or (1 + y + y²/2)^(2^(t−1)), y = x/2^t, over Z_2^64 at 30 bits
/// (returned with that ring and those bits), whose square is the approximation: 2t − 2
/// resp. 2t rounds.
async fn squaring_chain(
    c: &mut Ctx,
    x: &Shares,
    f: u32,
    t: u32,
    taylor: bool,
    (first_shift, y_shift): (u32, u32),
) -> Result<(Shares, Width, u32), Error> {
    // y1 = base² at 30 bits; `rest` squarings follow.
    let (mut y, rest) = if taylor {
        // B = 1 + y + y²/2 at 30 bits: y = x·2^(30 − f − t), y²/2 = x²/2^(2f + 2t + 1 − 30).
        let half_y2 = square_trunc(c, x, first_shift).await?;
        let base = x
            .scale(1u64 << y_shift)
            .add(&half_y2)?
            .add_public_scalar(1u64 << NEG_EXP_BITS);
        (base, t)
    } else {
        let base = x.add_public_scalar(1u64 << (t + f));
        (square_trunc(c, &base, first_shift).await?, t - 1)
    };
    for _ in 1..rest {
        y = square_trunc(c, &y, NEG_EXP_BITS).await?;
    }
    Ok((y, Width::W64, NEG_EXP_BITS))
}

/// [`ExpApprox::Minimax`]'s P(u), u = x/8 + 7/8, whose square is the approximation, with
/// every power and P at p = 25 fractional bits ([`MINIMAX_BITS`]; f + 3 for f > 22) in
/// Z_2^(2p+3) (returned with that ring and p): 8 rounds.
///
/// P = A + u⁴·B1 + u⁸·B2 (Paterson–Stockmeyer) with A = c0 + c1·u + c2·u² + c3·u³,
/// B1 = c4 + c5·u + c6·u² + c7·u³, B2 = c8 + c9·u + c10·u² + c11·u³ + c12·u⁴:
/// u² (rounds 1–2), {u³, u⁴} (3–4), u⁸ (5–6) alongside B1, B2 formed at 2p bits
/// (coefficients at p bits) and truncated by p (5), then the cross terms of u⁴·B1 and
/// u⁸·B2 plus A at 2p bits (coefficients at p bits, c0 at 2p) reshared and truncated to p
/// bits in one (7–8). Truncation errors are 2^−25 each (below 9.5e-7 on P² in all, see
/// [`MINIMAX_BITS`]).
///
/// Every |c_k| < 1/3 and, on the supported range x ∈ [−14, 0], |u| ≤ 7/8 and P ≤ 1, so
/// every product and every B stays below 2^(2p+1) raw. The chain is therefore made in
/// Z_2^(2p+3) (Z_2^53 at p = 25; docs/PROTOCOLS.md, Narrow truncation and lift): its
/// powers and P are only read by later products of the chain, P² included, whose cut
/// leaves out + 9 bits of that ring. Each truncation inside the chain sends 2·11 + 11 bits
/// fewer (the halves and R1's word) than over Z_2^64 and the B's 11 fewer. Inputs below
/// −14 give garbage here, as over Z_2^64, and the cutoff's selector zeroes it exactly.
async fn minimax_chain(c: &mut Ctx, x: &Shares, f: u32) -> Result<(Shares, Width, u32), Error> {
    let p = MINIMAX_BITS.max(f + 3);
    let ring = Width::new(2 * p + 3).ok_or(Error::bug("negExp chain ring"))?;
    let chain = (ring, ring);
    let n = x.len();
    let k = ExpApprox::MINIMAX_COEFFS;
    let at = |i: usize, bits: u32| encode_at(k.get(i).copied().unwrap_or(0.0), bits);
    let u = x
        .scale(1u64 << (p - 3 - f))
        .add_public_scalar(7u64 << (p - 3));
    let u2 = square_trunc_in(c, &u, p, chain).await?;
    let l2 = mul_trunc_in(
        c,
        &Shares::concat(&[&u, &u2])?,
        &Shares::concat(&[&u2, &u2])?,
        p,
        chain,
    )
    .await?;
    let (u3, u4) = l2.split_at(n)?;
    let b1 = lincomb(
        &[(&u, at(5, p)?), (&u2, at(6, p)?), (&u3, at(7, p)?)],
        at(4, 2 * p)?,
    )?;
    let b2 = lincomb(
        &[
            (&u, at(9, p)?),
            (&u2, at(10, p)?),
            (&u3, at(11, p)?),
            (&u4, at(12, p)?),
        ],
        at(8, 2 * p)?,
    )?;
    let (mut c8, mut cb) = (c.fork(), c.fork());
    let (u8, bs) = try_join(
        square_trunc_in(&mut c8, &u4, p, chain),
        trunc_in(&mut cb, &Shares::concat(&[&b1, &b2])?, p, chain),
    )
    .await?;
    let (b1, b2) = bs.split_at(n)?;
    let a = lincomb(
        &[(&u, at(1, p)?), (&u2, at(2, p)?), (&u3, at(3, p)?)],
        at(0, 2 * p)?,
    )?;
    let mut z = cross_terms(&u4, &b1);
    for ((zk, wk), ak) in z.iter_mut().zip(cross_terms(&u8, &b2)).zip(a.a()) {
        *zk = zk.wrapping_add(wk).wrapping_add(*ak);
    }
    let poly = reshare_trunc_narrow(c, z, ring, p, ring).await?;
    Ok((poly, ring, p))
}

/// The narrowest ring, in bits, in which [`softmax_rows_with`] and [`softmax_matmul_batch`]
/// read their input x at `frac_bits` fractional bits with `approx`, so that the product
/// before them (attention's scores) can be truncated into that ring only (5 bits per
/// element fewer per bit below 64): p + f + 6 for [`ExpApprox::Minimax`] (49 at f = 18),
/// whose chain reads u = x·2^(p−3−f) + 7/8 mod 2^(2p+3), while the row maxima and the
/// cutoff read x cut by f − 4 bits in rings of at most 19 bits; 64 for the others, whose
/// squaring chains start from x itself.
pub fn softmax_input_bits(frac_bits: u32, approx: ExpApprox) -> u32 {
    match approx {
        ExpApprox::Minimax => (MINIMAX_BITS.max(frac_bits + 3) + frac_bits + 6).min(64),
        _ => 64,
    }
}

/// Softmax of each row of a `rows × cols` row-major matrix with PUMA's negExp,
/// t = `squarings`. Same as [`softmax_rows_with`] with every row fully valid and
/// [`ExpApprox::Puma`]; see there for the method, range, error, rounds and bytes.
///
/// Rounds for rows of 32 and t = 5: **32**, whatever the number of rows while their
/// maxima compare at most 2^16 pairs (132 rows); 39 for a bulk call of more (one
/// tournament level first, [`crate::proto::MaxMethod`]).
///
/// # Errors
/// As [`softmax_rows_with`].
pub async fn softmax_rows(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    cols: usize,
    squarings: u32,
) -> Result<Shares, Error> {
    let valid = vec![cols; rows];
    softmax_rows_with(ctx, x, rows, cols, &valid, ExpApprox::Puma { squarings }).await
}

/// Softmax of each row of a `rows × cols` row-major matrix over its first `valid_len[r]`
/// entries (a public mask: the others are never compared and come out as exact zeros),
/// after PUMA's softmax (Dong et al. 2023, §5.2; docs/PROTOCOLS.md, Softmax):
/// 1. m = max of the valid entries (all rows in one [`MaxMethod::default`] run: all pairs
///    for rows of up to 32, and for longer rows while the call compares at most 2^16
///    pairs, e.g. 12 single-query rows of up to 105 keys in a KV-cached step; tournament
///    levels first otherwise). With [`ExpApprox::Minimax`] the comparisons take keys cut
///    locally to 4 fractional bits (⌊x·2^4⌋ − e, e ∈ {0, 1, 2}) in Z_2^(k'−f+5),
///    k' = [`SOFTMAX_RING_BITS`], by the three-round [`crate::proto::msb_masked`]. With
///    one level the selected value is exact; over several levels the keys themselves are
///    selected in that ring, and those left for the last level are lifted to Z_2^64 while
///    it compares them. Either
///    way m is at most the row's maximum and within 3·2^−4 of it. The other
///    approximations are not shift-invariant (the result would depend on which value near
///    the maximum is subtracted), so they compare the exact values by the carry tree in
///    Z_2^32;
/// 2. z = x − m − ε with ε = 2^−12 (64 units at f = 18; local), plus 3·2^−4 with cut
///    keys, so z ≤ −2^−12 < 0 and every negExp output is below 1;
/// 3. e = e^z by [`neg_exp_with`]'s protocol with its output at f + 4 fractional bits
///    (the sums below add one stochastic rounding per entry, 16 times smaller so);
/// 4. S = Σ e per row (local), S ∈ [e^−ε, n) for a row of n (e^−ε > 1/2);
/// 5. r = 1/S by [`reciprocal_extra`] on S at f + 4 bits, lo = f + 3,
///    hi = f + 3 + ⌈log2 n_max⌉ (S < n, every negExp output being below 1) and 16 extra
///    output bits (r at f + 12), once per row (6 rounds; 5 when hi ≤ 21);
/// 6. y = trunc(e·r, f + 16), r broadcast along the row.
///
/// Rows of different lengths are flattened into one vector: every step runs once for all
/// rows, so all rows share every round (rounds depend on the longest row only).
///
/// **Range** (contract): |x| < 4096 for every valid entry ([`SOFTMAX_RING_BITS`]).
///
/// **Error** is that of the exp approximation, propagated through the normalisation; the
/// protocol adds ≤ 6e-6 (measured against the same approximation evaluated in f64; 3.8e-5
/// for Taylor2 t = 4; with the exponentials summed at f bits, 2e-5 to 8e-5 depending on
/// the random draw, their stochastic roundings adding up over rows of 1024). Measured on rows of
/// 1…1024 entries uniform in [−50, 50], rows with one dominant entry, rows of equal
/// entries and tied maxima (tests/softmax.rs, 124121 entries), max |y − softmax(x)|, and
/// separately on adversarial rows (0, −c, …, −c), c ∈ [1, 10], n up to 1024:
///
/// | approx | negExp rounds | random, dominant, equal rows | adversarial rows |
/// |---|---|---|---|
/// | Puma t = 5 | 11 | 2.2e-2 | 0.20 |
/// | Puma t = 9 | 19 | 1.5e-3 | 1.3e-2 |
/// | Taylor2 t = 4 | 11 | 4.3e-3 | 9.3e-2 |
/// | Taylor2 t = 8 | 19 | 1.6e-5 | 2.6e-4 |
/// | Minimax | 11 | 6.1e-6 | 3.9e-6 |
///
/// PUMA's base underestimates e^z by ≈ z²/2^(t+1) relative, and many entries a few units
/// below the maximum add up (an f64 evaluation of the approximation alone gives the same
/// numbers: it is not the protocol); [`ExpApprox::Taylor2`] removes that term for two
/// rounds. So the targets 2e-2 (t = 5) and 1e-3 (t = 9) hold for PUMA's base only on short
/// or benign rows; Taylor2 meets them in the same rounds (t = 4, resp. t = 8 — the latter
/// on every row tested). [`ExpApprox::Minimax`]'s relative error is uniform (8.2e-7 on
/// [−14, 0]), so its figures are the protocol's rounding (the `protocol` figure of the test,
/// 5.4e-6, with the maxima compared on cut keys), in 8 negExp rounds fewer than Taylor2
/// t = 8 and with 28 % fewer bytes.
///
/// **Rounds** = R_max + R_exp + 6 + 2 with R_max the rounds of the maximum for the longest
/// row ([`crate::proto::max_rows_with`]'s with the carry tree; with cut keys each level
/// compares in 3 rounds instead of R_LT(32) = 6), R_exp those of [`ExpApprox::rounds`] and
/// 6 those of the row reciprocal ([`reciprocal_extra`]): n ≤ 32, Puma t = 5 (or Taylor2
/// t = 4): 13 + 11 + 6 + 2 = **32** (the baseline plan: 41; docs/PROTOCOLS.md, Baseline
/// plan); Minimax: 10 + 11 + 6 + 2 = **29**; Puma t = 9 (or Taylor2 t = 8): 40;
/// n = 1024: 5 tournament levels first, 53 + 11 + 6 + 2 = 72 (Minimax: 35 + 11 + 6 + 2 =
/// 54).
/// **Bits** per row of n (summed over the parties; a third per party with role rotation):
/// max (n = 32: 200886 by the carry tree, 169142 with cut keys: 496 comparisons of 319
/// bits instead of 383) + n·negExp at f + 4 bits (Puma t = 5: 1793; Minimax: 2202; 16
/// above [`neg_exp_with`]'s, whose join ring is 4 bits narrower) + the row's reciprocal
/// (n ≤ 32: 17419,
/// [`crate::proto::reciprocal_bits`]) plus n·(128 + 64 + 4(f + 16)) (final products with
/// their truncations fused into the reshare: 328 per entry); n = 32, Puma t = 5:
/// 200886 + 57376 + 17419 + 10496 = **286177 bits (35.8 KB) per row**; Minimax:
/// 169142 + 70464 + 17419 + 10496 = **267521**; pinned in tests/softmax.rs and
/// tests/cost_report.rs. Over several levels of cut keys, each B2A'd member costs
/// 4·(k' − f + 5) bits instead of 256 and each group's sum 3·(k' − f + 5) instead of
/// 192 (76 and 57 at f = 18), and the keys left for the last level are lifted, 2k + 64 +
/// 4(64 − k) bits each (282 at f = 18).
///
/// # Errors
/// `Misuse` if `x.len() ≠ rows·cols`, `valid_len.len() ≠ rows`, some valid length is 0 or
/// above `cols`, or for the parameters refused by [`neg_exp_with`]; `Protocol` if a
/// message is malformed.
pub async fn softmax_rows_with(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    cols: usize,
    valid_len: &[usize],
    approx: ExpApprox,
) -> Result<Shares, Error> {
    check_rows(x.len(), rows, cols, valid_len)?;
    let mut ctx = ctx.fork();
    let me = x.party();
    if rows == 0 {
        return Ok(Shares::zeros(me, 0));
    }
    let valid = ValidEntries::new(valid_len, cols);
    let flat = x.gather(&valid.flat_idx)?;
    let probs = softmax_segments(&mut ctx, flat, valid_len, &valid.seg_of, approx).await?;
    valid.scatter(&probs)
}

/// Where the valid entries of rows of `cols` with public valid lengths are: the flat
/// vector of valid entries, row by row, and the way back.
struct ValidEntries {
    /// Index in the full matrix of each valid entry.
    flat_idx: Vec<usize>,
    /// The row of each valid entry.
    seg_of: Vec<usize>,
    /// For each entry of the full matrix, its index among the valid ones (none if masked).
    layout: Vec<Option<usize>>,
}

impl ValidEntries {
    fn new(valid_len: &[usize], cols: usize) -> ValidEntries {
        let mut flat_idx = Vec::new();
        let mut seg_of = Vec::new();
        let mut layout = Vec::with_capacity(valid_len.len() * cols);
        for (r, &v) in valid_len.iter().enumerate() {
            for c in 0..cols {
                if c < v {
                    layout.push(Some(flat_idx.len()));
                    flat_idx.push(r * cols + c);
                    seg_of.push(r);
                } else {
                    layout.push(None);
                }
            }
        }
        ValidEntries {
            flat_idx,
            seg_of,
            layout,
        }
    }

    /// The full matrix from values of the valid entries, masked entries exactly 0.
    fn scatter(&self, values: &Shares) -> Result<Shares, Error> {
        let zero_at = values.len();
        let idx: Vec<usize> = self.layout.iter().map(|l| l.unwrap_or(zero_at)).collect();
        Shares::concat(&[values, &Shares::zeros(values.party(), 1)])?.gather(&idx)
    }
}

/// The shape checks of the softmax functions.
fn check_rows(x_len: usize, rows: usize, cols: usize, valid_len: &[usize]) -> Result<(), Error> {
    let total = rows
        .checked_mul(cols)
        .ok_or(Error::misuse("rows·cols overflows"))?;
    if x_len != total || valid_len.len() != rows {
        return Err(Error::misuse("softmax shapes do not match"));
    }
    if valid_len.iter().any(|&v| v == 0 || v > cols) {
        return Err(Error::misuse("valid lengths must be in 1..=cols"));
    }
    Ok(())
}

/// The sum of each consecutive segment (local, exact).
fn segment_sums(x: &Shares, lens: &[usize]) -> Result<Shares, Error> {
    let sum = |v: &[u64]| -> Result<Vec<u64>, Error> {
        let mut out = Vec::with_capacity(lens.len());
        let mut start = 0usize;
        for &l in lens {
            let seg = v
                .get(start..start + l)
                .ok_or(Error::bug("segments exceed the vector"))?;
            out.push(seg.iter().fold(0u64, |a, b| a.wrapping_add(*b)));
            start += l;
        }
        Ok(out)
    };
    Ok(Shares::from_parts(x.party(), sum(x.a())?, sum(x.b())?))
}

/// ⌈log2 n⌉ for n ≥ 1.
fn ceil_log2(n: usize) -> u32 {
    usize::BITS - n.saturating_sub(1).leading_zeros()
}

/// Softmax of consecutive segments of `x` with lengths `lens` (`seg_of[i]` the segment of
/// element i).
async fn softmax_segments(
    ctx: &mut Ctx,
    x: Shares,
    lens: &[usize],
    seg_of: &[usize],
    approx: ExpApprox,
) -> Result<Shares, Error> {
    let f = ctx.fixed().frac_bits();
    let (e, sums) = exps_and_sums(ctx, Entries::Ready(x), lens, seg_of, approx).await?;
    let (lo, hi) = sum_range(f, lens);
    // r = 1/S at f + SOFTMAX_RECIP_EXTRA bits from S at f + SUM_EXTRA_BITS.
    let r = reciprocal_extra(ctx, &sums, lo, hi, SOFTMAX_RECIP_EXTRA + SUM_EXTRA_BITS).await?;
    // 6. Broadcast product.
    let d = f + SOFTMAX_RECIP_EXTRA + SUM_EXTRA_BITS;
    mul_trunc(ctx, &e, &r.gather(seg_of)?, d).await
}

/// The valid entries of a softmax, one row after another: shares at f fractional bits,
/// or the summands of their products at 2f bits read mod 2^k (k the [`Width`]), which the
/// softmax truncates itself, cutting the maxima's keys from them first.
enum Entries {
    /// Shares of the entries.
    Ready(Shares),
    /// Summands of the entries' products and the ring they are read in.
    Products(Summands, Width),
}

/// Steps 1–4 of the softmax: e^(x − max − ε) per element and the sums S per segment.
async fn exps_and_sums(
    ctx: &mut Ctx,
    entries: Entries,
    lens: &[usize],
    seg_of: &[usize],
    approx: ExpApprox,
) -> Result<(Shares, Shares), Error> {
    let f = ctx.fixed().frac_bits();
    // 1. Row maxima. With the minimax exponential (uniform relative error, so the softmax
    // does not depend on which value near the maximum is subtracted) they compare keys
    // cut to 4 fractional bits, in three rounds each; the other approximations are not
    // shift-invariant and compare the exact values.
    let method = MaxMethod::default();
    let coarse = approx == ExpApprox::Minimax;
    let shift = f.saturating_sub(MAX_KEY_FRAC_BITS);
    let key_width = (SOFTMAX_RING_BITS + 1)
        .checked_sub(shift)
        .and_then(Width::new);
    let (x, max, compare) = match entries {
        Entries::Products(s, input) if coarse => {
            // The keys are cut from the products themselves (each party shifts its
            // summand) and shared in one round, so the comparisons start a round before
            // the products' own truncation, which they overlap.
            let width = key_width.ok_or(Error::bug("softmax ring width"))?;
            let cut_by = f + shift;
            if input.bits() < cut_by + width.bits() {
                return Err(Error::misuse(
                    "softmax products read in a ring too narrow for their maxima's keys",
                ));
            }
            let cut: Vec<u64> = s
                .words()
                .iter()
                .map(|&w| input.reduce(w) >> cut_by)
                .collect();
            let mut ck = ctx.fork();
            let keys = reshare_in(&mut ck, cut, width).await?;
            let ring = Width::new(softmax_input_bits(f, approx)).ok_or(Error::bug("ring"))?;
            let mut cx = ctx.fork();
            let x = reshare_trunc_summands(&mut cx, s, input, f, ring);
            let (x, max) =
                max_segments_of_keys(ctx, x, &keys, lens, (width, shift), method).await?;
            (x, max, Compare::Coarse { shift })
        }
        entries => {
            let x = match entries {
                Entries::Ready(x) => x,
                Entries::Products(s, input) => {
                    let ring =
                        Width::new(softmax_input_bits(f, approx)).ok_or(Error::bug("ring"))?;
                    reshare_trunc_summands(ctx, s, input, f, ring).await?
                }
            };
            let (compare, width) = if coarse {
                (Compare::Coarse { shift }, key_width)
            } else {
                (Compare::Exact, Width::new(SOFTMAX_RING_BITS))
            };
            let width = width.ok_or(Error::bug("softmax ring width"))?;
            let (max, _) = max_segments(ctx, &x, lens, width, method, false, compare).await?;
            (x, max, compare)
        }
    };
    // 2. z = x − max − ε', ε' = 2^−12 plus what the keys' cut may cost: the selected
    // maximum is at most the row's (or 1 unit above it, with keys cut from the products
    // over several levels) and within 3·2^shift (raw; + 1 with keys cut from the
    // products) below it, whatever the levels (one level selects the exact value, several
    // select and lift the keys).
    let mut eps = if f >= 12 { 1u64 << (f - 12) } else { 1 };
    if let Compare::Coarse { shift } = compare {
        eps += 3u64 << shift;
    }
    let z = x
        .sub(&max.gather(seg_of)?)?
        .add_public_scalar(eps.wrapping_neg());
    // 3. negExp, at f + SUM_EXTRA_BITS fractional bits.
    let e = neg_exp_at(ctx, &z, approx, SUM_EXTRA_BITS).await?;
    // 4. Row sums.
    let sums = segment_sums(&e, lens)?;
    Ok((e, sums))
}

/// The reciprocal's range for the sums, held at f + g fractional bits (g =
/// [`SUM_EXTRA_BITS`]): e^−ε ≤ S < n (every negExp output is below 1), so
/// 2^(f+g−1) ≤ S·2^(f+g) < 2^(f + g + ⌈log2 n⌉) for the longest segment n.
fn sum_range(f: u32, lens: &[usize]) -> (u32, u32) {
    let n_max = lens.iter().copied().max().unwrap_or(1);
    let g = SUM_EXTRA_BITS;
    (f + g - 1, f + g + ceil_log2(n_max) - 1)
}

/// Extra fractional bits of the row reciprocal in [`softmax_matmul_batch`] (f + 8): its
/// product with e·V sits at 2f + 8 bits, so outputs up to 2^18 stay inside the
/// truncation's range.
const DEFERRED_RECIP_EXTRA: u32 = 8;

/// softmax(X_b)·V_b for `batches` problems, each `rows` query rows over `keys` keys and
/// values of width `dim` (`x`: `batches × rows × keys`, `v`: `batches × keys × dim`,
/// row-major), row r (over all batches) seeing its first `valid_len[r]` keys — attention's
/// last two steps with the normalisation deferred past the product with V
/// (docs/PROTOCOLS.md, Softmax, deferred normalisation).
///
/// Steps 1–4 of [`softmax_rows_with`] give e = e^(x − max − ε) at f + 4 fractional bits
/// and the row sums S; then, concurrently, r = 1/S ([`reciprocal_extra`], r at f + 8 bits)
/// and E·V (the unnormalised rows times V, masked entries exactly 0, truncated by f + 4
/// back to f bits); last, y = trunc((E·V)·r, f + 8), r broadcast along each output row.
/// The product
/// with V hides behind the reciprocal, so the pair costs the softmax's rounds alone: 2
/// rounds fewer than [`softmax_rows_with`] followed by the product.
///
/// **Range** (contract): as [`softmax_rows_with`] for x (read mod 2^[`softmax_input_bits`]
/// only, so a producer may truncate into that ring), and for V: every |v| < 2^(62 −
/// 2f − 8) (2^18 at f = 18) and keys·max|v| < 2^(58 − 2f) (E·V at 2f + 4 bits before its
/// truncation; 2^22 at f = 18, e.g. |v| < 4096 over 1024 keys).
///
/// **Error**: e's rounding is not amplified by r before the product (each output carries
/// E·V's truncation times r ≤ 1, and r's relative error, below n·2^−(f+8)), so the result
/// is at least as close to softmax(x)·V as [`softmax_rows_with`] followed by the product;
/// measured in tests/softmax.rs against f64.
///
/// **Rounds**: those of [`softmax_rows_with`] (29 for rows of up to 32 keys with
/// [`ExpApprox::Minimax`]): the product with V (2) runs beside the reciprocal (6).
/// **Bits**: [`softmax_rows_with`]'s with the final products on the `rows × dim` outputs
/// instead of the valid probabilities (128 + 64 + 4(f + 8) = 296 bits per output at
/// f = 18 instead of 328 per probability) and the reciprocal at 12 extra bits (r at
/// f + 8 from S at f + 4) instead of 16, plus the product with V (128 + 64 + 4(f + 4) =
/// 280 per output); GPT-2's attention (12 × 32 causal rows over 32 keys, heads of 64):
/// 150377.5 bits per row on average, pinned in tests/softmax.rs and tests/cost_report.rs.
///
/// # Errors
/// `Misuse` for mismatched shapes or valid lengths, or the parameters refused by
/// [`neg_exp_with`]; `Protocol` if a message is malformed.
pub async fn softmax_matmul_batch(
    ctx: &mut Ctx,
    x: &Shares,
    v: &Shares,
    batches: usize,
    dims: (usize, usize, usize),
    valid_len: &[usize],
    approx: ExpApprox,
) -> Result<Shares, Error> {
    let valid = check_batch(x.len(), v, batches, dims, valid_len)?;
    let flat = x.gather(&valid.flat_idx)?;
    let entries = Entries::Ready(flat);
    deferred(ctx, entries, (&valid, valid_len), v, batches, dims, approx).await
}

/// [`softmax_matmul_batch`] from the summands of the entries' products at 2f fractional
/// bits (attention's scores Q·Kᵀ before any truncation), read mod 2^k, k = `input`, which
/// must be at least [`softmax_product_bits`]. Only the valid entries are truncated, into
/// the softmax's input ring. With [`ExpApprox::Minimax`] the row maxima's keys are cut
/// from the products (each party shifts its summand by 2f − 4 bits) and reshared in
/// Z_2^(k'−f+5) in one round, so the comparisons start a round before the products' own
/// two-round truncation ends (docs/PROTOCOLS.md, Softmax, keys from the products).
///
/// **Range** and **Error**: as [`softmax_matmul_batch`]; the keys are cut from the exact
/// products rather than from their truncation, which moves the selected maximum by at
/// most one unit, inside the slack subtracted before negExp.
///
/// **Rounds**: one fewer than the products' truncation followed by
/// [`softmax_matmul_batch`] (2 + 29 = 31 → **30** for rows of up to 32 keys with
/// [`ExpApprox::Minimax`]). **Bits**: those two, with only the valid entries truncated
/// (2k + m + 4·max(0, m − k + f) each, m = [`softmax_input_bits`]: 215 at f = 18 with
/// k = 51), plus 3·(k' − f + 5) = 57 bits per valid entry for the keys' reshare; GPT-2's
/// attention (12 × 32 causal rows over 32 keys, heads of 64): pinned in tests/softmax.rs
/// and tests/cost_report.rs.
///
/// # Errors
/// As [`softmax_matmul_batch`], and `Misuse` if `input` is narrower than
/// [`softmax_product_bits`] (or, with more than 31 fractional bits, than the maxima's
/// keys need).
#[allow(clippy::too_many_arguments)]
pub async fn softmax_matmul_batch_of_products(
    ctx: &mut Ctx,
    products: &Summands,
    input: Width,
    v: &Shares,
    batches: usize,
    dims: (usize, usize, usize),
    valid_len: &[usize],
    approx: ExpApprox,
) -> Result<Shares, Error> {
    let f = ctx.fixed().frac_bits();
    if input.bits() < softmax_product_bits(f) {
        return Err(Error::misuse(
            "softmax products must be read in at least softmax_product_bits",
        ));
    }
    let valid = check_batch(products.len(), v, batches, dims, valid_len)?;
    let flat = products.gather(&valid.flat_idx)?;
    let entries = Entries::Products(flat, input);
    deferred(ctx, entries, (&valid, valid_len), v, batches, dims, approx).await
}

/// The narrowest ring, in bits, in which [`softmax_matmul_batch_of_products`] reads its
/// products at 2f fractional bits: f + k' + 1 (51 at f = 18, k' =
/// [`SOFTMAX_RING_BITS`]). Entries within the range contract (|x| < 2^(k'−2−f)) have
/// products below 2^(k'−2+f), and the maxima's keys, cut by 2f − 4 bits, need k' − f + 5
/// bits.
pub fn softmax_product_bits(frac_bits: u32) -> u32 {
    (frac_bits + SOFTMAX_RING_BITS + 1).min(64)
}

/// The shape checks of [`softmax_matmul_batch`] for entries of length `x_len`; the valid
/// entries' layout.
fn check_batch(
    x_len: usize,
    v: &Shares,
    batches: usize,
    (rows, keys, dim): (usize, usize, usize),
    valid_len: &[usize],
) -> Result<ValidEntries, Error> {
    let all_rows = batches
        .checked_mul(rows)
        .ok_or(Error::misuse("batches·rows overflows"))?;
    check_rows(x_len, all_rows, keys, valid_len)?;
    let v_len = batches
        .checked_mul(keys)
        .and_then(|n| n.checked_mul(dim))
        .ok_or(Error::misuse("batches·keys·dim overflows"))?;
    if v.len() != v_len {
        return Err(Error::misuse("softmax values do not match the keys"));
    }
    Ok(ValidEntries::new(valid_len, keys))
}

/// [`softmax_matmul_batch`] on the valid entries, checked by [`check_batch`].
async fn deferred(
    ctx: &mut Ctx,
    entries: Entries,
    (valid, valid_len): (&ValidEntries, &[usize]),
    v: &Shares,
    batches: usize,
    (rows, keys, dim): (usize, usize, usize),
    approx: ExpApprox,
) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let me = v.party();
    let all_rows = batches * rows;
    if all_rows == 0 || dim == 0 {
        return Ok(Shares::zeros(me, all_rows * dim));
    }
    let f = ctx.fixed().frac_bits();
    let (e, sums) = exps_and_sums(&mut ctx, entries, valid_len, &valid.seg_of, approx).await?;
    let e_rows = valid.scatter(&e)?;
    let (lo, hi) = sum_range(f, valid_len);
    let (mut cr, mut cm) = (ctx.fork(), ctx.fork());
    // r = 1/S at f + 8 bits from S at f + g; E·V back to f bits (E at f + g).
    let g = SUM_EXTRA_BITS;
    let (r, ev) = try_join(
        reciprocal_extra(&mut cr, &sums, lo, hi, DEFERRED_RECIP_EXTRA + g),
        super::matmul::matmul_batch_trunc(&mut cm, &e_rows, v, batches, (rows, keys, dim), f + g),
    )
    .await?;
    let row_of: Vec<usize> = (0..all_rows)
        .flat_map(|r| core::iter::repeat_n(r, dim))
        .collect();
    mul_trunc(&mut ctx, &ev, &r.gather(&row_of)?, f + DEFERRED_RECIP_EXTRA).await
}
