//! The weights of a LLaMA-style decoder and their loaders: Hugging Face `LlamaForCausalLM`
//! checkpoints (`config.json` + `model.safetensors`) and GGUF files (llama.cpp layout,
//! dequantised exactly to `f32`, then widened to `f64`).
//!
//! Every projection is stored `[in, out]`, so `y = x · W` (HF's `nn.Linear` stores
//! `[out, in]`; the loaders transpose).

use std::path::{Path, PathBuf};

use ndarray::{Array1, Array2};
use safetensors::{Dtype, SafeTensors};

use super::config::{LlamaConfig, LlamaConfigError};
use crate::gguf::{GgufError, GgufFile};

/// Why a LLaMA checkpoint could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlamaLoadError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The configuration is unusable.
    #[error(transparent)]
    Config(#[from] LlamaConfigError),
    /// The GGUF file is malformed or lacks a tensor.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// The safetensors file is malformed.
    #[error("model.safetensors is not a valid safetensors file: {0}")]
    BadFile(String),
    /// A tensor is missing.
    #[error("tensor {0} is missing")]
    MissingTensor(String),
    /// A tensor has the wrong shape.
    #[error("tensor {name} has shape {found:?}, expected {expected:?}")]
    Shape {
        /// The tensor's name.
        name: String,
        /// The expected shape.
        expected: Vec<usize>,
        /// The shape found.
        found: Vec<usize>,
    },
    /// A tensor's dtype is not F32, F16, BF16 or F64.
    #[error("tensor {name} has dtype {dtype}, expected F32, F16, BF16 or F64")]
    UnsupportedDtype {
        /// The tensor's name.
        name: String,
        /// The dtype found.
        dtype: String,
    },
    /// A tensor holds NaN or an infinity.
    #[error("tensor {0} holds a non-finite value")]
    NonFinite(String),
}

/// One decoder layer's weights.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaLayer {
    /// RMSNorm before attention (`input_layernorm`), length `d`.
    pub attn_norm: Array1<f64>,
    /// `q_proj`, `[d, H·hd]`.
    pub wq: Array2<f64>,
    /// `k_proj`, `[d, KV·hd]`.
    pub wk: Array2<f64>,
    /// `v_proj`, `[d, KV·hd]`.
    pub wv: Array2<f64>,
    /// `o_proj`, `[H·hd, d]`.
    pub wo: Array2<f64>,
    /// RMSNorm before the MLP (`post_attention_layernorm`), length `d`.
    pub mlp_norm: Array1<f64>,
    /// `gate_proj`, `[d, I]`.
    pub w_gate: Array2<f64>,
    /// `up_proj`, `[d, I]`.
    pub w_up: Array2<f64>,
    /// `down_proj`, `[I, d]`.
    pub w_down: Array2<f64>,
}

/// All weights of a LLaMA-style decoder (the model owner's secret).
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaWeights {
    /// The token embedding, `[V, d]`.
    pub embed: Array2<f64>,
    /// The decoder layers.
    pub layers: Vec<LlamaLayer>,
    /// The final RMSNorm (`model.norm`), length `d`.
    pub norm: Array1<f64>,
    /// An untied LM head `[V, d]`; `None` when tied to `embed`.
    pub lm_head: Option<Array2<f64>>,
}

impl LlamaWeights {
    /// The LM head, `[V, d]` (the embedding when tied).
    pub fn lm_head(&self) -> &Array2<f64> {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }

