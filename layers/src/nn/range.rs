//! The owner's check that its weights lie in the ranges the secure protocols support,
//! made before anything is shared.
//!
//! Fixed-point protocols do not fail outside their ranges: they wrap around and return
//! garbage (see "Supported ranges" in docs/PROTOCOLS.md). A valid checkpoint can still
//! leave them, for example with a final norm whose γ is scaled up by 10^4. Only the owner
//! sees the weights, so only the owner can check; it refuses with an error naming the
//! tensor instead of letting the parties compute nonsense. The weights alone do not say
//! everything (an embedding scaled up overflows the residual stream, not a weight), so
//! the owner also runs its plaintext model on a public calibration input and checks the
//! activations each protocol will see ([`decoder_range_check`]).

use std::sync::Arc;

use ndarray::ArrayView2;
use puma_core::{Error, FixedPoint};

use super::activation::{Activation, MLP_RING_BITS};
use super::decoder::{BlockTensor, DecoderArch, DecoderSpec, DecoderTensor};
use super::norm::NormKind;
use super::settings::{SecureSettings, SiluApprox};

/// The largest |γ|·√d a LayerNorm or RMSNorm supports (2^14): the norm's last product
/// must stay below 2^62 with 2f + 12 bits already taken (docs/PROTOCOLS.md, LayerNorm and
/// RMSNorm, Supported ranges).
pub const NORM_SCALE_LIMIT: f64 = 16384.0;

/// A weight outside the range a protocol supports.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "{tensor}: {what} is {value:.4e}, above the {limit} that {protocol} supports \
     (docs/PROTOCOLS.md, {protocol}, Supported ranges); the secure result would be garbage"
)]
pub struct RangeError {
    /// The tensor, by its checkpoint name where the architecture gives one.
    pub tensor: String,
    /// The quantity that is too large.
    pub what: &'static str,
    /// Its value.
    pub value: f64,
    /// Its limit.
    pub limit: f64,
    /// The protocol whose range it leaves.
    pub protocol: &'static str,
}

/// Whether `t` is the scale γ of a norm.
fn is_norm_weight(t: DecoderTensor) -> bool {
    matches!(
        t,
        DecoderTensor::FinalNormWeight
            | DecoderTensor::Block {
                part: BlockTensor::AttnNormWeight | BlockTensor::MlpNormWeight,
                ..
            }
    )
}

/// Checks a norm's γ (encoded at `fx`) of width `d` against [`NORM_SCALE_LIMIT`].
///
/// # Errors
/// [`RangeError`] naming `tensor` when max |γ|·√d reaches the limit.
pub fn check_norm_scale(
    tensor: impl FnOnce() -> String,
    gamma: &[u64],
    d: usize,
    fx: FixedPoint,
) -> Result<(), RangeError> {
    let max = gamma
        .iter()
        .map(|&g| fx.decode(g).abs())
        .fold(0.0_f64, f64::max);
    let value = max * (d as f64).sqrt();
    if value < NORM_SCALE_LIMIT {
        return Ok(());
    }
    Err(RangeError {
        tensor: tensor(),
        what: "max |γ|·√d",
        value,
        limit: NORM_SCALE_LIMIT,
        protocol: "LayerNorm / RMSNorm",
    })
}

/// Owner side: the first tensor of a decoder's weights outside its supported range, if
/// any (today the norms' scales; every other weight's magnitude is checked when it is
/// encoded).
///
/// # Errors
/// As [`DecoderArch::spec`], [`DecoderArch::check`] and [`DecoderArch::encode`], for an
/// invalid config or weights that do not match it.
pub fn decoder_range_violation<A: DecoderArch>(
    arch: &A,
    weights: &A::Weights,
    fx: FixedPoint,
) -> Result<Option<RangeError>, Error> {
    let spec = arch.spec()?;
    arch.check(weights)?;
    for (t, _) in spec.tensors()? {
        if is_norm_weight(t) {
            let gamma = arch.encode(weights, t, fx)?;
            if let Err(e) = check_norm_scale(|| arch.tensor_name(t), &gamma, spec.d, fx) {
                return Ok(Some(e));
            }
        }
    }
    Ok(None)
}

/// The largest magnitudes a plaintext forward pass reached where a protocol's supported
/// range applies: what the owner learns by running its own model on a calibration input.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ActivationPeaks {
    /// Over every norm's input rows: max |x − mean(row)| for LayerNorm, max |x| for
    /// RMSNorm.
    pub norm_input: f64,
    /// Max |score| entering a softmax (after the 1/√head_dim scaling).
    pub scores: f64,
    /// Max |x| entering the MLP's activation.
    pub activation: f64,
    /// Max |logit|.
    pub logits: f64,
    /// Max |y| over the MLP's products summed in its narrow ring
    /// ([`crate::nn::activation::MLP_RING_BITS`]): a gated MLP's act(gate)·up, and every
    /// output of the output projection before its bias.
    pub mlp_products: f64,
    /// Max |q|, |k| after the rotary embedding (rotary models; 0 otherwise), whose
    /// products with the rotation's coefficients are truncated at 3f fractional bits.
    pub rotated: f64,
}

