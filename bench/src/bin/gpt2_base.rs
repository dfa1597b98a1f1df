//! GPT-2 base-shaped benchmark: 12 layers, width 768, 12 heads, vocabulary 50257, seeded
//! random weights (GPT-2's initialisation scale), 32 prompt tokens → 1 new token (and
//! optionally more, to measure the KV cache), three parties in one process.
//!
//! `cargo run --release -p puma-bench --bin gpt2_base [-- --new-tokens N --layers L --lan]`
//! prints wall time, bytes per party, rounds, the per-step costs and the peak resident
//! memory of the process (all three parties together). `--lan` puts a simulated 5 Gbit/s,
//! 1 ms round-trip network between the parties (`puma_transports::mem::Shape::LAN`),
//! `--wan` a 1 Gbit/s, 20 ms round-trip one (`Shape::WAN`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use puma_core::{Config, PartyId};
use puma_layers::nn::{
    Decoding, Observer, OutputMode, Progress, SecureSettings, SharedDecoder, generate,
};
use puma_runner::network_flags::NetworkFlags;
use puma_runner::random_gpt2::{GPT2_BASE, random_gpt2};
use puma_runner::resources::{CpuTime, peak_rss, process_cpu, thread_cpu};

/// GPT-2 base shape (seeded random weights), 32 prompt tokens → N new tokens, three
/// parties in one process: wall time, bytes per party, rounds, per-step costs, peak memory.
#[derive(Debug, Parser)]
#[command(name = "gpt2_base", version)]
struct Args {
    /// Tokens to generate after the 32-token prompt (at most 64: each cached step is a
    /// whole secure step of the 12 blocks).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    new_tokens: u64,
    /// GPT-2 base blocks to keep (12 is the whole model, and the most).
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u64).range(1..=12))]
    layers: u64,
    /// The simulated network, if any.
    #[command(flatten)]
    network: NetworkFlags,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Both are bounded by clap (≤ 64 and ≤ 12).
    let new_tokens = usize::try_from(args.new_tokens).unwrap_or(1);
    let layers = usize::try_from(args.layers).unwrap_or(12);
    let shape = args.network.shape();
    let t0 = Instant::now();
    let cpu0 = process_cpu();
    let model = Arc::new(random_gpt2(GPT2_BASE, layers));
    println!(
        "GPT-2 base shape: {layers} layers, width 768, 12 heads, vocabulary 50257; random weights built in {:.1} s{}",
        t0.elapsed().as_secs_f64(),
        cpu_note(process_cpu().zip(cpu0).map(|(b, a)| b.since(a)))
    );
    let prompt: Vec<u32> = (0..32u32).map(|i| (i * 1543 + 17) % 50257).collect();
    let settings = SecureSettings::default();
    let start = Instant::now();
    let timeout = std::time::Duration::from_secs(600);
    // When each generation step ended at the client, in seconds since its generation began.
    let step_ends: Arc<std::sync::Mutex<Vec<f64>>> = Arc::default();
    let out = puma_transports::mem::run3_shaped(Config::new(7), 11, timeout, shape, |me| {
        let model = model.clone();
        let prompt = prompt.clone();
        let step_ends = step_ends.clone();
        move |mut ctx| async move {
            let (cfg, w) = &*model;
            let t = Instant::now();
            let cpu = thread_cpu();
            let m =
                SharedDecoder::share(&mut ctx, PartyId::P1, cfg, (me == PartyId::P1).then_some(w))
                    .await?;
            let share_secs = t.elapsed().as_secs_f64();
            let share_bytes = ctx.meter().payload_bytes_sent;
            let t = Instant::now();
            let shared_cpu = thread_cpu();
            let share_cpu = shared_cpu.zip(cpu).map(|(b, a)| b.since(a));
            let observer: Option<Observer> = (me == PartyId::P0).then(|| {
                Arc::new(move |ev: Progress| {
                    if let Progress::Step { .. } = ev
                        && let Ok(mut ends) = step_ends.lock()
                    {
                        ends.push(t.elapsed().as_secs_f64());
                    }
                }) as Observer
            });
            let g = generate(
                &mut ctx,
                &m,
                PartyId::P0,
                (me == PartyId::P0).then_some(&prompt[..]),
                prompt.len(),
                &Decoding::new(new_tokens, OutputMode::RevealLogits),
                &settings,
                observer,
                None,
            )
            .await?;
            let infer_cpu = thread_cpu().zip(shared_cpu).map(|(b, a)| b.since(a));
            let secs = t.elapsed().as_secs_f64();
            Ok((g, (share_secs, share_cpu), share_bytes, (secs, infer_cpu)))
        }
    });
    let secs = start.elapsed().as_secs_f64();
    let mut ok = true;
    for (i, r) in out.results.iter().enumerate() {
        match r {
            Ok((g, (share_secs, share_cpu), share_bytes, (infer_secs, infer_cpu))) => {
                let s = &out.stats[i];
                println!(
                    "P{i}: sent {:.1} MB payload ({:.1} MB sharing the model in {share_secs:.1} s{}; generation {infer_secs:.2} s{}); steps (bytes, epochs): {:?}",
                    s.payload_bytes_total() as f64 / 1e6,
                    *share_bytes as f64 / 1e6,
                    cpu_note(*share_cpu),
                    cpu_note(*infer_cpu),
                    g.step_costs
                );
                if i == 0 {
                    println!("client got ids {:?}", g.ids);
                    for (k, b, e) in &g.costs.entries {
                        println!("  {k:<18} {:>10.2} MB  {e:>5} epochs", *b as f64 / 1e6);
                    }
                }
            }
            Err(e) => {
                eprintln!("P{i} failed: {e}");
                ok = false;
            }
        }
    }
    if let Ok(ends) = step_ends.lock() {
        let steps: Vec<String> = ends
            .iter()
            .scan(0.0, |prev, &end| {
                let d = end - *prev;
                *prev = end;
                Some(format!("{d:.2} s"))
            })
            .collect();
        println!(
            "client's step times (prompt step first): {}",
            steps.join(", ")
        );
    }
    let rounds = out.stats.iter().map(|s| s.rounds).max().unwrap_or(0);
    let total: u64 = out.stats.iter().map(|s| s.payload_bytes_total()).sum();
    println!(
        "wall time {secs:.1} s (three parties, one process); rounds {rounds}; total payload {:.1} MB",
        total as f64 / 1e6
    );
    if let Some(p) = peak_rss() {
        println!(
            "peak resident memory of the process (3 parties): {:.2} GB",
            p as f64 / 1e9
        );
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// ", CPU u s user + y s system" for a span's CPU time, if it could be read.
fn cpu_note(cpu: Option<CpuTime>) -> String {
    cpu.map(|c| format!(", CPU {:.2} s user + {:.2} s system", c.user, c.system))
        .unwrap_or_default()
}
