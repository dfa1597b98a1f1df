//! Secure LLaMA generation through the example's orchestration (three parties on three
//! threads): the tiny random fixture against plaintext, and the real SmolLM2-135M-Instruct
//! (Q4_1 GGUF, fetched by `scripts/fetch-smollm2.sh`) token-identical to the fixture's 10
//! greedy ids for both prompts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::{Path, PathBuf};

use puma_layers::gpt2::config::InputError;
use puma_runner::llama::{
    LlamaError, RunOptions, SMOLLM2_GGUF, TINY_MODEL_DIR, load_model, run_secure,
};
use safetensors::SafeTensors;

fn ids(path: &Path, key: &str) -> Vec<u32> {
    let bytes = std::fs::read(path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensor(key)
        .unwrap()
        .data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as u32)
        .collect()
}

fn smollm2() -> Option<PathBuf> {
    let path = std::env::var_os("PUMA_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(SMOLLM2_GGUF));
    if path.is_file() {
        return Some(path);
    }
    if std::env::var("PUMA_REQUIRE_REAL_MODELS").as_deref() == Ok("1") {
        panic!(
            "{} is missing and PUMA_REQUIRE_REAL_MODELS=1: run scripts/fetch-smollm2.sh",
            path.display()
        );
    }
    eprintln!(
        "SKIPPED smollm2 secure test: {} not found (run scripts/fetch-smollm2.sh or set PUMA_SMOLLM2_GGUF)",
        path.display()
    );
    None
}

#[test]
fn smollm2_secure_greedy_is_token_identical_to_the_reference() {
    let Some(path) = smollm2() else { return };
    let reference = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../models/smollm2-135m/reference.safetensors");
    let model = load_model(&path).unwrap();
    let prompts = vec![
        ids(&reference, "p1.input_ids"),
        ids(&reference, "p2.input_ids"),
    ];
    // Secure argmax (the other SmolLM2 runs reveal logits), both prompts in one ragged
    // batch. Without drafts: prompt lookup drafts little for these prompts (9 steps for 10
    // tokens), and each step would verify 5 rows a prompt, which took this test from 48 s
    // to 74 s on two cores. Speculative verification on SmolLM2 is the chat test's.
    let opts = RunOptions {
        max_new_tokens: 10,
        mode: puma_layers::nn::OutputMode::SecureArgmax,
        drafts: 0,
        batch: true,
        ..RunOptions::default()
    };
    let report = run_secure(model, &prompts, &opts, None).unwrap();
    for (k, r) in report.prompts.iter().enumerate() {
        let want = ids(&reference, &format!("p{}.greedy_new_ids", k + 1));
        println!(
            "p{}: secure ids {:?} in {:.1?} ({} steps)",
            k + 1,
            r.secure_ids,
            r.time,
            r.step_costs.len()
        );
        assert_eq!(r.secure_ids, want, "p{}", k + 1);
    }
    println!(
        "sharing {:.1?} ({} bytes from the owner), total {:.1?}, {} rounds",
        report.share_time,
        report.share_bytes,
        report.elapsed,
        report.rounds()
    );
    // 8 bytes per parameter (the tied head once): 134,515,008 parameters less the block
    // norms' γ (30 · 2 · 576), folded into the projections before sharing.
    assert_eq!(report.share_bytes, 8 * (134_515_008 - 30 * 2 * 576));
}

#[test]
fn tiny_random_secure_generation_and_comparison() {
    let model = load_model(Path::new(TINY_MODEL_DIR)).unwrap();
    let opts = RunOptions {
        max_new_tokens: 3,
        compare_plaintext: true,
        ..RunOptions::default()
    };
    let report = run_secure(model.clone(), &[vec![65, 42, 1812, 314]], &opts, None).unwrap();
    let r = &report.prompts[0];
    let plain = r.plaintext.as_ref().unwrap();
    let err = plain.max_logit_error.unwrap();
    println!("tiny: ids {:?}, max logit err {err:.2e}", r.secure_ids);
    assert!(err <= 5e-3);
    assert_eq!(r.secure_ids, plain.ids);
    // Costs: a cached step costs a little more than the previous one (longer attention
    // rows) and far less than the prompt step (4 rows).
    assert_eq!(r.step_costs.len(), 3);
    println!("tiny step costs (client bytes, epochs): {:?}", r.step_costs);
    assert!(r.step_costs[1].0 < r.step_costs[2].0);
    assert!(r.step_costs[2].0 < r.step_costs[0].0);
    assert!(report.rounds() > 0);
    // Typed input errors.
    assert!(matches!(
        run_secure(model.clone(), &[vec![]], &opts, None),
        Err(LlamaError::Input(InputError::Empty))
    ));
    assert!(matches!(
        run_secure(model, &[vec![49152]], &opts, None),
        Err(LlamaError::Input(InputError::TokenOutOfRange { .. }))
    ));
}

/// SmolLM2 at `path`, its tokenizer and its end-of-sequence ids (GGUF metadata).
fn smollm2_chat(
    path: &Path,
) -> (
    puma_runner::llama::LoadedLlama,
    puma_layers::Tokenizer,
    Vec<u32>,
) {
    let eos = puma_layers::stopping::eos_ids(path).unwrap();
    let model = load_model(path).unwrap();
    let file = puma_layers::gguf::GgufFile::open(path).unwrap();
    let tok = puma_layers::Tokenizer::from_gguf(&file, path).unwrap();
    (model, tok, eos)
}

/// SmolLM2's chat answer, with the client drafting 4 tokens a step by prompt lookup: the
/// plaintext model's greedy answer, in fewer steps than tokens, ending at the model's
/// end-of-sequence token `<|im_end|>` (from the GGUF metadata).
#[test]
fn smollm2_speculative_chat_answer_is_the_greedy_answer_and_stops_at_im_end() {
    let Some(path) = smollm2() else { return };
    let (model, tok, eos) = smollm2_chat(&path);
    assert_eq!(tok.encode("<|im_end|>").unwrap(), eos);
    // An answer that quotes its prompt: prompt lookup drafts it.
    let prompt = tok
        .encode(
            "<|im_start|>user\nRepeat exactly: the quick brown fox jumps over the lazy dog<|im_end|>\n<|im_start|>assistant\n",
        )
        .unwrap();
    let max_new = 16;
    let opts = RunOptions {
        max_new_tokens: max_new,
        mode: puma_layers::nn::OutputMode::SecureArgmax,
        eos: eos.clone(),
        drafts: 4,
        compare_plaintext: true,
        ..RunOptions::default()
    };
    let report = run_secure(model, &[prompt], &opts, None).unwrap();
    let r = &report.prompts[0];
    let text = tok.decode(&r.secure_ids).unwrap();
    println!(
        "{:?} {text:?} in {} steps",
        r.secure_ids,
        r.step_costs.len()
    );
    assert_eq!(r.plaintext.as_ref().unwrap().ids, r.secure_ids);
    assert!(text.contains("lazy dog"), "{text:?}");
    // The answer ends at <|im_end|>, which is kept as its last id.
    assert_eq!(r.finish, puma_layers::nn::Finish::Eos);
    assert!(r.secure_ids.len() < max_new);
    assert_eq!(r.secure_ids.last(), eos.first());
    // The quoted words were drafted and accepted: fewer steps than tokens.
    assert!(
        r.step_costs.len() < r.secure_ids.len(),
        "no draft was accepted"
    );
}
