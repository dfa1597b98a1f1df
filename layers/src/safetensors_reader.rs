//! Named tensors of a safetensors file as shape-checked, finite `f64` arrays: the part the
//! GPT-2 and BERT loaders share. Each loader maps [`TensorError`] into its own error type.

use ndarray::{Array1, Array2};
use safetensors::{Dtype, SafeTensors, tensor::TensorView};

use crate::gpt2::weights::LayerNormWeights;

/// Why a tensor could not be read.
#[derive(Debug)]
pub(crate) enum TensorError {
    /// No tensor of this name, with any of the reader's prefixes.
    Missing {
        /// The name without prefix.
        name: String,
    },
    /// The tensor's shape differs from the configuration's.
    Shape {
        /// The name without prefix.
        name: String,
        /// The expected shape.
        expected: Vec<usize>,
        /// The shape in the file.
        found: Vec<usize>,
    },
    /// The tensor holds a NaN or an infinity.
    NonFinite {
        /// The name without prefix.
        name: String,
    },
    /// The tensor's dtype is not a floating-point type that embeds in `f64`.
    UnsupportedDtype {
        /// The name without prefix.
        name: String,
        /// The dtype found.
        dtype: String,
    },
    /// The tensor's data bytes do not hold its shape.
    BadData {
        /// The name without prefix.
        name: String,
        /// What is wrong.
        reason: String,
    },
}

/// The tensors of one file, looked up by name with each of `prefixes` in turn (e.g.
/// `"transformer."` then `""`).
pub(crate) struct TensorReader<'a> {
    st: SafeTensors<'a>,
    prefixes: &'static [&'static str],
}

impl<'a> TensorReader<'a> {
    /// A reader trying `prefixes` in order.
    pub(crate) fn new(st: SafeTensors<'a>, prefixes: &'static [&'static str]) -> Self {
        TensorReader { st, prefixes }
    }

    /// The tensor `name` under the first prefix that has it, if any.
    pub(crate) fn find(&self, name: &str) -> Option<TensorView<'a>> {
        self.prefixes
            .iter()
            .find_map(|p| self.st.tensor(&format!("{p}{name}")).ok())
    }

    /// The tensor `name`'s values, after checking that its shape is `expected`.
    fn values(&self, name: &str, expected: &[usize]) -> Result<Vec<f64>, TensorError> {
        let view = self.find(name).ok_or_else(|| TensorError::Missing {
            name: name.to_owned(),
        })?;
        if view.shape() != expected {
            return Err(TensorError::Shape {
                name: name.to_owned(),
                expected: expected.to_vec(),
                found: view.shape().to_vec(),
            });
        }
        let values = to_f64(name, &view)?;
        if values.iter().any(|v| !v.is_finite()) {
            return Err(TensorError::NonFinite {
                name: name.to_owned(),
            });
        }
        Ok(values)
    }

    /// The `rows × cols` matrix `name`.
    pub(crate) fn matrix(
        &self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Array2<f64>, TensorError> {
        let values = self.values(name, &[rows, cols])?;
        Array2::from_shape_vec((rows, cols), values).map_err(|e| TensorError::BadData {
            name: name.to_owned(),
            reason: e.to_string(),
        })
    }

    /// The vector `name` of length `len`.
    pub(crate) fn vector(&self, name: &str, len: usize) -> Result<Array1<f64>, TensorError> {
        Ok(Array1::from(self.values(name, &[len])?))
    }

    /// `prefix.weight` and `prefix.bias` of a LayerNorm of width `d`.
    pub(crate) fn layer_norm(
        &self,
        prefix: &str,
        d: usize,
    ) -> Result<LayerNormWeights, TensorError> {
        Ok(LayerNormWeights {
            gamma: self.vector(&format!("{prefix}.weight"), d)?,
            beta: self.vector(&format!("{prefix}.bias"), d)?,
        })
    }
}

/// Converts the little-endian data of `view` to `f64` (exactly: every accepted dtype
/// embeds in `f64`).
fn to_f64(name: &str, view: &TensorView<'_>) -> Result<Vec<f64>, TensorError> {
    let data = view.data();
    let width = match view.dtype() {
        Dtype::F64 => 8,
        Dtype::F32 => 4,
        Dtype::F16 | Dtype::BF16 => 2,
        other => {
            return Err(TensorError::UnsupportedDtype {
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
        return Err(TensorError::BadData {
            name: name.to_owned(),
            reason: format!(
                "{} data bytes do not hold shape {:?} of {:?}",
                data.len(),
                view.shape(),
                view.dtype()
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
        // The only remaining width-2 dtype accepted above.
        _ => data
            .chunks_exact(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
    })
}
