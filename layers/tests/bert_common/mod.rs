//! Helpers of the BERT tests: the checked-in fixtures under `models/`, the real
//! all-MiniLM-L6-v2 checkpoint fetched by `scripts/fetch-minilm.sh`, and a reader for the
//! reference tensors.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    dead_code
)]

use std::path::PathBuf;

use ndarray::Array2;
use puma_layers::bert::BertBatch;
use safetensors::{Dtype, SafeTensors};

/// `models/<name>` at the repository root.
pub fn model_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("models")
        .join(name)
}

/// The all-MiniLM-L6-v2 directory: `$PUMA_MINILM_DIR`, else `target/models/minilm-l6`
/// (where `scripts/fetch-minilm.sh` puts it). `None` (with a printed skip notice) when
/// it is absent, unless `PUMA_REQUIRE_REAL_MODELS=1`, which makes its absence a failure.
pub fn minilm_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("PUMA_MINILM_DIR").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target/models/minilm-l6")
        },
        PathBuf::from,
    );
    if dir.join("model.safetensors").is_file() {
        return Some(dir);
    }
    let required = std::env::var("PUMA_REQUIRE_REAL_MODELS").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "all-MiniLM-L6-v2 not found at {} and PUMA_REQUIRE_REAL_MODELS=1: run `bash scripts/fetch-minilm.sh`",
        dir.display()
    );
    eprintln!(
        "SKIPPED: all-MiniLM-L6-v2 not found at {} (run `bash scripts/fetch-minilm.sh`, or set PUMA_MINILM_DIR)",
        dir.display()
    );
    None
}

/// A reference file.
pub struct Reference {
    bytes: Vec<u8>,
}

impl Reference {
    /// `models/<name>/reference.safetensors`.
    pub fn load(name: &str) -> Reference {
        let path = model_dir(name).join("reference.safetensors");
        Reference {
            bytes: std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
        }
    }

    /// A JSON value of the file's metadata (`sentences`, `inputs`).
    pub fn meta(&self, key: &str) -> serde_json::Value {
        let (_, meta) = SafeTensors::read_metadata(&self.bytes).unwrap();
        let text = meta.metadata().as_ref().unwrap().get(key).unwrap();
        serde_json::from_str(text).unwrap()
    }

    fn st(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).unwrap()
    }

    /// A float tensor's shape and values.
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

    /// A float tensor as a matrix of `rows × last dim` (leading dims flattened).
    pub fn matrix(&self, key: &str) -> Array2<f64> {
        let (shape, values) = self.floats(key);
        let cols = *shape.last().unwrap();
        Array2::from_shape_vec((values.len() / cols, cols), values).unwrap()
    }

    /// An int64 tensor's values and shape.
    pub fn ints(&self, key: &str) -> (Vec<usize>, Vec<i64>) {
        let st = self.st();
        let t = st.tensor(key).unwrap_or_else(|_| panic!("no tensor {key}"));
        assert_eq!(t.dtype(), Dtype::I64, "{key}");
        let v = t
            .data()
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        (t.shape().to_vec(), v)
    }

    /// The input `<tag>.*` as a batch (token types 0 when the file has none).
    pub fn batch(&self, tag: &str) -> BertBatch {
        let (shape, ids) = self.ints(&format!("{tag}.input_ids"));
        let (_, mask) = self.ints(&format!("{tag}.attention_mask"));
        let types = if self.st().tensor(&format!("{tag}.token_type_ids")).is_ok() {
            self.ints(&format!("{tag}.token_type_ids")).1
        } else {
            vec![0; ids.len()]
        };
        BertBatch {
            batch: shape[0],
            seq_len: shape[1],
            input_ids: ids.iter().map(|&i| i as u32).collect(),
            token_type_ids: types.iter().map(|&i| i as u32).collect(),
            attention_mask: mask.iter().map(|&m| m == 1).collect(),
        }
    }
}

/// Max |a − b| over the rows where `mask` is true (all rows if `None`).
pub fn max_diff_rows(a: &Array2<f64>, b: &Array2<f64>, mask: Option<&[bool]>) -> f64 {
    assert_eq!(a.dim(), b.dim());
    let mut m: f64 = 0.0;
    for (r, (ra, rb)) in a.rows().into_iter().zip(b.rows()).enumerate() {
        if mask.is_none_or(|mk| mk[r]) {
            for (x, y) in ra.iter().zip(rb) {
                m = m.max((x - y).abs());
            }
        }
    }
    m
}

/// The MiniLM sentence tags s01..s24.
pub fn minilm_tags() -> Vec<String> {
    (1..=24).map(|i| format!("s{i:02}")).collect()
}

/// The 276 sentence pairs (i < j) ordered by decreasing similarity in `cos`.
pub fn pair_ranking(cos: &Array2<f64>) -> Vec<(usize, usize)> {
    let n = cos.nrows();
    let mut p: Vec<(usize, usize)> = (0..n)
        .flat_map(|i| (i + 1..n).map(move |j| (i, j)))
        .collect();
    p.sort_by(|a, b| cos[[b.0, b.1]].total_cmp(&cos[[a.0, a.1]]));
    p
}

/// A sentence pair (i < j).
pub type Pair = (usize, usize);

/// Pairs of sentence pairs ordered differently by `got` than by `reference`, with the
/// reference's gap between them: `(pair a, pair b, |reference gap|)`.
pub fn discordant(got: &Array2<f64>, reference: &Array2<f64>) -> Vec<(Pair, Pair, f64)> {
    let pairs = pair_ranking(reference);
    let mut out = Vec::new();
    for (x, a) in pairs.iter().enumerate() {
        for b in &pairs[x + 1..] {
            let rg = reference[[a.0, a.1]] - reference[[b.0, b.1]];
            let gg = got[[a.0, a.1]] - got[[b.0, b.1]];
            if rg * gg < 0.0 || (gg == 0.0 && rg != 0.0) {
                out.push((*a, *b, rg.abs()));
            }
        }
    }
    out
}
