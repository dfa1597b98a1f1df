//! The streamed prompt step (the model shared segment by segment as the step reaches it)
//! against the whole-model path: the same last-position logits within the secure bound,
//! the same inference rounds and bytes at every party, for LLaMA (tied head, the tiny
//! fixture), GPT-2 (learned positions, biases, LayerNorm) and a seeded LLaMA-7B-like
//! shape with an untied head.

use std::sync::Arc;

use puma_core::sim::Sim;
use puma_core::{Error, PartyId};
use puma_layers::gpt2::weights::load_gpt2;
use puma_layers::llama::{LlamaConfig, load_hf};
use puma_layers::nn::{
    DecoderArch, Decoding, OutputMode, SecureSettings, SeededDecoder, SharedDecoder, StreamedStep,
    generate, prompt_step_streamed,
};

use crate::{common, llama_common};

const CLIENT: PartyId = PartyId::P0;
const OWNER: PartyId = PartyId::P1;

/// One party's figures of the whole-model path's first step: the client's last-position
/// logits, and the inference's (bytes sent, epochs).
type Whole = (Option<Vec<f64>>, u64, u32);

/// Runs both paths on `prompt` and returns each party's results.
fn both<A>(arch: A, weights: A::Weights, prompt: Vec<u32>) -> ([Whole; 3], [StreamedStep; 3])
where
    A: DecoderArch + Send + Sync + 'static,
    A::Weights: Send + Sync + 'static,
{
    let (arch, weights, prompt) = (Arc::new(arch), Arc::new(weights), Arc::new(prompt));
    let len = prompt.len();
    let whole = {
        let (arch, weights, prompt) = (arch.clone(), weights.clone(), prompt.clone());
        Sim::new(3).run(move |me| {
            let (arch, weights, prompt) = (arch.clone(), weights.clone(), prompt.clone());
            move |mut ctx| async move {
                let w = (me == OWNER).then_some(&*weights);
                let model = SharedDecoder::share(&mut ctx, OWNER, &*arch, w).await?;
                let m0 = ctx.meter();
                let g = generate(
                    &mut ctx,
                    &model,
                    CLIENT,
                    (me == CLIENT).then_some(&prompt[..]),
                    len,
                    &Decoding::new(1, OutputMode::RevealLogits),
                    &SecureSettings::default(),
                    None,
                    None,
                )
                .await?;
                let m1 = ctx.meter();
                Ok::<Whole, Error>((
                    g.logits.first().cloned(),
                    m1.payload_bytes_sent - m0.payload_bytes_sent,
                    m1.epoch - m0.epoch,
                ))
            }
        })
    };
    let streamed = streamed_step(arch, weights, prompt, 4);
    (whole.into_results().unwrap(), streamed)
}

/// Every party's result of the streamed step on `prompt`, the entropy from `seed`.
fn streamed_step<A>(
    arch: Arc<A>,
    weights: Arc<A::Weights>,
    prompt: Arc<Vec<u32>>,
    seed: u64,
) -> [StreamedStep; 3]
where
    A: DecoderArch + Send + Sync + 'static,
    A::Weights: Send + Sync + 'static,
{
    let len = prompt.len();
    let out = Sim::new(seed).run(move |me| {
        let (arch, weights, prompt) = (arch.clone(), weights.clone(), prompt.clone());
        move |mut ctx| async move {
            prompt_step_streamed(
                &mut ctx,
                OWNER,
                &*arch,
                (me == OWNER).then_some(&*weights),
                CLIENT,
                (me == CLIENT).then_some(&prompt[..]),
                len,
                &SecureSettings::default(),
                None,
            )
            .await
        }
    });
    out.into_results().unwrap()
}

