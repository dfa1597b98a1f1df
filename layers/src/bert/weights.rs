//! Loading BERT / RoBERTa weights from a `model.safetensors` file in Hugging Face layout.
//!
//! The file is read into memory and parsed by the `safetensors` crate; every tensor is
//! checked for presence, shape, dtype (F32, F16, BF16, F64, upcast exactly) and finiteness
//! and converted to `f64`. Nothing in a file can make the loader panic.
//!
//! `nn.Linear` weights are stored `[out, in]` (`y = x Wᵀ + b`); they are kept here
//! transposed, `[in, out]`, so that `y = x · W + b` as in the rest of the crate.

use std::path::Path;

use ndarray::{Array1, Array2};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};

use super::config::{BertConfig, BertFlavor};
use super::error::BertError;
use crate::checkpoint::LayerNormWeights;

/// A linear map `y = x · w + b` with `w` of `in × out`.
#[derive(Debug, Clone, PartialEq)]
pub struct Linear {
    /// The weight, `in × out`.
    pub w: Array2<f64>,
    /// The bias, `out`.
    pub b: Array1<f64>,
}

/// The weights of one encoder layer `encoder.layer.N`.
#[derive(Debug, Clone, PartialEq)]
pub struct BertLayer {
    /// `attention.self.query`, `d × d`.
    pub query: Linear,
    /// `attention.self.key`, `d × d`.
    pub key: Linear,
    /// `attention.self.value`, `d × d`.
    pub value: Linear,
    /// `attention.output.dense`, `d × d`.
    pub attn_out: Linear,
    /// `attention.output.LayerNorm` (after the residual sum).
    pub attn_ln: LayerNormWeights,
    /// `intermediate.dense`, `d × inner`.
    pub inter: Linear,
    /// `output.dense`, `inner × d`.
    pub out: Linear,
    /// `output.LayerNorm`.
    pub out_ln: LayerNormWeights,
}

/// All weights of a BERT / RoBERTa encoder, as `f64`.
#[derive(Debug, Clone, PartialEq)]
pub struct BertWeights {
    /// `embeddings.word_embeddings`, `vocab × d`.
    pub word: Array2<f64>,
    /// `embeddings.position_embeddings`, `positions × d`.
    pub position: Array2<f64>,
    /// `embeddings.token_type_embeddings`, `types × d`.
    pub token_type: Array2<f64>,
    /// `embeddings.LayerNorm`.
    pub emb_ln: LayerNormWeights,
    /// The encoder layers.
    pub layers: Vec<BertLayer>,
    /// The dense layer before tanh on the first token, `d × d`: BERT's `pooler.dense`, or
    /// RoBERTa's `classifier.dense` when the checkpoint has a classification head.
    pub pooler: Option<Linear>,
    /// The classification layer on the pooled output, `d × labels`: BERT's `classifier`,
    /// RoBERTa's `classifier.out_proj`.
    pub classifier: Option<Linear>,
}

impl BertWeights {
    /// Number of classification labels (0 without a head).
    pub fn num_labels(&self) -> usize {
        self.classifier.as_ref().map_or(0, |c| c.b.len())
    }

    /// Reads the weights from the bytes of a `model.safetensors` file.
    ///
    /// # Errors
    /// [`BertError::BadFile`] for an invalid file, otherwise [`BertError::MissingTensor`],
    /// [`BertError::Shape`], [`BertError::UnsupportedDtype`] or [`BertError::NonFinite`]
    /// for the first tensor that fails, [`BertError::Config`] for an invalid `config`.
    pub fn from_safetensors_bytes(
        bytes: &[u8],
        config: &BertConfig,
    ) -> Result<BertWeights, BertError> {
        load(bytes, config, "safetensors bytes")
    }

    /// Reads the weights from the file at `path`.
    ///
    /// # Errors
    /// [`BertError::Io`] if it cannot be read, otherwise as
    /// [`BertWeights::from_safetensors_bytes`].
    pub fn from_safetensors_file(
        path: &Path,
        config: &BertConfig,
    ) -> Result<BertWeights, BertError> {
        let bytes = std::fs::read(path).map_err(|source| BertError::Io {
            path: path.to_owned(),
            source,
        })?;
        load(&bytes, config, &path.display().to_string())
    }
}

/// Loads a BERT / RoBERTa model directory: `dir/config.json` and `dir/model.safetensors`.
///
/// # Errors
/// As [`BertConfig::from_file`] and [`BertWeights::from_safetensors_file`].
pub fn load_bert(dir: &Path) -> Result<(BertConfig, BertWeights), BertError> {
    let config = BertConfig::from_file(&dir.join("config.json"))?;
    let weights = BertWeights::from_safetensors_file(&dir.join("model.safetensors"), &config)?;
    Ok((config, weights))
}

/// The tensors of one file, looked up by unprefixed name.
struct Reader<'a> {
    st: SafeTensors<'a>,
}

