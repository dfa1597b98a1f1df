//! Secure GPT-2 on the trained Shakespeare checkpoint against the reference implementation:
//! 20 greedy steps on every fixture prompt, logits within the fixture's secure bound.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use puma_layers::Tokenizer;
use puma_layers::nn::{CorpusIndex, Drafter, OutputMode, SecureSettings};
use puma_runner::decoding_flags::load_corpus;
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

/// The steps speculative verification with `drafter` takes to confirm `greedy` after
/// `prompt`, `k` drafts a step: the client's side of it in plaintext (a step confirms the
/// drafts up to the first that differs from the greedy pick, and that pick; k is cut to
/// leave room for the pick).
fn draft_steps(drafter: &Drafter, prompt: &[u32], greedy: &[u32], k: usize) -> usize {
    let (mut made, mut steps) = (0, 0);
    while made < greedy.len() {
        let kk = k.min(greedy.len() - made - 1);
        let context = [prompt, &greedy[..made]].concat();
        let drafts = drafter.padded(&context, kk);
        let accepted = drafts
            .iter()
            .zip(&greedy[made..])
            .take_while(|(d, g)| d == g)
            .count();
        made += accepted + 1;
        steps += 1;
    }
    steps
}

/// The public Shakespeare corpus (`scripts/fetch-shakespeare.sh`), indexed with the
/// model's tokenizer; `None` (skipped) when it has not been fetched, a failure then with
/// `PUMA_REQUIRE_REAL_MODELS=1` (CI).
fn shakespeare_corpus(test: &str) -> Option<CorpusIndex> {
    let path = std::env::var_os("PUMA_SHAKESPEARE_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../target/models/shakespeare/shakespeare.txt")
        });
    if !path.is_file() {
        assert_ne!(
            std::env::var("PUMA_REQUIRE_REAL_MODELS").as_deref(),
            Ok("1"),
            "{test}: {} is missing and PUMA_REQUIRE_REAL_MODELS=1: run scripts/fetch-shakespeare.sh",
            path.display()
        );
        eprintln!(
            "SKIPPED {test}: {} not found (run scripts/fetch-shakespeare.sh)",
            path.display()
        );
        return None;
    }
    let tok = Tokenizer::from_gpt2_dir(Path::new(DEFAULT_MODEL_DIR)).unwrap();
    Some(load_corpus(&path, &tok).unwrap())
}

#[test]
fn drafts_that_are_all_accepted_end_at_the_token_limit() {
    // A corpus that holds the greedy text itself drafts it exactly: 20 tokens in steps of
    // 4 drafts + the pick, the last one ending exactly at the limit (that step did not
    // start as the last: it must still end the generation).
    let (prompt, want) = fixture_prompts().swap_remove(1);
    let oracle = CorpusIndex::new([prompt.clone(), want.clone()].concat()).unwrap();
    let opts = RunOptions {
        max_new_tokens: 20,
        mode: OutputMode::SecureArgmax,
        seed: 5,
        drafts: 4,
        drafter: Drafter::Corpus(Arc::new(oracle)),
        ..RunOptions::default()
    };
    let model = load_model(Path::new(DEFAULT_MODEL_DIR)).unwrap();
    let out = run_secure(model, &prompt, &opts, None).unwrap();
    assert_eq!(out.secure_ids, want);
    assert_eq!(out.costs[0].steps.len(), 4);
}

#[test]
fn corpus_drafts_halve_the_rounds_per_generated_token() {
    let Some(corpus) = shakespeare_corpus("corpus_drafts_halve_the_rounds_per_generated_token")
    else {
        return;
    };
    // The corpus the model was trained on: 1,565,959 tokens (the fixture README's count).
    assert_eq!(corpus.len(), 1_565_959);
    let corpus = Drafter::Corpus(Arc::new(corpus));
    let prompts = fixture_prompts();
    // The client's side in plaintext: prompt lookup confirms 80 tokens in 69 steps, the
    // corpus in 38 (deterministic: they depend only on the greedy ids).
    let steps = |d: &Drafter| -> Vec<usize> {
        prompts
            .iter()
            .map(|(p, g)| draft_steps(d, p, g, 4))
            .collect()
    };
    assert_eq!(steps(&Drafter::PromptLookup), [18, 20, 16, 15]);
    let want_steps = steps(&corpus);
    assert_eq!(want_steps.iter().sum::<usize>(), 38, "{want_steps:?}");
    let base = RunOptions {
        max_new_tokens: 20,
        mode: OutputMode::SecureArgmax,
        seed: 5,
        ..RunOptions::default()
    };
    let spec = RunOptions {
        drafts: 4,
        drafter: corpus,
        ..base.clone()
    };
    let model = || load_model(Path::new(DEFAULT_MODEL_DIR)).unwrap();
    // The secure runs on the first two prompts (the plaintext step counts above cover all
    // four): a speculative step verifies five positions, so these runs are among the
    // suite's longest; greedy ids on every prompt are the fidelity test's to check.
    let secure = &prompts[..2];
    let (mut greedy_rounds, mut spec_rounds, mut tokens) = (0, 0, 0);
    for (p, (prompt, want)) in secure.iter().enumerate() {
        let fast = run_secure(model(), prompt, &spec, None).unwrap();
        assert_eq!(fast.secure_ids, *want, "p{}: with corpus drafts", p + 1);
        assert_eq!(fast.costs[0].steps.len(), want_steps[p], "p{}", p + 1);
        let greedy = run_secure(model(), prompt, &base, None).unwrap();
        assert_eq!(greedy.secure_ids, *want, "p{}: greedy", p + 1);
        greedy_rounds += generation_rounds(&greedy);
        spec_rounds += generation_rounds(&fast);
        tokens += want.len();
    }
    assert_eq!(tokens, 40);
    let (g, f) = (
        f64::from(greedy_rounds) / tokens as f64,
        f64::from(spec_rounds) / tokens as f64,
    );
    println!(
        "rounds per generated token: greedy {g:.1}, with 4 corpus drafts per step {f:.1} ({:.2}x fewer)",
        g / f
    );
    assert!(
        g >= 2.0 * f,
        "corpus drafts must halve the rounds per token: {f} against {g}"
    );
}

#[test]
fn a_ragged_batch_of_four_costs_the_rounds_of_its_longest_prompt() {
    let prompts = fixture_prompts();
    let longest = prompts.iter().map(|(p, _)| p.len()).max().unwrap();
    // Three steps of the 4 blocks: 12 softmaxes, each a round cheaper since its maxima's
    // keys are cut from the scores' products (were 888, 1177 and 1174).
    for (mode, pinned) in [
        (OutputMode::RevealLogits, 876),
        (OutputMode::SecureArgmax, 1165),
        (OutputMode::Private, 1162),
    ] {
        let opts = RunOptions {
            max_new_tokens: 3,
            mode,
            seed: 5,
            ..RunOptions::default()
        };
        let all: Vec<Vec<u32>> = prompts.iter().map(|(p, _)| p.clone()).collect();
        let model = || load_model(Path::new(DEFAULT_MODEL_DIR)).unwrap();
        let batched = puma_runner::gpt2::run_secure_batch(model(), &all, &opts, None).unwrap();
        for ((_, want), got) in prompts.iter().zip(&batched) {
            assert_eq!(got.secure_ids, want[..3], "{mode:?}: batched ids");
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
