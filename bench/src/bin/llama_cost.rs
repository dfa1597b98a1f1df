//! Communication of secure LLaMA-7B-shaped inference (8 prompt tokens → 1 generated token),
//! from measured runs of scaled-down shapes.
//!
//! ```sh
//! cargo run --release -p puma-bench --bin llama_cost
//! ```
//!
//! LLaMA-7B: 32 layers, width 4096, 32 heads of 128 (no GQA), MLP 11008, vocabulary 32000.
//! Sharing a 7B model (56 GB of shares per party) does not fit this machine, so the binary
//! runs the real secure generation (seeded random weights; costs do not depend on the
//! values) on models of 1 and 2 layers at width 4096·s, MLP 11008·s, 32·s heads of 128, full
//! vocabulary, for s = 1/16, 1/8, 1/4. Per-layer bytes = B(2 layers) − B(1 layer); the rest
//! (input, embedding, final norm, LM head, output) = B(1 layer) − per-layer. Every activation
//! tensor of a layer has a width proportional to s at a fixed number of rows and head width,
//! so both are affine in s: fitted on s = 1/8 and 1/4, checked against s = 1/16, and
//! extrapolated to s = 1. Rounds do not depend on s (checked) and are scaled by the layer
//! count. Model sharing is excluded (one-time, 8 bytes per parameter from the owner).

use std::process::ExitCode;

use clap::Parser;
use ndarray::{Array1, Array2};
use puma_layers::llama::{LlamaConfig, LlamaLayer, LlamaWeights};
use puma_layers::nn::{DecoderArch, LayerCosts};
use puma_layers::nn::{SecureSettings, SiluApprox};
use puma_runner::llama::{LoadedLlama, RunOptions, run_secure};

/// A deterministic generator of small weights (xorshift64*, uniform in ±√3·std).
struct Weights(u64);

impl Weights {
    fn next(&mut self, std: f64) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let u = (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64;
        (2.0 * u - 1.0) * 3f64.sqrt() * std
    }

    fn matrix(&mut self, r: usize, c: usize, std: f64) -> Array2<f64> {
        Array2::from_shape_simple_fn((r, c), || self.next(std))
    }
}

fn config(s_div: usize, layers: usize) -> LlamaConfig {
    LlamaConfig {
        vocab_size: 32000,
        hidden_size: 4096 / s_div,
        intermediate_size: 11008 / s_div,
        num_hidden_layers: layers,
        num_attention_heads: 32 / s_div,
        num_key_value_heads: 32 / s_div,
        head_dim: 128,
        rms_norm_eps: 1e-6,
        rope_theta: 10000.0,
        max_position_embeddings: 2048,
        tie_word_embeddings: false,
    }
}

fn model(cfg: &LlamaConfig) -> LlamaWeights {
    let mut g = Weights(0x9E37_79B9_7F4A_7C15);
    let (d, i, v) = (cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size);
    let layers = (0..cfg.num_hidden_layers)
        .map(|_| LlamaLayer {
            attn_norm: Array1::ones(d),
            wq: g.matrix(d, d, 0.02),
            wk: g.matrix(d, d, 0.02),
            wv: g.matrix(d, d, 0.02),
            wo: g.matrix(d, d, 0.02),
            mlp_norm: Array1::ones(d),
            w_gate: g.matrix(d, i, 0.02),
            w_up: g.matrix(d, i, 0.02),
            w_down: g.matrix(i, d, 0.02),
        })
        .collect();
    LlamaWeights {
        embed: g.matrix(v, d, 0.02),
        layers,
        norm: Array1::ones(d),
        lm_head: Some(g.matrix(v, d, 0.02)),
    }
}

/// Inference payload bytes summed over the three parties, rounds, and the client's bytes by
/// layer kind.
fn measure(
    s_div: usize,
    layers: usize,
    silu: SiluApprox,
) -> Result<(f64, u32, LayerCosts), String> {
    let cfg = config(s_div, layers);
    let weights = model(&cfg);
    let loaded = LoadedLlama {
        path: "random".into(),
        config: cfg,
        weights,
    };
    let prompt: Vec<u32> = (0..8).map(|t| 1000 + 37 * t).collect();
    let opts = RunOptions {
        max_new_tokens: 1,
        settings: SecureSettings {
            silu,
            ..SecureSettings::default()
        },
        ..RunOptions::default()
    };
    let share_rounds = loaded
        .config
        .spec()
        .and_then(|s| s.share_rounds())
        .map_err(|e| e.to_string())?;
    let r = run_secure(loaded, &[prompt], &opts, None).map_err(|e| e.to_string())?;
    let total: u64 = r.stats.iter().map(|s| s.payload_bytes_total()).sum();
    let bytes = (total - r.share_bytes) as f64;
    // The model's streamed sharing takes one round per chunk.
    let rounds = r
        .rounds()
        .saturating_sub(u32::try_from(share_rounds).unwrap_or(u32::MAX));
    println!(
        "  s = 1/{s_div:<2} layers {layers}: {:>10.2} MB, {rounds} rounds ({:.1} s)",
        bytes / 1e6,
        r.elapsed.as_secs_f64()
    );
    Ok((bytes, rounds, r.layer_costs))
}

