//! The owner's check that its weights lie in the ranges the secure protocols support,
//! made before anything is shared.
//!
//! Fixed-point protocols do not fail outside their ranges: they wrap around and return
//! garbage (see "Supported ranges" in docs/PROTOCOLS.md). A valid checkpoint can still
//! leave them, for example with a final norm whose γ is scaled up by 10^4. Only the owner
//! sees the weights, so only the owner can check; it refuses with an error naming the
//! tensor instead of letting the parties compute nonsense.

use puma_core::{Error, FixedPoint};

use super::decoder::{BlockTensor, DecoderArch, DecoderTensor};

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
