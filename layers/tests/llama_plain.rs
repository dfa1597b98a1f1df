//! The f64 LLaMA against the float32 references: the tiny random fixture
//! (`models/llama-tiny-random`, GQA and RoPE) and the real SmolLM2-135M-Instruct from its
//! Q4_1 GGUF (fetched by `scripts/fetch-smollm2.sh`; reference in `models/smollm2-135m`).
//! Tolerances are the fixtures README's "f64 re-implementation: assert" column.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::llama_common;

use llama_common::{Reference, max_abs_diff, model_dir, smollm2_gguf};
use puma_layers::llama::plain::PlainLlama;
use puma_layers::llama::{load_gguf, load_hf};

#[test]
fn tiny_random_logits_and_hidden_states() {
    let (cfg, w) = load_hf(&model_dir("llama-tiny-random")).unwrap();
    assert_eq!((cfg.num_attention_heads, cfg.num_key_value_heads), (4, 2));
    assert!(cfg.tie_word_embeddings && w.lm_head.is_none());
    let model = PlainLlama::new(cfg, w).unwrap();
    let r = Reference::load("llama-tiny-random");
    for p in ["p1", "p2", "p3"] {
        let ids = r.ids(&format!("{p}.input_ids"));
        let logits = model.forward(&ids).unwrap();
        let (_, want) = r.floats(&format!("{p}.logits"));
        let err = max_abs_diff(logits.iter(), &want);
        let hidden = model.last_hidden_state(&ids).unwrap();
        let (_, want_h) = r.floats(&format!("{p}.last_hidden_state"));
        let err_h = max_abs_diff(hidden.iter(), &want_h);
        println!("{p}: max |logit err| {err:.2e}, hidden {err_h:.2e}");
        assert!(err <= 1e-5, "{p}: logits off by {err}");
        assert!(err_h <= 1e-5, "{p}: hidden off by {err_h}");
        // Greedy with the KV cache equals the reference's no-cache loop (where the margins
        // allow: the smallest stored margin is 0.035, far above f64 error).
        let greedy = model.generate_greedy(&ids, 20).unwrap();
        assert_eq!(greedy, r.ids(&format!("{p}.greedy_new_ids")), "{p}");
    }
}

#[test]
fn smollm2_gguf_weights_logits_and_greedy() {
    let Some(path) = smollm2_gguf("smollm2_gguf_weights_logits_and_greedy") else {
        return;
    };
    let (cfg, w) = load_gguf(&path).unwrap();
    assert_eq!(
        (
            cfg.num_hidden_layers,
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.intermediate_size,
            cfg.vocab_size
        ),
        (30, 576, 9, 3, 1536, 49152)
    );
    assert_eq!(cfg.rms_norm_eps, 9.999999747378752e-06);
    assert_eq!(cfg.rope_theta, 100000.0);
    assert!(cfg.tie_word_embeddings);
    // The dequantised tensors against weights_check.json (exact f32 values: sums to 1e-9
    // relative, first values exactly).
    let text =
        std::fs::read_to_string(model_dir("smollm2-135m").join("weights_check.json")).unwrap();
    let check: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut checked = 0;
    for (name, entry) in check.as_object().unwrap() {
        let Some(shape) = entry.get("shape") else {
            continue;
        };
        let shape: Vec<usize> = serde_json::from_value(shape.clone()).unwrap();
        // Our matrices are stored [in, out]; compare in HF [out, in] order.
        let values: Vec<f64> = match name.as_str() {
            "model.embed_tokens.weight" => w.embed.iter().copied().collect(),
            "lm_head.weight" => w.lm_head().iter().copied().collect(),
            "model.norm.weight" => w.norm.to_vec(),
            _ => {
                let rest = name.strip_prefix("model.layers.").unwrap();
                let (n, suffix) = rest.split_once('.').unwrap();
                let l = &w.layers[n.parse::<usize>().unwrap()];
                match suffix {
                    "input_layernorm.weight" => l.attn_norm.to_vec(),
                    "post_attention_layernorm.weight" => l.mlp_norm.to_vec(),
                    s => {
                        let m = match s {
                            "self_attn.q_proj.weight" => &l.wq,
                            "self_attn.k_proj.weight" => &l.wk,
                            "self_attn.v_proj.weight" => &l.wv,
                            "self_attn.o_proj.weight" => &l.wo,
                            "mlp.gate_proj.weight" => &l.w_gate,
                            "mlp.up_proj.weight" => &l.w_up,
                            "mlp.down_proj.weight" => &l.w_down,
                            other => panic!("unexpected tensor {other}"),
                        };
                        m.t().iter().copied().collect()
                    }
                }
            }
        };
        assert_eq!(values.len(), shape.iter().product::<usize>(), "{name}");
        let sum: f64 = values.iter().sum();
        let sum_sq: f64 = values.iter().map(|v| v * v).sum();
        let want_sum = entry["sum"].as_f64().unwrap();
        let want_sq = entry["sum_sq"].as_f64().unwrap();
        assert!(
            (sum - want_sum).abs() <= 1e-9 * want_sq.max(1.0),
            "{name}: sum {sum} vs {want_sum}"
        );
        assert!(
            (sum_sq - want_sq).abs() <= 1e-9 * want_sq,
            "{name}: sum_sq {sum_sq} vs {want_sq}"
        );
        let first8: Vec<f64> = serde_json::from_value(entry["first8"].clone()).unwrap();
        // Exact f32 values (the JSON's lm_head copy prints one value 1 f64-ulp off, far
        // below the f32 grid of 7e-9 at 0.1).
        assert!(
            max_abs_diff(values[..8].iter(), &first8) <= 1e-15,
            "{name}: first values"
        );
        checked += 1;
    }
    assert_eq!(checked, 273, "every tensor (and the tied head) checked");
    let r = Reference::load("smollm2-135m");
    let rows = |m: &ndarray::Array2<f64>| {
        m.slice(ndarray::s![..4, ..])
            .iter()
            .copied()
            .collect::<Vec<f64>>()
    };
    let (_, q4) = r.floats("weights_check.layers0_q_proj_rows0_3");
    let (_, k4) = r.floats("weights_check.layers0_k_proj_rows0_3");
    let (_, e4) = r.floats("weights_check.embed_tokens_rows0_3");
    assert_eq!(
        rows(&w.layers[0].wq.t().to_owned()),
        q4,
        "un-permuted q rows"
    );
    assert_eq!(
        rows(&w.layers[0].wk.t().to_owned()),
        k4,
        "un-permuted k rows"
    );
    assert_eq!(rows(&w.embed), e4);

    let model = PlainLlama::new(cfg, w).unwrap();
    for p in ["p1", "p2"] {
        let ids = r.ids(&format!("{p}.input_ids"));
        let logits = model.forward(&ids).unwrap();
        let (_, want) = r.floats(&format!("{p}.logits"));
        let err = max_abs_diff(logits.iter(), &want);
        println!("{p}: max |logit err| {err:.2e}");
        assert!(err <= 1e-3, "{p}: logits off by {err}");
        let greedy = model.generate_greedy(&ids, 10).unwrap();
        assert_eq!(greedy, r.ids(&format!("{p}.greedy_new_ids")), "{p}");
    }
}
