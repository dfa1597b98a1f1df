//! Secure GPT-2 generation end to end over the threaded transport, against the plaintext
//! `f64` model, on the tiny random checkpoint shipped in `models/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::Path;
use std::process::Command;

use puma_core::Width;
use puma_core::proto::ExpApprox;
use puma_layers::gpt2::config::InputError;
use puma_layers::nn::{GeluApprox, OutputMode, SecureSettings};
use puma_runner::gpt2::{Gpt2Error, RunOptions, TINY_MODEL_DIR, load_model, run_secure};

/// The fixture prompt p2, "Hello world".
const P2: [u32; 2] = [15496, 995];

/// Bound on max |secure logit − plaintext logit| for `gpt2-tiny-random` (logits within
/// ±1.2) with the settings of [`settings`].
///
/// Measured: 1.92e-4 … 2.32e-4 over 11 entropy seeds (3 steps × 50257 logits each; the run
/// is deterministic per seed). The fixture's rounding-only floor at 18 fractional bits is
/// 1.4e-4 (every weight and module output rounded to 2^-18); the rest is the {0, +1}-ulp
/// truncations, LayerNorm's rsqrt (relative ≤ 1e-3 of outputs of size ~1, times the tied
/// head's 64 weights of std 0.02), the precise GeLU (≤ 1.3e-4 on activations that the
/// 256 × 64 projection of std 0.02 shrinks) and the Taylor-2 exponential (3.5e-6). The bound
/// is about twice the largest measurement, ten times tighter than the fixture's suggested
/// secure bound (5e-3), and a hundredth of the smallest top-2 margin here (0.0707).
/// With PUMA's GeLU polynomial instead the error is 3.6e-2 (its 0.0085 offset at 0,
/// amplified by LayerNorm on this model's tiny-variance residual stream), hence the pinned
/// settings.
const TINY_LOGIT_BOUND: f64 = 5e-4;

/// The approximations the bound was measured with, pinned so that a change of the
/// defaults does not change what this test checks.
fn settings() -> SecureSettings {
    SecureSettings {
        softmax_exp: ExpApprox::Taylor2 { squarings: 8 },
        logit_compare_width: Width::W64,
        gelu: GeluApprox::Precise,
        ..SecureSettings::default()
    }
}

fn options(max_new_tokens: usize, mode: OutputMode) -> RunOptions {
    RunOptions {
        max_new_tokens,
        mode,
        settings: settings(),
        compare_plaintext: true,
        ..RunOptions::default()
    }
}

#[test]
fn secure_generation_matches_plaintext_on_tiny_model() {
    let model = load_model(Path::new(TINY_MODEL_DIR)).unwrap();
    let r = run_secure(model, &P2, &options(3, OutputMode::RevealLogits), None).unwrap();
    let plain = r.plaintext.as_ref().unwrap();
    eprintln!(
        "secure {:?} plaintext {:?} margins {:?} max logit error {:?} rounds {} steps {:?}",
        r.secure_ids,
        plain.ids,
        plain.margins,
        plain.max_logit_error,
        r.rounds(),
        r.costs[0].steps
    );
    assert_eq!(r.secure_ids.len(), 3);
    assert_eq!(r.secure_ids, plain.ids);
    assert_eq!(plain.first_mismatch(&r.secure_ids), None);
    // Each step's top-2 margin is well above twice the error, so equal ids are expected.
    let err = plain.max_logit_error.unwrap();
    assert!(err.is_finite() && err <= TINY_LOGIT_BOUND, "{err}");
    for m in &plain.margins {
        assert!(*m > 2.0 * TINY_LOGIT_BOUND, "margin {m}");
    }
    // The logits are not trivially small, so the check means something.
    let max_logit = r.secure_logits[0]
        .iter()
        .fold(0.0f64, |a, b| a.max(b.abs()));
    assert!(max_logit > 0.5, "{max_logit}");

    // Costs: three steps at every party, lockstep epochs; only the owner sent while the
    // model was shared: 8 bytes per parameter (the tied LM head once) of GPT2LMHeadModel,
    // less the blocks' ln_1 and ln_2 (γ and β, 4d per block), which the owner folds into
    // the attention and MLP input weights.
    for c in &r.costs {
        assert_eq!(c.steps.len(), 3);
        assert_eq!(c.steps[0].1, r.costs[0].steps[0].1);
    }
    let cfg = &r.config;
    let (d, v) = (cfg.n_embd as u64, cfg.vocab_size as u64);
    let params_per_block = 3 * d * d + 3 * d + d * d + d + 8 * d * d + 4 * d + d;
    let shared = v * d + cfg.n_positions as u64 * d + cfg.n_layer as u64 * params_per_block + 2 * d;
    assert_eq!(shared, 3_324_224); // 64-wide, 2 blocks, 128 positions, vocabulary 50257
    assert_eq!(r.costs[1].share_model.0, 8 * shared);
    assert_eq!(r.costs[0].share_model.0, 0);
    assert_eq!(r.costs[2].share_model.0, 0);
    // With the KV cache a further token costs less than the prompt step (the LM head over
    // the 50257-word vocabulary dominates both at this width).
    let total = |k: usize| r.costs.iter().map(|c| c.steps[k].0).sum::<u64>();
    assert!(total(2) < total(0), "{} vs {}", total(2), total(0));
    // Every kind the model uses was metered.
    let kinds: Vec<&str> = r.costs[0]
        .layers
        .entries
        .iter()
        .map(|e| e.0.name())
        .collect();
    for k in [
        "embedding",
        "layernorm",
        "linear",
        "softmax",
        "gelu",
        "lm head",
        "output",
    ] {
        assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
    }
    assert!(r.rounds() > 0);
    assert_eq!(r.step_times.len(), 3);
}

