//! Activations built on the logistic function σ(x) = 1/(1 + e^−x) and evaluated from
//! negExp and the reciprocal rather than a polynomial: tanh(x) = 2σ(2x) − 1 (BERT's
//! pooler). (LLaMA's SiLU x·σ(x) is a polynomial protocol: [`super::silu_chebyshev`].)

use crate::engine::Ctx;
use crate::error::Error;
use crate::ring::Width;
use crate::share::Shares;

use super::mul::mul_trunc;
use super::{ExpApprox, b2a, msb, mul, neg_exp_with, reciprocal_extra};

/// Ring width of [`tanh`]'s sign comparison: exact for |x| < 2^(31 − f) (8192 at f = 18).
const TANH_SIGN_RING_BITS: u32 = 32;

/// Extra fractional bits of [`tanh`]'s 1/(1 + e) (f + 12 in total).
const TANH_RECIP_EXTRA: u32 = 12;

/// tanh of every element at f fractional bits: tanh(x) = sign(x)·(1 − e)/(1 + e) with
/// e = e^(−2|x|) ∈ (0, 1], so the exponential only sees non-positive inputs and the
/// reciprocal only [1, 2].
///
/// Schedule: s = `[x < 0]` (one MSB in Z_2^32, 6 rounds, and B2A, 1), |x| = x − 2·s·x (one
/// product, 1; no truncation: s is an integer), e = [`neg_exp_with`]`(−2|x|)` with
/// [`ExpApprox::Minimax`] (11), r = 1/(1 + e) by [`reciprocal_extra`] on
/// [2^(f−1), 2^(f+2)) with 12 extra bits (5: three octaves below 2^21 need no truncated u),
/// t = trunc((1 − e)·r, f + 12) with the truncation fused into the reshare (2), and the
/// sign restored by one more exact product, t − 2·s·t (1).
///
/// **Range** (contract): |x| < 4096 (negExp's cut-off comparison sees −2|x|).
/// **Error** (measured, tests/norm_activations.rs, f = 18, 100,009 points: [−12, 12] by
/// 1e-3, BERT-pooler-like normal inputs and edges up to ±4095): |y − tanh(x)| ≤ 1.2e-5,
/// from the exponential, the reciprocal and the f-bit output grid (2^−f = 3.8e-6);
/// tanh(0) = 0 exactly.
///
/// Rounds: 6 + 1 + 1 + 11 + 5 + 2 + 1 = **27**. Bits per element, summed over the
/// parties, at f = 18: 383 (sign) + 256 (B2A) + 192 (s·x) + 2186 (negExp) + 8122
/// (reciprocal, [`super::reciprocal_bits`]: three octaves of three sub-segments) + 312
/// ((1 − e)·r with its truncation by f + 12) + 192 (s·t) = **11,643 bits**; **Bytes**:
/// 11643·n/24 per party ≈ 485.13 per element (exact for n divisible by 24).
///
/// # Errors
/// `Misuse` for a fixed-point format the exponential refuses (f > 27); `Protocol` if a
/// message is malformed.
pub async fn tanh(ctx: &mut Ctx, x: &Shares) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    let lo = f
        .checked_sub(1)
        .ok_or(Error::misuse("tanh needs fractional bits"))?;
    let width = Width::new(TANH_SIGN_RING_BITS).ok_or(Error::bug("tanh ring width"))?;
    let neg = msb(&mut ctx, x, width).await?;
    let s = b2a(&mut ctx, &neg).await?;
    let sx = mul(&mut ctx, &s, x).await?;
    let abs = x.sub(&sx.scale(2))?;
    let e = neg_exp_with(&mut ctx, &abs.scale(2).neg(), ExpApprox::Minimax).await?;
    let one = 1u64 << f;
    let den = e.add_public_scalar(one);
    let num = e.neg().add_public_scalar(one);
    let r = reciprocal_extra(&mut ctx, &den, lo, f + 1, TANH_RECIP_EXTRA).await?;
    let t = mul_trunc(&mut ctx, &num, &r, f + TANH_RECIP_EXTRA).await?;
    let st = mul(&mut ctx, &s, &t).await?;
    t.sub(&st.scale(2))
}
