//! The settings of a secure evaluation, common to every architecture: which approximation
//! each nonlinear layer uses and at what ring width comparisons run.

use puma_core::Width;
use puma_core::proto::{ExpApprox, GeluFit};

/// Which approximation of GeLU the secure model evaluates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GeluApprox {
    /// A piecewise polynomial of PUMA's shape and cost (8 rounds): [`GeluFit::PUMA`] (max
    /// error 0.0199) or [`GeluFit::MINIMAX`] (1.75e-3).
    Piecewise(GeluFit),
    /// [`puma_core::proto::gelu_chebyshev`] for the model's GeLU form (10 rounds; 1838 bits
    /// per element as the MLP evaluates it, from its input in Z_2^46 and lifted into its
    /// Z_2^56 by [`puma_core::proto::gelu_chebyshev_into`]; max error ≤ 1.3e-4): needed for
    /// logits within 2e-2 of plaintext on trained checkpoints.
    Precise,
}

/// Which SiLU a gated MLP evaluates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiluApprox {
    /// [`puma_core::proto::silu`]: PUMA-shaped piecewise polynomial (8 rounds), max error
    /// 0.0148 and 0.014 already at x = 0 — too coarse for small activations.
    Piecewise,
    /// [`puma_core::proto::silu_chebyshev`] (16 rounds; 2366 bits per element as the gated
    /// MLP evaluates it, lifted into its Z_2^56 by
    /// [`puma_core::proto::silu_chebyshev_into`]; max error 1.5e-4, exactly 0 or x beyond
    /// |x| = 11.57): needed for logits close to plaintext on trained checkpoints.
    Precise,
}

/// Settings of the secure evaluation; every party must pass the same value.
#[derive(Clone, Copy, Debug)]
pub struct SecureSettings {
    /// The exponential inside softmax.
    pub softmax_exp: ExpApprox,
    /// Ring width of the comparisons of the secure argmax over the logits.
    pub logit_compare_width: Width,
    /// The GeLU approximation.
    pub gelu: GeluApprox,
    /// The SiLU approximation.
    pub silu: SiluApprox,
    /// A public bound on |x| for every RMSNorm input (the residual stream); it sets how far
    /// RMSNorm scales its input down before squaring. Trained LLaMA models carry "massive
    /// activations" (SmolLM2-135M: 2.5e4), so the default is 2^15.
    pub residual_bound: f64,
}

impl Default for SecureSettings {
    fn default() -> Self {
        SecureSettings {
            softmax_exp: ExpApprox::Minimax,
            logit_compare_width: Width::W64,
            gelu: GeluApprox::Precise,
            silu: SiluApprox::Precise,
            residual_bound: 32768.0,
        }
    }
}
