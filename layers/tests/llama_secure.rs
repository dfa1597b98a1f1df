//! Secure LLaMA (three simulated parties) on the tiny random fixture (GQA, RoPE, tied
//! head): every position's logits within the README's secure bound of the float32
//! reference, the KV-cached secure generation equal to the plaintext model, and the
//! RMSNorm input scaling checked on massive activations.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod llama_common;

use std::sync::Arc;

use llama_common::{Reference, max_abs_diff, model_dir};
use puma_core::sim::Sim;
use puma_core::{PartyId, proto};
use puma_layers::llama::load_hf;
use puma_layers::llama::plain::{PlainLlama, rms_norm};
use puma_layers::nn::{
    OutputMode, RmsScaling, SecureSettings, SharedDecoder, forward_logits, generate, rms_norm_rows,
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
                steps,
                OutputMode::RevealLogits,
                &SecureSettings::default(),
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

#[test]
fn rms_norm_scales_massive_activations() {
    // Rows of width 576 with SmolLM2-like outliers (2.5e4 in one channel) and a row of tiny
    // values; the default bound 2^15 gives k = 5, g = 21 at f = 18.
    let d = 576;
    let s = RmsScaling::new(d, 32768.0, 18).unwrap();
    assert_eq!((s.k, s.g), (5, 21));
    assert!(RmsScaling::new(1 << 20, 1e9, 18).is_err());
    // A small bound needs no scaling; the square precision is capped at f + 8.
    assert_eq!(
        RmsScaling::new(64, 1.0, 18).unwrap(),
        RmsScaling { k: 0, g: 26 }
    );
    let mut x = vec![0.0f64; 3 * d];
    for (i, v) in x.iter_mut().enumerate() {
        *v = ((i * 37 % 101) as f64 - 50.0) / 25.0;
    }
    x[14] = 24926.0;
    x[d + 260] = -3000.0;
    for v in &mut x[2 * d..] {
        *v *= 0.04;
    }
    let gamma: Vec<f64> = (0..d).map(|i| 0.5 + (i % 7) as f64 * 0.3).collect();
    let fx = puma_core::FixedPoint::default();
    let xe = fx.encode_slice(&x).unwrap();
    let ge = fx.encode_slice(&gamma).unwrap();
    let out = Sim::new(5).run(move |me| {
        let (xe, ge) = (xe.clone(), ge.clone());
        move |mut ctx| async move {
            let xs = proto::share_input(
                &mut ctx,
                PartyId::P0,
                (me == PartyId::P0).then_some(&xe[..]),
                3 * d,
            )
            .await?;
            let gs = proto::share_input(
                &mut ctx,
                PartyId::P1,
                (me == PartyId::P1).then_some(&ge[..]),
                d,
            )
            .await?;
            let y = rms_norm_rows(&mut ctx, &xs, 3, d, &gs, 1e-5, 32768.0).await?;
            proto::reveal_all(&mut ctx, &y).await
        }
    });
    let [y, _, _] = out.into_results().unwrap();
    let y = fx.decode_slice(&y);
    let xa =
        ndarray::Array2::from_shape_vec((3, d), fx.decode_slice(&fx.encode_slice(&x).unwrap()))
            .unwrap();
    let want = rms_norm(xa.view(), &ndarray::Array1::from(gamma), 1e-5);
    let err = max_abs_diff(want.iter(), &y);
    println!("rmsnorm with outliers: max abs err {err:.2e}");
    assert!(err <= 2e-3, "rmsnorm off by {err}");
    // The outlier channel itself comes out right (≈ √d · γ), not wrapped.
    assert!((y[14] - want[[0, 14]]).abs() <= 2e-3 * want[[0, 14]].abs());
}
