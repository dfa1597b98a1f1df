//! GPT-2 model configuration, read from a Hugging Face `config.json`.
//!
//! Only the fields the forward pass needs are read; unknown fields are ignored. Fields that
//! would change the computation in ways this crate does not implement (cross-attention,
//! unscaled or layer-scaled attention scores, another `model_type`) are rejected rather
//! than silently ignored.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::limits::{self, LimitError};

/// The MLP activation of a GPT-2 model (`activation_function` in `config.json`). (Serde
/// form: the variant's name, for a share store's config text.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Activation {
    /// The tanh approximation `0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³)))`:
    /// `"gelu_new"` (GPT-2's default) and `"gelu_pytorch_tanh"` (the same formula).
    GeluTanh,
    /// The exact GeLU `0.5 x (1 + erf(x / sqrt(2)))`: `"gelu"`.
    GeluErf,
}

impl Activation {
    /// The activation named `name` in a Hugging Face config.
    ///
    /// # Errors
    /// [`ConfigError::UnsupportedActivation`] for any other name.
    pub fn from_hf_name(name: &str) -> Result<Activation, ConfigError> {
        match name {
            "gelu_new" | "gelu_pytorch_tanh" => Ok(Activation::GeluTanh),
            "gelu" => Ok(Activation::GeluErf),
            other => Err(ConfigError::UnsupportedActivation(other.to_owned())),
        }
    }
}

/// Why a GPT-2 configuration could not be read or is not usable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The text is not JSON of the expected form (a required field is missing or has the
    /// wrong type).
    #[error("invalid config.json: {0}")]
    Json(#[from] serde_json::Error),
    /// `model_type` is present and is not `"gpt2"`.
    #[error("model_type {0:?} is not supported (expected \"gpt2\")")]
    UnsupportedModelType(String),
    /// `activation_function` names an activation this crate does not implement.
    #[error("activation_function {0:?} is not supported (expected \"gelu_new\" or \"gelu\")")]
    UnsupportedActivation(String),
    /// An option that changes the architecture is set to a value this crate does not
    /// implement.
    #[error("unsupported option {field} = {value}")]
    UnsupportedOption {
        /// The config field.
        field: &'static str,
        /// Its value, as found.
        value: String,
    },
    /// A size field is zero.
    #[error("{0} must be positive")]
    ZeroSize(&'static str),
    /// `n_embd` is not a multiple of `n_head`.
    #[error("n_embd {n_embd} is not divisible by n_head {n_head}")]
    HeadsDoNotDivide {
        /// The embedding width.
        n_embd: usize,
        /// The number of heads.
        n_head: usize,
    },
    /// The sizes are too large to index in memory (a product overflows `usize`).
    #[error("model sizes are too large: {0}")]
    TooLarge(&'static str),
    /// A size exceeds the model size limits of [`crate::limits`] (the error names the
    /// field and the limit).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// `layer_norm_epsilon` is negative, NaN or infinite.
    #[error("layer_norm_epsilon {0} must be finite and non-negative")]
    BadEpsilon(f64),
}

/// The architecture of a GPT-2 model: what `GPT2Config` in `transformers` holds, reduced to
/// what the forward pass uses.
///
/// Construct it with [`Gpt2Config::from_json_str`] or [`Gpt2Config::from_file`], which
/// validate it; a hand-built value should be checked with [`Gpt2Config::validate`].
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2Config {
    /// Number of Transformer blocks.
    pub n_layer: usize,
    /// Width of the residual stream (`d`).
    pub n_embd: usize,
    /// Number of attention heads; `n_embd / n_head` is the head dimension.
    pub n_head: usize,
    /// Width of the MLP's hidden layer (`n_inner` in the config; `null` means `4 · n_embd`).
    pub n_inner: usize,
    /// Number of learned positions: the longest sequence the model accepts.
    pub n_positions: usize,
    /// Vocabulary size (rows of `wte`).
    pub vocab_size: usize,
    /// The LayerNorm epsilon, added to the variance inside the square root.
    pub layer_norm_epsilon: f64,
    /// The MLP activation.
    pub activation: Activation,
}

/// The fields of `config.json` that are read. Sizes are required; the rest default as in
/// `transformers.GPT2Config`.
#[derive(Deserialize)]
struct RawConfig {
    model_type: Option<String>,
    n_layer: usize,
    n_embd: usize,
    n_head: usize,
    #[serde(default)]
    n_inner: Option<usize>,
    n_positions: usize,
    vocab_size: usize,
    #[serde(default = "default_eps")]
    layer_norm_epsilon: f64,
    #[serde(default = "default_activation")]
    activation_function: String,
    #[serde(default)]
    add_cross_attention: Option<bool>,
    #[serde(default)]
    scale_attn_weights: Option<bool>,
    #[serde(default)]
    scale_attn_by_inverse_layer_idx: Option<bool>,
}

fn default_eps() -> f64 {
    1e-5
}

fn default_activation() -> String {
    "gelu_new".to_owned()
}

impl Gpt2Config {
    /// Parses and validates the text of a Hugging Face GPT-2 `config.json`.
    ///
    /// # Errors
    /// [`ConfigError::Json`] for malformed JSON or a missing/mistyped size field, and the
    /// other variants as in [`Gpt2Config::validate`].
    pub fn from_json_str(text: &str) -> Result<Gpt2Config, ConfigError> {
        let raw: RawConfig = serde_json::from_str(text)?;
        match raw.model_type {
            Some(t) if t != "gpt2" => return Err(ConfigError::UnsupportedModelType(t)),
            _ => {}
        }
        if raw.add_cross_attention == Some(true) {
            return Err(ConfigError::UnsupportedOption {
                field: "add_cross_attention",
                value: "true".into(),
            });
        }
        if raw.scale_attn_weights == Some(false) {
            return Err(ConfigError::UnsupportedOption {
                field: "scale_attn_weights",
                value: "false".into(),
            });
        }
        if raw.scale_attn_by_inverse_layer_idx == Some(true) {
            return Err(ConfigError::UnsupportedOption {
                field: "scale_attn_by_inverse_layer_idx",
                value: "true".into(),
            });
        }
        let config = Gpt2Config {
            n_layer: raw.n_layer,
            n_embd: raw.n_embd,
            n_head: raw.n_head,
            n_inner: match raw.n_inner {
                Some(n) => n,
                None => raw
                    .n_embd
                    .checked_mul(4)
                    .ok_or(ConfigError::TooLarge("4 · n_embd"))?,
            },
            n_positions: raw.n_positions,
            vocab_size: raw.vocab_size,
            layer_norm_epsilon: raw.layer_norm_epsilon,
            activation: Activation::from_hf_name(&raw.activation_function)?,
        };
        config.validate()?;
        Ok(config)
    }

    /// Reads and validates `config.json` at `path`.
    ///
    /// # Errors
    /// [`ConfigError::Io`] if the file cannot be read, otherwise as
    /// [`Gpt2Config::from_json_str`].
    pub fn from_file(path: &Path) -> Result<Gpt2Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.to_owned(),
            source,
        })?;
        Gpt2Config::from_json_str(&text)
    }

    /// Checks that the sizes are usable: all positive, within the model size limits of
    /// [`crate::limits`] (each size, then the parameter count), `n_embd` divisible by
    /// `n_head`, epsilon finite and non-negative.
    ///
    /// # Errors
    /// [`ConfigError::ZeroSize`], [`ConfigError::Limit`],
    /// [`ConfigError::HeadsDoNotDivide`] or [`ConfigError::BadEpsilon`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (name, v) in [
            ("n_layer", self.n_layer),
            ("n_embd", self.n_embd),
            ("n_head", self.n_head),
            ("n_inner", self.n_inner),
            ("n_positions", self.n_positions),
            ("vocab_size", self.vocab_size),
        ] {
            if v == 0 {
                return Err(ConfigError::ZeroSize(name));
            }
        }
        limits::check(&[
            ("n_layer", self.n_layer, limits::MAX_LAYERS),
            ("vocab_size", self.vocab_size, limits::MAX_VOCAB),
            ("n_embd", self.n_embd, limits::MAX_WIDTH),
            ("n_inner", self.n_inner, limits::MAX_WIDTH),
            ("n_head", self.n_head, limits::MAX_WIDTH),
            ("n_positions", self.n_positions, limits::MAX_POSITIONS),
        ])?;
        if self.n_embd % self.n_head != 0 {
            return Err(ConfigError::HeadsDoNotDivide {
                n_embd: self.n_embd,
                n_head: self.n_head,
            });
        }
        // Every size is bounded, so the count cannot overflow (nor can the plaintext
        // weights' byte counts).
        limits::check_parameters(self.unchecked_spec().parameters().ok())?;
        if !(self.layer_norm_epsilon.is_finite() && self.layer_norm_epsilon >= 0.0) {
            return Err(ConfigError::BadEpsilon(self.layer_norm_epsilon));
        }
        Ok(())
    }

    /// The width of one attention head, `n_embd / n_head`.
    pub fn head_dim(&self) -> usize {
        self.n_embd.checked_div(self.n_head).unwrap_or(0)
    }
}

