//! The public architecture of a LLaMA-style decoder.

use std::path::Path;

use serde::Deserialize;

use crate::gguf::{GgufError, GgufFile};
use crate::gpt2::config::InputError;
use crate::limits::{self, LimitError};

/// Why a LLaMA configuration is unusable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlamaConfigError {
    /// `config.json` is not valid JSON or lacks a required field.
    #[error("config.json: {0}")]
    Json(String),
    /// A GGUF metadata key is missing or mistyped.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The values do not describe a model this crate can run.
    #[error("invalid LLaMA configuration: {0}")]
    Invalid(String),
    /// A size exceeds the model size limits of [`crate::limits`] (the error names the
    /// field and the limit).
    #[error(transparent)]
    Limit(#[from] LimitError),
}

/// The architecture of a LLaMA-style decoder (public: every party knows it).
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// Vocabulary size (rows of the token embedding).
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU MLP.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Number of query heads.
    pub num_attention_heads: usize,
    /// Number of key/value heads (grouped-query attention: query head `h` reads KV head
    /// `h / (num_attention_heads / num_key_value_heads)`).
    pub num_key_value_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// The RMSNorm epsilon, added to the mean of squares.
    pub rms_norm_eps: f64,
    /// The RoPE base θ (`inv_freq[i] = θ^(−2i/head_dim)`).
    pub rope_theta: f64,
    /// The longest sequence the model accepts.
    pub max_position_embeddings: usize,
    /// Whether the LM head is the token embedding.
    pub tie_word_embeddings: bool,
}

#[derive(Deserialize)]
struct RopeParameters {
    rope_theta: Option<f64>,
    rope_type: Option<String>,
}

#[derive(Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    rms_norm_eps: Option<f64>,
    rope_theta: Option<f64>,
    rope_parameters: Option<RopeParameters>,
    rope_scaling: Option<serde_json::Value>,
    max_position_embeddings: Option<usize>,
    tie_word_embeddings: Option<bool>,
    hidden_act: Option<String>,
    attention_bias: Option<bool>,
    mlp_bias: Option<bool>,
}

impl LlamaConfig {
    /// Parses and validates a Hugging Face `LlamaConfig` `config.json` (transformers 4 or 5
    /// field names: `rope_theta` at top level or in `rope_parameters`).
    ///
    /// # Errors
    /// [`LlamaConfigError::Json`] for malformed JSON, [`LlamaConfigError::Invalid`] for
    /// features this crate does not implement (biases, RoPE scaling, another activation) or
    /// inconsistent sizes.
    pub fn from_json_str(text: &str) -> Result<LlamaConfig, LlamaConfigError> {
        let raw: RawConfig =
            serde_json::from_str(text).map_err(|e| LlamaConfigError::Json(e.to_string()))?;
        if let Some(t) = raw.model_type.as_deref() {
            if t != "llama" {
                return Err(LlamaConfigError::Invalid(format!(
                    "model_type {t:?}, expected \"llama\""
                )));
            }
        }
        if raw.hidden_act.as_deref().is_some_and(|a| a != "silu") {
            return Err(LlamaConfigError::Invalid("hidden_act must be silu".into()));
        }
        if raw.attention_bias == Some(true) || raw.mlp_bias == Some(true) {
            return Err(LlamaConfigError::Invalid(
                "attention or MLP biases are not supported".into(),
            ));
        }
        let rope_type = raw
            .rope_parameters
            .as_ref()
            .and_then(|r| r.rope_type.clone());
        if rope_type.as_deref().is_some_and(|t| t != "default")
            || raw.rope_scaling.as_ref().is_some_and(|v| !v.is_null())
        {
            return Err(LlamaConfigError::Invalid(
                "only the default RoPE (no scaling) is supported".into(),
            ));
        }
        let rope_theta = raw
            .rope_parameters
            .as_ref()
            .and_then(|r| r.rope_theta)
            .or(raw.rope_theta)
            .unwrap_or(10000.0);
        let heads = raw.num_attention_heads;
        let cfg = LlamaConfig {
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: raw.num_key_value_heads.unwrap_or(heads),
            head_dim: raw
                .head_dim
                .unwrap_or_else(|| raw.hidden_size.checked_div(heads).unwrap_or(0)),
            rms_norm_eps: raw.rms_norm_eps.unwrap_or(1e-6),
            rope_theta,
            max_position_embeddings: raw.max_position_embeddings.unwrap_or(2048),
            tie_word_embeddings: raw.tie_word_embeddings.unwrap_or(false),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads and validates `path` (a `config.json`).
    ///
    /// # Errors
    /// [`LlamaConfigError::Json`] if unreadable, and those of [`LlamaConfig::from_json_str`].
    pub fn from_file(path: &Path) -> Result<LlamaConfig, LlamaConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LlamaConfigError::Json(format!("cannot read {}: {e}", path.display())))?;
        LlamaConfig::from_json_str(&text)
    }