    /// Checks every shape against `cfg`.
    ///
    /// # Errors
    /// [`LlamaLoadError::Shape`] naming the first mismatch.
    pub fn check_shapes(&self, cfg: &LlamaConfig) -> Result<(), LlamaLoadError> {
        let (d, v, i) = (cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size);
        let (q, kv) = (cfg.q_dim(), cfg.kv_dim());
        let mut checks: Vec<(String, Vec<usize>, Vec<usize>)> = vec![
            ("embed".into(), vec![v, d], self.embed.shape().to_vec()),
            ("norm".into(), vec![d], self.norm.shape().to_vec()),
            (
                "layers".into(),
                vec![cfg.num_hidden_layers],
                vec![self.layers.len()],
            ),
        ];
        if let Some(h) = &self.lm_head {
            checks.push(("lm_head".into(), vec![v, d], h.shape().to_vec()));
        }
        for (n, l) in self.layers.iter().enumerate() {
            let s =
                |a: &str, e: Vec<usize>, f: &[usize]| (format!("layers.{n}.{a}"), e, f.to_vec());
            checks.extend([
                s("attn_norm", vec![d], l.attn_norm.shape()),
                s("wq", vec![d, q], l.wq.shape()),
                s("wk", vec![d, kv], l.wk.shape()),
                s("wv", vec![d, kv], l.wv.shape()),
                s("wo", vec![q, d], l.wo.shape()),
                s("mlp_norm", vec![d], l.mlp_norm.shape()),
                s("w_gate", vec![d, i], l.w_gate.shape()),
                s("w_up", vec![d, i], l.w_up.shape()),
                s("w_down", vec![i, d], l.w_down.shape()),
            ]);
        }
        for (name, expected, found) in checks {
            if expected != found {
                return Err(LlamaLoadError::Shape {
                    name,
                    expected,
                    found,
                });
            }
        }
        Ok(())
    }
}

/// Decodes little-endian floats of a supported dtype to `f64` (exact widening).
fn to_f64(name: &str, dtype: Dtype, data: &[u8], numel: usize) -> Result<Vec<f64>, LlamaLoadError> {
    let width = match dtype {
        Dtype::F64 => 8,
        Dtype::F32 => 4,
        Dtype::F16 | Dtype::BF16 => 2,
        other => {
            return Err(LlamaLoadError::UnsupportedDtype {
                name: name.into(),
                dtype: format!("{other:?}"),
            });
        }
    };
    if numel.checked_mul(width) != Some(data.len()) {
        return Err(LlamaLoadError::BadFile(format!(
            "tensor {name}: {} bytes do not hold {numel} elements",
            data.len()
        )));
    }
    let out: Vec<f64> = match dtype {
        Dtype::F64 => data
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap_or([0; 4]))))
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes(c.try_into().unwrap_or([0; 2])).to_f64())
            .collect(),
        _ => data
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes(c.try_into().unwrap_or([0; 2])).to_f64())
            .collect(),
    };
    if out.iter().any(|x| !x.is_finite()) {
        return Err(LlamaLoadError::NonFinite(name.into()));
    }
    Ok(out)
}

/// A tensor source by Hugging Face name: `[out, in]` matrices and vectors as `f64`.
trait Source {
    /// The tensor `name` with the given shape (row-major).
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f64>, LlamaLoadError>;
    /// Whether `name` exists.
    fn has(&self, name: &str) -> bool;
}

struct StSource<'a>(SafeTensors<'a>);

impl Source for StSource<'_> {
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f64>, LlamaLoadError> {
        let view = self
            .0
            .tensor(name)
            .map_err(|_| LlamaLoadError::MissingTensor(name.into()))?;
        if view.shape() != shape {
            return Err(LlamaLoadError::Shape {
                name: name.into(),
                expected: shape.to_vec(),
                found: view.shape().to_vec(),
            });
        }
        to_f64(name, view.dtype(), view.data(), shape.iter().product())
    }

    fn has(&self, name: &str) -> bool {
        self.0.tensor(name).is_ok()
    }
}

/// GGUF tensors under their Hugging Face names (`token_embd` → `model.embed_tokens`, …),
/// with llama.cpp's row permutation of `attn_q` / `attn_k` undone.
struct GgufSource<'a> {
    file: &'a GgufFile,
    cfg: &'a LlamaConfig,
}