impl<'a> Reader<'a> {
    fn find(&self, name: &str) -> Option<TensorView<'a>> {
        ["bert.", "roberta.", ""]
            .iter()
            .find_map(|p| self.st.tensor(&format!("{p}{name}")).ok())
    }

    fn view(&self, name: &str) -> Result<TensorView<'a>, BertError> {
        self.find(name).ok_or_else(|| BertError::MissingTensor {
            name: name.to_owned(),
        })
    }

    fn values(
        name: &str,
        view: &TensorView<'_>,
        expected: &[usize],
    ) -> Result<Vec<f64>, BertError> {
        if view.shape() != expected {
            return Err(BertError::Shape {
                name: name.to_owned(),
                expected: expected.to_vec(),
                found: view.shape().to_vec(),
            });
        }
        let values = to_f64(name, view)?;
        if values.iter().any(|v| !v.is_finite()) {
            return Err(BertError::NonFinite {
                name: name.to_owned(),
            });
        }
        Ok(values)
    }

    fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Array2<f64>, BertError> {
        let view = self.view(name)?;
        let values = Self::values(name, &view, &[rows, cols])?;
        Array2::from_shape_vec((rows, cols), values).map_err(|_| BertError::Shape {
            name: name.to_owned(),
            expected: vec![rows, cols],
            found: view.shape().to_vec(),
        })
    }

    fn vector(&self, name: &str, len: usize) -> Result<Array1<f64>, BertError> {
        let view = self.view(name)?;
        Ok(Array1::from(Self::values(name, &view, &[len])?))
    }

    /// `prefix.weight` (`[out, in]` in the file) transposed, and `prefix.bias`.
    fn linear(&self, prefix: &str, input: usize, output: usize) -> Result<Linear, BertError> {
        let w = self.matrix(&format!("{prefix}.weight"), output, input)?;
        Ok(Linear {
            w: w.t().as_standard_layout().into_owned(),
            b: self.vector(&format!("{prefix}.bias"), output)?,
        })
    }

    /// A linear layer whose output width is read from the file (classification heads).
    fn head(&self, prefix: &str, input: usize) -> Result<Option<Linear>, BertError> {
        match self.find(&format!("{prefix}.weight")) {
            None => Ok(None),
            Some(v) => match v.shape() {
                [out, _] => self.linear(prefix, input, *out).map(Some),
                found => Err(BertError::Shape {
                    name: format!("{prefix}.weight"),
                    expected: vec![0, input],
                    found: found.to_vec(),
                }),
            },
        }
    }

    fn layer_norm(&self, prefix: &str, d: usize) -> Result<LayerNormWeights, BertError> {
        Ok(LayerNormWeights {
            gamma: self.vector(&format!("{prefix}.weight"), d)?,
            beta: self.vector(&format!("{prefix}.bias"), d)?,
        })
    }
}

/// Converts the little-endian data of `view` to `f64` (exact for every accepted dtype).
fn to_f64(name: &str, view: &TensorView<'_>) -> Result<Vec<f64>, BertError> {
    let data = view.data();
    let width = match view.dtype() {
        Dtype::F64 => 8,
        Dtype::F32 => 4,
        Dtype::F16 | Dtype::BF16 => 2,
        other => {
            return Err(BertError::UnsupportedDtype {
                name: name.to_owned(),
                dtype: format!("{other:?}"),
            });
        }
    };
    let numel = view
        .shape()
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d));
    if numel.and_then(|n| n.checked_mul(width)) != Some(data.len()) {
        return Err(BertError::BadFile {
            what: format!("tensor {name}"),
            reason: format!(
                "{} data bytes do not hold shape {:?}",
                data.len(),
                view.shape()
            ),
        });
    }
    Ok(match view.dtype() {
        Dtype::F64 => data
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect(),
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        _ => data
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
    })
}

fn load(bytes: &[u8], cfg: &BertConfig, what: &str) -> Result<BertWeights, BertError> {
    cfg.validate()?;
    let st = SafeTensors::deserialize(bytes).map_err(|e| BertError::BadFile {
        what: what.to_owned(),
        reason: e.to_string(),
    })?;
    let r = Reader { st };
    let (d, inner) = (cfg.hidden_size, cfg.intermediate_size);
    let word = r.matrix("embeddings.word_embeddings.weight", cfg.vocab_size, d)?;
    let position = r.matrix(
        "embeddings.position_embeddings.weight",
        cfg.max_position_embeddings,
        d,
    )?;
    let token_type = r.matrix(
        "embeddings.token_type_embeddings.weight",
        cfg.type_vocab_size,
        d,
    )?;
    let emb_ln = r.layer_norm("embeddings.LayerNorm", d)?;
    let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
    for i in 0..cfg.num_hidden_layers {
        let p = format!("encoder.layer.{i}");
        layers.push(BertLayer {
            query: r.linear(&format!("{p}.attention.self.query"), d, d)?,
            key: r.linear(&format!("{p}.attention.self.key"), d, d)?,
            value: r.linear(&format!("{p}.attention.self.value"), d, d)?,
            attn_out: r.linear(&format!("{p}.attention.output.dense"), d, d)?,
            attn_ln: r.layer_norm(&format!("{p}.attention.output.LayerNorm"), d)?,
            inter: r.linear(&format!("{p}.intermediate.dense"), d, inner)?,
            out: r.linear(&format!("{p}.output.dense"), inner, d)?,
            out_ln: r.layer_norm(&format!("{p}.output.LayerNorm"), d)?,
        });
    }
    let roberta_head =
        cfg.flavor == BertFlavor::Roberta && r.find("classifier.dense.weight").is_some();
    let (pooler, classifier) = if roberta_head {
        (
            Some(r.linear("classifier.dense", d, d)?),
            r.head("classifier.out_proj", d)?,
        )
    } else {
        let pooler = match r.find("pooler.dense.weight") {
            Some(_) => Some(r.linear("pooler.dense", d, d)?),
            None => None,
        };
        (pooler, r.head("classifier", d)?)
    };
    if classifier.is_some() && pooler.is_none() {
        return Err(BertError::MissingTensor {
            name: "pooler.dense.weight".into(),
        });
    }
    Ok(BertWeights {
        word,
        position,
        token_type,
        emb_ln,
        layers,
        pooler,
        classifier,
    })
}
