//! Loading GPT-2 checkpoints in Hugging Face layout: `config.json` + `model.safetensors`.
//!
//! The file is read into memory (no memory map, no `unsafe`) and parsed with the
//! `safetensors` crate, which validates the header and the data offsets; every tensor the
//! model needs is then checked for presence, shape and dtype and converted to `f64`.
//! Nothing in a file can make the loader panic: every defect is a [`LoadError`].
//!
//! Accepted layouts:
//! - names with the `transformer.` prefix (what `GPT2LMHeadModel.save_pretrained` writes)
//!   or without it (the OpenAI-converted `gpt2`, `gpt2-medium`, `gpt2-large`, `gpt2-xl`
//!   and `distilgpt2` checkpoints);
//! - dtypes F32, F16, BF16 and F64 (upcast exactly to `f64`);
//! - extra tensors are ignored, in particular the `attn.bias` / `attn.masked_bias`
//!   causal-mask buffers of older checkpoints;
//! - the LM head: `lm_head.weight` absent means tied to `wte` (the usual case); present and
//!   equal to `wte` is also tied; present and different is kept as a separate matrix.
//!
//! Weight layout: GPT-2's `Conv1D` stores weights as `[in, out]`, so `y = x · W + b`.

use std::path::{Path, PathBuf};

use ndarray::{Array1, Array2};
use safetensors::SafeTensors;

use crate::gpt2::config::{ConfigError, Gpt2Config};
use crate::safetensors_reader::{TensorError, TensorReader};

/// Why a checkpoint could not be loaded. Variants about one tensor name it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// A file could not be read (missing, unreadable).
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `config.json` is unreadable or not a usable GPT-2 configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The weights file is not a valid safetensors file (truncated, garbage header, data
    /// offsets out of range, …).
    #[error("{what} is not a valid safetensors file: {reason}")]
    BadFile {
        /// The file (or `"safetensors bytes"` for an in-memory buffer).
        what: String,
        /// What is wrong, as the parser reports it.
        reason: String,
    },
    /// A tensor the model needs is not in the file (looked up with and without the
    /// `transformer.` prefix).
    #[error(
        "tensor {name} is missing (looked for it with and without the \"transformer.\" prefix)"
    )]
    MissingTensor {
        /// The name without prefix, e.g. `h.0.attn.c_attn.weight`.
        name: String,
    },
    /// A tensor's shape does not match the configuration.
    #[error("tensor {name} has shape {found:?}, expected {expected:?}")]
    Shape {
        /// The tensor's name.
        name: String,
        /// The shape the configuration implies.
        expected: Vec<usize>,
        /// The shape found.
        found: Vec<usize>,
    },
    /// A tensor's dtype is not one of F32, F16, BF16, F64.
    #[error("tensor {name} has dtype {dtype}, expected F32, F16, BF16 or F64")]
    UnsupportedDtype {
        /// The tensor's name.
        name: String,
        /// The dtype found.
        dtype: String,
    },
    /// A tensor holds NaN or an infinity.
    #[error("tensor {name} holds a non-finite value")]
    NonFinite {
        /// The tensor's name.
        name: String,
    },
}

/// The affine parameters of a LayerNorm: `y = (x − mean) / sqrt(var + eps) · gamma + beta`.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerNormWeights {
    /// The scale (`weight` in the checkpoint), length `n_embd`.
    pub gamma: Array1<f64>,
    /// The shift (`bias` in the checkpoint), length `n_embd`.
    pub beta: Array1<f64>,
}

/// The weights of one GPT-2 block `h.N`, with `d = n_embd` and `inner = n_inner`.
/// Matrices are `[in, out]`: `y = x · W + b`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2Block {
    /// `ln_1`: the LayerNorm before attention.
    pub ln_1: LayerNormWeights,
    /// `attn.c_attn.weight`, `d × 3d`: the fused `[q | k | v]` projection.
    pub attn_w: Array2<f64>,
    /// `attn.c_attn.bias`, `3d`.
    pub attn_b: Array1<f64>,
    /// `attn.c_proj.weight`, `d × d`: the attention output projection.
    pub proj_w: Array2<f64>,
    /// `attn.c_proj.bias`, `d`.
    pub proj_b: Array1<f64>,
    /// `ln_2`: the LayerNorm before the MLP.
    pub ln_2: LayerNormWeights,
    /// `mlp.c_fc.weight`, `d × inner`.
    pub fc_w: Array2<f64>,
    /// `mlp.c_fc.bias`, `inner`.
    pub fc_b: Array1<f64>,
    /// `mlp.c_proj.weight`, `inner × d`.
    pub fc_proj_w: Array2<f64>,
    /// `mlp.c_proj.bias`, `d`.
    pub fc_proj_b: Array1<f64>,
}

