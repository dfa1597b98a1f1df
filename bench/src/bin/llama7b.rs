//! LLaMA-7B at its full shape, whole: 32 layers, width 4096, 32 heads of 128, MLP 11008
//! (SwiGLU), vocabulary 32000, RMSNorm, RoPE, an untied head; seeded random weights; 8
//! prompt tokens → 1 generated token; three parties in one process.
//!
//! `cargo run --release -p puma-bench --features jemalloc --bin llama7b [-- --layers L --width-div S]`
//!
//! The model never exists whole, in plaintext or in shares: the owner draws each tensor
//! from the seed when its segment (the input, one block, the output) is shared, just
//! before the parties need it, and every party drops a segment's shares once it has run
//! (`puma_layers::nn::streamed`). Prints the wall time of the model sharing and of the
//! inference apart, the inference's bytes per party and in total (as PUMA counts them:
//! model sharing excluded) and rounds, the sharing's bytes and rounds, and the process's
//! peak resident memory. `--layers` and `--width-div` run smaller shapes (the same per-layer
//! costs as `llama_cost`'s measured runs).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use puma_core::{Config, PartyId};
use puma_layers::llama::LlamaConfig;
use puma_layers::nn::{
    DecoderArch, Observer, Progress, SecureSettings, SeededDecoder, StreamedStep, argmax_lowest,
    prompt_step_streamed,
};
use puma_runner::resources::peak_rss;

/// With `--features jemalloc`: blocks freed after one layer are reused for the next instead
/// of being returned to the system and faulted back in, page by page (Cargo.toml of this
/// crate, .cargo/config.toml).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const CLIENT: PartyId = PartyId::P0;
const OWNER: PartyId = PartyId::P1;
/// PUMA's LLaMA-7B figure (Dong et al. 2023, Table 5): inference bytes, 8 tokens → 1.
const PUMA_BYTES: f64 = 1.794e9;

/// LLaMA-7B's shape with seeded random weights, 8 prompt tokens → 1 token, whole and
/// streamed: sharing and inference times, bytes, rounds, peak memory.
#[derive(Debug, Parser)]
#[command(name = "llama7b", version)]
struct Args {
    /// Blocks to run (32 is LLaMA-7B).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=32))]
    layers: u64,
    /// Divide the width, the MLP and the head count by this (1 is LLaMA-7B; heads stay
    /// 128 wide).
    #[arg(long, default_value = "1", value_parser = ["1", "2", "4", "8", "16", "32"])]
    width_div: String,
    /// Seed of the weights.
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    // Bounded by clap.
    let layers = usize::try_from(args.layers).map_err(|e| e.to_string())?;
    let div: usize = args.width_div.parse().map_err(|_| "bad --width-div")?;
    let cfg = LlamaConfig {
        vocab_size: 32000,
        hidden_size: 4096 / div,
        intermediate_size: 11008 / div,
        num_hidden_layers: layers,
        num_attention_heads: 32 / div,
        num_key_value_heads: 32 / div,
        head_dim: 128,
        rms_norm_eps: 1e-6,
        rope_theta: 10000.0,
        max_position_embeddings: 2048,
        tie_word_embeddings: false,
    };
    let spec = cfg.spec().map_err(|e| e.to_string())?;
    let params = spec.parameters().map_err(|e| e.to_string())?;
    println!(
        "LLaMA-7B shape: {layers} layers, width {}, {} heads of 128, MLP {}, vocabulary 32000, \
         untied head; {:.2} B parameters (seeded random weights, std 0.02); 8 tokens -> 1",
        cfg.hidden_size,
        cfg.num_attention_heads,
        cfg.intermediate_size,
        params as f64 / 1e9
    );
    let arch = Arc::new(SeededDecoder::new(spec, args.seed, 0.02).map_err(|e| e.to_string())?);
    let prompt: Vec<u32> = (0..8).map(|t| 1000 + 37 * t).collect();
    let bar = ProgressBar::new(layers as u64);
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:40}] block {pos}/{len}")
            .map_err(|e| e.to_string())?,
    );
    let observer: Observer = {
        let bar = bar.clone();
        Arc::new(move |ev: Progress| {
            if let Progress::Layer { layer, .. } = ev {
                bar.set_position(layer as u64 + 1);
            }
        })
    };
    let start = Instant::now();
    // A party waits while the owner draws and encodes a whole block (hundreds of millions
    // of weights): a generous idle timeout.
    let timeout = Duration::from_secs(900);
    let out = puma_transports::mem::run3_shaped(Config::new(7), 11, timeout, None, |me| {
        let (arch, prompt) = (arch.clone(), prompt.clone());
        let observer = (me == CLIENT).then(|| observer.clone());
        move |mut ctx| async move {
            prompt_step_streamed(
                &mut ctx,
                OWNER,
                &*arch,
                (me == OWNER).then_some(&()),
                CLIENT,
                (me == CLIENT).then_some(&prompt[..]),
                prompt.len(),
                &SecureSettings::default(),
                observer.as_ref(),
            )
            .await
        }
    });
    bar.finish_and_clear();
    let wall = start.elapsed();
    let mut steps: Vec<StreamedStep> = Vec::with_capacity(3);
    for (i, r) in out.results.into_iter().enumerate() {
        steps.push(r.map_err(|e| format!("party P{i} failed: {e}"))?);
    }
    let client = steps.first().ok_or("no client result")?;
    let logits = client.logits.as_ref().ok_or("the client got no logits")?;
    println!(
        "next token (argmax of the revealed logits): {}",
        argmax_lowest(logits)
    );
    println!(
        "wall time {:.1} s: model sharing {:.1} s, inference {:.1} s (the client's clock)",
        wall.as_secs_f64(),
        client.share_time.as_secs_f64(),
        client.inference_time.as_secs_f64()
    );
    let infer: Vec<u64> = steps.iter().map(|s| s.inference_bytes).collect();
    let total: u64 = infer.iter().sum();
    println!(
        "inference bytes per party: {}; total {:.3} GB (PUMA: {:.3} GB); rounds {}",
        infer
            .iter()
            .enumerate()
            .map(|(i, b)| format!("P{i} {:.1} MB", *b as f64 / 1e6))
            .collect::<Vec<_>>()
            .join(", "),
        total as f64 / 1e9,
        PUMA_BYTES / 1e9,
        client.inference_rounds
    );
    let shared: u64 = steps.iter().map(|s| s.share_bytes).sum();
    println!(
        "model sharing: {:.2} GB from the owner, {} rounds (one per 8 MiB chunk of each segment)",
        shared as f64 / 1e9,
        client.share_rounds
    );
    println!("client's inference bytes by layer kind:");
    for (k, b, e) in &client.costs.entries {
        println!("  {k:<18} {:>10.2} MB  {e:>5} epochs", *b as f64 / 1e6);
    }
    if let Some(p) = peak_rss() {
        println!(
            "peak resident memory of the process (3 parties): {:.2} GiB",
            p as f64 / (1u64 << 30) as f64
        );
    }
    Ok(())
}
