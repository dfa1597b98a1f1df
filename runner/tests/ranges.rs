//! The owner refuses weights that leave the ranges the secure protocols support, naming
//! the tensor, instead of letting the parties compute garbage (a final norm scaled by
//! 10^4 made the secure GPT-2's logits wrong by 2.8e5 with exit status 0).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::Path;
use std::sync::Arc;

use puma_core::FixedPoint;
use puma_layers::gpt2::plain::PlainGpt2;
use puma_layers::nn::{
    NORM_SCALE_LIMIT, SecureSettings, calibration_ids, decoder_range_check, decoder_range_violation,
};
use puma_runner::decoder::{RunError, RunOptions};
use puma_runner::gpt2::{DEFAULT_MODEL_DIR, Gpt2Error, load_model, run_secure};

/// The violation the owner's calibration pass finds in GPT-2 `weights` whose tensors are
/// each within range (asserted): the case only running the plaintext model can catch.
fn found_by_calibration(
    config: &puma_layers::gpt2::config::Gpt2Config,
    weights: &Arc<puma_layers::gpt2::weights::Gpt2Weights>,
) -> puma_layers::nn::RangeError {
    let (fx, settings) = (FixedPoint::default(), SecureSettings::default());
    assert_eq!(
        decoder_range_violation(config, &**weights, fx).unwrap(),
        None
    );
    decoder_range_check(config, weights, &settings, fx)
        .unwrap()
        .expect("a violation")
}

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
    // The final norm keeps its γ, whose product with the normalised rows has a range.
    let mut scaled = m.clone();
    scaled.weights.norm *= 1e5;
    let v = decoder_range_violation(&scaled.config, &scaled.weights, fx)
        .unwrap()
        .expect("a violation");
    assert_eq!(v.tensor, "model.norm.weight");
    // A block norm's γ is folded into the projections it feeds, so no γ product is left
    // to overflow; scaled up, it shows where its effect lands instead: in the MLP's output
    // added to the residual stream, which the calibration pass finds.
    m.weights.layers[1].mlp_norm *= 1e5;
    assert_eq!(
        decoder_range_violation(&m.config, &m.weights, fx).unwrap(),
        None
    );
    let v = decoder_range_check(
        &m.config,
        &Arc::new(m.weights.clone()),
        &SecureSettings::default(),
        fx,
    )
    .unwrap()
    .expect("a violation");
    assert_eq!(
        v.tensor,
        "norm inputs (the residual stream) on the calibration input"
    );
}

#[test]
fn an_embedding_that_overflows_the_residual_stream_is_found_by_calibration() {
    // No weight is out of range, but the residual stream the LayerNorms see is.
    let model = load_model(Path::new(DEFAULT_MODEL_DIR)).unwrap();
    let (fx, settings) = (FixedPoint::default(), SecureSettings::default());
    let ok = decoder_range_check(
        &model.config,
        &Arc::new(model.weights.clone()),
        &settings,
        fx,
    );
    assert_eq!(ok.unwrap(), None);
    let mut scaled = model;
    scaled.weights.wte *= 1e5;
    let weights = Arc::new(scaled.weights.clone());
    let v = found_by_calibration(&scaled.config, &weights);
    assert!(v.tensor.starts_with("norm inputs"), "{v}");
    assert_eq!(v.protocol, "LayerNorm");
    assert!(v.value >= 8192.0, "{v}");
    // The plaintext peak itself, recomputed from the trace of the calibration input.
    let plain = PlainGpt2::new(scaled.config.clone(), Arc::clone(&weights)).unwrap();
    let ids = calibration_ids(scaled.config.vocab_size, scaled.config.n_positions);
    let trace = plain.forward_trace(&ids).unwrap();
    let first = &trace.blocks[0].input;
    let row_peak = first
        .rows()
        .into_iter()
        .map(|r| {
            let m = r.sum() / r.len() as f64;
            r.iter().fold(0.0_f64, |a, v| a.max((v - m).abs()))
        })
        .fold(0.0_f64, f64::max);
    assert!(v.value >= row_peak, "{} < {row_peak}", v.value);
    let err = run_secure(scaled, &[464, 2068], &RunOptions::default(), None).unwrap_err();
    assert!(err.to_string().contains("calibration input"), "{err}");
}

#[test]
fn the_shipped_and_real_models_pass_the_check() {
    let (fx, settings) = (FixedPoint::default(), SecureSettings::default());
    for dir in [DEFAULT_MODEL_DIR, puma_runner::gpt2::TINY_MODEL_DIR] {
        let m = load_model(Path::new(dir)).unwrap();
        let r = decoder_range_check(&m.config, &Arc::new(m.weights), &settings, fx).unwrap();
        assert_eq!(r, None, "{dir}");
    }
    let mut paths = vec![std::path::PathBuf::from(puma_runner::llama::TINY_MODEL_DIR)];
    let smol = std::path::PathBuf::from(puma_runner::llama::SMOLLM2_GGUF);
    if smol.is_file() {
        paths.push(smol);
    } else if std::env::var("PUMA_REQUIRE_REAL_MODELS").as_deref() == Ok("1") {
        panic!(
            "{} is missing: run scripts/fetch-smollm2.sh",
            smol.display()
        );
    }
    for p in paths {
        let m = puma_runner::llama::load_model(&p).unwrap();
        let peaks = {
            let w = Arc::new(m.weights);
            let r = decoder_range_check(&m.config, &w, &settings, fx).unwrap();
            assert_eq!(r, None, "{}", p.display());
            puma_layers::llama::plain::PlainLlama::new(m.config.clone(), w)
                .unwrap()
                .activation_peaks(&calibration_ids(m.config.vocab_size, 16))
                .unwrap()
        };
        eprintln!("{}: {peaks:?}", p.display());
        assert!(peaks.norm_input > 0.0 && peaks.logits > 0.0);
    }
}