/// Asserts what both paths must share and returns the client's streamed logits.
fn same_costs_and_logits(whole: &[Whole; 3], streamed: &[StreamedStep; 3], bound: f64) -> Vec<f64> {
    for (p, (w, s)) in whole.iter().zip(streamed).enumerate() {
        assert_eq!(
            s.inference_bytes, w.1,
            "party {p}: the streamed inference sends what the whole-model step sends"
        );
    }
    // Rounds as the client counts them (it waits for the last message; the owner, which
    // sends the model without waiting, enters the inference one epoch earlier).
    let client = CLIENT.index();
    assert_eq!(
        streamed[client].inference_rounds, whole[client].2,
        "the streamed inference takes the whole-model step's rounds"
    );
    assert!(
        streamed[1].logits.is_none() && streamed[2].logits.is_none(),
        "only the client learns the logits"
    );
    let got = streamed[0].logits.clone().unwrap();
    let want = whole[0].0.clone().unwrap();
    assert_eq!(got.len(), want.len());
    let err = got
        .iter()
        .zip(&want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    println!("streamed vs whole-model logits: max |diff| {err:.2e}");
    assert!(
        err <= bound,
        "streamed logits off the whole-model path's by {err}"
    );
    got
}

#[test]
fn llama_tied_head_streamed_equals_whole_model_and_reference() {
    let (cfg, w) = load_hf(&llama_common::model_dir("llama-tiny-random")).unwrap();
    let r = llama_common::Reference::load("llama-tiny-random");
    let ids = r.ids("p1.input_ids");
    let (_, want) = r.floats("p1.logits");
    let v = cfg.vocab_size;
    let params = cfg.spec().unwrap().parameters().unwrap() as u64;
    let (whole, streamed) = both(cfg, w, ids.clone());
    let got = same_costs_and_logits(&whole, &streamed, 5e-3);
    let last = &want[(ids.len() - 1) * v..ids.len() * v];
    let err = llama_common::max_abs_diff(got.iter(), last);
    assert!(err <= 5e-3, "streamed logits off the reference by {err}");
    // The model's sharing: 8 bytes per parameter from the owner alone.
    assert_eq!(streamed[OWNER.index()].share_bytes, 8 * params);
    assert_eq!(streamed[CLIENT.index()].share_bytes, 0);
}

#[test]
fn gpt2_streamed_equals_whole_model_and_reference() {
    let (cfg, w) = load_gpt2(&common::model_dir("gpt2-tiny-random")).unwrap();
    let r = common::Reference::load("gpt2-tiny-random");
    let ids = r.ids("p1.input_ids");
    let want = r.matrix("p1.logits");
    let (whole, streamed) = both(cfg, w, ids.clone());
    let got = same_costs_and_logits(&whole, &streamed, 5e-3);
    let last = want.row(ids.len() - 1);
    let err = got
        .iter()
        .zip(last)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(err <= 5e-3, "streamed logits off the reference by {err}");
}

#[test]
fn seeded_untied_llama_shape_streamed_equals_whole_model() {
    let spec = LlamaConfig {
        vocab_size: 300,
        hidden_size: 64,
        intermediate_size: 172,
        num_hidden_layers: 3,
        num_attention_heads: 4,
        num_key_value_heads: 4,
        head_dim: 16,
        rms_norm_eps: 1e-6,
        rope_theta: 10000.0,
        max_position_embeddings: 64,
        tie_word_embeddings: false,
    }
    .spec()
    .unwrap();
    let arch = SeededDecoder::new(spec, 11, 0.02).unwrap();
    let prompt: Vec<u32> = (0..8).map(|t| 10 + 37 * t).collect();
    let (whole, streamed) = both(arch, (), prompt);
    same_costs_and_logits(&whole, &streamed, 2e-3);
}

/// The real SmolLM2-135M-Instruct through the streamed step: the last position's logits
/// within the secure bound of the reference (0.1) and its argmax the reference's first
/// greedy token.
#[test]
fn smollm2_streamed_prompt_step_matches_the_reference() {
    let Some(path) =
        llama_common::smollm2_gguf("smollm2_streamed_prompt_step_matches_the_reference")
    else {
        return;
    };
    let (cfg, w) = puma_layers::llama::load_gguf(&path).unwrap();
    let r = llama_common::Reference::load("smollm2-135m");
    let ids = r.ids("p1.input_ids");
    let (_, want) = r.floats("p1.logits");
    let first = r.ids("p1.greedy_new_ids")[0];
    let v = cfg.vocab_size;
    let len = ids.len();
    let [client, _, _] = streamed_step(Arc::new(cfg), Arc::new(w), Arc::new(ids), 5);
    let logits = client.logits.unwrap();
    let err = llama_common::max_abs_diff(logits.iter(), &want[(len - 1) * v..len * v]);
    println!("SmolLM2 streamed p1: max |logit err| {err:.2e} (last position)");
    assert!(err <= 0.1, "streamed logits off the reference by {err}");
    assert_eq!(puma_layers::nn::argmax_lowest(&logits) as u32, first);
}

/// An empty prompt, or one beyond the model's positions, is refused at every party before
/// anything is shared.
#[test]
fn streamed_step_refuses_prompts_that_do_not_fit() {
    let spec = LlamaConfig {
        vocab_size: 50,
        hidden_size: 16,
        intermediate_size: 24,
        num_hidden_layers: 1,
        num_attention_heads: 2,
        num_key_value_heads: 2,
        head_dim: 8,
        rms_norm_eps: 1e-6,
        rope_theta: 10000.0,
        max_position_embeddings: 4,
        tie_word_embeddings: false,
    }
    .spec()
    .unwrap();
    let arch = Arc::new(SeededDecoder::new(spec, 1, 0.02).unwrap());
    for len in [0usize, 5] {
        let arch = arch.clone();
        let out = Sim::new(2).run(move |me| {
            let arch = arch.clone();
            move |mut ctx| async move {
                let prompt = vec![1u32; len];
                prompt_step_streamed(
                    &mut ctx,
                    OWNER,
                    &*arch,
                    (me == OWNER).then_some(&()),
                    CLIENT,
                    (me == CLIENT).then_some(&prompt[..]),
                    len,
                    &SecureSettings::default(),
                    None,
                )
                .await
            }
        });
        for r in out.results {
            let e = r.expect_err("refused");
            assert!(e.to_string().contains("input length"), "{e}");
        }
    }
}