/// The GGUF name of a Hugging Face tensor name, and the head count of a Q/K projection whose
/// rows llama.cpp permuted.
fn gguf_name(hf: &str, cfg: &LlamaConfig) -> Option<(String, Option<usize>)> {
    let w = |s: &str| Some((s.to_owned(), None));
    match hf {
        "model.embed_tokens.weight" => return w("token_embd.weight"),
        "model.norm.weight" => return w("output_norm.weight"),
        "lm_head.weight" => return w("output.weight"),
        _ => {}
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (n, suffix) = rest.split_once('.')?;
    let (g, heads) = match suffix {
        "input_layernorm.weight" => ("attn_norm", None),
        "self_attn.q_proj.weight" => ("attn_q", Some(cfg.num_attention_heads)),
        "self_attn.k_proj.weight" => ("attn_k", Some(cfg.num_key_value_heads)),
        "self_attn.v_proj.weight" => ("attn_v", None),
        "self_attn.o_proj.weight" => ("attn_output", None),
        "post_attention_layernorm.weight" => ("ffn_norm", None),
        "mlp.gate_proj.weight" => ("ffn_gate", None),
        "mlp.up_proj.weight" => ("ffn_up", None),
        "mlp.down_proj.weight" => ("ffn_down", None),
        _ => return None,
    };
    Some((format!("blk.{n}.{g}.weight"), heads))
}

impl Source for GgufSource<'_> {
    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f64>, LlamaLoadError> {
        let (g, heads) =
            gguf_name(name, self.cfg).ok_or_else(|| LlamaLoadError::MissingTensor(name.into()))?;
        let (values, dims) = self.file.dequantize(&g)?;
        // GGUF dims are fastest-first: [in, out] describes the row-major [out][in] matrix.
        let found: Vec<usize> = dims.iter().rev().map(|&d| d as usize).collect();
        if found != shape {
            return Err(LlamaLoadError::Shape {
                name: name.into(),
                expected: shape.to_vec(),
                found,
            });
        }
        if values.iter().any(|x| !x.is_finite()) {
            return Err(LlamaLoadError::NonFinite(name.into()));
        }
        let Some(heads) = heads else {
            return Ok(values.into_iter().map(f64::from).collect());
        };
        // llama.cpp stores row (h, j, a) of head h as h·hd + 2j + a (pairs adjacent);
        // HF's rotate_half wants h·hd + a·hd/2 + j.
        let (out, inp) = match shape {
            [o, i] => (*o, *i),
            _ => return Err(LlamaLoadError::MissingTensor(name.into())),
        };
        let hd = out / heads.max(1);
        let half = hd / 2;
        let mut res = vec![0.0; out * inp];
        for h in 0..heads {
            for a in 0..2 {
                for j in 0..half {
                    let dst = (h * hd + a * half + j) * inp;
                    let src = (h * hd + 2 * j + a) * inp;
                    if let (Some(d), Some(s)) =
                        (res.get_mut(dst..dst + inp), values.get(src..src + inp))
                    {
                        for (x, &y) in d.iter_mut().zip(s) {
                            *x = f64::from(y);
                        }
                    }
                }
            }
        }
        Ok(res)
    }

    fn has(&self, name: &str) -> bool {
        gguf_name(name, self.cfg).is_some_and(|(g, _)| self.file.tensor_info(&g).is_some())
    }
}

fn vector(src: &dyn Source, name: &str, n: usize) -> Result<Array1<f64>, LlamaLoadError> {
    Ok(Array1::from(src.get(name, &[n])?))
}

/// An HF `[out, in]` matrix, returned as `[in, out]`.
fn linear(
    src: &dyn Source,
    name: &str,
    out: usize,
    inp: usize,
) -> Result<Array2<f64>, LlamaLoadError> {
    let v = src.get(name, &[out, inp])?;
    let m = Array2::from_shape_vec((out, inp), v).map_err(|_| LlamaLoadError::Shape {
        name: name.into(),
        expected: vec![out, inp],
        found: vec![],
    })?;
    Ok(m.reversed_axes().as_standard_layout().into_owned())
}

