//! Activation functions on shares, by name, with the approximation the settings choose.

use puma_core::proto::GeluForm;
use puma_core::{Ctx, Error, Shares, proto};

use super::cost::LayerKind;
use super::settings::{GeluApprox, SecureSettings, SiluApprox};

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
}

impl From<crate::gpt2::config::Activation> for Activation {
    fn from(a: crate::gpt2::config::Activation) -> Activation {
        match a {
            crate::gpt2::config::Activation::GeluErf => Activation::Gelu(GeluForm::Erf),
            crate::gpt2::config::Activation::GeluTanh => Activation::Gelu(GeluForm::Tanh),
        }
    }
}
