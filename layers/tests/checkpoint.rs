//! Loading checkpoints and configs: the fixture models, small synthetic checkpoints built
//! here with the `safetensors` serializer, and every kind of defective input (each must be
//! a typed error, never a panic). A scalar-loop GPT-2 written independently below checks
//! the forward pass on the synthetic models, including the erf GeLU that no fixture uses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::model_dir;
use ndarray::Array2;
use puma_layers::gpt2::plain::{PlainGpt2, gelu_erf, gelu_tanh};
use puma_layers::{Activation, ConfigError, Gpt2Config, Gpt2Weights, LoadError, load_gpt2};
use safetensors::{Dtype, tensor::TensorView};

// ---------------------------------------------------------------- fixture checkpoints

#[test]
fn fixture_configs_parse() {
    let (c, w) = load_gpt2(&model_dir("gpt2-tiny-random")).unwrap();
    assert_eq!(
        c,
        Gpt2Config {
            n_layer: 2,
            n_embd: 64,
            n_head: 4,
            n_inner: 256,
            n_positions: 128,
            vocab_size: 50257,
            layer_norm_epsilon: 1e-5,
            activation: Activation::GeluTanh,
        }
    );
    assert_eq!(c.head_dim(), 16);
    assert_eq!(w.wte.dim(), (50257, 64));
    assert_eq!(w.blocks.len(), 2);
    assert!(w.lm_head.is_none(), "tied head");
    let params: usize = [w.wte.len(), w.wpe.len(), 2 * 64]
        .into_iter()
        .chain(w.blocks.iter().map(|b| {
            4 * 64
                + b.attn_w.len()
                + b.attn_b.len()
                + b.proj_w.len()
                + b.proj_b.len()
                + b.fc_w.len()
                + b.fc_b.len()
                + b.fc_proj_w.len()
                + b.fc_proj_b.len()
        }))
        .sum();
    assert_eq!(params, 3_324_736, "parameter count of the fixture README");

    let (c, w) = load_gpt2(&model_dir("gpt2-shakespeare")).unwrap();
    assert_eq!(
        (c.n_layer, c.n_embd, c.n_head, c.n_inner),
        (4, 256, 4, 1024)
    );
    assert_eq!((c.n_positions, c.vocab_size), (256, 50257));
    // f16 weights are upcast exactly: every value is an f16.
    assert!(
        w.blocks[0]
            .attn_w
            .iter()
            .all(|&v| f64::from(half::f16::from_f64(v)) == v)
    );
}

// ---------------------------------------------------------------- synthetic checkpoints

/// A small GPT-2 config (vocab 11, 5 positions, d 8, 2 heads, inner 12, 2 layers).
fn small_config_json(activation: &str) -> String {
    format!(
        r#"{{"model_type": "gpt2", "n_layer": 2, "n_embd": 8, "n_head": 2, "n_inner": 12,
            "n_positions": 5, "vocab_size": 11, "layer_norm_epsilon": 1e-5,
            "activation_function": "{activation}", "some_unknown_field": [1, 2]}}"#
    )
}

