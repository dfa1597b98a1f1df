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
use safetensors::SafeTensors;

use super::config::{BertConfig, BertFlavor};
use super::error::BertError;
use crate::gpt2::weights::LayerNormWeights;
use crate::safetensors_reader::{TensorError, TensorReader};

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

/// The prefixes tried before a tensor name: `BertModel` and `RobertaModel` heads put
/// `bert.` or `roberta.` before their encoder's tensors, a bare encoder nothing.
const PREFIXES: &[&str] = &["bert.", "roberta.", ""];

impl From<TensorError> for BertError {
    fn from(e: TensorError) -> Self {
        match e {
            TensorError::Missing { name } => BertError::MissingTensor { name },
            TensorError::Shape {
                name,
                expected,
                found,
            } => BertError::Shape {
                name,
                expected,
                found,
            },
            TensorError::NonFinite { name } => BertError::NonFinite { name },
            TensorError::UnsupportedDtype { name, dtype } => {
                BertError::UnsupportedDtype { name, dtype }
            }
            TensorError::BadData { name, reason } => BertError::BadFile {
                what: format!("tensor {name}"),
                reason,
            },
        }
    }
}

/// `prefix.weight` (`[out, in]` in the file) transposed, and `prefix.bias`.
fn linear(
    r: &TensorReader<'_>,
    prefix: &str,
    input: usize,
    output: usize,
) -> Result<Linear, BertError> {
    let w = r.matrix(&format!("{prefix}.weight"), output, input)?;
    Ok(Linear {
        w: w.t().as_standard_layout().into_owned(),
        b: r.vector(&format!("{prefix}.bias"), output)?,
    })
}

/// A linear layer whose output width is read from the file (classification heads).
fn head(r: &TensorReader<'_>, prefix: &str, input: usize) -> Result<Option<Linear>, BertError> {
    match r.find(&format!("{prefix}.weight")) {
        None => Ok(None),
        Some(v) => match v.shape() {
            [out, _] => linear(r, prefix, input, *out).map(Some),
            found => Err(BertError::Shape {
                name: format!("{prefix}.weight"),
                expected: vec![0, input],
                found: found.to_vec(),
            }),
        },
    }
}

fn load(bytes: &[u8], cfg: &BertConfig, what: &str) -> Result<BertWeights, BertError> {
    cfg.validate()?;
    let st = SafeTensors::deserialize(bytes).map_err(|e| BertError::BadFile {
        what: what.to_owned(),
        reason: e.to_string(),
    })?;
    let r = TensorReader::new(st, PREFIXES);
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
            query: linear(&r, &format!("{p}.attention.self.query"), d, d)?,
            key: linear(&r, &format!("{p}.attention.self.key"), d, d)?,
            value: linear(&r, &format!("{p}.attention.self.value"), d, d)?,
            attn_out: linear(&r, &format!("{p}.attention.output.dense"), d, d)?,
            attn_ln: r.layer_norm(&format!("{p}.attention.output.LayerNorm"), d)?,
            inter: linear(&r, &format!("{p}.intermediate.dense"), d, inner)?,
            out: linear(&r, &format!("{p}.output.dense"), inner, d)?,
            out_ln: r.layer_norm(&format!("{p}.output.LayerNorm"), d)?,
        });
    }
    let roberta_head =
        cfg.flavor == BertFlavor::Roberta && r.find("classifier.dense.weight").is_some();
    let (pooler, classifier) = if roberta_head {
        (
            Some(linear(&r, "classifier.dense", d, d)?),
            head(&r, "classifier.out_proj", d)?,
        )
    } else {
        let pooler = match r.find("pooler.dense.weight") {
            Some(_) => Some(linear(&r, "pooler.dense", d, d)?),
            None => None,
        };
        (pooler, head(&r, "classifier", d)?)
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
