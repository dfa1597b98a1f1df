//! The owner refuses weights that leave the ranges the secure protocols support, naming
//! the tensor, instead of letting the parties compute garbage (a final norm scaled by
//! 10^4 made the secure GPT-2's logits wrong by 2.8e5 with exit status 0).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::Path;

use puma_core::FixedPoint;
use puma_layers::nn::{NORM_SCALE_LIMIT, decoder_range_violation};
use puma_runner::decoder::{RunError, RunOptions};
use puma_runner::gpt2::{DEFAULT_MODEL_DIR, Gpt2Error, load_model, run_secure};

#[test]
fn a_scaled_final_layernorm_is_refused_naming_ln_f() {
    let model = load_model(Path::new(DEFAULT_MODEL_DIR)).unwrap();
    let fx = FixedPoint::default();
    // The checkpoint as trained is within range (|γ|·√d far below 2^14).
    assert_eq!(
        decoder_range_violation(&model.config, &model.weights, fx).unwrap(),
        None
    );
    let mut scaled = model;
    scaled.weights.ln_f.gamma *= 1e4;
    let v = decoder_range_violation(&scaled.config, &scaled.weights, fx)
        .unwrap()
        .expect("a violation");
    assert_eq!(v.tensor, "ln_f.weight");
    let max_gamma = scaled
        .weights
        .ln_f
        .gamma
        .iter()
        .fold(0.0_f64, |m, g| m.max(g.abs()));
    let expected = max_gamma * (scaled.config.n_embd as f64).sqrt();
    assert!(
        (v.value - expected).abs() <= 1e-3 * expected,
        "{} vs {expected}",
        v.value
    );
    assert_eq!(v.limit, NORM_SCALE_LIMIT);
    // The secure run refuses before anything is shared, with the tensor in the message.
    let opts = RunOptions {
        max_new_tokens: 2,
        ..RunOptions::default()
    };
    let err = run_secure(scaled, &[464, 2068, 7586], &opts, None).unwrap_err();
    assert!(matches!(err, Gpt2Error::Run(RunError::Range(_))), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("ln_f.weight") && text.contains("|γ|·√d"),
        "{text}"
    );
}

#[test]
fn a_scaled_llama_norm_is_refused_naming_it() {
    let mut m =
        puma_runner::llama::load_model(Path::new(puma_runner::llama::TINY_MODEL_DIR)).unwrap();
    let fx = FixedPoint::default();
    assert_eq!(
        decoder_range_violation(&m.config, &m.weights, fx).unwrap(),
        None
    );
    m.weights.layers[1].mlp_norm *= 1e5;
    let v = decoder_range_violation(&m.config, &m.weights, fx)
        .unwrap()
        .expect("a violation");
    assert_eq!(v.tensor, "model.layers.1.post_attention_layernorm.weight");
}
