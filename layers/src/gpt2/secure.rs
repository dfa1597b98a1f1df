//! GPT-2's wiring into the one decoder path ([`crate::nn::decoder`]): its public spec
//! (learned positions, pre-LN blocks with biases, plain GeLU MLP, tied LM head) and the
//! owner's encoding of each shared tensor from a Hugging Face checkpoint.
//!
//! Two exact rewrites happen on the owner's side before sharing: the query columns of the
//! attention weights and bias are scaled by 1/√head_dim (the attention scaling for free),
//! and ln_1's and ln_2's γ and β are folded into the layer each feeds,
//! (n·γ + β)·W + b = n·(diag(γ)·W) + (βW + b), so the block LayerNorms run without their
//! affine part (202,752 bits per row of 768 saved, no rounds added). ln_f keeps its γ and
//! β: folding it would need an untied copy of the LM head.

use std::sync::Arc;

use ndarray::{Array1, Array2};
use puma_core::{Error, FixedPoint};

use crate::gpt2::config::Gpt2Config;
use crate::gpt2::plain::PlainGpt2;
use crate::gpt2::weights::{Gpt2Weights, LayerNormWeights};
use crate::nn::decoder::{BlockTensor, DecoderArch, DecoderSpec, DecoderTensor, Positions};
use crate::nn::range::ActivationPeaks;
use crate::nn::{Heads, NormKind};

/// Encodes plaintext values at `fx`, into a vector of exactly `n` capacity.
pub(crate) fn encode_all(
    fx: FixedPoint,
    n: usize,
    xs: impl IntoIterator<Item = impl core::borrow::Borrow<f64>>,
) -> Result<Vec<u64>, Error> {
    let mut out = Vec::with_capacity(n);
    fx.encode_extend(xs.into_iter().map(|x| *x.borrow()), &mut out)?;
    Ok(out)
}

/// diag(γ)·W, element by element with its (row, column): the weight of a linear layer `W`
/// (`k × n`, input rows) fed by a LayerNorm with affine part γ, β, once γ is folded in.
/// Yielded rather than built, so that the owner encodes it without a folded copy. A γ
/// shorter than W's rows yields NaN there, which the encoding refuses.
fn folded_weight<'a>(
    ln: &'a LayerNormWeights,
    w: &'a Array2<f64>,
) -> impl Iterator<Item = ((usize, usize), f64)> + 'a {
    w.indexed_iter()
        .map(|((r, c), v)| ((r, c), v * ln.gamma.get(r).copied().unwrap_or(f64::NAN)))
}

/// βW + b: the bias of that layer once β is folded in.
fn fold_bias(ln: &LayerNormWeights, w: &Array2<f64>, b: &Array1<f64>) -> Array1<f64> {
    ln.beta.dot(w) + b
}

impl Gpt2Config {
    /// The decoder spec of these sizes, unchecked ([`Gpt2Config::validate`] counts the
    /// parameters of it).
    pub(crate) fn unchecked_spec(&self) -> DecoderSpec {
        let eps = self.layer_norm_epsilon;
        DecoderSpec {
            vocab: self.vocab_size,
            d: self.n_embd,
            layers: self.n_layer,
            heads: Heads {
                q: self.n_head,
                kv: self.n_head,
                dim: self.head_dim(),
            },
            inner: self.n_inner,
            max_positions: self.n_positions,
            positions: Positions::Learned,
            block_norm: NormKind::LayerNormUnscaled { eps },
            final_norm: NormKind::LayerNorm { eps },
            bias: true,
            gated: false,
            activation: self.activation.into(),
            tied_head: true,
        }
    }
}

impl DecoderArch for Gpt2Config {
    type Weights = Gpt2Weights;

    fn spec(&self) -> Result<DecoderSpec, Error> {
        self.validate()
            .map_err(|_| Error::misuse("invalid GPT-2 configuration"))?;
        Ok(self.unchecked_spec())
    }

    fn check(&self, w: &Gpt2Weights) -> Result<(), Error> {
        w.check_shapes(self)
            .map_err(|_| Error::misuse("weights do not match the config"))?;
        if w.lm_head.is_some() {
            return Err(Error::misuse("only GPT-2's tied LM head is supported"));
        }
        Ok(())
    }

