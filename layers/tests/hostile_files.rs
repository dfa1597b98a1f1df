//! Hostile model files: every class of malformed `config.json` and `model.safetensors` ends
//! in a typed error, never a panic or an allocation the file does not back, and no error
//! message prints weight values (the model owner's secret).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use puma_layers::gguf::GgufFile;
use puma_layers::{ConfigError, Gpt2Config, Gpt2Weights, LoadError};

/// A weight no rendering of a shape, offset or name could contain.
const PLANTED: f32 = 0.123_456_79;

fn config() -> Gpt2Config {
    Gpt2Config::from_json_str(CONFIG).unwrap()
}

const CONFIG: &str = r#"{"n_layer":1,"n_embd":4,"n_head":2,"n_positions":3,"vocab_size":5,
  "layer_norm_epsilon":1e-5,"activation_function":"gelu_new","model_type":"gpt2"}"#;

/// Tensors of the one-layer model above: (name, shape).
fn tensors() -> Vec<(String, Vec<usize>)> {
    let (d, inner) = (4, 16);
    [
        ("wte.weight", vec![5, d]),
        ("wpe.weight", vec![3, d]),
        ("ln_f.weight", vec![d]),
        ("ln_f.bias", vec![d]),
        ("h.0.ln_1.weight", vec![d]),
        ("h.0.ln_1.bias", vec![d]),
        ("h.0.ln_2.weight", vec![d]),
        ("h.0.ln_2.bias", vec![d]),
        ("h.0.attn.c_attn.weight", vec![d, 3 * d]),
        ("h.0.attn.c_attn.bias", vec![3 * d]),
        ("h.0.attn.c_proj.weight", vec![d, d]),
        ("h.0.attn.c_proj.bias", vec![d]),
        ("h.0.mlp.c_fc.weight", vec![d, inner]),
        ("h.0.mlp.c_fc.bias", vec![inner]),
        ("h.0.mlp.c_proj.weight", vec![inner, d]),
        ("h.0.mlp.c_proj.bias", vec![d]),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_owned(), s))
    .collect()
}

/// A safetensors file built by hand, so that its header can lie. `edit` may change each
/// tensor's header entry (name, dtype, shape, offsets) before it is written.
fn file_with(edit: impl Fn(&str, &mut String, &mut Vec<usize>, &mut [usize; 2])) -> Vec<u8> {
    let mut header = Vec::new();
    let mut data = Vec::new();
    for (name, shape) in tensors() {
        let n: usize = shape.iter().product();
        let start = data.len();
        for _ in 0..n {
            data.extend_from_slice(&PLANTED.to_le_bytes());
        }
        let (mut dtype, mut shape, mut offs) = ("F32".to_owned(), shape, [start, data.len()]);
        edit(&name, &mut dtype, &mut shape, &mut offs);
        header.push(format!(
            r#""{name}":{{"dtype":"{dtype}","shape":{shape:?},"data_offsets":[{},{}]}}"#,
            offs[0], offs[1]
        ));
    }
    let mut h = format!("{{{}}}", header.join(",")).into_bytes();
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend(data);
    out
}

fn valid() -> Vec<u8> {
    file_with(|_, _, _, _| {})
}

fn load(bytes: &[u8]) -> Result<Gpt2Weights, LoadError> {
    Gpt2Weights::from_safetensors_bytes(bytes, &config())
}

/// The error's message, checked to carry no weight value.
fn message(e: &LoadError) -> String {
    let text = format!("{e} {e:?}");
    for r in [
        format!("{PLANTED}"),
        format!("{}", f64::from(PLANTED)),
        "0.1234".to_owned(),
    ] {
        assert!(!text.contains(&r), "{text} prints a weight");
    }
    text
}

#[test]
fn the_hand_built_file_loads() {
    let w = load(&valid()).unwrap();
    assert_eq!(w.wte[[4, 3]], f64::from(PLANTED));
}

#[test]
fn every_truncation_is_a_bad_file() {
    let f = valid();
    for len in (0..f.len()).step_by(7).chain([f.len() - 1]) {
        let e = load(&f[..len]).unwrap_err();
        assert!(
            matches!(e, LoadError::BadFile { .. }),
            "len {len}: {}",
            message(&e)
        );
    }
}

#[test]
fn lying_header_lengths_are_bad_files() {
    let f = valid();
    for lie in [0u64, 1, 7, u64::MAX, u64::MAX / 2, f.len() as u64, 1 << 40] {
        let mut g = f.clone();
        g[..8].copy_from_slice(&lie.to_le_bytes());
        let e = load(&g).unwrap_err();
        assert!(
            matches!(e, LoadError::BadFile { .. }),
            "{lie}: {}",
            message(&e)
        );
    }
}

#[test]
fn garbage_headers_are_bad_files() {
    let f = valid();
    let hlen = u64::from_le_bytes(f[..8].try_into().unwrap()) as usize;
    for junk in [
        &b"\xff\xfe\xfd"[..],
        b"[1,2,3]",
        b"{\"a\":",
        b"null",
        b"{}}}}",
    ] {
        let mut g = f.clone();
        let n = junk.len().min(hlen);
        g[8..8 + n].copy_from_slice(&junk[..n]);
        let e = load(&g).unwrap_err();
        assert!(
            matches!(
                e,
                LoadError::BadFile { .. } | LoadError::MissingTensor { .. }
            ),
            "{}",
            message(&e)
        );
    }
}