/// Deterministic pseudo-random values in [-scale, scale).
fn values(seed: u64, n: usize, scale: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// name (without prefix) → (shape, values) of every tensor of the small model.
fn small_tensors() -> BTreeMap<String, (Vec<usize>, Vec<f64>)> {
    let (v, p, d, inner) = (11, 5, 8, 12);
    let mut t = BTreeMap::new();
    let mut seed = 0;
    let mut add = |name: String, shape: Vec<usize>, scale: f64, offset: f64| {
        seed += 1;
        let n = shape.iter().product();
        let vals = values(seed, n, scale)
            .into_iter()
            .map(|x| x + offset)
            .collect();
        t.insert(name, (shape, vals));
    };
    add("wte.weight".into(), vec![v, d], 1.0, 0.0);
    add("wpe.weight".into(), vec![p, d], 0.5, 0.0);
    for i in 0..2 {
        let h = format!("h.{i}");
        for ln in ["ln_1", "ln_2"] {
            add(format!("{h}.{ln}.weight"), vec![d], 0.3, 1.0);
            add(format!("{h}.{ln}.bias"), vec![d], 0.3, 0.0);
        }
        add(format!("{h}.attn.c_attn.weight"), vec![d, 3 * d], 0.8, 0.0);
        add(format!("{h}.attn.c_attn.bias"), vec![3 * d], 0.2, 0.0);
        add(format!("{h}.attn.c_proj.weight"), vec![d, d], 0.5, 0.0);
        add(format!("{h}.attn.c_proj.bias"), vec![d], 0.2, 0.0);
        add(format!("{h}.mlp.c_fc.weight"), vec![d, inner], 0.8, 0.0);
        add(format!("{h}.mlp.c_fc.bias"), vec![inner], 0.2, 0.0);
        add(format!("{h}.mlp.c_proj.weight"), vec![inner, d], 0.5, 0.0);
        add(format!("{h}.mlp.c_proj.bias"), vec![d], 0.2, 0.0);
    }
    add("ln_f.weight".into(), vec![d], 0.3, 1.0);
    add("ln_f.bias".into(), vec![d], 0.3, 0.0);
    t
}

fn encode(dtype: Dtype, vals: &[f64]) -> Vec<u8> {
    match dtype {
        Dtype::F64 => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        Dtype::F32 => vals
            .iter()
            .flat_map(|&v| (v as f32).to_le_bytes())
            .collect(),
        Dtype::F16 => vals
            .iter()
            .flat_map(|&v| half::f16::from_f64(v).to_le_bytes())
            .collect(),
        Dtype::BF16 => vals
            .iter()
            .flat_map(|&v| half::bf16::from_f64(v).to_le_bytes())
            .collect(),
        Dtype::I32 => vals
            .iter()
            .flat_map(|&v| (v as i32).to_le_bytes())
            .collect(),
        d => panic!("{d:?}"),
    }
}

/// Serializes `tensors` (name → dtype, shape, values) to safetensors bytes.
fn serialize(tensors: &BTreeMap<String, (Dtype, Vec<usize>, Vec<f64>)>) -> Vec<u8> {
    let data: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, (dt, shape, vals))| (n.clone(), *dt, shape.clone(), encode(*dt, vals)))
        .collect();
    let views: Vec<(String, TensorView<'_>)> = data
        .iter()
        .map(|(n, dt, shape, bytes)| {
            (
                n.clone(),
                TensorView::new(*dt, shape.clone(), bytes).unwrap(),
            )
        })
        .collect();
    safetensors::serialize(views, None).unwrap()
}

/// The small model's tensors in `dtype`, names prefixed with `prefix`.
fn small_file(dtype: Dtype, prefix: &str) -> BTreeMap<String, (Dtype, Vec<usize>, Vec<f64>)> {
    small_tensors()
        .into_iter()
        .map(|(n, (shape, vals))| (format!("{prefix}{n}"), (dtype, shape, vals)))
        .collect()
}

fn small_config() -> Gpt2Config {
    Gpt2Config::from_json_str(&small_config_json("gelu_new")).unwrap()
}

fn load_bytes(bytes: &[u8]) -> Result<Gpt2Weights, LoadError> {
    Gpt2Weights::from_safetensors_bytes(bytes, &small_config())
}

/// Writes a model directory (config + weights) into a fresh temporary directory.
fn write_dir(config: &str, weights: &[u8]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("config.json"), config).unwrap();
    std::fs::write(dir.path().join("model.safetensors"), weights).unwrap();
    dir
}

