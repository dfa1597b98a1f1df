//! Decoding figures on the Shakespeare GPT-2 and the four fixture prompts: batching (the
//! prompts one after another against one batch of four) and speculative verification
//! (greedy with and without drafts), in rounds, bytes and time per generated token.
//!
//! `cargo run --release -p puma-bench --bin decoding [-- --tokens N --wan]`: `--lan` or
//! `--wan` puts a simulated network between the parties (`puma_transports::mem::Shape`),
//! so that time per token shows what rounds cost. `--draft-corpus FILE` drafts from a
//! public corpus (`scripts/fetch-shakespeare.sh`) instead of by prompt lookup;
//! `--speculation-only` skips the batching table.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use puma_layers::Tokenizer;
use puma_layers::nn::{Drafter, OutputMode};
use puma_runner::decoding_flags::load_corpus;
use puma_runner::gpt2::{
    DEFAULT_MODEL_DIR, Gpt2Report, LoadedModel, RunOptions, load_model, run_secure_batch,
};
use puma_runner::network_flags::NetworkFlags;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../layers/tests/fixtures/gpt2-shakespeare/reference.safetensors"
);

/// Batching and speculative verification on the Shakespeare GPT-2 (fixture prompts).
#[derive(Debug, Parser)]
#[command(name = "decoding", version)]
struct Args {
    /// Tokens to generate after each prompt.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=200))]
    tokens: u64,
    /// Drafts per step with speculation.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=16))]
    drafts: u64,
    /// Draft from this public text (the model's tokenizer splits it) instead of by
    /// prompt lookup.
    #[arg(long, value_name = "FILE")]
    draft_corpus: Option<PathBuf>,
    /// Only the speculative verification table.
    #[arg(long)]
    speculation_only: bool,
    /// The simulated network, if any.
    #[command(flatten)]
    network: NetworkFlags,
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

/// The fixture prompts' ids.
fn prompts() -> Result<Vec<Vec<u32>>, String> {
    let bytes = std::fs::read(FIXTURE).map_err(|e| format!("{FIXTURE}: {e}"))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| e.to_string())?;
    ["p1", "p2", "p3", "p4"]
        .iter()
        .map(|p| {
            let t = st
                .tensor(&format!("{p}.input_ids"))
                .map_err(|e| e.to_string())?;
            Ok(t.data()
                .chunks_exact(8)
                .map(|c| {
                    let mut w = [0u8; 8];
                    w.copy_from_slice(c);
                    i64::from_le_bytes(w) as u32
                })
                .collect())
        })
        .collect()
}

/// The embedded Shakespeare GPT-2, loaded afresh for each run.
fn model() -> Result<LoadedModel, String> {
    load_model(Path::new(DEFAULT_MODEL_DIR)).map_err(|e| e.to_string())
}

/// Generation rounds, bytes per party and time of a report (steps only, no sharing).
fn generation(r: &Gpt2Report) -> (u32, u64, Duration) {
    let steps = &r.costs[0].steps;
    let rounds = steps.iter().map(|&(_, e)| e).sum();
    let bytes = r
        .costs
        .iter()
        .map(|c| c.steps.iter().map(|&(b, _)| b).sum::<u64>())
        .max()
        .unwrap_or(0);
    (rounds, bytes, r.step_times.iter().sum())
}

fn run(args: &Args) -> Result<(), String> {
    let prompts = prompts()?;
    let tokens = usize::try_from(args.tokens).map_err(|_| "--tokens is too large")?;
    let network = args.network.shape();
    let net = args.network.describe();
    println!(
        "Shakespeare GPT-2, {} fixture prompts, {tokens} new tokens each, {net}",
        prompts.len()
    );
    let base = RunOptions {
        max_new_tokens: tokens,
        mode: OutputMode::SecureArgmax,
        network,
        ..RunOptions::default()
    };
    if !args.speculation_only {
        batching(&prompts, &base, tokens)?;
    }
    speculation(args, &prompts, &base)
}

