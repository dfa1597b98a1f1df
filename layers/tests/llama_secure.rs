//! Secure LLaMA (three simulated parties) on the tiny random fixture (GQA, RoPE, tied
//! head): every position's logits within the README's secure bound of the float32
//! reference and the KV-cached secure generation equal to the plaintext model (RMSNorm's
//! input scaling on massive activations is tested in puma-core).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::llama_common;

use std::sync::Arc;

use llama_common::{Reference, max_abs_diff, model_dir};
use puma_core::PartyId;
use puma_core::sim::Sim;
use puma_layers::llama::load_hf;
use puma_layers::llama::plain::PlainLlama;
use puma_layers::nn::{
    Decoding, OutputMode, SecureSettings, SharedDecoder, forward_logits, generate,
};

const CLIENT: PartyId = PartyId::P0;
const OWNER: PartyId = PartyId::P1;

#[test]
fn tiny_random_secure_logits_within_5e_3() {
    let (cfg, w) = load_hf(&model_dir("llama-tiny-random")).unwrap();
    let r = Reference::load("llama-tiny-random");
    let ids = r.ids("p1.input_ids");
    let (_, want) = r.floats("p1.logits");
    let (cfg, w, ids2) = (Arc::new(cfg), Arc::new(w), Arc::new(ids.clone()));
    let len = ids.len();
    let out = Sim::new(7).run(move |me| {
        let (cfg, w, ids) = (cfg.clone(), w.clone(), ids2.clone());
        move |mut ctx| async move {
            let weights = (me == OWNER).then_some(&*w);
            let model = SharedDecoder::share(&mut ctx, OWNER, &*cfg, weights).await?;
            let prompt = (me == CLIENT).then_some(&ids[..]);
            forward_logits(
                &mut ctx,
                &model,
                CLIENT,
                prompt,
                len,
                &SecureSettings::default(),
            )
            .await
        }
    });
    let [logits, p1, p2] = out.into_results().unwrap();
    assert!(
        p1.is_none() && p2.is_none(),
        "only the client learns the logits"
    );
    let logits = logits.unwrap();
    let err = max_abs_diff(logits.iter(), &want);
    println!("secure p1 (8 positions × 49152): max |logit err| {err:.2e}");
    assert!(err <= 5e-3, "secure logits off by {err}");
}

#[test]
fn tiny_random_secure_generation_matches_plaintext() {
    let (cfg, w) = load_hf(&model_dir("llama-tiny-random")).unwrap();
    let plain = PlainLlama::new(cfg.clone(), w.clone()).unwrap();
    // "Hello world" (p2) and 4 greedy steps with the KV cache.
    let prompt = vec![19556u32, 905];
    let steps = 4;
    let (cfg2, w2, p2) = (Arc::new(cfg), Arc::new(w), Arc::new(prompt.clone()));
    let out = Sim::new(11).run(move |me| {
        let (cfg, w, prompt) = (cfg2.clone(), w2.clone(), p2.clone());
        move |mut ctx| async move {
            let weights = (me == OWNER).then_some(&*w);
            let model = SharedDecoder::share(&mut ctx, OWNER, &*cfg, weights).await?;
            let p = (me == CLIENT).then_some(&prompt[..]);
            generate(
                &mut ctx,
                &model,
                CLIENT,
                p,
                prompt.len(),
                &Decoding::new(steps, OutputMode::RevealLogits),
                &SecureSettings::default(),
                None,
                None,
            )
            .await
        }
    });
    let [g, o1, o2] = out.into_results().unwrap();
    assert!(o1.ids.is_empty() && o2.ids.is_empty());
    // The plaintext logits along the secure trajectory (teacher forcing).
    let mut seq = prompt.clone();
    seq.extend_from_slice(&g.ids[..steps - 1]);
    let all = plain.forward(&seq).unwrap();
    let mut worst: f64 = 0.0;
    for (k, secure_row) in g.logits.iter().enumerate() {
        let row = all.row(prompt.len() - 1 + k);
        worst = worst.max(max_abs_diff(row.iter(), secure_row));
    }
    println!(
        "secure generation: ids {:?}, max |logit err| {worst:.2e}",
        g.ids
    );
    assert!(worst <= 5e-3, "step logits off by {worst}");
    // The reference's greedy ids for p2 are all 905 (margins ≥ 0.035 ≫ 5e-3).
    assert_eq!(g.ids, vec![905; steps]);
    assert_eq!(g.step_costs.len(), steps);
}
