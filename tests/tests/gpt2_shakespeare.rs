//! Secure GPT-2 on the trained Shakespeare checkpoint against the reference implementation:
//! 20 greedy steps on every fixture prompt, logits within the fixture's secure bound.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::Path;

use puma_layers::nn::{OutputMode, SecureSettings};
use puma_runner::gpt2::{DEFAULT_MODEL_DIR, RunOptions, load_model, run_secure};

const REFERENCE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../layers/tests/fixtures/gpt2-shakespeare/reference.safetensors"
);

/// The fixture README's suggested secure bound for this model's logits.
const LOGIT_BOUND: f64 = 2e-2;

fn tensor_i64(st: &safetensors::SafeTensors<'_>, name: &str) -> Vec<i64> {
    let t = st.tensor(name).unwrap();
    t.data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn tensor_f32(st: &safetensors::SafeTensors<'_>, name: &str) -> (Vec<f32>, Vec<usize>) {
    let t = st.tensor(name).unwrap();
    let v = t
        .data()
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (v, t.shape().to_vec())
}

#[test]
fn secure_greedy_matches_the_reference_on_every_prompt() {
    let bytes = std::fs::read(REFERENCE).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let opts = RunOptions {
        max_new_tokens: 20,
        mode: OutputMode::RevealLogits,
        settings: SecureSettings::default(),
        compare_plaintext: false,
        seed: 5,
        ..RunOptions::default()
    };
    for p in ["p1", "p2", "p3", "p4"] {
        let prompt: Vec<u32> = tensor_i64(&st, &format!("{p}.input_ids"))
            .iter()
            .map(|&v| v as u32)
            .collect();
        let want: Vec<u32> = tensor_i64(&st, &format!("{p}.greedy_new_ids"))
            .iter()
            .map(|&v| v as u32)
            .collect();
        let (margins, _) = tensor_f32(&st, &format!("{p}.greedy_top2_margin"));
        let (logits, shape) = tensor_f32(&st, &format!("{p}.logits"));
        let model = load_model(Path::new(DEFAULT_MODEL_DIR)).unwrap();
        let report = run_secure(model, &prompt, &opts, None).unwrap();
        // Logits of the last prompt position against the reference.
        let v = shape[2];
        let last = &logits[(shape[1] - 1) * v..shape[1] * v];
        let err = report.secure_logits[0]
            .iter()
            .zip(last)
            .map(|(a, b)| (a - f64::from(*b)).abs())
            .fold(0.0, f64::max);
        assert!(err <= LOGIT_BOUND, "{p}: logit error {err}");
        // Greedy ids up to the first step whose reference margin is below twice the bound.
        let checked = margins
            .iter()
            .position(|&m| f64::from(m) < 2.0 * LOGIT_BOUND)
            .unwrap_or(20);
        println!("{p}: first-step logit error {err:.2e}; ids compared on {checked} of 20 steps");
        assert_eq!(report.secure_ids[..checked], want[..checked], "{p}");
        // Our logit error is far below the bound (a few 1e-4), and the smallest stored
        // margin is 0.0145: all 20 steps agree on every prompt.
        assert_eq!(report.secure_ids, want, "{p}: all 20 steps");
    }
}

/// The four fixture prompts and their reference greedy continuations (20 ids each).
fn fixture_prompts() -> Vec<(Vec<u32>, Vec<u32>)> {
    let bytes = std::fs::read(REFERENCE).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let ids =
        |name: &str| -> Vec<u32> { tensor_i64(&st, name).iter().map(|&v| v as u32).collect() };
    ["p1", "p2", "p3", "p4"]
        .iter()
        .map(|p| {
            (
                ids(&format!("{p}.input_ids")),
                ids(&format!("{p}.greedy_new_ids")),
            )
        })
        .collect()
}

/// Rounds of a generation (all its steps) at the client.
fn generation_rounds(report: &puma_runner::gpt2::Gpt2Report) -> u32 {
    report.costs[0].steps.iter().map(|&(_, e)| e).sum()
}

#[test]
fn speculative_verification_is_greedy_and_saves_rounds_per_token() {
    let base = RunOptions {
        max_new_tokens: 20,
        mode: OutputMode::SecureArgmax,
        seed: 5,
        ..RunOptions::default()
    };
    let spec = RunOptions {
        drafts: 4,
        ..base.clone()
    };
    let model = || load_model(Path::new(DEFAULT_MODEL_DIR)).unwrap();
    let mut steps = Vec::new();
    let mut last = None;
    for (p, (prompt, want)) in fixture_prompts().iter().enumerate() {
        let fast = run_secure(model(), prompt, &spec, None).unwrap();
        assert_eq!(fast.secure_ids, *want, "p{}: with drafts", p + 1);
        steps.push(fast.costs[0].steps.len());
        last = Some((prompt.clone(), fast));
    }
    // Prompt lookup drafts what the text repeats: in 20 tokens these prompts repeat
    // little, so most steps accept nothing (the steps are deterministic).
    assert_eq!(steps, [18, 20, 16, 15]);
    // Rounds against plain greedy decoding on the prompt that repeats most (the figures
    // for every prompt are the `decoding` bench's).
    let (prompt, fast) = last.unwrap();
    let greedy = run_secure(model(), &prompt, &base, None).unwrap();
    let (g, f) = (generation_rounds(&greedy), generation_rounds(&fast));
    println!(
        "p4: {:.1} rounds/token greedy, {:.1} with 4 drafts per step",
        f64::from(g) / 20.0,
        f64::from(f) / 20.0
    );
    assert!(f < g, "speculation must save rounds: {f} against {g}");
}

#[test]
fn a_ragged_batch_of_four_costs_the_rounds_of_its_longest_prompt() {
    let prompts = fixture_prompts();
    let longest = prompts.iter().map(|(p, _)| p.len()).max().unwrap();
    for (mode, pinned) in [
        (OutputMode::RevealLogits, 2500),
        (OutputMode::SecureArgmax, 3077),
        (OutputMode::Private, 3071),
    ] {
        let opts = RunOptions {
            max_new_tokens: 6,
            mode,
            seed: 5,
            ..RunOptions::default()
        };
        let all: Vec<Vec<u32>> = prompts.iter().map(|(p, _)| p.clone()).collect();
        let model = || load_model(Path::new(DEFAULT_MODEL_DIR)).unwrap();
        let batched = puma_runner::gpt2::run_secure_batch(model(), &all, &opts, None).unwrap();
        for ((_, want), got) in prompts.iter().zip(&batched) {
            assert_eq!(got.secure_ids, want[..6], "{mode:?}: batched ids");
        }
        // The batch costs what its longest prompt costs alone (the others cost no more).
        let (prompt, _) = prompts.iter().find(|(p, _)| p.len() == longest).unwrap();
        let longest_alone = generation_rounds(&run_secure(model(), prompt, &opts, None).unwrap());
        let batch_rounds = generation_rounds(&batched[0]);
        println!(
            "{mode:?}: batch of 4 {batch_rounds} rounds, longest prompt alone {longest_alone}"
        );
        assert_eq!(batch_rounds, longest_alone, "{mode:?}");
        assert_eq!(batch_rounds, pinned, "{mode:?}");
    }
}
