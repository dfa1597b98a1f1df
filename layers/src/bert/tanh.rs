//! tanh on shares, for BERT's pooler (and RoBERTa's classification head), built from the
//! core's comparison, negExp and reciprocal: tanh(x) = sign(x)·(1 − e)/(1 + e) with
//! e = exp(−2|x|) ∈ (0, 1], so the exponential only sees non-positive inputs and the
//! reciprocal only [1, 2].

use puma_core::proto::{self, ExpApprox};
use puma_core::{Ctx, Error, Shares, Width};

/// Ring width of the sign comparison: |x| < 2^(31 − f) (8192 at f = 18).
const SIGN_RING_BITS: u32 = 32;
/// Extra fractional bits of 1/(1 + e).
const RECIP_EXTRA: u32 = 12;

/// tanh of every element, output at f fractional bits.
///
/// Schedule: s = `[x < 0]` (one comparison in Z_2^32, B2A), |x| = x − 2·s·x (one product,
/// no truncation: s is an integer), e = exp(−2|x|) by [`proto::neg_exp_with`] with
/// [`ExpApprox::Taylor2`] t = 8 (max |err| ≤ 1e-5), r = 1/(1 + e) by
/// [`proto::reciprocal_extra`] on [2^(f−1), 2^(f+2)) with 12 extra bits,
/// t = trunc((1 − e)·r), and the sign restored by one more exact product.
///
/// **Range**: |x| < 8192. **Error**: about 2e-5 (the exponential's error, halved by
/// 1/(1 + e) and doubled by the chain rule at most), plus the f-bit output grid.
/// Rounds: R_LT(32) + 1 + 1 + 19 + R_recip + 2 + 1 ≈ 43.
///
/// # Errors
/// `Protocol` if a message is malformed.
pub async fn tanh(ctx: &mut Ctx, x: &Shares) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    let width = Width::new(SIGN_RING_BITS).ok_or(Error::bug("tanh ring width"))?;
    let neg = proto::msb(&mut ctx, x, width).await?;
    let s = proto::b2a(&mut ctx, &neg).await?;
    let sx = proto::mul(&mut ctx, &s, x).await?;
    let abs = x.sub(&sx.scale(2))?;
    let e = proto::neg_exp_with(
        &mut ctx,
        &abs.scale(2).neg(),
        ExpApprox::Taylor2 { squarings: 8 },
    )
    .await?;
    let one = 1u64 << f;
    let den = e.add_public_scalar(one);
    let num = e.neg().add_public_scalar(one);
    let r = proto::reciprocal_extra(&mut ctx, &den, f - 1, f + 1, RECIP_EXTRA).await?;
    let t = proto::mul(&mut ctx, &num, &r).await?;
    let t = proto::trunc(&mut ctx, &t, f + RECIP_EXTRA).await?;
    let st = proto::mul(&mut ctx, &s, &t).await?;
    t.sub(&st.scale(2))
}
