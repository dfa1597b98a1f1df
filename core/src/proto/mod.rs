//! Protocols over a [`Ctx`]: each is an `async fn` that forks its own context,
//! so calling one twice never reuses tags or randomness.
//!
//! Costs are given per element as **Rounds** (critical path) and **Bytes** sent per party
//! (payload, excluding frame and record headers); tests pin them.

mod and;
mod b2a;
mod blocks;
mod dpf;
mod drafts;
mod eq;
mod gelu;
mod input;
mod layernorm;
mod logistic;
mod masked_lt;
mod matmul;
mod maxpool;
mod msb;
mod mul;
mod neg_power;
mod reveal;
mod rmsnorm;
mod sample;
mod softmax;
mod trunc;

pub use and::and;
pub use b2a::{b2a, mul_bit, select};
pub use drafts::{Accepted, accept_drafts};
pub use eq::{eq, eq_public};
pub use gelu::{
    ACTIVATION_RING_BITS, GeluFit, GeluForm, gelu, gelu_chebyshev, gelu_chebyshev_input_bits,
    gelu_chebyshev_into, gelu_precise, gelu_with, silu, silu_chebyshev, silu_chebyshev_into,
};
pub use input::{
    share_input, share_input_parts, share_input_streamed, share_input_streamed_observed,
    share_one_hot,
};
pub use layernorm::{layernorm_rows, layernorm_rows_unscaled};
pub use logistic::tanh;
pub use masked_lt::{
    LT_THRESHOLDS_ROUNDS, lt_thresholds, lt_thresholds_bits, msb_masked, msb_masked_bits,
};
pub use matmul::{
    matmul, matmul_batch, matmul_batch_fixed, matmul_batch_summands, matmul_fixed, matmul_summands,
};
pub use maxpool::{
    DEFAULT_ALL_PAIRS_MAX, MaxMethod, argmax_rows, argmax_rows_with, max_rows, max_rows_with,
};
pub use msb::{
    MsbForm, lt, lt_public, lt_thresholds_carry, msb, msb_rounds, msb_rounds_with, msb_with,
};
pub use mul::{mul, mul_fixed, mul_summands, square, square_fixed};
pub use neg_power::{
    reciprocal, reciprocal_bits, reciprocal_extra, rsqrt, rsqrt_bits, rsqrt_scaled,
};
pub use reveal::{reveal_all, reveal_to};
pub use rmsnorm::{RmsScaling, rms_norm_rows, rms_norm_rows_unscaled};
pub use sample::{SAMPLING_GRID_BITS, SamplingParams, sample_rows};
pub use softmax::{
    ExpApprox, SOFTMAX_RING_BITS, neg_exp_with, softmax_input_bits, softmax_matmul_batch,
    softmax_matmul_batch_of_products, softmax_product_bits, softmax_rows, softmax_rows_with,
};
use trunc::{
    reshare_cut, reshare_lift, reshare_lift_into, reshare_trunc, reshare_trunc_narrow, trunc_in,
};
pub use trunc::{reshare_cut_summands, reshare_trunc_summands, trunc};

use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::ring::Width;
use crate::share::Shares;

/// Turns a 3-of-3 additive sharing `z_i` (one value per party, summing to the secret) into
/// replicated shares: re-mask with a zero sharing, send to `P_{i-1}`, receive from `P_{i+1}`.
///
/// Rounds: 1. Bytes: 8 per element per party.
pub(crate) async fn reshare(ctx: &mut Ctx, z: Vec<u64>) -> Result<Shares, Error> {
    reshare_in(ctx, z, Width::W64).await
}

/// [`reshare`] in the narrow ring Z_2^k of `ring`: replicated shares of Σ z_i mod 2^k, both
/// holders of each component keeping it reduced mod 2^k.
///
/// Rounds: 1. Bits: k per element per party.
pub(crate) async fn reshare_in(
    ctx: &mut Ctx,
    mut z: Vec<u64>,
    ring: Width,
) -> Result<Shares, Error> {
    let alpha = ctx.zero_share(z.len());
    for (v, a) in z.iter_mut().zip(&alpha) {
        *v = ring.reduce(v.wrapping_add(*a));
    }
    let me = ctx.me();
    let n = z.len();
    let z_next = ctx.exchange(me.prev(), &z, me.next(), n, ring).await?;
    Ok(Shares::from_parts(me, z, z_next))
}