/// Why a token sequence cannot be fed to a model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// There is no token to predict from.
    #[error("the prompt is empty")]
    Empty,
    /// A token id is outside the vocabulary.
    #[error("token id {id} at position {position} is outside the vocabulary of {vocab_size}")]
    TokenOutOfRange {
        /// Absolute position of the token in the sequence.
        position: usize,
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab_size: usize,
    },
    /// The sequence needs more positions than the model has.
    #[error("a sequence of {len} tokens exceeds the model's {n_positions} positions")]
    TooLong {
        /// Positions the sequence (prompt, cache and tokens still to be fed) needs.
        len: usize,
        /// The model's `n_positions`.
        n_positions: usize,
    },
    /// A KV cache was made by a model of another shape.
    #[error("the KV cache does not belong to this model: {0}")]
    CacheMismatch(String),
    /// A hidden state does not have the model's width.
    #[error("a hidden state of {found} elements does not fit the model's width {expected}")]
    Width {
        /// `n_embd`.
        expected: usize,
        /// The length given.
        found: usize,
    },
    /// The logits are not finite numbers (the weights overflow `f64`), so there is no
    /// argmax.
    #[error("the logits are not finite")]
    NonFinite,
}

impl Gpt2Config {
    /// Checks that `ids`, placed at positions `start..start + ids.len()`, fit the model:
    /// every id below `vocab_size` and the last position below `n_positions`.
    ///
    /// # Errors
    /// [`InputError::TooLong`] or [`InputError::TokenOutOfRange`].
    pub fn check_ids(&self, ids: &[u32], start: usize) -> Result<(), InputError> {
        let len = start.saturating_add(ids.len());
        if len > self.n_positions {
            return Err(InputError::TooLong {
                len,
                n_positions: self.n_positions,
            });
        }
        for (i, &id) in ids.iter().enumerate() {
            if usize::try_from(id).map_or(true, |id| id >= self.vocab_size) {
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
