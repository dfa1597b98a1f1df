//! The f64 GPT-2 against the float32 reference activations of the two fixture models
//! (`models/gpt2-tiny-random`, `models/gpt2-shakespeare`; references in
//! `tests/fixtures/<model>/reference.safetensors`).
//!
//! Tolerances are the "f64 re-implementation: assert" column of the fixtures' README:
//! the differences measured here are float32 rounding in the reference. Run with
//! `--nocapture` to see the measured maxima.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::common;

use std::sync::OnceLock;

use common::{Reference, max_abs_diff, model_dir};
use ndarray::{Axis, s};
use puma_layers::gpt2::config::InputError;
use puma_layers::gpt2::plain::{PlainGpt2, argmax_with_margin};

const TINY: &str = "gpt2-tiny-random";
const SHAKESPEARE: &str = "gpt2-shakespeare";
const PROMPTS: [&str; 4] = ["p1", "p2", "p3", "p4"];

fn model(name: &str) -> &'static PlainGpt2 {
    static TINY_MODEL: OnceLock<PlainGpt2> = OnceLock::new();
    static SHAKESPEARE_MODEL: OnceLock<PlainGpt2> = OnceLock::new();
    let cell = match name {
        TINY => &TINY_MODEL,
        SHAKESPEARE => &SHAKESPEARE_MODEL,
        _ => panic!("unknown model {name}"),
    };
    cell.get_or_init(|| PlainGpt2::load(&model_dir(name)).unwrap())
}

fn reference(name: &str) -> &'static Reference {
    static TINY_REF: OnceLock<Reference> = OnceLock::new();
    static SHAKESPEARE_REF: OnceLock<Reference> = OnceLock::new();
    let cell = match name {
        TINY => &TINY_REF,
        SHAKESPEARE => &SHAKESPEARE_REF,
        _ => panic!("unknown model {name}"),
    };
    cell.get_or_init(|| Reference::load(name))
}

/// Maximum absolute errors over all prompts of one model.
#[derive(Debug, Default)]
struct Errors {
    embeddings: f64,
    blocks: f64,
    last_hidden_state: f64,
    logits: f64,
}

fn compare_activations(name: &str) -> Errors {
    let (m, r) = (model(name), reference(name));
    let mut e = Errors::default();
    for p in PROMPTS {
        let ids = r.ids(&format!("{p}.input_ids"));
        let t = m.forward_trace(&ids).unwrap();
        assert_eq!(t.blocks.len(), m.config().n_layer);
        // Only the fixtures' p1 stores the embeddings and the block outputs.
        let key = format!("{p}.embeddings");
        if r.has(&key) {
            e.embeddings = e
                .embeddings
                .max(max_abs_diff(&t.embeddings, &r.matrix(&key)));
        }
        for (i, b) in t.blocks.iter().enumerate() {
            let key = format!("{p}.block{i}.output");
            if r.has(&key) {
                e.blocks = e.blocks.max(max_abs_diff(&b.output, &r.matrix(&key)));
            }
        }
        e.last_hidden_state = e.last_hidden_state.max(max_abs_diff(
            &t.last_hidden_state,
            &r.matrix(&format!("{p}.last_hidden_state")),
        ));
        e.logits = e
            .logits
            .max(max_abs_diff(&t.logits, &r.matrix(&format!("{p}.logits"))));
        // The trace and the plain forward agree exactly.
        assert_eq!(t.logits, m.forward(&ids).unwrap());
    }
    eprintln!("{name}: max abs error vs float32 reference: {e:?}");
    e
}

#[test]
fn tiny_random_activations_match_reference() {
    let e = compare_activations(TINY);
    for (what, err) in [
        ("embeddings", e.embeddings),
        ("block outputs", e.blocks),
        ("last_hidden_state", e.last_hidden_state),
        ("logits", e.logits),
    ] {
        assert!(err <= 1e-5, "{what}: max abs error {err:e}");
    }
}

