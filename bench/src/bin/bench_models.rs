//! Secure inference benchmark on the shapes of PUMA's tables, seeded random weights, three
//! parties in one process over the in-memory transport:
//!
//! - GPT-2 base, medium and large (`base`, `medium`, `large`): 32 prompt tokens → 1
//!   generated token, the next token's logits revealed to the client;
//! - Bert-Base and Bert-Large (`bert-base`, `bert-large`): one sequence of 128 tokens, the
//!   mean-pooled, normalised sentence embedding revealed to the client (as the `bert`
//!   binary's `--synthetic` runs do).
//!
//! `cargo run --release -p puma-bench --bin bench_models -- [--models
//! base,medium,large,bert-base,bert-large] [--whole | --scaled] [--json]`
//!
//! The default is all five: 2 min 54 s on 2 cores at load average 7–8 from other jobs (23
//! November), of which the two BERT shapes take about 100 s.
//!
//! A configuration is either run whole (all layers; the default for GPT-2 base and Bert-Base,
//! the shapes that fit in 24 GiB as three parties in one process) or
//! measured with 1 and P layers (P = 3 for GPT-2, 2 for BERT) and scaled by the layer
//! count: `f(L) = f(1) + (L − 1)·(f(P) − f(1))/(P − 1)` for time, bytes, rounds, peak
//! memory and every breakdown entry (floored at the larger measured value, so that noisy
//! times cannot scale below it). Each output says which (`method`, and in JSON
//! `scaled` and `estimated`, the fields that are estimates). Bytes and rounds are exact
//! either way (every layer costs the same); scaled times and memory are estimates. GPT-2
//! medium and large do not fit whole as three parties in one 24 GiB process; Bert-Large's
//! estimated peak (14–18 GB in two scaled runs) leaves no margin on such a machine.
//! Bert-Base also runs scaled with `--scaled` (the same bytes and rounds, peak RSS 5.79–5.84
//! GB against 5.76 GB whole, in about a third of the time).
//! Every measured run is a fresh child process (this binary with `--single NAME LAYERS`), so
//! that its peak resident set is its own.
//!
//! Per configuration: inference wall time (last party shared the model → last party done),
//! model sharing time, CPU seconds of the three party threads, payload bytes per party and
//! in total (model sharing excluded, shown apart), rounds, peak RSS of the process and the
//! RSS before the parties start, and bytes (three parties) and epochs (P0) per layer kind.
//! `--json` prints one object per configuration.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use puma_core::{Config, PartyId};
use puma_layers::bert::BertBatch;
use puma_layers::bert::secure::{self as bert_secure, BatchShape, BertHeads, SharedBert};
use puma_layers::nn::{Decoding, LayerCosts, OutputMode, SecureSettings, SharedDecoder, generate};
use puma_runner::bert::{BERT_BASE, BERT_LARGE, BertShape, synthetic_ids, synthetic_model};
use puma_runner::random_gpt2::{GPT2_BASE, GPT2_LARGE, GPT2_MEDIUM, Gpt2Shape, random_gpt2};
use puma_runner::resources::peak_rss;
use serde_json::json;

/// Prompt tokens, as in PUMA's GPT-2 table.
const PROMPT: usize = 32;

/// Tokens of the one BERT sequence, as in PUMA's BERT table.
const BERT_TOKENS: usize = 128;

/// The layer kinds of GPT-2's breakdown, in display order.
const GPT2_KINDS: [&str; 8] = [
    "input",
    "embedding",
    "layernorm",
    "linear",
    "softmax",
    "gelu",
    "lm head",
    "output",
];

/// The layer kinds of BERT's breakdown (those `puma_layers::bert::secure::run` reports),
/// in display order.
const BERT_KINDS: [&str; 9] = [
    "input",
    "embedding",
    "layernorm",
    "linear",
    "softmax",
    "gelu",
    "pooler and classifier",
    "mean pooling",
    "output",
];

/// A configuration of the suite: a GPT-2 shape (32 → 1 tokens) or a BERT shape (one
/// sequence of 128 tokens, sentence embedding revealed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Model {
    Gpt2(Gpt2Shape),
    Bert(BertShape),
}

