//! Activation functions on shares, by name, with the approximation the settings choose.

use puma_core::proto::GeluForm;
use puma_core::{Ctx, Error, Shares, Width, proto};

use super::cost::LayerKind;
use super::settings::{GeluApprox, SecureSettings, SiluApprox};

/// Bits of the ring in which the MLP's products after the activation are summed: the
/// precise activations lift their result into Z_2^56 only, a gated MLP's up projection
/// and its product with the activation are made there, and the output projection reads
/// its input mod 2^56 (docs/ARCHITECTURE.md, Decoder path; docs/PROTOCOLS.md, Narrow
/// truncation and lift). Each bit below 64 saves 5 bits per lifted or truncated element
/// and costs 2 per output of the product summed in the ring. The bound it sets: every
/// such product (SiLU(g)·u, and each output of the output projection) within ±2^(56 − 2 −
/// 2f), ±262,144 at f = 18; the owner's calibration checks it ([`super::range`]).
pub const MLP_RING_BITS: u32 = 56;

/// The ring of [`MLP_RING_BITS`].
///
/// # Errors
/// Never for the constant; `Bug` if it were out of range.
pub fn mlp_ring() -> Result<Width, Error> {
    Width::new(MLP_RING_BITS).ok_or(Error::bug("MLP ring width"))
}

/// The activation a model's MLP applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Activation {
    /// GeLU in its erf form or its tanh form.
    Gelu(#[serde(with = "GeluFormName")] GeluForm),
    /// SiLU (x·σ(x)).
    Silu,
}

/// How [`GeluForm`] (a core type, without serde) is written in a serialised spec.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(remote = "GeluForm")]
enum GeluFormName {
    Erf,
    Tanh,
}

impl Activation {
    /// The kind its cost is attributed to.
    pub fn kind(self) -> LayerKind {
        match self {
            Activation::Gelu(_) => LayerKind::Gelu,
            Activation::Silu => LayerKind::Silu,
        }
    }

    /// The activation of every element of `x`, with the approximation `settings` picks.
    ///
    /// # Errors
    /// `Protocol` on a malformed message.
    pub async fn forward(
        self,
        ctx: &mut Ctx,
        x: &Shares,
        settings: &SecureSettings,
    ) -> Result<Shares, Error> {
        match (self, settings.gelu, settings.silu) {
            (Activation::Gelu(_), GeluApprox::Piecewise(fit), _) => {
                proto::gelu_with(ctx, x, &fit).await
            }
            (Activation::Gelu(form), GeluApprox::Precise, _) => {
                proto::gelu_chebyshev(ctx, x, form).await
            }
            (Activation::Silu, _, SiluApprox::Piecewise) => proto::silu(ctx, x).await,
            (Activation::Silu, _, SiluApprox::Precise) => proto::silu_chebyshev(ctx, x).await,
        }
    }

    /// The narrowest ring in which [`Activation::forward_into`] reads its input under
    /// `settings` at `frac_bits` fractional bits, so that the projection before it can
    /// truncate into that ring only (5 bits per element fewer per bit below 64): 2f + 10
    /// bits for the precise GeLU ([`proto::gelu_chebyshev_input_bits`]; 46 at f = 18),
    /// Z_2^64 for the others. SiLU's result holds x itself (ReLU(x) = x − s·x), which its
    /// consumer reads mod 2^[`MLP_RING_BITS`], and the piecewise forms compare x over
    /// Z_2^32 and multiply it over Z_2^64.
    ///
    /// # Errors
    /// `Bug` if the ring were out of range (it is not for the formats sessions accept).
    pub fn input_ring(self, settings: &SecureSettings, frac_bits: u32) -> Result<Width, Error> {
        match (self, settings.gelu) {
            (Activation::Gelu(_), GeluApprox::Precise) => {
                Width::new(proto::gelu_chebyshev_input_bits(frac_bits).min(64))
                    .ok_or(Error::bug("activation input ring"))
            }
            _ => Ok(Width::W64),
        }
    }

    /// [`Activation::forward`] between narrow rings: x read mod 2^k only, k = `input`
    /// (at least [`Activation::input_ring`]), and the result for a consumer that reads it
    /// mod 2^m only, m = `output`: the precise approximations lift their join into that
    /// ring instead of Z_2^64 (40 bits per element fewer for m = 56); the others are made
    /// over Z_2^64, which also holds the value mod 2^m.
    ///
    /// # Errors
    /// `Misuse` if `input` is narrower than [`Activation::input_ring`]; `Protocol` on a
    /// malformed message.
    pub async fn forward_into(
        self,
        ctx: &mut Ctx,
        x: &Shares,
        settings: &SecureSettings,
        (input, output): (Width, Width),
    ) -> Result<Shares, Error> {
        if input.bits() < self.input_ring(settings, ctx.fixed().frac_bits())?.bits() {
            return Err(Error::misuse(
                "an activation's input ring is narrower than it reads",
            ));
        }
        match (self, settings.gelu, settings.silu) {
            (Activation::Gelu(form), GeluApprox::Precise, _) => {
                proto::gelu_chebyshev_into(ctx, x, form, (input, output)).await
            }
            (Activation::Silu, _, SiluApprox::Precise) => {
                proto::silu_chebyshev_into(ctx, x, output).await
            }
            _ => self.forward(ctx, x, settings).await,
        }
    }
}

impl From<crate::gpt2::config::Activation> for Activation {
    fn from(a: crate::gpt2::config::Activation) -> Activation {
        match a {
            crate::gpt2::config::Activation::GeluErf => Activation::Gelu(GeluForm::Erf),
            crate::gpt2::config::Activation::GeluTanh => Activation::Gelu(GeluForm::Tanh),
        }
    }
}