#[test]
fn shakespeare_activations_match_reference() {
    let e = compare_activations(SHAKESPEARE);
    // Embeddings are f16 weights upcast: exact in f32 and f64 up to one f32 addition.
    assert!(e.embeddings <= 1e-6, "embeddings: {:e}", e.embeddings);
    for (what, err) in [
        ("block outputs", e.blocks),
        ("last_hidden_state", e.last_hidden_state),
        ("logits", e.logits),
    ] {
        assert!(err <= 1e-4, "{what}: max abs error {err:e}");
    }
}

/// Greedy generation with the KV cache equals the stored ids, equals generation without
/// the cache, and every step's top-2 margin matches the stored one.
fn check_greedy(name: &str, margin_tol: f64) {
    let (m, r) = (model(name), reference(name));
    let mut worst_margin: f64 = 0.0;
    for p in PROMPTS {
        let ids = r.ids(&format!("{p}.input_ids"));
        let expected = r.ids(&format!("{p}.greedy_new_ids"));
        let (_, margins) = r.floats(&format!("{p}.greedy_top2_margin"));
        assert_eq!(expected.len(), 20);

        let cached = m.generate_greedy(&ids, 20).unwrap();
        assert_eq!(cached, expected, "{name} {p}: cached greedy ids");
        let uncached = m.generate_greedy_no_cache(&ids, 20).unwrap();
        assert_eq!(uncached, expected, "{name} {p}: uncached greedy ids");

        // Step by step through forward_with_cache, checking the margins.
        let mut cache = m.new_cache();
        let mut logits = m.forward_with_cache(&ids, &mut cache).unwrap();
        for (step, (&want, &want_margin)) in expected.iter().zip(&margins).enumerate() {
            let last = logits.row(logits.nrows() - 1);
            let (id, margin) = argmax_with_margin(last).unwrap();
            assert_eq!(id, want as usize, "{name} {p} step {step}");
            worst_margin = worst_margin.max((margin - want_margin).abs());
            logits = m.forward_with_cache(&[want], &mut cache).unwrap();
        }
        assert_eq!(cache.len(), ids.len() + 20);
    }
    eprintln!("{name}: max abs error of greedy top-2 margins: {worst_margin:e}");
    assert!(worst_margin <= margin_tol, "margin error {worst_margin:e}");
}

#[test]
fn tiny_random_greedy_matches_reference() {
    check_greedy(TINY, 1e-5);
}

#[test]
fn shakespeare_greedy_matches_reference() {
    check_greedy(SHAKESPEARE, 1e-4);
}

#[test]
fn shakespeare_greedy_decodes_to_reference_text() {
    let r = reference(SHAKESPEARE);
    let tok = puma_layers::Tokenizer::from_dir(&model_dir(SHAKESPEARE)).unwrap();
    let new = model(SHAKESPEARE)
        .generate_greedy(&r.ids("p1.input_ids"), 20)
        .unwrap();
    assert_eq!(
        tok.decode(&new).unwrap(),
        "\n\nBUCKINGHAM.\nI'll be a good lord.\n\nKING.\n"
    );
}

/// Feeding a prompt in chunks through the cache gives the rows of the full forward.
#[test]
fn kv_cache_chunks_equal_full_forward() {
    for name in [TINY, SHAKESPEARE] {
        let (m, r) = (model(name), reference(name));
        let ids = r.ids("p4.input_ids");
        let full = m.forward(&ids).unwrap();
        let mut cache = m.new_cache();
        let mut rows = Vec::new();
        let mut at = 0;
        for chunk in [1, 1, 5, 9, ids.len()] {
            let end = (at + chunk).min(ids.len());
            rows.push(m.forward_with_cache(&ids[at..end], &mut cache).unwrap());
            at = end;
        }
        assert_eq!(at, ids.len());
        assert_eq!(cache.len(), ids.len());
        let views: Vec<_> = rows.iter().map(|a| a.view()).collect();
        let chunked = ndarray::concatenate(Axis(0), &views).unwrap();
        let err = max_abs_diff(&chunked, &full);
        assert!(err <= 1e-11, "{name}: chunked vs full {err:e}");
        // The cached keys of block 0 are the block's k projection of the whole prompt.
        let t = m.forward_trace(&ids).unwrap();
        let d = m.config().n_embd;
        let (k0, v0) = cache.layer(0).unwrap();
        assert!(
            max_abs_diff(
                &k0.to_owned(),
                &t.blocks[0].qkv.slice(s![.., d..2 * d]).to_owned()
            ) < 1e-12
        );
        assert!(
            max_abs_diff(
                &v0.to_owned(),
                &t.blocks[0].qkv.slice(s![.., 2 * d..]).to_owned()
            ) < 1e-12
        );
    }
}