impl Model {
    /// Every configuration, in the suite's order.
    const ALL: [Model; 5] = [
        Model::Gpt2(GPT2_BASE),
        Model::Gpt2(GPT2_MEDIUM),
        Model::Gpt2(GPT2_LARGE),
        Model::Bert(BERT_BASE),
        Model::Bert(BERT_LARGE),
    ];

    /// The name `--models` takes.
    fn arg(self) -> &'static str {
        match self {
            Model::Gpt2(s) => s.name.trim_start_matches("gpt2-"),
            Model::Bert(s) => s.name,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Model::Gpt2(s) => s.name,
            Model::Bert(s) => s.name,
        }
    }

    fn layers(self) -> usize {
        match self {
            Model::Gpt2(s) => s.layers,
            Model::Bert(s) => s.layers,
        }
    }

    fn width(self) -> usize {
        match self {
            Model::Gpt2(s) => s.width,
            Model::Bert(s) => s.width,
        }
    }

    fn heads(self) -> usize {
        match self {
            Model::Gpt2(s) => s.heads,
            Model::Bert(s) => s.heads,
        }
    }

    fn kinds(self) -> &'static [&'static str] {
        match self {
            Model::Gpt2(_) => &GPT2_KINDS,
            Model::Bert(_) => &BERT_KINDS,
        }
    }

    /// Tokens in and out.
    fn tokens(self) -> (usize, usize) {
        match self {
            Model::Gpt2(_) => (PROMPT, 1),
            Model::Bert(_) => (BERT_TOKENS, 0),
        }
    }

    /// Whether the whole model is run by default: the shapes that fit in 24 GiB as three
    /// parties in one process, GPT-2 base (6.2 GB peak) and Bert-Base (5.8 GB). GPT-2
    /// medium's weights alone are ~17 GB as three parties' shares, large's more;
    /// Bert-Large's estimated peak (14–18 GB) leaves no margin.
    fn whole_by_default(self) -> bool {
        matches!(self, Model::Gpt2(GPT2_BASE) | Model::Bert(BERT_BASE))
    }

    /// The larger layer count measured for scaling (the smaller is 1).
    fn probe(self) -> usize {
        match self {
            Model::Gpt2(_) => 3,
            Model::Bert(_) => 2,
        }
    }

    /// Runs the first `layers` layers.
    fn run(self, layers: usize) -> Result<Figures, String> {
        match self {
            Model::Gpt2(s) => run(s, layers),
            Model::Bert(s) => run_bert(s, layers),
        }
    }
}

/// Figures of one run (or one scaled combination of runs).
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Figures {
    /// Wall time of the whole run3 call (sharing + inference), seconds.
    wall_secs: f64,
    /// Longest model-sharing time over the parties, seconds.
    share_secs: f64,
    /// Inference time: from the moment the last party finished sharing the model to the
    /// moment the last party finished inference, seconds.
    infer_secs: f64,
    /// CPU seconds of the three party threads during inference (summed; load-independent,
    /// unlike wall time on a shared machine).
    infer_cpu_secs: f64,
    /// CPU seconds of the three party threads while sharing the model (summed).
    share_cpu_secs: f64,
    /// Payload bytes each party sent during inference (model sharing excluded).
    infer_bytes: [f64; 3],
    /// Payload bytes each party sent while sharing the model.
    share_bytes: [f64; 3],
    /// Critical-path rounds of the inference (prompt step, all parties' max epochs).
    infer_rounds: f64,
    /// Rounds of the whole session (setup and sharing included).
    session_rounds: f64,
    /// Peak resident set of the process (three parties plus the owner's plaintext model).
    peak_rss: f64,
    /// Resident set after building the plaintext model, before the parties start.
    baseline_rss: f64,
    /// Bytes (summed over the parties) and epochs (P0) per layer kind.
    breakdown: Vec<(f64, f64)>,
}

