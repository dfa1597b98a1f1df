//! BERT / RoBERTa configuration, read from a Hugging Face `config.json`.
//!
//! Only the fields the encoder needs are read; options that would change the computation
//! in ways this crate does not implement (relative position embeddings, decoders,
//! cross-attention) are rejected rather than ignored.

use std::path::Path;

use serde::Deserialize;

use super::error::BertError;
use super::secure::{BertHeads, parameters};
use crate::gpt2::config::Activation;
use crate::limits;

/// Which of the two architectures (they differ in tensor prefix, positions and head).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BertFlavor {
    /// `model_type` `"bert"` (also used by MiniLM, all-MiniLM-L6-v2, …): positions
    /// `0, 1, …`; pooler + `classifier` head.
    Bert,
    /// `model_type` `"roberta"`: positions start at `pad_token_id + 1` and skip padding;
    /// the classification head is `classifier.dense` (+ tanh) and `classifier.out_proj`
    /// on the first token.
    Roberta,
}

/// The architecture of a BERT or RoBERTa encoder.
///
/// Construct it with [`BertConfig::from_json_str`] or [`BertConfig::from_file`], which
/// validate it; a hand-built value (or one deserialised from its serde form, which a
/// share store keeps) should be checked with [`BertConfig::validate`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BertConfig {
    /// BERT or RoBERTa.
    pub flavor: BertFlavor,
    /// Rows of the word embedding.
    pub vocab_size: usize,
    /// Width of the hidden states (`d`).
    pub hidden_size: usize,
    /// Number of encoder layers.
    pub num_hidden_layers: usize,
    /// Number of attention heads; `hidden_size / num_attention_heads` is the head size.
    pub num_attention_heads: usize,
    /// Width of the MLP's hidden layer.
    pub intermediate_size: usize,
    /// The MLP activation (`hidden_act`).
    pub activation: Activation,
    /// Rows of the position embedding.
    pub max_position_embeddings: usize,
    /// Rows of the token-type embedding.
    pub type_vocab_size: usize,
    /// The LayerNorm epsilon.
    pub layer_norm_eps: f64,
    /// `pad_token_id` (RoBERTa's position offset).
    pub pad_token_id: usize,
}

#[derive(Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    #[serde(default = "default_act")]
    hidden_act: String,
    #[serde(default = "default_positions")]
    max_position_embeddings: usize,
    #[serde(default = "default_types")]
    type_vocab_size: usize,
    #[serde(default = "default_eps")]
    layer_norm_eps: f64,
    #[serde(default)]
    pad_token_id: Option<usize>,
    #[serde(default)]
    position_embedding_type: Option<String>,
    #[serde(default)]
    is_decoder: Option<bool>,
    #[serde(default)]
    add_cross_attention: Option<bool>,
}

fn default_act() -> String {
    "gelu".to_owned()
}
fn default_positions() -> usize {
    512
}
fn default_types() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}