#[test]
fn rotated_queries_and_mlp_products_have_ranges_of_their_own() {
    use puma_layers::nn::{ActivationPeaks, DecoderArch};
    let m = puma_runner::llama::load_model(Path::new(puma_runner::llama::TINY_MODEL_DIR)).unwrap();
    let (fx, settings) = (FixedPoint::default(), SecureSettings::default());
    let spec = m.config.spec().unwrap();
    // Queries and keys are truncated at 3f fractional bits after the rotation: ±2^(62 − 3f).
    let peaks = ActivationPeaks {
        rotated: 300.0,
        ..ActivationPeaks::default()
    };
    let v = peaks.violation(&spec, &settings, fx).expect("a violation");
    assert_eq!(
        v.tensor,
        "rotated queries and keys on the calibration input"
    );
    assert_eq!(v.limit, 256.0);
    // The MLP's products after the activation are summed in Z_2^56: ±2^(56 − 2 − 2f).
    let peaks = ActivationPeaks {
        mlp_products: 3e5,
        ..ActivationPeaks::default()
    };
    let v = peaks.violation(&spec, &settings, fx).expect("a violation");
    assert_eq!(
        v.tensor,
        "MLP products (after the activation) on the calibration input"
    );
    assert_eq!(v.limit, 262_144.0);
    // Found by calibration: query and key weights scaled up push the rotated queries and
    // keys out of range, which the check names before the scores that follow from them.
    let ids = calibration_ids(m.config.vocab_size, m.config.max_position_embeddings);
    let base = m
        .config
        .activation_peaks(&Arc::new(m.weights.clone()), &ids)
        .unwrap()
        .expect("peaks");
    assert!(base.rotated > 0.0);
    let factor = 300.0 / base.rotated;
    let mut scaled = m.clone();
    for layer in &mut scaled.weights.layers {
        layer.wq *= factor;
        layer.wk *= factor;
    }
    let v = decoder_range_check(
        &scaled.config,
        &Arc::new(scaled.weights.clone()),
        &settings,
        fx,
    )
    .unwrap()
    .expect("a violation");
    assert_eq!(
        v.tensor, "rotated queries and keys on the calibration input",
        "{v}"
    );
    assert!(v.value >= 256.0, "{v}");
    assert_eq!(v.protocol, "Fused truncation");
}

#[test]
fn a_gelu_input_past_its_range_is_refused_naming_the_gelu() {
    use puma_layers::nn::DecoderArch;
    let model = load_model(Path::new(DEFAULT_MODEL_DIR)).unwrap();
    let (fx, settings) = (FixedPoint::default(), SecureSettings::default());
    let ids = calibration_ids(model.config.vocab_size, model.config.n_positions);
    let base = model
        .config
        .activation_peaks(&Arc::new(model.weights.clone()), &ids)
        .unwrap()
        .expect("peaks");
    assert!(
        base.activation > 0.0 && base.activation < 4091.875,
        "{base:?}"
    );
    // The MLP's first projection scaled up and its second scaled down by the same factor:
    // the GeLU's inputs leave its range (|x| < 4091.875 for the comparisons in Z_2^17,
    // docs/PROTOCOLS.md, GeLU) while the residual stream and the products stay in theirs,
    // so the check must name the GeLU and not a later symptom.
    let factor = 5000.0 / base.activation;
    let mut scaled = model;
    for block in &mut scaled.weights.blocks {
        block.fc_w *= factor;
        block.fc_b *= factor;
        block.fc_proj_w /= factor;
    }
    let weights = Arc::new(scaled.weights.clone());
    let v = found_by_calibration(&scaled.config, &weights);
    assert_eq!(v.tensor, "MLP activation inputs on the calibration input");
    assert_eq!(v.protocol, "GeLU");
    assert_eq!(v.limit, 4091.875);
    // The peak the plaintext model reaches (above 5000: the later blocks see a slightly
    // different residual stream, since GeLU(s·z)/s is not GeLU(z)).
    let peak = scaled
        .config
        .activation_peaks(&weights, &ids)
        .unwrap()
        .expect("peaks")
        .activation;
    assert!(peak >= 5000.0 * (1.0 - 1e-9), "{peak}");
    assert_eq!(v.value, peak);
    // Just inside the range passes.
    let inside = puma_layers::nn::ActivationPeaks {
        activation: 4091.8,
        ..base
    };
    let spec = scaled.config.spec().unwrap();
    assert_eq!(inside.violation(&spec, &settings, fx), None);
    // The secure run refuses before anything is shared, naming the GeLU.
    let err = run_secure(scaled, &[464, 2068], &RunOptions::default(), None).unwrap_err();
    assert!(matches!(err, Gpt2Error::Run(RunError::Range(_))), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("GeLU") && text.contains("MLP activation inputs"),
        "{text}"
    );
}