/// What one party's thread reports from a run.
struct PartyRun {
    /// Payload bytes and epochs per layer kind during inference.
    costs: LayerCosts,
    /// Time spent sharing the model, seconds.
    share_secs: f64,
    /// Payload bytes sent while sharing the model.
    share_bytes: u64,
    /// When the model sharing ended.
    shared_at: Instant,
    /// When the inference ended.
    done_at: Instant,
    /// CPU seconds of the thread (sharing, inference).
    cpu: (f64, f64),
    /// Epochs of the inference.
    epochs: u32,
}

impl Figures {
    /// The figures of a run that started at `start` (the process's resident set then was
    /// `baseline_rss`), from the parties' reports; bytes and epochs are broken down by
    /// `kinds`, which must name every kind a party reports.
    fn collect(
        start: Instant,
        baseline_rss: f64,
        out: &puma_transports::mem::Outcome<PartyRun>,
        kinds: &[&str],
    ) -> Result<Figures, String> {
        let mut fig = Figures {
            wall_secs: start.elapsed().as_secs_f64(),
            baseline_rss,
            peak_rss: peak_rss().unwrap_or(0) as f64,
            session_rounds: f64::from(out.rounds()),
            breakdown: vec![(0.0, 0.0); kinds.len()],
            ..Figures::default()
        };
        let (mut all_shared, mut all_done) = (start, start);
        for (i, r) in out.results.iter().enumerate() {
            let r = r.as_ref().map_err(|e| format!("P{i} failed: {e}"))?;
            fig.share_cpu_secs += r.cpu.0;
            fig.infer_cpu_secs += r.cpu.1;
            fig.share_secs = fig.share_secs.max(r.share_secs);
            all_shared = all_shared.max(r.shared_at);
            all_done = all_done.max(r.done_at);
            fig.share_bytes[i] = r.share_bytes as f64;
            fig.infer_bytes[i] = (out.stats[i].payload_bytes_total() - r.share_bytes) as f64;
            fig.infer_rounds = fig.infer_rounds.max(f64::from(r.epochs));
            for (kind, bytes, epochs) in &r.costs.entries {
                let Some(k) = kinds.iter().position(|k| *k == kind.name()) else {
                    return Err(format!("unknown layer kind {kind:?}"));
                };
                fig.breakdown[k].0 += *bytes as f64;
                if i == 0 {
                    fig.breakdown[k].1 += f64::from(*epochs);
                }
            }
        }
        fig.infer_secs = all_done.duration_since(all_shared).as_secs_f64();
        Ok(fig)
    }

    /// `self + t·(other − self)` (t ≥ 1), entry by entry, floored at the larger of the two
    /// measured values: a model with more layers never costs less, but two wall times (or
    /// peak RSS) measured on a loaded machine can come out in the wrong order, and their
    /// difference scaled by `t` would then go below both (even negative). Bytes and rounds
    /// grow with the layers, so the floor never changes them.
    fn extrapolate(&self, other: &Figures, t: f64) -> Figures {
        let f = |a: f64, b: f64| (a + t * (b - a)).max(a).max(b);
        let f3 = |a: [f64; 3], b: [f64; 3]| [f(a[0], b[0]), f(a[1], b[1]), f(a[2], b[2])];
        Figures {
            wall_secs: f(self.wall_secs, other.wall_secs),
            share_secs: f(self.share_secs, other.share_secs),
            infer_secs: f(self.infer_secs, other.infer_secs),
            infer_cpu_secs: f(self.infer_cpu_secs, other.infer_cpu_secs),
            share_cpu_secs: f(self.share_cpu_secs, other.share_cpu_secs),
            infer_bytes: f3(self.infer_bytes, other.infer_bytes),
            share_bytes: f3(self.share_bytes, other.share_bytes),
            infer_rounds: f(self.infer_rounds, other.infer_rounds),
            session_rounds: f(self.session_rounds, other.session_rounds),
            peak_rss: f(self.peak_rss, other.peak_rss),
            baseline_rss: f(self.baseline_rss, other.baseline_rss),
            breakdown: self
                .breakdown
                .iter()
                .zip(&other.breakdown)
                .map(|(a, b)| (f(a.0, b.0), f(a.1, b.1)))
                .collect(),
        }
    }
}