impl BertConfig {
    /// Parses and validates the text of a `config.json`.
    ///
    /// # Errors
    /// [`BertError::Json`] for malformed JSON or a missing size field, [`BertError::Config`]
    /// for an unsupported `model_type`, activation or option, or invalid sizes.
    pub fn from_json_str(text: &str) -> Result<BertConfig, BertError> {
        let raw: RawConfig = serde_json::from_str(text)?;
        let flavor = match raw.model_type.as_deref() {
            None | Some("bert") => BertFlavor::Bert,
            Some("roberta") => BertFlavor::Roberta,
            Some(other) => {
                return Err(BertError::Config(format!(
                    "model_type {other:?} (expected \"bert\" or \"roberta\")"
                )));
            }
        };
        if let Some(p) = raw.position_embedding_type.as_deref()
            && p != "absolute"
        {
            return Err(BertError::Config(format!(
                "position_embedding_type {p:?} (only \"absolute\")"
            )));
        }
        if raw.is_decoder == Some(true) || raw.add_cross_attention == Some(true) {
            return Err(BertError::Config(
                "is_decoder / add_cross_attention (encoders only)".into(),
            ));
        }
        let activation = Activation::from_hf_name(&raw.hidden_act)
            .map_err(|_| BertError::Config(format!("hidden_act {:?}", raw.hidden_act)))?;
        let pad = match (flavor, raw.pad_token_id) {
            (_, Some(p)) => p,
            (BertFlavor::Bert, None) => 0,
            (BertFlavor::Roberta, None) => 1,
        };
        let cfg = BertConfig {
            flavor,
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: raw.num_attention_heads,
            intermediate_size: raw.intermediate_size,
            activation,
            max_position_embeddings: raw.max_position_embeddings,
            type_vocab_size: raw.type_vocab_size,
            layer_norm_eps: raw.layer_norm_eps,
            pad_token_id: pad,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads and validates `config.json` at `path`.
    ///
    /// # Errors
    /// [`BertError::Io`] if the file cannot be read, otherwise as
    /// [`BertConfig::from_json_str`].
    pub fn from_file(path: &Path) -> Result<BertConfig, BertError> {
        let text = std::fs::read_to_string(path).map_err(|source| BertError::Io {
            path: path.to_owned(),
            source,
        })?;
        BertConfig::from_json_str(&text)
    }

    /// Checks sizes: all positive, within the model size limits of [`crate::limits`]
    /// (each size, then the parameter count with a pooler), heads dividing the width, a
    /// finite non-negative epsilon, and (RoBERTa) a pad id leaving room for positions.
    ///
    /// # Errors
    /// [`BertError::Config`] naming the first violated constraint, or
    /// [`BertError::Limit`] naming the field beyond its limit.
    pub fn validate(&self) -> Result<(), BertError> {
        let sizes = [
            ("vocab_size", self.vocab_size),
            ("hidden_size", self.hidden_size),
            ("num_hidden_layers", self.num_hidden_layers),
            ("num_attention_heads", self.num_attention_heads),
            ("intermediate_size", self.intermediate_size),
            ("max_position_embeddings", self.max_position_embeddings),
            ("type_vocab_size", self.type_vocab_size),
        ];
        for (name, v) in sizes {
            if v == 0 {
                return Err(BertError::Config(format!("{name} must be positive")));
            }
        }
        limits::check(&[
            (
                "num_hidden_layers",
                self.num_hidden_layers,
                limits::MAX_LAYERS,
            ),
            ("vocab_size", self.vocab_size, limits::MAX_VOCAB),
            ("type_vocab_size", self.type_vocab_size, limits::MAX_VOCAB),
            ("hidden_size", self.hidden_size, limits::MAX_WIDTH),
            (
                "intermediate_size",
                self.intermediate_size,
                limits::MAX_WIDTH,
            ),
            (
                "num_attention_heads",
                self.num_attention_heads,
                limits::MAX_WIDTH,
            ),
            (
                "max_position_embeddings",
                self.max_position_embeddings,
                limits::MAX_POSITIONS,
            ),
        ])?;
        if self.hidden_size % self.num_attention_heads != 0 {
            return Err(BertError::Config(format!(
                "hidden_size {} is not divisible by num_attention_heads {}",
                self.hidden_size, self.num_attention_heads
            )));
        }
        // Every size is bounded, so no product or sum overflows. A classifier comes on
        // top, announced by the owner (at most MAX_LABELS labels; the sharing checks the
        // total again).
        let with_pooler = BertHeads {
            pooler: true,
            labels: 0,
        };
        limits::check_parameters(parameters(self, with_pooler))?;
        if !self.layer_norm_eps.is_finite() || self.layer_norm_eps < 0.0 {
            return Err(BertError::Config(
                "layer_norm_eps must be finite and non-negative".into(),
            ));
        }
        if self.flavor == BertFlavor::Roberta
            && self.pad_token_id.saturating_add(2) > self.max_position_embeddings
        {
            return Err(BertError::Config(
                "pad_token_id leaves no RoBERTa positions".into(),
            ));
        }
        Ok(())
    }

    /// The size of one attention head.
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }

    /// The longest sequence the model accepts (RoBERTa reserves `pad_token_id + 1`
    /// positions).
    pub fn max_len(&self) -> usize {
        match self.flavor {
            BertFlavor::Bert => self.max_position_embeddings,
            BertFlavor::Roberta => self
                .max_position_embeddings
                .saturating_sub(self.pad_token_id + 1),
        }
    }

    /// The position ids of one sequence of `len` tokens with attention mask `mask`
    /// (`mask[i]` true for a real token). BERT: `0..len`. RoBERTa: real tokens count from
    /// `pad_token_id + 1`, padding gets `pad_token_id` (what `transformers` computes when
    /// the padding tokens are exactly the masked ones).
    pub fn position_ids(&self, mask: &[bool]) -> Vec<usize> {
        match self.flavor {
            BertFlavor::Bert => (0..mask.len()).collect(),
            BertFlavor::Roberta => {
                let mut seen = 0;
                mask.iter()
                    .map(|&m| {
                        if m {
                            seen += 1;
                            self.pad_token_id + seen
                        } else {
                            self.pad_token_id
                        }
                    })
                    .collect()
            }
        }
    }
}
