//! Model sharing streamed in several chunks, with the owner's weights passed by value: the
//! secure logits of every position match the f64 plaintext model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use ndarray::{Array1, Array2};
use puma_core::PartyId;
use puma_core::sim::Sim;
use puma_layers::gpt2::config::{Activation, Gpt2Config};
use puma_layers::gpt2::plain::PlainGpt2;
use puma_layers::gpt2::weights::{Gpt2Block, Gpt2Weights, LayerNormWeights};
use puma_layers::nn::{SHARE_CHUNK_WORDS, SecureSettings, SharedDecoder, forward_logits};

/// Width 32, vocabulary 140,000: `wte` alone (4.48 M words) is longer than one chunk, so
/// the first chunk ends inside it and the second carries its tail and every other tensor.
fn model() -> (Gpt2Config, Gpt2Weights) {
    let (d, v, p, inner) = (32, 140_000, 8, 128);
    let cfg = Gpt2Config {
        n_layer: 1,
        n_embd: d,
        n_head: 2,
        n_inner: inner,
        n_positions: p,
        vocab_size: v,
        layer_norm_epsilon: 1e-5,
        activation: Activation::GeluTanh,
    };
    let mut st = 99u64;
    let mut u = move || {
        // SplitMix64 → uniform in [−1, 1).
        st = st.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = st;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    };
    let mut m = |r: usize, c: usize, s: f64| Array2::from_shape_fn((r, c), |_| s * u());
    let wte = m(v, d, 0.1);
    let wpe = m(p, d, 0.05);
    let attn_w = m(d, 3 * d, 0.2);
    let proj_w = m(d, d, 0.2);
    let fc_w = m(d, inner, 0.2);
    let fc_proj_w = m(inner, d, 0.1);
    let vecs = m(8, inner, 0.1);
    let row = |i: usize, n: usize| vecs.row(i).iter().take(n).copied().collect::<Array1<f64>>();
    let ln = |i: usize| LayerNormWeights {
        gamma: row(i, d).mapv(|x| 1.0 + x),
        beta: row(i + 1, d),
    };
    let w = Gpt2Weights {
        wte,
        wpe,
        blocks: vec![Gpt2Block {
            ln_1: ln(0),
            attn_w,
            attn_b: row(2, inner).iter().take(3 * d).copied().collect(),
            proj_w,
            proj_b: row(3, d),
            ln_2: ln(4),
            fc_w,
            fc_b: row(6, inner),
            fc_proj_w,
            fc_proj_b: row(7, d),
        }],
        ln_f: ln(5),
        lm_head: None,
    };
    (cfg, w)
}

#[test]
fn streamed_sharing_matches_plaintext() {
    let (cfg, w) = model();
    let params = cfg.vocab_size * cfg.n_embd;
    assert!(params > SHARE_CHUNK_WORDS, "wte must span two chunks");
    let ids: Vec<u32> = vec![7, 139_999, 65_536, 3];
    let plain = PlainGpt2::new(cfg.clone(), w.clone()).unwrap();
    let want = plain.forward(&ids).unwrap();
    let model = Arc::new((cfg, w));
    let len = ids.len();
    let out = Sim::new(4).run(|me| {
        let model = model.clone();
        let ids = ids.clone();
        move |mut ctx| async move {
            let (cfg, w) = &*model;
            // Each tensor is encoded when the stream reaches it.
            let mine = (me == PartyId::P1).then_some(w);
            let shared = SharedDecoder::share(&mut ctx, PartyId::P1, cfg, mine).await?;
            let sharing_bytes = ctx.meter().payload_bytes_sent;
            let logits = forward_logits(
                &mut ctx,
                &shared,
                PartyId::P0,
                (me == PartyId::P0).then_some(&ids[..]),
                len,
                &SecureSettings::default(),
            )
            .await?;
            Ok((sharing_bytes, logits))
        }
    });
    let [c, o, h] = out.into_results().unwrap();
    // Only the owner sends payload while sharing (the receiver's per-chunk records are
    // empty): whole words, at least all of `wte`. The exact count is pinned in puma-core
    // (`share_input_streamed` against `share_input_parts`).
    let (cfg, _) = &*model;
    assert_eq!(c.0, 0);
    assert_eq!(h.0, 0);
    assert_eq!(o.0 % 8, 0);
    assert!(o.0 > 8 * (cfg.vocab_size * cfg.n_embd) as u64, "{}", o.0);
    let got = c.1.unwrap();
    assert_eq!(got.len(), want.len());
    let err = got
        .iter()
        .zip(want.iter())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    println!("max |secure − plaintext logit| = {err:.2e}");
    assert!(err.is_finite() && err <= 5e-4, "{err}");
}