    fn activation_peaks(
        &self,
        weights: &Arc<Gpt2Weights>,
        ids: &[u32],
    ) -> Result<Option<ActivationPeaks>, Error> {
        let plain = PlainGpt2::new(self.clone(), Arc::clone(weights))
            .map_err(|_| Error::misuse("weights do not match the config"))?;
        let peaks = plain
            .activation_peaks(ids)
            .map_err(|_| Error::misuse("the plaintext model cannot run the calibration input"))?;
        Ok(Some(peaks))
    }

    fn tensor_name(&self, t: DecoderTensor) -> String {
        // ln_1 and ln_2 are folded into the next layer's weights (see `folded_weight`).
        let block = |layer: usize, name: &str| format!("h.{layer}.{name}");
        match t {
            DecoderTensor::Embed => "wte.weight".into(),
            DecoderTensor::Positions => "wpe.weight".into(),
            DecoderTensor::FinalNormWeight => "ln_f.weight".into(),
            DecoderTensor::FinalNormBias => "ln_f.bias".into(),
            DecoderTensor::Block { layer, part } => match part {
                BlockTensor::QkvWeight => block(layer, "attn.c_attn.weight (with ln_1)"),
                BlockTensor::QkvBias => block(layer, "attn.c_attn.bias (with ln_1)"),
                BlockTensor::AttnOutWeight => block(layer, "attn.c_proj.weight"),
                BlockTensor::AttnOutBias => block(layer, "attn.c_proj.bias"),
                BlockTensor::MlpInWeight => block(layer, "mlp.c_fc.weight (with ln_2)"),
                BlockTensor::MlpInBias => block(layer, "mlp.c_fc.bias (with ln_2)"),
                BlockTensor::MlpOutWeight => block(layer, "mlp.c_proj.weight"),
                BlockTensor::MlpOutBias => block(layer, "mlp.c_proj.bias"),
                _ => t.name(),
            },
            DecoderTensor::LmHead => t.name(),
        }
    }

    fn encode(&self, w: &Gpt2Weights, t: DecoderTensor, fx: FixedPoint) -> Result<Vec<u64>, Error> {
        let d = self.n_embd;
        let scale = 1.0 / (self.head_dim() as f64).sqrt();
        let contiguous = |a: &Array2<f64>| encode_all(fx, a.len(), a.iter());
        let vector = |a: &Array1<f64>| encode_all(fx, a.len(), a.iter());
        let block = |layer: usize| {
            w.blocks
                .get(layer)
                .ok_or(Error::misuse("weights do not match the config"))
        };
        match t {
            DecoderTensor::Embed => contiguous(&w.wte),
            DecoderTensor::Positions => contiguous(&w.wpe),
            DecoderTensor::FinalNormWeight => vector(&w.ln_f.gamma),
            DecoderTensor::FinalNormBias => vector(&w.ln_f.beta),
            DecoderTensor::Block { layer, part } => {
                let b = block(layer)?;
                match part {
                    BlockTensor::QkvWeight => encode_all(
                        fx,
                        b.attn_w.len(),
                        folded_weight(&b.ln_1, &b.attn_w)
                            .map(|((_, c), v)| if c < d { v * scale } else { v }),
                    ),
                    BlockTensor::QkvBias => {
                        let bias = fold_bias(&b.ln_1, &b.attn_w, &b.attn_b);
                        encode_all(
                            fx,
                            bias.len(),
                            bias.iter()
                                .enumerate()
                                .map(|(c, v)| if c < d { v * scale } else { *v }),
                        )
                    }
                    BlockTensor::AttnOutWeight => contiguous(&b.proj_w),
                    BlockTensor::AttnOutBias => vector(&b.proj_b),
                    BlockTensor::MlpInWeight => encode_all(
                        fx,
                        b.fc_w.len(),
                        folded_weight(&b.ln_2, &b.fc_w).map(|(_, v)| v),
                    ),
                    BlockTensor::MlpInBias => vector(&fold_bias(&b.ln_2, &b.fc_w, &b.fc_b)),
                    BlockTensor::MlpOutWeight => contiguous(&b.fc_proj_w),
                    BlockTensor::MlpOutBias => vector(&b.fc_proj_b),
                    BlockTensor::AttnNormWeight
                    | BlockTensor::AttnNormBias
                    | BlockTensor::MlpNormWeight
                    | BlockTensor::MlpNormBias => {
                        Err(Error::bug("GPT-2's block norms are folded, not shared"))
                    }
                }
            }
            DecoderTensor::LmHead => Err(Error::bug("GPT-2's LM head is tied")),
        }
    }
}