#[test]
fn lying_offsets_and_shapes_are_typed_errors() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "offsets past the end",
            file_with(|n, _, _, o| {
                if n == "wte.weight" {
                    o[1] += 1 << 30;
                }
            }),
        ),
        (
            "reversed offsets",
            file_with(|n, _, _, o| {
                if n == "wpe.weight" {
                    o.swap(0, 1);
                }
            }),
        ),
        (
            "overlapping tensors",
            file_with(|n, _, _, o| {
                if n == "ln_f.bias" {
                    o[0] -= 4;
                }
            }),
        ),
        (
            "huge shape",
            file_with(|n, _, s, _| {
                if n == "wte.weight" {
                    *s = vec![1 << 40, 1 << 40];
                }
            }),
        ),
        (
            "overflowing shape",
            file_with(|n, _, s, _| {
                if n == "wte.weight" {
                    *s = vec![usize::MAX, 2];
                }
            }),
        ),
        (
            "shape of the wrong size",
            file_with(|n, _, s, _| {
                if n == "h.0.mlp.c_fc.weight" {
                    *s = vec![16, 4];
                }
            }),
        ),
        (
            "integer dtype",
            file_with(|n, d, _, _| {
                if n == "ln_f.weight" {
                    *d = "I32".into();
                }
            }),
        ),
        (
            "unknown dtype",
            file_with(|n, d, _, _| {
                if n == "ln_f.weight" {
                    *d = "F128".into();
                }
            }),
        ),
        (
            "dtype of another width",
            file_with(|n, d, _, _| {
                if n == "ln_f.weight" {
                    *d = "F64".into();
                }
            }),
        ),
        (
            "missing tensor",
            valid().pipe_rename("h.0.attn.c_proj.bias", "h.0.attn.c_proj.bia_"),
        ),
    ];
    for (what, bytes) in cases {
        let e = load(&bytes).unwrap_err();
        let text = message(&e);
        assert!(
            matches!(
                e,
                LoadError::BadFile { .. }
                    | LoadError::Shape { .. }
                    | LoadError::UnsupportedDtype { .. }
                    | LoadError::MissingTensor { .. }
            ),
            "{what}: {text}"
        );
    }
}

trait Rename {
    fn pipe_rename(self, from: &str, to: &str) -> Vec<u8>;
}

impl Rename for Vec<u8> {
    /// Replaces the first occurrence of `from` (same length) in the header.
    fn pipe_rename(mut self, from: &str, to: &str) -> Vec<u8> {
        assert_eq!(from.len(), to.len());
        let at = self
            .windows(from.len())
            .position(|w| w == from.as_bytes())
            .unwrap();
        self[at..at + to.len()].copy_from_slice(to.as_bytes());
        self
    }
}

#[test]
fn non_finite_weights_are_refused_by_name() {
    for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut f = valid();
        let last = f.len() - 4;
        f[last..].copy_from_slice(&bad.to_le_bytes());
        let e = load(&f).unwrap_err();
        assert!(matches!(e, LoadError::NonFinite { .. }), "{}", message(&e));
    }
}

#[test]
fn hostile_configs_are_typed_errors() {
    let base: serde_json::Value = serde_json::from_str(CONFIG).unwrap();
    let with = |k: &str, v: serde_json::Value| {
        let mut c = base.clone();
        c[k] = v;
        c.to_string()
    };
    let cases = [
        ("not json".to_owned(), "json"),
        ("".to_owned(), "json"),
        ("[]".to_owned(), "json"),
        (with("n_embd", (-4).into()), "json"),
        (with("n_embd", "4".into()), "json"),
        (with("n_embd", 1e30.into()), "json"),
        (with("n_embd", 0.into()), "zero"),
        (with("n_layer", 0.into()), "zero"),
        (with("n_head", 3.into()), "heads"),
        (with("vocab_size", u64::MAX.into()), "large"),
        (with("n_positions", (1u64 << 62).into()), "large"),
        (with("layer_norm_epsilon", (-1.0).into()), "eps"),
        (with("activation_function", "swish".into()), "activation"),
        (with("model_type", "bert".into()), "type"),
        (with("add_cross_attention", true.into()), "option"),
    ];
    for (text, class) in cases {
        let e = Gpt2Config::from_json_str(&text).unwrap_err();
        let ok = match class {
            "json" => matches!(e, ConfigError::Json(_)),
            "zero" => matches!(e, ConfigError::ZeroSize(_)),
            "heads" => matches!(e, ConfigError::HeadsDoNotDivide { .. }),
            "large" => matches!(e, ConfigError::Limit(_)),
            "eps" => matches!(e, ConfigError::BadEpsilon(_)),
            "activation" => matches!(e, ConfigError::UnsupportedActivation(_)),
            "type" => matches!(e, ConfigError::UnsupportedModelType(_)),
            _ => matches!(e, ConfigError::UnsupportedOption { .. }),
        };
        assert!(ok, "{text}: expected {class}, got {e:?}");
    }
}

#[test]
fn hostile_gguf_headers_are_typed_errors() {
    let mut header = b"GGUF".to_vec();
    header.extend_from_slice(&3u32.to_le_bytes());
    // Tensor and metadata counts far beyond what the file holds.
    for (tensors, kvs) in [(u64::MAX, 0u64), (0, u64::MAX), (1 << 40, 1 << 40), (1, 1)] {
        let mut f = header.clone();
        f.extend_from_slice(&tensors.to_le_bytes());
        f.extend_from_slice(&kvs.to_le_bytes());
        // A key with a huge string length.
        f.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(GgufFile::from_bytes(f).is_err());
    }
    for len in 0..header.len() + 16 {
        let mut f = header.clone();
        f.extend_from_slice(&[0; 16]);
        assert!(GgufFile::from_bytes(f[..len].to_vec()).is_err() || len >= 24);
    }
    let mut wrong = header.clone();
    wrong[..4].copy_from_slice(b"GGML");
    assert!(GgufFile::from_bytes(wrong).is_err());
}