fn load_from(src: &dyn Source, cfg: &LlamaConfig) -> Result<LlamaWeights, LlamaLoadError> {
    let (d, v, i) = (cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size);
    let (q, kv) = (cfg.q_dim(), cfg.kv_dim());
    let embed = Array2::from_shape_vec((v, d), src.get("model.embed_tokens.weight", &[v, d])?)
        .map_err(|_| LlamaLoadError::MissingTensor("model.embed_tokens.weight".into()))?;
    let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
    for n in 0..cfg.num_hidden_layers {
        let p = format!("model.layers.{n}");
        layers.push(LlamaLayer {
            attn_norm: vector(src, &format!("{p}.input_layernorm.weight"), d)?,
            wq: linear(src, &format!("{p}.self_attn.q_proj.weight"), q, d)?,
            wk: linear(src, &format!("{p}.self_attn.k_proj.weight"), kv, d)?,
            wv: linear(src, &format!("{p}.self_attn.v_proj.weight"), kv, d)?,
            wo: linear(src, &format!("{p}.self_attn.o_proj.weight"), d, q)?,
            mlp_norm: vector(src, &format!("{p}.post_attention_layernorm.weight"), d)?,
            w_gate: linear(src, &format!("{p}.mlp.gate_proj.weight"), i, d)?,
            w_up: linear(src, &format!("{p}.mlp.up_proj.weight"), i, d)?,
            w_down: linear(src, &format!("{p}.mlp.down_proj.weight"), d, i)?,
        });
    }
    let norm = vector(src, "model.norm.weight", d)?;
    let lm_head = if !cfg.tie_word_embeddings && src.has("lm_head.weight") {
        let h = Array2::from_shape_vec((v, d), src.get("lm_head.weight", &[v, d])?)
            .map_err(|_| LlamaLoadError::MissingTensor("lm_head.weight".into()))?;
        (h != embed).then_some(h)
    } else if !cfg.tie_word_embeddings {
        return Err(LlamaLoadError::MissingTensor("lm_head.weight".into()));
    } else {
        None
    };
    Ok(LlamaWeights {
        embed,
        layers,
        norm,
        lm_head,
    })
}

/// Loads a Hugging Face `LlamaForCausalLM` directory: `dir/config.json` and
/// `dir/model.safetensors` (single file).
///
/// # Errors
/// [`LlamaLoadError::Io`] for a missing file, [`LlamaLoadError::Config`] for a bad config,
/// and the tensor errors (missing, shape, dtype, non-finite, malformed file).
pub fn load_hf(dir: &Path) -> Result<(LlamaConfig, LlamaWeights), LlamaLoadError> {
    let cfg = LlamaConfig::from_file(&dir.join("config.json"))?;
    let path = dir.join("model.safetensors");
    let bytes = std::fs::read(&path).map_err(|source| LlamaLoadError::Io { path, source })?;
    let st =
        SafeTensors::deserialize(&bytes).map_err(|e| LlamaLoadError::BadFile(e.to_string()))?;
    let w = load_from(&StSource(st), &cfg)?;
    Ok((cfg, w))
}

/// Loads a LLaMA-architecture GGUF file: configuration from its metadata, tensors
/// dequantised (F32, F16, Q4_1, Q8_0) and renamed to the HF layout, with the Q/K row
/// permutation of llama.cpp undone so that the HF `rotate_half` RoPE applies.
///
/// # Errors
/// [`LlamaLoadError::Io`], [`LlamaLoadError::Gguf`] for a malformed file or a tensor type
/// without a dequantiser, [`LlamaLoadError::Config`] for missing metadata, and the tensor
/// errors.
pub fn load_gguf(path: &Path) -> Result<(LlamaConfig, LlamaWeights), LlamaLoadError> {
    let file = GgufFile::open(path).map_err(|e| match e {
        GgufError::Io { path, source } => LlamaLoadError::Io { path, source },
        other => LlamaLoadError::Gguf(other),
    })?;
    load_gguf_file(&file)
}

/// [`load_gguf`] on a parsed file.
///
/// # Errors
/// As [`load_gguf`].
pub fn load_gguf_file(file: &GgufFile) -> Result<(LlamaConfig, LlamaWeights), LlamaLoadError> {
    let cfg = LlamaConfig::from_gguf(file)?;
    let w = load_from(&GgufSource { file, cfg: &cfg }, &cfg)?;
    Ok((cfg, w))
}