/// Current resident set of this process in bytes (Linux `VmRSS`), if known.
fn rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// CPU seconds (user + system) of the calling thread so far (Linux), if known.
fn thread_cpu_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    // Linux reports clock ticks of USER_HZ = 100 per second.
    Some((utime + stime) / 100.0)
}

/// Runs `shape` with its first `layers` blocks: P1 owns the model, P0 is the client.
fn run(shape: Gpt2Shape, layers: usize) -> Result<Figures, String> {
    let model = Arc::new(random_gpt2(shape, layers));
    let baseline_rss = rss().unwrap_or(0) as f64;
    let prompt: Vec<u32> = (0..PROMPT as u32)
        .map(|i| (i * 1543 + 17) % 50257)
        .collect();
    let settings = SecureSettings::default();
    let start = Instant::now();
    let out = puma_transports::mem::run3(Config::new(7), 11, |me| {
        let model = model.clone();
        let prompt = prompt.clone();
        move |mut ctx| async move {
            let (cfg, w) = &*model;
            let cpu0 = thread_cpu_secs().unwrap_or(0.0);
            let t = Instant::now();
            let m =
                SharedDecoder::share(&mut ctx, PartyId::P1, cfg, (me == PartyId::P1).then_some(w))
                    .await?;
            let share_secs = t.elapsed().as_secs_f64();
            let share_bytes = ctx.meter().payload_bytes_sent;
            let shared_at = Instant::now();
            let cpu1 = thread_cpu_secs().unwrap_or(0.0);
            let g = generate(
                &mut ctx,
                &m,
                PartyId::P0,
                (me == PartyId::P0).then_some(&prompt[..]),
                PROMPT,
                &Decoding::new(1, OutputMode::RevealLogits),
                &settings,
                None,
                None,
            )
            .await?;
            let cpu = (cpu1 - cpu0, thread_cpu_secs().unwrap_or(0.0) - cpu1);
            Ok(PartyRun {
                epochs: g.step_costs.iter().map(|&(_, e)| e).sum(),
                costs: g.costs,
                share_secs,
                share_bytes,
                shared_at,
                done_at: Instant::now(),
                cpu,
            })
        }
    });
    Figures::collect(start, baseline_rss, &out, &GPT2_KINDS)
}

/// Runs `shape` with its first `layers` layers on one sequence of [`BERT_TOKENS`] tokens,
/// as the `bert` binary does with `--synthetic`: P1 owns the model (seeded random weights
/// with pooler and a 2-label head, both shared but not evaluated), P0 is the client and
/// learns the mean-pooled, normalised sentence embedding; default settings (precise GeLU,
/// minimax softmax exponential).
fn run_bert(shape: BertShape, layers: usize) -> Result<Figures, String> {
    let model = Arc::new(synthetic_model(shape.config(layers), 2, 2024));
    let baseline_rss = rss().unwrap_or(0) as f64;
    let batch = Arc::new(BertBatch::single(&synthetic_ids(BERT_TOKENS)));
    let batch_shape = BatchShape::of(&batch);
    let heads = BertHeads::of(&model.weights);
    let settings = SecureSettings::default();
    let outputs = bert_secure::Outputs {
        embeddings: true,
        ..bert_secure::Outputs::default()
    };
    let start = Instant::now();
    let out = puma_transports::mem::run3(Config::new(7), 11, |me| {
        let (model, batch, batch_shape) = (model.clone(), batch.clone(), batch_shape.clone());
        move |mut ctx| async move {
            let cpu0 = thread_cpu_secs().unwrap_or(0.0);
            let t = Instant::now();
            let w = (me == PartyId::P1).then_some(&model.weights);
            let m = SharedBert::share(&mut ctx, PartyId::P1, &model.config, heads, w).await?;
            let share_secs = t.elapsed().as_secs_f64();
            let shared = ctx.meter();
            let shared_at = Instant::now();
            let cpu1 = thread_cpu_secs().unwrap_or(0.0);
            let input = (me == PartyId::P0).then_some(&*batch);
            let r = bert_secure::run(
                &mut ctx,
                &m,
                PartyId::P0,
                input,
                &batch_shape,
                outputs,
                &settings,
            )
            .await?;
            let cpu = (cpu1 - cpu0, thread_cpu_secs().unwrap_or(0.0) - cpu1);
            let epochs = ctx.meter().epoch - shared.epoch;
            Ok(PartyRun {
                costs: r.costs,
                share_secs,
                share_bytes: shared.payload_bytes_sent,
                shared_at,
                done_at: Instant::now(),
                cpu,
                epochs,
            })
        }
    });
    Figures::collect(start, baseline_rss, &out, &BERT_KINDS)
}

