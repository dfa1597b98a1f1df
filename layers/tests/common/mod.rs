//! Shared helpers of the integration tests: paths of the checked-in fixtures and a reader
//! for the reference tensors.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    dead_code
)]

use std::path::PathBuf;

use ndarray::Array2;
use safetensors::{Dtype, SafeTensors};

/// `models/<name>` at the repository root.
pub fn model_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("models")
        .join(name)
}

/// The reference activations of a fixture model (`layers/tests/fixtures/<name>/`).
pub struct Reference {
    bytes: Vec<u8>,
}

impl Reference {
    pub fn load(name: &str) -> Reference {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name)
            .join("reference.safetensors");
        Reference {
            bytes: std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        }
    }

    fn st(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).unwrap()
    }

    /// The prompts, from the file's metadata.
    pub fn prompts(&self) -> Vec<String> {
        let (_, meta) = SafeTensors::read_metadata(&self.bytes).unwrap();
        let text = meta.metadata().as_ref().unwrap().get("prompts").unwrap();
        serde_json::from_str(text).unwrap()
    }

    /// A float tensor (F32 or F64) and its shape.
    pub fn floats(&self, key: &str) -> (Vec<usize>, Vec<f64>) {
        let st = self.st();
        let t = st.tensor(key).unwrap_or_else(|_| panic!("no tensor {key}"));
        let values = match t.dtype() {
            Dtype::F32 => t
                .data()
                .chunks_exact(4)
                .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
                .collect(),
            Dtype::F64 => t
                .data()
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            d => panic!("{key}: dtype {d:?}"),
        };
        (t.shape().to_vec(), values)
    }

    /// A `[1, rows, cols]` float tensor as `rows × cols`.
    pub fn matrix(&self, key: &str) -> Array2<f64> {
        let (shape, values) = self.floats(key);
        assert_eq!(shape.len(), 3, "{key}: shape {shape:?}");
        assert_eq!(shape[0], 1, "{key}: batch {shape:?}");
        Array2::from_shape_vec((shape[1], shape[2]), values).unwrap()
    }

    /// An int64 tensor's values as token ids.
    pub fn ids(&self, key: &str) -> Vec<u32> {
        let st = self.st();
        let t = st.tensor(key).unwrap_or_else(|_| panic!("no tensor {key}"));
        assert_eq!(t.dtype(), Dtype::I64, "{key}");
        t.data()
            .chunks_exact(8)
            .map(|c| u32::try_from(i64::from_le_bytes(c.try_into().unwrap())).unwrap())
            .collect()
    }

    /// Whether the file holds `key`.
    pub fn has(&self, key: &str) -> bool {
        self.st().tensor(key).is_ok()
    }
}

/// Largest absolute element-wise difference (shapes must agree).
pub fn max_abs_diff(a: &Array2<f64>, b: &Array2<f64>) -> f64 {
    assert_eq!(a.shape(), b.shape());
    a.iter()
        .zip(b.iter())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}