/// Each prompt alone, then all four in one batch.
fn batching(prompts: &[Vec<u32>], base: &RunOptions, tokens: usize) -> Result<(), String> {
    println!("\nbatching (secure argmax, greedy)");
    println!(
        "{:<10} {:>8} {:>12} {:>10} {:>12}",
        "run", "rounds", "MB/party", "time", "tokens/s"
    );
    let mut alone = (0u32, 0u64, Duration::ZERO);
    for p in prompts {
        let r = run_secure_batch(model()?, std::slice::from_ref(p), base, None)
            .map_err(|e| e.to_string())?;
        let g = generation(r.first().ok_or("no report")?);
        alone = (alone.0 + g.0, alone.1 + g.1, alone.2 + g.2);
    }
    let batch = run_secure_batch(model()?, prompts, base, None).map_err(|e| e.to_string())?;
    let b = generation(batch.first().ok_or("no report")?);
    let all_tokens = (tokens * prompts.len()) as f64;
    for (name, (rounds, bytes, time)) in [("B = 1 ×4", alone), ("B = 4", b)] {
        println!(
            "{name:<10} {rounds:>8} {:>12.2} {:>9.2}s {:>12.2}",
            bytes as f64 / 1e6,
            time.as_secs_f64(),
            all_tokens / time.as_secs_f64()
        );
    }
    Ok(())
}

/// Greedy with and without drafts, per prompt.
fn speculation(args: &Args, prompts: &[Vec<u32>], base: &RunOptions) -> Result<(), String> {
    let drafts = usize::try_from(args.drafts).map_err(|_| "--drafts is too large")?;
    let (drafter, how) = match &args.draft_corpus {
        Some(path) => {
            let tok = Tokenizer::from_gpt2_dir(Path::new(DEFAULT_MODEL_DIR))
                .map_err(|e| e.to_string())?;
            let corpus = load_corpus(path, &tok)?;
            let how = format!("corpus ({} tokens)", corpus.len());
            (Drafter::Corpus(Arc::new(corpus)), how)
        }
        None => (Drafter::PromptLookup, "prompt-lookup".to_owned()),
    };
    println!("\nspeculative verification ({drafts} {how} drafts per step) against greedy");
    println!(
        "{:<6} {:>14} {:>14} {:>8} {:>14} {:>14} {:>10}",
        "prompt", "rounds/token", "with drafts", "steps", "s/token", "with drafts", "same ids"
    );
    let spec = RunOptions {
        drafts,
        drafter,
        ..base.clone()
    };
    let (mut all_g, mut all_s, mut all_n) = (0u32, 0u32, 0usize);
    for (i, p) in prompts.iter().enumerate() {
        let one = std::slice::from_ref(p);
        let g = run_secure_batch(model()?, one, base, None).map_err(|e| e.to_string())?;
        let s = run_secure_batch(model()?, one, &spec, None).map_err(|e| e.to_string())?;
        let (g, s) = (g.first().ok_or("no report")?, s.first().ok_or("no report")?);
        let (gr, _, gt) = generation(g);
        let (sr, _, st) = generation(s);
        let n = g.secure_ids.len().max(1) as f64;
        println!(
            "p{:<5} {:>14.1} {:>14.1} {:>8} {:>14.3} {:>14.3} {:>10}",
            i + 1,
            f64::from(gr) / n,
            f64::from(sr) / n,
            s.costs[0].steps.len(),
            gt.as_secs_f64() / n,
            st.as_secs_f64() / n,
            g.secure_ids == s.secure_ids
        );
        (all_g, all_s, all_n) = (all_g + gr, all_s + sr, all_n + g.secure_ids.len());
    }
    let n = all_n.max(1) as f64;
    println!(
        "all    {:>14.1} {:>14.1}   ({:.2}x fewer rounds per generated token)",
        f64::from(all_g) / n,
        f64::from(all_s) / n,
        f64::from(all_g) / f64::from(all_s.max(1))
    );
    Ok(())
}