    /// The configuration of a GGUF file with `general.architecture = llama` (keys
    /// `llama.block_count`, `llama.embedding_length`, …). The vocabulary size is the
    /// number of tokenizer tokens; the head is tied when the file has no `output.weight`.
    ///
    /// # Errors
    /// [`LlamaConfigError::Gguf`] for missing keys, [`LlamaConfigError::Invalid`] for
    /// another architecture or inconsistent sizes.
    pub fn from_gguf(file: &GgufFile) -> Result<LlamaConfig, LlamaConfigError> {
        let arch = file.meta_str("general.architecture")?;
        if arch != "llama" {
            return Err(LlamaConfigError::Invalid(format!(
                "GGUF architecture {arch:?}, expected \"llama\""
            )));
        }
        let u = |k: &str| -> Result<usize, LlamaConfigError> {
            let v = file.meta_u64(k)?;
            usize::try_from(v).map_err(|_| LlamaConfigError::Invalid(format!("{k} too large")))
        };
        let hidden = u("llama.embedding_length")?;
        let heads = u("llama.attention.head_count")?;
        let vocab = match file.metadata().get("tokenizer.ggml.tokens") {
            Some(v) => v.as_array().map(<[_]>::len).unwrap_or(0),
            None => u("llama.vocab_size")?,
        };
        let cfg = LlamaConfig {
            vocab_size: vocab,
            hidden_size: hidden,
            intermediate_size: u("llama.feed_forward_length")?,
            num_hidden_layers: u("llama.block_count")?,
            num_attention_heads: heads,
            num_key_value_heads: u("llama.attention.head_count_kv").unwrap_or(heads),
            head_dim: hidden.checked_div(heads).unwrap_or(0),
            rms_norm_eps: file.meta_f64("llama.attention.layer_norm_rms_epsilon")?,
            rope_theta: file.meta_f64("llama.rope.freq_base").unwrap_or(10000.0),
            max_position_embeddings: u("llama.context_length")?,
            tie_word_embeddings: file.tensor_info("output.weight").is_none(),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks the sizes: all positive, within the model size limits of [`crate::limits`]
    /// (each size, the query width, then the parameter count), heads a multiple of KV
    /// heads, even head width, a positive epsilon and θ.
    ///
    /// # Errors
    /// [`LlamaConfigError::Invalid`] naming the first violated condition, or
    /// [`LlamaConfigError::Limit`] naming the field beyond its limit.
    pub fn validate(&self) -> Result<(), LlamaConfigError> {
        let bad = |m: &str| Err(LlamaConfigError::Invalid(m.into()));
        if self.vocab_size == 0
            || self.hidden_size == 0
            || self.intermediate_size == 0
            || self.num_hidden_layers == 0
            || self.num_attention_heads == 0
            || self.num_key_value_heads == 0
            || self.max_position_embeddings == 0
        {
            return bad("sizes must be positive");
        }
        limits::check(&[
            (
                "num_hidden_layers",
                self.num_hidden_layers,
                limits::MAX_LAYERS,
            ),
            ("vocab_size", self.vocab_size, limits::MAX_VOCAB),
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
                "num_key_value_heads",
                self.num_key_value_heads,
                limits::MAX_WIDTH,
            ),
            ("head_dim", self.head_dim, limits::MAX_WIDTH),
            (
                "num_attention_heads · head_dim",
                self.num_attention_heads.saturating_mul(self.head_dim),
                limits::MAX_WIDTH,
            ),
            (
                "max_position_embeddings",
                self.max_position_embeddings,
                limits::MAX_POSITIONS,
            ),
        ])?;
        if self.num_attention_heads % self.num_key_value_heads != 0 {
            return bad("num_attention_heads must be a multiple of num_key_value_heads");
        }
        if self.head_dim == 0 || self.head_dim % 2 != 0 {
            return bad("head_dim must be positive and even");
        }
        if !(self.rms_norm_eps.is_finite() && self.rms_norm_eps > 0.0) {
            return bad("rms_norm_eps must be positive");
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 1.0) {
            return bad("rope_theta must exceed 1");
        }
        // Every size is bounded, so the count cannot overflow.
        limits::check_parameters(self.unchecked_spec().parameters().ok())?;
        Ok(())
    }

    /// Query heads per KV head.
    pub fn group_size(&self) -> usize {
        self.num_attention_heads / self.num_key_value_heads.max(1)
    }

    /// Width of all query heads together.
    pub fn q_dim(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    /// Width of all KV heads together.
    pub fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }

    /// Checks that `ids` at positions `start..` fit: ids below `vocab_size`, positions
    /// below `max_position_embeddings`.
    ///
    /// # Errors
    /// [`InputError::TooLong`] or [`InputError::TokenOutOfRange`].
    pub fn check_ids(&self, ids: &[u32], start: usize) -> Result<(), InputError> {
        let len = start.saturating_add(ids.len());
        if len > self.max_position_embeddings {
            return Err(InputError::TooLong {
                len,
                n_positions: self.max_position_embeddings,
            });
        }
        for (i, &id) in ids.iter().enumerate() {
            if id as usize >= self.vocab_size {
                return Err(InputError::TokenOutOfRange {
                    position: start.saturating_add(i),
                    id,
                    vocab_size: self.vocab_size,
                });
            }
        }
        Ok(())
    }
}