#[test]
fn loads_every_float_dtype_exactly_with_or_without_prefix() {
    let reference = small_tensors();
    for dtype in [Dtype::F64, Dtype::F32, Dtype::F16, Dtype::BF16] {
        for prefix in ["transformer.", ""] {
            let w = load_bytes(&serialize(&small_file(dtype, prefix))).unwrap();
            // Each value is the stored one, upcast exactly.
            let (_, wte) = &reference["wte.weight"];
            let want: Vec<f64> = match dtype {
                Dtype::F64 => wte.clone(),
                Dtype::F32 => wte.iter().map(|&v| f64::from(v as f32)).collect(),
                Dtype::F16 => wte
                    .iter()
                    .map(|&v| half::f16::from_f64(v).to_f64())
                    .collect(),
                _ => wte
                    .iter()
                    .map(|&v| half::bf16::from_f64(v).to_f64())
                    .collect(),
            };
            assert_eq!(
                w.wte.iter().copied().collect::<Vec<_>>(),
                want,
                "{dtype:?} {prefix:?}"
            );
            assert!(w.lm_head.is_none());
            let (_, fc) = &reference["h.1.mlp.c_fc.weight"];
            assert_eq!(w.blocks[1].fc_w.dim(), (8, 12));
            if dtype == Dtype::F64 {
                assert_eq!(w.blocks[1].fc_w.as_slice().unwrap(), &fc[..]);
                assert_eq!(w.blocks[0].ln_2.beta.to_vec(), reference["h.0.ln_2.bias"].1);
            }
        }
    }
}

#[test]
fn ignores_attention_buffers_and_unknown_tensors() {
    let mut t = small_file(Dtype::F32, "");
    // The mask buffers of the OpenAI-converted checkpoints (shape [1, 1, P, P]).
    for i in 0..2 {
        t.insert(
            format!("h.{i}.attn.bias"),
            (Dtype::F32, vec![1, 1, 5, 5], vec![1.0; 25]),
        );
        t.insert(
            format!("h.{i}.attn.masked_bias"),
            (Dtype::F32, vec![], vec![-1e4]),
        );
    }
    t.insert(
        "something.else".into(),
        (Dtype::I32, vec![2], vec![1.0, 2.0]),
    );
    let with = load_bytes(&serialize(&t)).unwrap();
    let without = load_bytes(&serialize(&small_file(Dtype::F32, ""))).unwrap();
    assert_eq!(with, without);
}