/// All weights of a GPT-2 language model, as `f64`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2Weights {
    /// Token embedding `wte.weight`, `vocab_size × d`.
    pub wte: Array2<f64>,
    /// Position embedding `wpe.weight`, `n_positions × d`.
    pub wpe: Array2<f64>,
    /// The blocks `h.0 .. h.{n_layer-1}`.
    pub blocks: Vec<Gpt2Block>,
    /// The final LayerNorm `ln_f`.
    pub ln_f: LayerNormWeights,
    /// A separate LM head (`lm_head.weight`, `vocab_size × d`), or `None` when it is tied
    /// to `wte` (absent from the file, or equal to `wte`). Use [`Gpt2Weights::lm_head`].
    pub lm_head: Option<Array2<f64>>,
}

impl Gpt2Weights {
    /// The LM head matrix (`vocab_size × d`; logits are `h · lm_headᵀ`): the separate head
    /// if there is one, otherwise `wte`.
    pub fn lm_head(&self) -> &Array2<f64> {
        self.lm_head.as_ref().unwrap_or(&self.wte)
    }

    /// Reads the weights from the bytes of a `model.safetensors` file, checking every
    /// tensor against `config`.
    ///
    /// # Errors
    /// [`LoadError::BadFile`] if the bytes are not a valid safetensors file, otherwise
    /// [`LoadError::MissingTensor`], [`LoadError::Shape`], [`LoadError::UnsupportedDtype`]
    /// or [`LoadError::NonFinite`] for the first tensor that fails.
    pub fn from_safetensors_bytes(
        bytes: &[u8],
        config: &Gpt2Config,
    ) -> Result<Gpt2Weights, LoadError> {
        load_from_bytes(bytes, config, "safetensors bytes")
    }

    /// Reads the weights from the `model.safetensors` file at `path`.
    ///
    /// # Errors
    /// [`LoadError::Io`] if the file cannot be read, otherwise as
    /// [`Gpt2Weights::from_safetensors_bytes`].
    pub fn from_safetensors_file(
        path: &Path,
        config: &Gpt2Config,
    ) -> Result<Gpt2Weights, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Io {
            path: path.to_owned(),
            source,
        })?;
        load_from_bytes(&bytes, config, &path.display().to_string())
    }

    /// Checks that every matrix and vector has the shape `config` implies (useful for
    /// weights built or modified in code; loaded weights already passed this check).
    ///
    /// # Errors
    /// [`LoadError::Shape`] naming the first mismatching tensor (by its checkpoint name),
    /// or [`LoadError::Config`] if `config` itself is invalid.
    pub fn check_shapes(&self, config: &Gpt2Config) -> Result<(), LoadError> {
        config.validate()?;
        let (d, inner) = (config.n_embd, config.n_inner);
        let mut checks: Vec<(String, Vec<usize>, Vec<usize>)> = vec![
            (
                "wte.weight".into(),
                vec![config.vocab_size, d],
                self.wte.shape().to_vec(),
            ),
            (
                "wpe.weight".into(),
                vec![config.n_positions, d],
                self.wpe.shape().to_vec(),
            ),
            ("h.*".into(), vec![config.n_layer], vec![self.blocks.len()]),
        ];
        if let Some(head) = &self.lm_head {
            checks.push((
                "lm_head.weight".into(),
                vec![config.vocab_size, d],
                head.shape().to_vec(),
            ));
        }
        let ln = |name: &str, w: &LayerNormWeights| {
            [
                (format!("{name}.weight"), vec![d], w.gamma.shape().to_vec()),
                (format!("{name}.bias"), vec![d], w.beta.shape().to_vec()),
            ]
        };
        checks.extend(ln("ln_f", &self.ln_f));
        for (i, b) in self.blocks.iter().enumerate() {
            let p = format!("h.{i}");
            checks.extend(ln(&format!("{p}.ln_1"), &b.ln_1));
            checks.extend(ln(&format!("{p}.ln_2"), &b.ln_2));
            let three_d = d.saturating_mul(3);
            checks.extend([
                (
                    format!("{p}.attn.c_attn.weight"),
                    vec![d, three_d],
                    b.attn_w.shape().to_vec(),
                ),
                (
                    format!("{p}.attn.c_attn.bias"),
                    vec![three_d],
                    b.attn_b.shape().to_vec(),
                ),
                (
                    format!("{p}.attn.c_proj.weight"),
                    vec![d, d],
                    b.proj_w.shape().to_vec(),
                ),
                (
                    format!("{p}.attn.c_proj.bias"),
                    vec![d],
                    b.proj_b.shape().to_vec(),
                ),
                (
                    format!("{p}.mlp.c_fc.weight"),
                    vec![d, inner],
                    b.fc_w.shape().to_vec(),
                ),
                (
                    format!("{p}.mlp.c_fc.bias"),
                    vec![inner],
                    b.fc_b.shape().to_vec(),
                ),
                (
                    format!("{p}.mlp.c_proj.weight"),
                    vec![inner, d],
                    b.fc_proj_w.shape().to_vec(),
                ),
                (
                    format!("{p}.mlp.c_proj.bias"),
                    vec![d],
                    b.fc_proj_b.shape().to_vec(),
                ),
            ]);
        }
        for (name, expected, found) in checks {
            if expected != found {
                return Err(LoadError::Shape {
                    name,
                    expected,
                    found,
                });
            }
        }
        Ok(())
    }
}