#[test]
fn secret_output_modes_generate_the_plaintext_tokens() {
    let model = load_model(Path::new(TINY_MODEL_DIR)).unwrap();
    for mode in [OutputMode::SecureArgmax, OutputMode::Private] {
        let r = run_secure(model.clone(), &P2, &options(2, mode), None).unwrap();
        let plain = r.plaintext.as_ref().unwrap();
        assert_eq!(r.secure_ids, plain.ids, "{mode:?}");
        assert_eq!(r.secure_ids.len(), 2);
        // The logits stay secret: nothing to compare.
        assert!(r.secure_logits.is_empty());
        assert_eq!(plain.max_logit_error, None);
    }
}

#[test]
fn bad_inputs_are_typed_errors() {
    let missing = load_model(Path::new("/nonexistent/gpt2-model"));
    assert!(
        matches!(missing, Err(Gpt2Error::NoModelDir(_))),
        "{missing:?}"
    );
    let model = load_model(Path::new(TINY_MODEL_DIR)).unwrap();
    let n_positions = model.config.n_positions;
    let opts = RunOptions::default();
    let r = run_secure(model.clone(), &[], &opts, None);
    assert!(
        matches!(r, Err(Gpt2Error::Input(InputError::Empty))),
        "{r:?}"
    );
    let r = run_secure(model.clone(), &[50257], &opts, None);
    assert!(
        matches!(r, Err(Gpt2Error::Input(InputError::TokenOutOfRange { .. }))),
        "{r:?}"
    );
    let long = vec![1u32; n_positions];
    let r = run_secure(model, &long, &opts, None);
    assert!(
        matches!(r, Err(Gpt2Error::Input(InputError::TooLong { .. }))),
        "{r:?}"
    );
}

fn gpt2_bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpt2"))
}