/// Communication of secure LLaMA-7B-shaped inference (8 tokens → 1), measured on 1- and
/// 2-layer models at widths 4096/16, 4096/8 and 4096/4 and extrapolated to the full shape.
/// Takes several minutes in a release build.
#[derive(Debug, Parser)]
#[command(name = "llama_cost", version)]
struct Args {}

fn main() -> ExitCode {
    let Args {} = Args::parse();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    for (silu, name) in [
        (SiluApprox::Precise, "precise SiLU (default)"),
        (SiluApprox::Piecewise, "PUMA's piecewise SiLU"),
    ] {
        println!("\n== {name} ==");
        estimate(silu)?;
    }
    Ok(())
}

fn estimate(silu: SiluApprox) -> Result<(), String> {
    println!(
        "measured secure runs, 8 tokens -> 1, reveal-logits, inference bytes of all 3 parties:"
    );
    let mut per_layer = Vec::new();
    let mut rest = Vec::new();
    let mut kinds = Vec::new();
    for s_div in [16usize, 8, 4] {
        let (b1, r1, k1) = measure(s_div, 1, silu)?;
        let (b2, r2, k2) = measure(s_div, 2, silu)?;
        per_layer.push((1.0 / s_div as f64, b2 - b1, r2 - r1));
        rest.push((1.0 / s_div as f64, 2.0 * b1 - b2, 2 * r1 - r2));
        kinds = k2
            .entries
            .iter()
            .map(|(k, b, _)| {
                let one = k1.entries.iter().find(|e| e.0 == *k).map_or(0, |e| e.1);
                (*k, b.saturating_sub(one))
            })
            .collect::<Vec<_>>();
    }
    println!("client bytes of one layer at s = 1/4, by kind:");
    for (k, b) in &kinds {
        if *b > 0 {
            println!("  {k:18} {:>9.3} MB", *b as f64 / 1e6);
        }
    }
    let fit = |pts: &[(f64, f64, u32)]| -> (f64, f64) {
        let (s1, y1, _) = pts[1];
        let (s2, y2, _) = pts[2];
        let beta = (y2 - y1) / (s2 - s1);
        (y1 - beta * s1, beta)
    };
    let (a, b) = fit(&per_layer);
    let (ra, rb) = fit(&rest);
    let (s0, y0, _) = per_layer[0];
    let (_, z0, _) = rest[0];
    println!(
        "per layer: {:.3} MB at s = 1/16 measured vs {:.3} MB predicted by the fit ({:+.2} %)",
        y0 / 1e6,
        (a + b * s0) / 1e6,
        100.0 * ((a + b * s0) / y0 - 1.0)
    );
    println!(
        "rest:      {:.3} MB at s = 1/16 measured vs {:.3} MB predicted ({:+.2} %)",
        z0 / 1e6,
        (ra + rb * s0) / 1e6,
        100.0 * ((ra + rb * s0) / z0 - 1.0)
    );
    let layer_rounds: Vec<u32> = per_layer.iter().map(|p| p.2).collect();
    let rest_rounds: Vec<u32> = rest.iter().map(|p| p.2).collect();
    println!("rounds per layer at s = 1/16, 1/8, 1/4: {layer_rounds:?}; rest: {rest_rounds:?}");
    let layer_7b = a + b;
    let rest_7b = ra + rb;
    let total = 32.0 * layer_7b + rest_7b;
    let rounds =
        32 * layer_rounds.last().copied().unwrap_or(0) + rest_rounds.last().copied().unwrap_or(0);
    println!(
        "LLaMA-7B shape (extrapolated to s = 1): per layer {:.1} MB, rest {:.1} MB, total {:.3} GB, {rounds} rounds (PUMA: 1.794 GB)",
        layer_7b / 1e6,
        rest_7b / 1e6,
        total / 1e9
    );
    Ok(())
}