/// Loads a GPT-2 model from a Hugging Face model directory: `dir/config.json` and
/// `dir/model.safetensors` (single file; sharded checkpoints are not supported).
///
/// Works for any GPT-2 size (`gpt2`, `gpt2-medium`, `gpt2-large`, `gpt2-xl`,
/// `distilgpt2`: the tensor names are the same), with or without the `transformer.`
/// prefix.
///
/// # Errors
/// [`LoadError::Io`] for a missing or unreadable file, [`LoadError::Config`] for a bad
/// `config.json`, and the tensor errors of [`Gpt2Weights::from_safetensors_bytes`].
pub fn load_gpt2(dir: &Path) -> Result<(Gpt2Config, Gpt2Weights), LoadError> {
    let config_path = dir.join("config.json");
    let config = match Gpt2Config::from_file(&config_path) {
        Ok(c) => c,
        Err(ConfigError::Io { path, source }) => return Err(LoadError::Io { path, source }),
        Err(e) => return Err(LoadError::Config(e)),
    };
    let weights = Gpt2Weights::from_safetensors_file(&dir.join("model.safetensors"), &config)?;
    Ok((config, weights))
}

/// The prefixes tried before a tensor name: `GPT2LMHeadModel` puts `transformer.` before the
/// names of its `GPT2Model`'s tensors, a bare `GPT2Model` nothing.
const PREFIXES: &[&str] = &["transformer.", ""];

impl From<TensorError> for LoadError {
    fn from(e: TensorError) -> Self {
        match e {
            TensorError::Missing { name } => LoadError::MissingTensor { name },
            TensorError::Shape {
                name,
                expected,
                found,
            } => LoadError::Shape {
                name,
                expected,
                found,
            },
            TensorError::NonFinite { name } => LoadError::NonFinite { name },
            TensorError::UnsupportedDtype { name, dtype } => {
                LoadError::UnsupportedDtype { name, dtype }
            }
            TensorError::BadData { name, reason } => LoadError::BadFile {
                what: format!("tensor {name}"),
                reason,
            },
        }
    }
}

fn load_from_bytes(
    bytes: &[u8],
    config: &Gpt2Config,
    what: &str,
) -> Result<Gpt2Weights, LoadError> {
    config.validate()?;
    let st = SafeTensors::deserialize(bytes).map_err(|e| LoadError::BadFile {
        what: what.to_owned(),
        reason: e.to_string(),
    })?;
    let r = TensorReader::new(st, PREFIXES);
    let (d, inner, vocab) = (config.n_embd, config.n_inner, config.vocab_size);
    let three_d = d.saturating_mul(3);
    let wte = r.matrix("wte.weight", vocab, d)?;
    let wpe = r.matrix("wpe.weight", config.n_positions, d)?;
    let mut blocks = Vec::with_capacity(config.n_layer);
    for i in 0..config.n_layer {
        let p = format!("h.{i}");
        blocks.push(Gpt2Block {
            ln_1: r.layer_norm(&format!("{p}.ln_1"), d)?,
            attn_w: r.matrix(&format!("{p}.attn.c_attn.weight"), d, three_d)?,
            attn_b: r.vector(&format!("{p}.attn.c_attn.bias"), three_d)?,
            proj_w: r.matrix(&format!("{p}.attn.c_proj.weight"), d, d)?,
            proj_b: r.vector(&format!("{p}.attn.c_proj.bias"), d)?,
            ln_2: r.layer_norm(&format!("{p}.ln_2"), d)?,
            fc_w: r.matrix(&format!("{p}.mlp.c_fc.weight"), d, inner)?,
            fc_b: r.vector(&format!("{p}.mlp.c_fc.bias"), inner)?,
            fc_proj_w: r.matrix(&format!("{p}.mlp.c_proj.weight"), inner, d)?,
            fc_proj_b: r.vector(&format!("{p}.mlp.c_proj.bias"), d)?,
        });
    }
    let ln_f = r.layer_norm("ln_f", d)?;
    // The LM head belongs to GPT2LMHeadModel, not GPT2Model: a file has it unprefixed.
    let lm_head = match r.find("lm_head.weight") {
        None => None,
        Some(_) => {
            let head = r.matrix("lm_head.weight", vocab, d)?;
            (head != wte).then_some(head)
        }
    };
    Ok(Gpt2Weights {
        wte,
        wpe,
        blocks,
        ln_f,
        lm_head,
    })
}