#[test]
fn binary_prints_one_json_object() {
    let out = gpt2_bin()
        .args([
            "--model",
            TINY_MODEL_DIR,
            "--prompt-ids",
            "15496,995",
            "--max-new-tokens",
            "2",
        ])
        .args(["--compare-plaintext", "--json"])
        // The settings TINY_LOGIT_BOUND was measured with.
        .args([
            "--gelu",
            "precise",
            "--softmax-exp",
            "taylor2",
            "--softmax-squarings",
            "8",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["prompt_ids"], serde_json::json!([15496, 995]));
    assert_eq!(v["secure_ids"].as_array().unwrap().len(), 2);
    assert_eq!(v["secure_ids"], v["plaintext_ids"]);
    assert_eq!(v["ids_match"], true);
    assert!(v["max_abs_logit_error"].as_f64().unwrap() <= TINY_LOGIT_BOUND);
    assert_eq!(v["bytes_per_party"].as_array().unwrap().len(), 3);
    assert!(v["rounds"].as_u64().unwrap() > 0);
    assert!(v["seconds"].as_f64().unwrap() > 0.0);
    assert_eq!(v["step_costs"].as_array().unwrap().len(), 2);
    assert!(!v["layer_costs"].as_array().unwrap().is_empty());
    assert!(v["text"].is_string());
}

#[test]
fn binary_rejects_bad_arguments_and_missing_models() {
    let out = gpt2_bin()
        .args(["--output-mode", "nonsense"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Usage"));
    let out = gpt2_bin().args(["--max-new-tokens", "0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = gpt2_bin()
        .args(["--prompt", "x", "--prompt-ids", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = gpt2_bin()
        .args(["--model", "/nonexistent/gpt2-model"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent/gpt2-model") && err.contains("does not exist"),
        "{err}"
    );
    assert!(out.stdout.is_empty() || !String::from_utf8_lossy(&out.stdout).contains("panicked"));
    let out = gpt2_bin()
        .args(["--model", TINY_MODEL_DIR, "--prompt-ids", "99999", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("outside the vocabulary"));
    assert!(out.stdout.is_empty());
}

/// GPT-2's reversible map of bytes to printable characters (to write a byte-level vocab).
fn byte_char(b: u8) -> char {
    let printable = |c: u8| (33..=126).contains(&c) || (161..=172).contains(&c) || c >= 174;
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&c| !printable(c)).count() as u32;
    char::from_u32(256 + n).unwrap()
}

/// `--model DIR` encodes the prompt with DIR's own `vocab.json` + `merges.txt` (a
/// fine-tune's tokenizer, not GPT-2's), and falls back to the built-in GPT-2 tokenizer
/// with a note when DIR has none.
#[test]
fn binary_uses_the_model_directorys_tokenizer() {
    let dir = std::env::temp_dir().join(format!("puma-gpt2-own-tokenizer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(Path::new(TINY_MODEL_DIR).join(f), dir.join(f)).unwrap();
    }
    // The 256 byte tokens in byte order (GPT-2 starts with '!'), then "hi", " t", " to".
    let mut vocab = serde_json::Map::new();
    for b in 0..=255u8 {
        vocab.insert(byte_char(b).to_string(), b.into());
    }
    for (i, t) in ["hi", "Ġt", "Ġto"].iter().enumerate() {
        vocab.insert((*t).to_owned(), (256 + i).into());
    }
    std::fs::write(
        dir.join("vocab.json"),
        serde_json::to_string(&vocab).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("merges.txt"), "#version: 0.2\nh i\nĠ t\nĠt o\n").unwrap();
    let run = |model: &Path, prompt: &str| {
        let out = gpt2_bin()
            .arg("--model")
            .arg(model)
            .args(["--prompt", prompt, "--max-new-tokens", "1", "--json"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{err}");
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        (v, err)
    };
    // GPT-2's own tokenizer would give [5303, 284].
    let (v, err) = run(&dir, "hi to");
    assert_eq!(v["prompt_ids"], serde_json::json!([256, 258]));
    assert!(!err.contains("built-in"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();

    let (v, err) = run(Path::new(TINY_MODEL_DIR), "Hello world");
    assert_eq!(v["prompt_ids"], serde_json::json!(P2));
    assert!(
        err.contains("has no tokenizer files") && err.contains("built-in GPT-2 tokenizer"),
        "{err}"
    );
}

/// The embedded Shakespeare model stops at a stop string, with the text printed as it
/// came, and its ids are the plaintext greedy ids up to there.
#[test]
fn binary_stops_at_a_stop_string_and_streams_the_text() {
    let run = |extra: &[&str]| {
        let out = gpt2_bin()
            .args([
                "--prompt",
                "ROMEO:",
                "--max-new-tokens",
                "30",
                "--stop",
                ".",
            ])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let v: serde_json::Value =
        serde_json::from_str(&run(&["--json", "--compare-plaintext"])).unwrap();
    let ids = v["secure_ids"].as_array().unwrap();
    assert!(ids.len() < 30, "{v}");
    assert_eq!(v["finish"], "stop");
    assert_eq!(v["ids_match"], true, "{v}");
    let text = v["text"].as_str().unwrap();
    assert!(text.ends_with('.'), "{text:?}");
    assert_eq!(text.matches('.').count(), 1, "{text:?}");
    // Without --json the same text is printed as it comes, after the prompt.
    let human = run(&[]);
    assert!(human.contains(&format!("ROMEO:{text}\n")), "{human}");
    assert!(human.contains("ended by a stop string"), "{human}");
}
