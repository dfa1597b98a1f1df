//! Normalisation layers on shares: LayerNorm (with or without its affine part) and RMSNorm.

use puma_core::{Ctx, Error, Shares, proto};

use super::cost::LayerKind;

/// The smallest LayerNorm epsilon the core's LayerNorm accepts without overflowing its
/// rsqrt table: 1/√ε (times √2 for the table's power-of-two grid) must stay below 2^11
/// at f + 14 table bits. Models with a smaller ε (BERT: 1e-12) run with this one: the
/// relative change of 1/√(σ² + ε) is below ε_floor/(2σ²), 5e-4 on the smallest variance of
/// bert-tiny-random and 1e-4 on all-MiniLM-L6-v2's.
pub const LAYERNORM_EPS_FLOOR: f64 = 6e-7;

/// One shared normalisation layer over rows of width `d`.
pub enum Norm {
    /// LayerNorm with its affine part γ, β.
    LayerNorm {
        /// γ (`d`).
        gamma: Shares,
        /// β (`d`).
        beta: Shares,
        /// ε.
        eps: f64,
    },
    /// LayerNorm without affine part (γ and β folded into the next layer by the owner).
    LayerNormUnscaled {
        /// ε.
        eps: f64,
    },
    /// RMSNorm with weight γ.
    RmsNorm {
        /// γ (`d`).
        gamma: Shares,
        /// ε.
        eps: f64,
    },
    /// RMSNorm without weight (γ folded into the next layers by the owner).
    RmsNormUnscaled {
        /// ε.
        eps: f64,
    },
}

impl std::fmt::Debug for Norm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Norm::LayerNorm { .. } => "LayerNorm",
            Norm::LayerNormUnscaled { .. } => "LayerNormUnscaled",
            Norm::RmsNorm { .. } => "RmsNorm",
            Norm::RmsNormUnscaled { .. } => "RmsNormUnscaled",
        };
        f.write_str(name)
    }
}

impl Norm {
    /// The kind its cost is attributed to.
    pub fn kind(&self) -> LayerKind {
        match self {
            Norm::RmsNorm { .. } | Norm::RmsNormUnscaled { .. } => LayerKind::RmsNorm,
            Norm::LayerNorm { .. } | Norm::LayerNormUnscaled { .. } => LayerKind::LayerNorm,
        }
    }

    /// γ's shares, if the layer has them.
    pub fn weight(&self) -> Option<&Shares> {
        match self {
            Norm::LayerNorm { gamma, .. } | Norm::RmsNorm { gamma, .. } => Some(gamma),
            Norm::LayerNormUnscaled { .. } | Norm::RmsNormUnscaled { .. } => None,
        }
    }

    /// β's shares, if the layer has them.
    pub fn bias(&self) -> Option<&Shares> {
        match self {
            Norm::LayerNorm { beta, .. } => Some(beta),
            _ => None,
        }
    }

    /// Normalises each of the `rows` rows of width `d` of `x`. `residual_bound` is the
    /// public bound on |x| RMSNorm scales by (see
    /// [`SecureSettings::residual_bound`](super::SecureSettings::residual_bound)).
    ///
    /// # Errors
    /// `Misuse` for mismatched lengths; `Protocol` on a malformed message.
    pub async fn forward(
        &self,
        ctx: &mut Ctx,
        x: &Shares,
        rows: usize,
        d: usize,
        residual_bound: f64,
    ) -> Result<Shares, Error> {
        match self {
            Norm::LayerNorm { gamma, beta, eps } => {
                proto::layernorm_rows(ctx, x, rows, d, gamma, beta, eps.max(LAYERNORM_EPS_FLOOR))
                    .await
            }
            Norm::LayerNormUnscaled { eps } => {
                proto::layernorm_rows_unscaled(ctx, x, rows, d, eps.max(LAYERNORM_EPS_FLOOR)).await
            }
            Norm::RmsNorm { gamma, eps } => {
                proto::rms_norm_rows(ctx, x, rows, d, gamma, *eps, residual_bound).await
            }
            Norm::RmsNormUnscaled { eps } => {
                proto::rms_norm_rows_unscaled(ctx, x, rows, d, *eps, residual_bound).await
            }
        }
    }
}

/// The public kind of a norm layer, from which its shared tensors and [`Norm`] follow.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum NormKind {
    /// LayerNorm with γ and β.
    LayerNorm {
        /// ε.
        eps: f64,
    },
    /// LayerNorm whose γ and β the owner folded into the next layer.
    LayerNormUnscaled {
        /// ε.
        eps: f64,
    },
    /// RMSNorm with γ.
    RmsNorm {
        /// ε.
        eps: f64,
    },
    /// RMSNorm whose γ the owner folded into the next layers.
    RmsNormUnscaled {
        /// ε.
        eps: f64,
    },
}

impl NormKind {
    /// Whether the layer has a shared γ.
    pub fn has_weight(self) -> bool {
        !matches!(
            self,
            NormKind::LayerNormUnscaled { .. } | NormKind::RmsNormUnscaled { .. }
        )
    }

    /// Whether the layer has a shared β.
    pub fn has_bias(self) -> bool {
        matches!(self, NormKind::LayerNorm { .. })
    }

    /// The layer with its shared tensors (`Some` exactly where [`NormKind::has_weight`] and
    /// [`NormKind::has_bias`] say).
    ///
    /// # Errors
    /// `Bug` if a tensor is missing.
    pub fn build(self, weight: Option<Shares>, bias: Option<Shares>) -> Result<Norm, Error> {
        let missing = || Error::bug("a norm layer lacks its shared tensors");
        Ok(match self {
            NormKind::LayerNorm { eps } => Norm::LayerNorm {
                gamma: weight.ok_or_else(missing)?,
                beta: bias.ok_or_else(missing)?,
                eps,
            },
            NormKind::LayerNormUnscaled { eps } => Norm::LayerNormUnscaled { eps },
            NormKind::RmsNorm { eps } => Norm::RmsNorm {
                gamma: weight.ok_or_else(missing)?,
                eps,
            },
            NormKind::RmsNormUnscaled { eps } => Norm::RmsNormUnscaled { eps },
        })
    }
}
