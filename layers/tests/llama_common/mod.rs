//! Helpers of the LLaMA tests: fixture paths, the real SmolLM2 GGUF's location, and a
//! reader for reference tensors.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    dead_code
)]

use std::path::PathBuf;

use safetensors::{Dtype, SafeTensors};

/// `models/<name>` at the repository root.
pub fn model_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("models")
        .join(name)
}

/// The SmolLM2-135M-Instruct GGUF: `$PUMA_SMOLLM2_GGUF`, else
/// `target/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf` (what
/// `scripts/fetch-smollm2.sh` writes). When absent: panics if `PUMA_REQUIRE_REAL_MODELS=1`
/// (CI), otherwise prints why the test is skipped and returns `None`.
pub fn smollm2_gguf(test: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PUMA_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../target/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    if path.is_file() {
        return Some(path);
    }
    if std::env::var("PUMA_REQUIRE_REAL_MODELS").as_deref() == Ok("1") {
        panic!(
            "{test}: {} is missing and PUMA_REQUIRE_REAL_MODELS=1; run scripts/fetch-smollm2.sh",
            path.display()
        );
    }
    eprintln!(
        "SKIPPED {test}: {} not found (run scripts/fetch-smollm2.sh or set PUMA_SMOLLM2_GGUF)",
        path.display()
    );
    None
}

/// Reference tensors (`models/<name>/reference.safetensors`).
pub struct Reference {
    bytes: Vec<u8>,
}

impl Reference {
    pub fn load(name: &str) -> Reference {
        let path = model_dir(name).join("reference.safetensors");
        Reference {
            bytes: std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        }
    }

    /// A float tensor (F32 or F64) and its shape.
    pub fn floats(&self, key: &str) -> (Vec<usize>, Vec<f64>) {
        let st = SafeTensors::deserialize(&self.bytes).unwrap();
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

    /// An int64 tensor as u32 ids.
    pub fn ids(&self, key: &str) -> Vec<u32> {
        let st = SafeTensors::deserialize(&self.bytes).unwrap();
        let t = st.tensor(key).unwrap_or_else(|_| panic!("no tensor {key}"));
        assert_eq!(t.dtype(), Dtype::I64);
        t.data()
            .chunks_exact(8)
            .map(|c| u32::try_from(i64::from_le_bytes(c.try_into().unwrap())).unwrap())
            .collect()
    }
}

/// Largest |a − b|.
pub fn max_abs_diff<'a>(a: impl IntoIterator<Item = &'a f64>, b: &[f64]) -> f64 {
    let a: Vec<f64> = a.into_iter().copied().collect();
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, |m: f64, e| if e.is_nan() || e > m { e } else { m })
}