impl ActivationPeaks {
    /// Raises `slot` to the largest |v| of `values`.
    pub fn raise(slot: &mut f64, values: impl IntoIterator<Item = f64>) {
        for v in values {
            *slot = slot.max(v.abs());
        }
    }

    /// Raises [`ActivationPeaks::norm_input`] by the rows of `x` as a norm of `kind` sees
    /// them.
    pub fn raise_norm_input(&mut self, kind: NormKind, x: ArrayView2<'_, f64>) {
        for row in x.rows() {
            let mean = match kind {
                NormKind::RmsNorm { .. } | NormKind::RmsNormUnscaled { .. } => 0.0,
                NormKind::LayerNorm { .. } | NormKind::LayerNormUnscaled { .. } => {
                    row.sum() / row.len().max(1) as f64
                }
            };
            Self::raise(&mut self.norm_input, row.iter().map(|v| v - mean));
        }
    }

    /// The first peak outside the range its protocol supports under `settings` and `fx`
    /// (docs/PROTOCOLS.md, Supported ranges), if any.
    pub fn violation(
        &self,
        spec: &DecoderSpec,
        settings: &SecureSettings,
        fx: FixedPoint,
    ) -> Option<RangeError> {
        let (norm_what, norm_limit, norm) = match spec.block_norm {
            NormKind::RmsNorm { .. } | NormKind::RmsNormUnscaled { .. } => {
                ("max |x|", settings.residual_bound, "RMSNorm")
            }
            NormKind::LayerNorm { .. } | NormKind::LayerNormUnscaled { .. } => {
                ("max |x − mean|", 8192.0, "LayerNorm")
            }
        };
        let (act_limit, act) = match (spec.activation, settings.silu) {
            (Activation::Silu, SiluApprox::Precise) => (4095.875, "Precise SiLU"),
            (Activation::Silu, SiluApprox::Piecewise) => (8186.0, "SiLU"),
            (Activation::Gelu(_), _) => (4091.875, "GeLU"),
        };
        // A product's raw value must stay below 2^62: 2^(62 − 2f) in real terms. In the
        // order of the dataflow, so that the first range left is named.
        let product_limit = 2f64.powi(62 - 2 * fx.frac_bits() as i32);
        [
            (
                "norm inputs (the residual stream)",
                norm_what,
                self.norm_input,
                norm_limit,
                norm,
            ),
            (
                "rotated queries and keys",
                "max |q|, |k|",
                self.rotated,
                2f64.powi(62 - 3 * fx.frac_bits() as i32),
                "Fused truncation",
            ),
            (
                "attention scores",
                "max |score|",
                self.scores,
                4096.0,
                "Softmax",
            ),
            (
                "MLP activation inputs",
                "max |x|",
                self.activation,
                act_limit,
                act,
            ),
            (
                "logits",
                "max |logit|",
                self.logits,
                product_limit,
                "Matrix product",
            ),
            (
                "MLP products (after the activation)",
                "max |y|",
                self.mlp_products,
                2f64.powi(MLP_RING_BITS as i32 - 2 - 2 * fx.frac_bits() as i32),
                "Narrow truncation and lift",
            ),
        ]
        .into_iter()
        // A NaN peak (an overflowing plaintext) counts as out of range too.
        .find(|&(_, _, value, limit, _)| value.is_nan() || value >= limit)
        .map(|(where_, what, value, limit, protocol)| RangeError {
            tensor: format!("{where_} on the calibration input"),
            what,
            value,
            limit,
            protocol,
        })
    }
}

/// The owner's calibration input for a model of `vocab` ids and `max_positions`
/// positions: 16 ids (fewer if the model has fewer positions) spread over the
/// vocabulary. Public and fixed, so that every owner's check is reproducible.
pub fn calibration_ids(vocab: usize, max_positions: usize) -> Vec<u32> {
    let n = max_positions.clamp(1, 16);
    (0..n)
        .map(|i| ((i * 7919 + 13) % vocab.max(1)) as u32)
        .collect()
}

/// Owner side, before sharing: [`decoder_range_violation`] on the weights, then the
/// plaintext model ([`DecoderArch::activation_peaks`]) on [`calibration_ids`] against
/// the ranges of the protocols `settings` selects.
///
/// # Errors
/// As [`decoder_range_violation`] and [`DecoderArch::activation_peaks`].
pub fn decoder_range_check<A: DecoderArch>(
    arch: &A,
    weights: &Arc<A::Weights>,
    settings: &SecureSettings,
    fx: FixedPoint,
) -> Result<Option<RangeError>, Error> {
    if let Some(e) = decoder_range_violation(arch, weights, fx)? {
        return Ok(Some(e));
    }
    let spec = arch.spec()?;
    let ids = calibration_ids(spec.vocab, spec.max_positions);
    let peaks = arch.activation_peaks(weights, &ids)?;
    Ok(peaks.and_then(|p| p.violation(&spec, settings, fx)))
}