#[test]
fn lm_head_tied_equal_or_separate() {
    let mut t = small_file(Dtype::F32, "transformer.");
    let wte = t["transformer.wte.weight"].clone();
    // Present and equal to wte: tied.
    t.insert("lm_head.weight".into(), wte.clone());
    let w = load_bytes(&serialize(&t)).unwrap();
    assert!(w.lm_head.is_none());
    assert_eq!(w.lm_head(), &w.wte);
    // Present and different: kept.
    let (dt, shape, vals) = wte.clone();
    let other: Vec<f64> = vals.iter().map(|v| v * 0.5).collect();
    t.insert("lm_head.weight".into(), (dt, shape, other.clone()));
    let w = load_bytes(&serialize(&t)).unwrap();
    let head = w.lm_head.as_ref().expect("separate head");
    assert_eq!(
        head.iter().map(|&v| v as f32).collect::<Vec<_>>(),
        other.iter().map(|&v| v as f32).collect::<Vec<_>>()
    );
    assert_eq!(w.lm_head(), head);
    // Logits use the separate head: scaling it by 0.5 halves them.
    let tied = PlainGpt2::new(
        small_config(),
        Gpt2Weights {
            lm_head: None,
            ..w.clone()
        },
    )
    .unwrap();
    let separate = PlainGpt2::new(small_config(), w).unwrap();
    let (a, b) = (
        tied.forward(&[1, 2]).unwrap(),
        separate.forward(&[1, 2]).unwrap(),
    );
    assert!(
        a.iter()
            .zip(b.iter())
            .all(|(x, y)| (x * 0.5 - y).abs() < 1e-6)
    );
    // Wrong shape.
    t.insert(
        "lm_head.weight".into(),
        (Dtype::F32, vec![11, 7], vec![0.0; 77]),
    );
    match load_bytes(&serialize(&t)) {
        Err(LoadError::Shape {
            name,
            expected,
            found,
        }) => {
            assert_eq!(name, "lm_head.weight");
            assert_eq!((expected, found), (vec![11, 8], vec![11, 7]));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn missing_tensor_is_named() {
    let mut t = small_file(Dtype::F32, "transformer.");
    t.remove("transformer.h.1.mlp.c_fc.bias");
    match load_bytes(&serialize(&t)) {
        Err(e @ LoadError::MissingTensor { .. }) => {
            let LoadError::MissingTensor { name } = &e else {
                unreachable!()
            };
            assert_eq!(name, "h.1.mlp.c_fc.bias");
            assert!(e.to_string().contains("h.1.mlp.c_fc.bias"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // A config with more layers than the file.
    let json = small_config_json("gelu_new").replace(r#""n_layer": 2"#, r#""n_layer": 3"#);
    let c = Gpt2Config::from_json_str(&json).unwrap();
    let err = Gpt2Weights::from_safetensors_bytes(&serialize(&small_file(Dtype::F32, "")), &c);
    assert!(matches!(err, Err(LoadError::MissingTensor { name }) if name == "h.2.ln_1.weight"));
}

#[test]
fn wrong_shape_names_expected_and_found() {
    let mut t = small_file(Dtype::F32, "transformer.");
    // A [out, in] (nn.Linear) weight where Conv1D [in, out] is expected.
    t.insert(
        "transformer.h.0.attn.c_attn.weight".into(),
        (Dtype::F32, vec![24, 8], vec![0.0; 192]),
    );
    match load_bytes(&serialize(&t)) {
        Err(e @ LoadError::Shape { .. }) => {
            let msg = e.to_string();
            let LoadError::Shape {
                name,
                expected,
                found,
            } = e
            else {
                unreachable!()
            };
            assert_eq!(name, "h.0.attn.c_attn.weight");
            assert_eq!(expected, vec![8, 24]);
            assert_eq!(found, vec![24, 8]);
            assert!(msg.contains("[24, 8]") && msg.contains("[8, 24]"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    // Fewer positions than the config says.
    let mut t = small_file(Dtype::F32, "");
    t.insert("wpe.weight".into(), (Dtype::F32, vec![4, 8], vec![0.0; 32]));
    assert!(
        matches!(load_bytes(&serialize(&t)), Err(LoadError::Shape { name, .. }) if name == "wpe.weight")
    );
}

#[test]
fn unsupported_dtype_and_non_finite_values() {
    let mut t = small_file(Dtype::F32, "");
    let (_, shape, vals) = t["h.1.ln_2.bias"].clone();
    t.insert("h.1.ln_2.bias".into(), (Dtype::I32, shape, vals));
    match load_bytes(&serialize(&t)) {
        Err(LoadError::UnsupportedDtype { name, dtype }) => {
            assert_eq!(name, "h.1.ln_2.bias");
            assert_eq!(dtype, "I32");
        }
        other => panic!("{other:?}"),
    }
    let mut t = small_file(Dtype::F16, "");
    t.get_mut("h.0.mlp.c_proj.weight").unwrap().2[3] = f64::NAN;
    assert!(
        matches!(load_bytes(&serialize(&t)), Err(LoadError::NonFinite { name }) if name == "h.0.mlp.c_proj.weight")
    );
    let mut t = small_file(Dtype::F16, "");
    t.get_mut("wte.weight").unwrap().2[0] = 1e6; // overflows f16 to +inf
    assert!(
        matches!(load_bytes(&serialize(&t)), Err(LoadError::NonFinite { name }) if name == "wte.weight")
    );
}

#[test]
fn missing_files_are_io_errors() {
    let dir = tempfile::tempdir().unwrap();
    match load_gpt2(&dir.path().join("nope")) {
        Err(LoadError::Io { path, source }) => {
            assert!(path.ends_with("config.json"));
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{other:?}"),
    }
    std::fs::write(
        dir.path().join("config.json"),
        small_config_json("gelu_new"),
    )
    .unwrap();
    match load_gpt2(dir.path()) {
        Err(LoadError::Io { path, .. }) => assert!(path.ends_with("model.safetensors")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn truncated_and_garbage_files_are_bad_file_errors() {
    let good = serialize(&small_file(Dtype::F32, "transformer."));
    let cfg = small_config_json("gelu_new");
    assert!(load_gpt2(write_dir(&cfg, &good).path()).is_ok());
    let header_len = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
    for cut in [
        0,
        3,
        8,
        9,
        8 + header_len / 2,
        8 + header_len,
        8 + header_len + 1,
        good.len() - 1,
    ] {
        let dir = write_dir(&cfg, &good[..cut]);
        match load_gpt2(dir.path()) {
            Err(e @ LoadError::BadFile { .. }) => {
                assert!(e.to_string().contains("model.safetensors"), "{e}");
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
    // Garbage: random bytes, a huge header length, a header that is not JSON, a header
    // whose offsets point past the end.
    let mut huge = u64::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(b"{}");
    let mut not_json = 4u64.to_le_bytes().to_vec();
    not_json.extend_from_slice(b"abcd");
    let bad_offsets = {
        let header = br#"{"wte.weight":{"dtype":"F32","shape":[11,8],"data_offsets":[0,352]}}"#;
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(header);
        b.extend_from_slice(&[0u8; 100]);
        b
    };
    let random: Vec<u8> = values(7, 4096, 128.0)
        .into_iter()
        .map(|v| v as i8 as u8)
        .collect();
    for (what, bytes) in [
        ("huge", huge),
        ("not json", not_json),
        ("offsets", bad_offsets),
        ("random", random),
    ] {
        assert!(
            matches!(load_bytes(&bytes), Err(LoadError::BadFile { .. })),
            "{what}"
        );
    }
    // A bad config next to good weights.
    let dir = write_dir("{ not json", &good);
    assert!(matches!(
        load_gpt2(dir.path()),
        Err(LoadError::Config(ConfigError::Json(_)))
    ));
}

// ---------------------------------------------------------------- configs

#[test]
fn config_defaults_and_activations() {
    let c = Gpt2Config::from_json_str(
        r#"{"n_layer": 1, "n_embd": 6, "n_head": 3, "n_inner": null, "n_positions": 4, "vocab_size": 9}"#,
    )
    .unwrap();
    assert_eq!(c.n_inner, 24);
    assert_eq!(c.layer_norm_epsilon, 1e-5);
    assert_eq!(c.activation, Activation::GeluTanh);
    assert_eq!(c.head_dim(), 2);
    let c = Gpt2Config::from_json_str(&small_config_json("gelu")).unwrap();
    assert_eq!(c.activation, Activation::GeluErf);
    let c = Gpt2Config::from_json_str(&small_config_json("gelu_pytorch_tanh")).unwrap();
    assert_eq!(c.activation, Activation::GeluTanh);
}

#[test]
fn config_errors_are_typed() {
    let base = small_config_json("gelu_new");
    let with = |from: &str, to: &str| {
        assert!(base.contains(from), "{from}");
        Gpt2Config::from_json_str(&base.replace(from, to))
    };
    assert!(matches!(
        with(r#""gelu_new""#, r#""relu""#),
        Err(ConfigError::UnsupportedActivation(a)) if a == "relu"
    ));
    assert!(matches!(
        with(r#""n_head": 2"#, r#""n_head": 3"#),
        Err(ConfigError::HeadsDoNotDivide {
            n_embd: 8,
            n_head: 3
        })
    ));
    assert!(matches!(
        with(r#""n_head": 2"#, r#""n_head": 0"#),
        Err(ConfigError::ZeroSize("n_head"))
    ));
    assert!(matches!(
        with(r#""n_layer": 2"#, r#""n_layer": 0"#),
        Err(ConfigError::ZeroSize("n_layer"))
    ));
    assert!(matches!(
        with(r#""vocab_size": 11"#, r#""vocab_size": 0"#),
        Err(ConfigError::ZeroSize("vocab_size"))
    ));
    assert!(matches!(
        with(r#""n_inner": 12"#, r#""n_inner": 0"#),
        Err(ConfigError::ZeroSize("n_inner"))
    ));
    assert!(matches!(
        with(r#""n_embd": 8, "#, ""),
        Err(ConfigError::Json(_))
    ));
    assert!(matches!(
        with(r#""n_embd": 8"#, r#""n_embd": -8"#),
        Err(ConfigError::Json(_))
    ));
    assert!(matches!(
        with(r#""n_embd": 8"#, r#""n_embd": "8""#),
        Err(ConfigError::Json(_))
    ));
    assert!(matches!(
        with(
            r#""vocab_size": 11"#,
            r#""vocab_size": 18446744073709551615"#
        ),
        Err(ConfigError::Limit(e)) if e.field == "vocab_size"
    ));
    assert!(matches!(
        with(r#""model_type": "gpt2""#, r#""model_type": "llama""#),
        Err(ConfigError::UnsupportedModelType(t)) if t == "llama"
    ));
    assert!(matches!(
        with(
            r#""n_layer": 2"#,
            r#""n_layer": 2, "scale_attn_by_inverse_layer_idx": true"#
        ),
        Err(ConfigError::UnsupportedOption {
            field: "scale_attn_by_inverse_layer_idx",
            ..
        })
    ));
    assert!(matches!(
        with(
            r#""n_layer": 2"#,
            r#""n_layer": 2, "add_cross_attention": true"#
        ),
        Err(ConfigError::UnsupportedOption {
            field: "add_cross_attention",
            ..
        })
    ));
    assert!(matches!(
        with(
            r#""layer_norm_epsilon": 1e-5"#,
            r#""layer_norm_epsilon": -1.0"#
        ),
        Err(ConfigError::BadEpsilon(_))
    ));
    assert!(matches!(
        Gpt2Config::from_json_str("[]"),
        Err(ConfigError::Json(_))
    ));
    assert!(matches!(
        Gpt2Config::from_file(Path::new("/nonexistent/config.json")),
        Err(ConfigError::Io { .. })
    ));
}

#[test]
fn model_rejects_weights_of_another_shape() {
    let w = load_bytes(&serialize(&small_file(Dtype::F32, ""))).unwrap();
    let mut bad = w.clone();
    bad.blocks[1].fc_b = ndarray::Array1::zeros(13);
    assert!(matches!(
        PlainGpt2::new(small_config(), bad),
        Err(LoadError::Shape { name, .. }) if name == "h.1.mlp.c_fc.bias"
    ));
    let mut bad = w;
    bad.blocks.pop();
    assert!(matches!(
        PlainGpt2::new(small_config(), bad),
        Err(LoadError::Shape { .. })
    ));
}

// ---------------------------------------------------------------- forward vs scalar loops

/// GPT-2 written with scalar loops, straight from the equations: position by position,
/// each recomputing attention over the whole prefix (no cache, no matrix library).
fn naive_gpt2(c: &Gpt2Config, w: &Gpt2Weights, ids: &[u32]) -> Array2<f64> {
    let (d, hd, l) = (c.n_embd, c.head_dim(), ids.len());
    let act = |x: f64| match c.activation {
        Activation::GeluTanh => gelu_tanh(x),
        Activation::GeluErf => gelu_erf(x),
    };
    let ln = |x: &[f64], g: &ndarray::Array1<f64>, b: &ndarray::Array1<f64>| -> Vec<f64> {
        let mean = x.iter().sum::<f64>() / d as f64;
        let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / d as f64;
        (0..d)
            .map(|j| (x[j] - mean) / (var + c.layer_norm_epsilon).sqrt() * g[j] + b[j])
            .collect()
    };
    let mm = |x: &[f64], m: &Array2<f64>, b: &ndarray::Array1<f64>| -> Vec<f64> {
        (0..m.ncols())
            .map(|j| b[j] + (0..m.nrows()).map(|i| x[i] * m[[i, j]]).sum::<f64>())
            .collect()
    };
    let mut x: Vec<Vec<f64>> = (0..l)
        .map(|t| {
            (0..d)
                .map(|j| w.wte[[ids[t] as usize, j]] + w.wpe[[t, j]])
                .collect()
        })
        .collect();
    for b in &w.blocks {
        let qkv: Vec<Vec<f64>> = x
            .iter()
            .map(|r| mm(&ln(r, &b.ln_1.gamma, &b.ln_1.beta), &b.attn_w, &b.attn_b))
            .collect();
        for t in 0..l {
            let mut heads = vec![0.0; d];
            for h in 0..c.n_head {
                let q = &qkv[t][h * hd..(h + 1) * hd];
                let scores: Vec<f64> = (0..=t)
                    .map(|u| {
                        (0..hd).map(|i| q[i] * qkv[u][d + h * hd + i]).sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = scores.iter().map(|s| (s - max).exp()).sum();
                for (u, s) in scores.iter().enumerate() {
                    for i in 0..hd {
                        heads[h * hd + i] += (s - max).exp() / z * qkv[u][2 * d + h * hd + i];
                    }
                }
            }
            let a = mm(&heads, &b.proj_w, &b.proj_b);
            for j in 0..d {
                x[t][j] += a[j];
            }
        }
        for r in &mut x {
            let f: Vec<f64> = mm(&ln(r, &b.ln_2.gamma, &b.ln_2.beta), &b.fc_w, &b.fc_b)
                .into_iter()
                .map(act)
                .collect();
            let m = mm(&f, &b.fc_proj_w, &b.fc_proj_b);
            for j in 0..d {
                r[j] += m[j];
            }
        }
    }
    let head = w.lm_head();
    let mut out = Array2::zeros((l, c.vocab_size));
    for t in 0..l {
        let h = ln(&x[t], &w.ln_f.gamma, &w.ln_f.beta);
        for v in 0..c.vocab_size {
            out[[t, v]] = (0..d).map(|j| h[j] * head[[v, j]]).sum();
        }
    }
    out
}

#[test]
fn forward_matches_scalar_loops_for_both_gelus() {
    let weights = serialize(&small_file(Dtype::F64, "transformer."));
    for act in ["gelu_new", "gelu"] {
        let dir = write_dir(&small_config_json(act), &weights);
        let m = PlainGpt2::load(dir.path()).unwrap();
        let ids = [3, 10, 0, 7, 7];
        let want = naive_gpt2(m.config(), m.weights(), &ids);
        let got = m.forward(&ids).unwrap();
        let err = common::max_abs_diff(&got, &want);
        assert!(err < 1e-12, "{act}: {err:e}");
        // Cached generation over the full 5 positions equals the uncached one.
        let g = m.generate_greedy(&ids[..2], 4).unwrap();
        assert_eq!(g, m.generate_greedy_no_cache(&ids[..2], 4).unwrap());
    }
    // The two activations give different models.
    let a = PlainGpt2::load(write_dir(&small_config_json("gelu_new"), &weights).path()).unwrap();
    let b = PlainGpt2::load(write_dir(&small_config_json("gelu"), &weights).path()).unwrap();
    assert!(
        common::max_abs_diff(&a.forward(&[1, 2]).unwrap(), &b.forward(&[1, 2]).unwrap()) > 1e-6
    );
}