fn report(model: Model, method: &str, scaled: bool, fig: &Figures, as_json: bool) {
    let total_infer: f64 = fig.infer_bytes.iter().sum();
    let per_party_rss = (fig.peak_rss - fig.baseline_rss) / 3.0;
    let (tokens_in, tokens_out) = model.tokens();
    if as_json {
        let breakdown: serde_json::Map<String, serde_json::Value> = model
            .kinds()
            .iter()
            .zip(&fig.breakdown)
            .map(|(k, (b, e))| {
                (
                    k.to_string(),
                    json!({ "bytes": b.round(), "epochs": e.round() }),
                )
            })
            .collect();
        let obj = json!({
            "model": model.name(),
            "layers": model.layers(),
            "width": model.width(),
            "heads": model.heads(),
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "output": match model {
                Model::Gpt2(_) => "logits of the next token",
                Model::Bert(_) => "sentence embedding",
            },
            "method": method,
            "scaled": scaled,
            "estimated": if scaled {
                json!(["seconds", "cpu_seconds", "share_cpu_seconds", "share_seconds",
                       "wall_seconds", "peak_rss_bytes", "baseline_rss_bytes",
                       "peak_rss_per_party_bytes"])
            } else {
                json!([])
            },
            "seconds": fig.infer_secs,
            "cpu_seconds": fig.infer_cpu_secs,
            "share_cpu_seconds": fig.share_cpu_secs,
            "share_seconds": fig.share_secs,
            "wall_seconds": fig.wall_secs,
            "bytes_per_party": fig.infer_bytes.map(f64::round),
            "total_bytes": total_infer.round(),
            "share_bytes_per_party": fig.share_bytes.map(f64::round),
            "rounds": fig.infer_rounds.round(),
            "session_rounds": fig.session_rounds.round(),
            "peak_rss_bytes": fig.peak_rss.round(),
            "baseline_rss_bytes": fig.baseline_rss.round(),
            "peak_rss_per_party_bytes": per_party_rss.round(),
            "breakdown": breakdown,
        });
        println!("{obj}");
        return;
    }
    let tokens = match model {
        Model::Gpt2(_) => format!("{tokens_in} → {tokens_out} tokens"),
        Model::Bert(_) => format!("{tokens_in} tokens → sentence embedding"),
    };
    println!(
        "== {} ({} layers, width {}, {} heads), {tokens}; {method}",
        model.name(),
        model.layers(),
        model.width(),
        model.heads()
    );
    println!(
        "  inference {:.2} s (last party shared → last party done); model sharing {:.2} s (slowest party); whole run {:.2} s",
        fig.infer_secs, fig.share_secs, fig.wall_secs
    );
    println!(
        "  CPU of the three party threads: inference {:.2} s, sharing {:.2} s",
        fig.infer_cpu_secs, fig.share_cpu_secs
    );
    println!(
        "  inference bytes per party {:.1} / {:.1} / {:.1} MB, total {:.1} MB; rounds {:.0} (session {:.0})",
        fig.infer_bytes[0] / 1e6,
        fig.infer_bytes[1] / 1e6,
        fig.infer_bytes[2] / 1e6,
        total_infer / 1e6,
        fig.infer_rounds,
        fig.session_rounds
    );
    println!(
        "  model sharing {:.1} MB from the owner",
        fig.share_bytes.iter().sum::<f64>() / 1e6
    );
    println!(
        "  peak RSS {:.2} GB for the process; {:.2} GB before the parties started (plaintext model); (peak − that)/3 = {:.2} GB per party",
        fig.peak_rss / 1e9,
        fig.baseline_rss / 1e9,
        per_party_rss / 1e9
    );
    for (k, (b, e)) in model.kinds().iter().zip(&fig.breakdown) {
        if *b > 0.0 || *e > 0.0 {
            println!(
                "    {k:<22} {:>10.2} MB (3 parties) {:>6.0} epochs",
                b / 1e6,
                e
            );
        }
    }
}