/// The perplexity fixture: 4 windows of 256 held-out tokens, log-softmax in f64.
#[test]
fn shakespeare_val_slice_perplexity() {
    let (m, r) = (model(SHAKESPEARE), reference(SHAKESPEARE));
    let tokens = r.ids("val_slice.input_ids");
    let (_, want_nll) = r.floats("val_slice.token_nll");
    let (_, want_ppl) = r.floats("val_slice.perplexity");
    assert_eq!(tokens.len(), 1024);
    let mut nll = Vec::new();
    for window in tokens.chunks(256) {
        let logits = m.forward(window).unwrap();
        for (t, row) in logits.rows().into_iter().take(255).enumerate() {
            let max = row.fold(f64::NEG_INFINITY, |a, &b| a.max(b));
            let lse = max + row.iter().map(|v| (v - max).exp()).sum::<f64>().ln();
            nll.push(lse - row[window[t + 1] as usize]);
        }
    }
    let token_err = nll
        .iter()
        .zip(&want_nll)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    let ppl = (nll.iter().sum::<f64>() / nll.len() as f64).exp();
    let rel = (ppl - want_ppl[0]).abs() / want_ppl[0];
    eprintln!(
        "val_slice: perplexity {ppl} (reference {}), rel diff {rel:e}, max token NLL error {token_err:e}",
        want_ppl[0]
    );
    assert_eq!(nll.len(), 1020);
    assert!(rel <= 1e-6, "perplexity rel diff {rel:e}");
    assert!(token_err <= 1e-4, "token NLL error {token_err:e}");
}

#[test]
fn bad_inputs_are_typed_errors() {
    let m = model(TINY);
    let c = m.config().clone();
    assert!(matches!(
        m.forward(&[1, 50257]),
        Err(InputError::TokenOutOfRange {
            position: 1,
            id: 50257,
            ..
        })
    ));
    let long = vec![0u32; c.n_positions + 1];
    assert!(matches!(m.forward(&long), Err(InputError::TooLong { .. })));
    assert!(m.forward(&long[1..]).is_ok());
    assert_eq!(m.forward(&[]).unwrap().shape(), &[0, c.vocab_size]);
    assert_eq!(m.generate_greedy(&[], 3), Err(InputError::Empty));
    assert_eq!(m.generate_greedy(&[], 0), Ok(vec![]));
    // prompt + max_new - 1 positions are fed.
    let prompt = vec![0u32; c.n_positions - 4];
    assert_eq!(m.generate_greedy(&prompt, 5).unwrap().len(), 5);
    assert!(matches!(
        m.generate_greedy(&prompt, 6),
        Err(InputError::TooLong { .. })
    ));
    // A full cache refuses more tokens and is left unchanged.
    let mut cache = m.new_cache();
    m.forward_with_cache(&long[1..], &mut cache).unwrap();
    assert!(matches!(
        m.forward_with_cache(&[0], &mut cache),
        Err(InputError::TooLong { .. })
    ));
    assert_eq!(cache.len(), c.n_positions);
    assert_eq!(
        m.logits_row(ndarray::Array1::zeros(3).view()),
        Err(InputError::Width {
            expected: c.n_embd,
            found: 3
        })
    );
    // A cache of another model.
    let mut other = model(SHAKESPEARE).new_cache();
    assert!(matches!(
        m.forward_with_cache(&[0], &mut other),
        Err(InputError::CacheMismatch(_))
    ));
}
