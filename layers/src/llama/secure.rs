//! LLaMA's wiring into the one decoder path ([`crate::nn::decoder`]): its public spec
//! (rotary positions, RMSNorm, grouped-query attention without biases, SwiGLU MLP, tied or
//! untied LM head) and the owner's encoding of each shared tensor from a Hugging Face or
//! GGUF checkpoint. The query weights are scaled by 1/√head_dim before sharing (the
//! attention scaling for free); queries, keys and values share one product, as do the
//! gate and up projections. The block RMSNorms' γ is folded into the projections each
//! feeds, (x/rms ⊙ γ)·W = (x/rms)·(diag(γ)·W), so those norms run without their weight
//! (152,064 bits per row of 576 saved, no rounds added); the final norm keeps its γ, which
//! a tied LM head could not absorb.

use std::sync::Arc;

use ndarray::{Array1, Array2};
use puma_core::{Error, FixedPoint};

use super::config::LlamaConfig;
use super::plain::PlainLlama;
use super::weights::LlamaWeights;
use crate::gpt2::secure::encode_all;
use crate::nn::decoder::{BlockTensor, DecoderArch, DecoderSpec, DecoderTensor, Positions};
use crate::nn::range::ActivationPeaks;
use crate::nn::{Activation, Heads, NormKind};

/// The matrices `parts` (same number of rows, each with its scale factor) side by side,
/// row-major, row r multiplied by `gamma[r]` (the feeding norm's weight, folded in),
/// encoded: the fused `d × (q + 2kv)` and `d × 2I` weights.
fn encode_side_by_side(
    fx: FixedPoint,
    gamma: &Array1<f64>,
    parts: &[(&Array2<f64>, f64)],
) -> Result<Vec<u64>, Error> {
    let rows = gamma.len();
    if parts.iter().any(|(m, _)| m.nrows() != rows) {
        return Err(Error::misuse("weights do not match the config"));
    }
    let n: usize = parts.iter().map(|(m, _)| m.len()).sum();
    let mut out = Vec::with_capacity(n);
    for (r, g) in gamma.iter().enumerate() {
        for (m, s) in parts {
            fx.encode_extend(m.row(r).iter().map(|x| x * s * g), &mut out)?;
        }
    }
    Ok(out)
}

impl LlamaConfig {
    /// The decoder spec of these sizes, unchecked ([`LlamaConfig::validate`] counts the
    /// parameters of it).
    pub(crate) fn unchecked_spec(&self) -> DecoderSpec {
        let eps = self.rms_norm_eps;
        DecoderSpec {
            vocab: self.vocab_size,
            d: self.hidden_size,
            layers: self.num_hidden_layers,
            heads: Heads {
                q: self.num_attention_heads,
                kv: self.num_key_value_heads,
                dim: self.head_dim,
            },
            inner: self.intermediate_size,
            max_positions: self.max_position_embeddings,
            positions: Positions::Rotary {
                theta: self.rope_theta,
            },
            block_norm: NormKind::RmsNormUnscaled { eps },
            final_norm: NormKind::RmsNorm { eps },
            bias: false,
            gated: true,
            activation: Activation::Silu,
            tied_head: self.tie_word_embeddings,
        }
    }
}

impl DecoderArch for LlamaConfig {
    type Weights = LlamaWeights;

    fn spec(&self) -> Result<DecoderSpec, Error> {
        self.validate()
            .map_err(|_| Error::misuse("invalid LLaMA configuration"))?;
        Ok(self.unchecked_spec())
    }

    fn check(&self, w: &LlamaWeights) -> Result<(), Error> {
        w.check_shapes(self)
            .map_err(|_| Error::misuse("weights do not match the config"))?;
        if self.tie_word_embeddings && w.lm_head.is_some() {
            return Err(Error::misuse(
                "the config ties the LM head, the weights do not",
            ));
        }
        Ok(())
    }

    fn activation_peaks(
        &self,
        weights: &Arc<LlamaWeights>,
        ids: &[u32],
    ) -> Result<Option<ActivationPeaks>, Error> {
        let plain = PlainLlama::new(self.clone(), Arc::clone(weights))
            .map_err(|_| Error::misuse("weights do not match the config"))?;
        let peaks = plain
            .activation_peaks(ids)
            .map_err(|_| Error::misuse("the plaintext model cannot run the calibration input"))?;
        Ok(Some(peaks))
    }

    fn tensor_name(&self, t: DecoderTensor) -> String {
        let block = |layer: usize, name: &str| format!("model.layers.{layer}.{name}");
        match t {
            DecoderTensor::Embed => "model.embed_tokens.weight".into(),
            DecoderTensor::FinalNormWeight => "model.norm.weight".into(),
            DecoderTensor::LmHead => "lm_head.weight".into(),
            DecoderTensor::Block { layer, part } => match part {
                BlockTensor::QkvWeight => block(
                    layer,
                    "self_attn.{q,k,v}_proj.weight (with input_layernorm)",
                ),
                BlockTensor::AttnOutWeight => block(layer, "self_attn.o_proj.weight"),
                BlockTensor::MlpInWeight => block(
                    layer,
                    "mlp.{gate,up}_proj.weight (with post_attention_layernorm)",
                ),
                BlockTensor::MlpOutWeight => block(layer, "mlp.down_proj.weight"),
                _ => t.name(),
            },
            _ => t.name(),
        }
    }

    fn encode(
        &self,
        w: &LlamaWeights,
        t: DecoderTensor,
        fx: FixedPoint,
    ) -> Result<Vec<u64>, Error> {
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let layer = |l: usize| {
            w.layers
                .get(l)
                .ok_or(Error::misuse("weights do not match the config"))
        };
        match t {
            DecoderTensor::Embed => encode_all(fx, w.embed.len(), w.embed.iter()),
            DecoderTensor::FinalNormWeight => encode_all(fx, w.norm.len(), w.norm.iter()),
            DecoderTensor::LmHead => {
                let head = w.lm_head();
                encode_all(fx, head.len(), head.iter())
            }
            DecoderTensor::Block { layer: l, part } => {
                let l = layer(l)?;
                match part {
                    BlockTensor::QkvWeight => encode_side_by_side(
                        fx,
                        &l.attn_norm,
                        &[(&l.wq, scale), (&l.wk, 1.0), (&l.wv, 1.0)],
                    ),
                    BlockTensor::AttnOutWeight => encode_all(fx, l.wo.len(), l.wo.iter()),
                    BlockTensor::MlpInWeight => {
                        encode_side_by_side(fx, &l.mlp_norm, &[(&l.w_gate, 1.0), (&l.w_up, 1.0)])
                    }
                    BlockTensor::MlpOutWeight => encode_all(fx, l.w_down.len(), l.w_down.iter()),
                    BlockTensor::AttnNormWeight | BlockTensor::MlpNormWeight => {
                        Err(Error::bug("LLaMA's block norms are folded, not shared"))
                    }
                    _ => Err(Error::bug("LLaMA has no such tensor")),
                }
            }
            DecoderTensor::Positions | DecoderTensor::FinalNormBias => {
                Err(Error::bug("LLaMA has no such tensor"))
            }
        }
    }
}