/// Runs `model` with `layers` layers in a fresh child process and reads its figures.
fn run_child(model: Model, layers: usize) -> Result<Figures, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = std::process::Command::new(exe)
        .args(["--single", model.arg(), &layers.to_string()])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| e.to_string())
}

/// The child side of [`run_child`]: prints one run's figures as JSON.
fn single(model: Model, layers: usize) -> ExitCode {
    match model
        .run(layers)
        .and_then(|f| serde_json::to_string(&f).map_err(|e| e.to_string()))
    {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// A `--models` name: `base`, `medium`, `large`, `bert-base` or `bert-large` (or the full
/// name, e.g. `gpt2-base`).
fn parse_model(name: &str) -> Result<Model, String> {
    Model::ALL
        .into_iter()
        .find(|m| m.arg() == name || m.name() == name)
        .ok_or_else(|| {
            let names: Vec<&str> = Model::ALL.iter().map(|m| m.arg()).collect();
            format!("unknown model `{name}` (one of {})", names.join(", "))
        })
}

/// Secure inference on the shapes of PUMA's tables (seeded random weights, three parties in
/// one process): GPT-2 base, medium, large (32 → 1 tokens) and Bert-Base, Bert-Large (128
/// tokens → sentence embedding). Each measurement runs in a fresh child process.
#[derive(Debug, Parser)]
#[command(name = "bench_models", version)]
struct Args {
    /// The configurations to measure, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_parser = parse_model,
        default_value = "base,medium,large,bert-base,bert-large"
    )]
    models: Vec<Model>,
    /// Run every configuration whole (all layers); medium, large and Bert-Large need more
    /// than 24 GiB this way.
    #[arg(long, conflicts_with = "scaled")]
    whole: bool,
    /// Measure every configuration with 1 and 3 (GPT-2) or 2 (BERT) layers and scale.
    #[arg(long)]
    scaled: bool,
    /// Print one JSON object per configuration.
    #[arg(long)]
    json: bool,
    /// Internal: run one model with its first LAYERS layers (at most its layer count) and
    /// print the figures as JSON (what the parent process reads).
    #[arg(long, num_args = 2, value_names = ["MODEL", "LAYERS"], hide = true)]
    single: Option<Vec<String>>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(single_args) = &args.single {
        let [name, layers] = single_args.as_slice() else {
            eprintln!("bench_models: --single takes MODEL LAYERS");
            return ExitCode::from(2);
        };
        let model = match parse_model(name) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("bench_models: --single: {e}");
                return ExitCode::from(2);
            }
        };
        return match layers.parse::<usize>() {
            Ok(l) if (1..=model.layers()).contains(&l) => single(model, l),
            _ => {
                eprintln!(
                    "bench_models: --single: LAYERS `{layers}` must be between 1 and {} ({}'s layer count)",
                    model.layers(),
                    model.name()
                );
                ExitCode::from(2)
            }
        };
    }
    let force = if args.whole {
        Some(true)
    } else if args.scaled {
        Some(false)
    } else {
        None
    };
    let as_json = args.json;
    let models = args.models;
    for model in models {
        let whole = force.unwrap_or(model.whole_by_default());
        let result = if whole {
            run_child(model, model.layers()).map(|f| (f, "whole run".to_owned()))
        } else {
            let probe = model.probe();
            run_child(model, 1).and_then(|one| {
                let more = run_child(model, probe)?;
                let t = (model.layers() - 1) as f64 / (probe - 1) as f64;
                Ok((
                    one.extrapolate(&more, t),
                    format!(
                        "measured with 1 and {probe} layers, scaled to {} layers (bytes and rounds exact; time and memory estimated)",
                        model.layers()
                    ),
                ))
            })
        };
        match result {
            Ok((fig, method)) => report(model, &method, !whole, &fig, as_json),
            Err(e) => {
                eprintln!("{}: {e}", model.name());
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
