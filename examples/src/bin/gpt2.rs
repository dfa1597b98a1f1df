//! Secure GPT-2 text generation: three parties on three threads in one process.
//!
//! The client (P0) holds the prompt and alone learns the generated tokens; the model owner
//! (P1) holds the weights; P2 helps. Nobody else sees the prompt, the weights or the
//! hidden states: every layer runs on 2-out-of-3 replicated secret shares.
//!
//! ```sh
//! cargo run --release -p puma-examples --bin gpt2
//! cargo run --release -p puma-examples --bin gpt2 -- --prompt "JULIET:" --max-new-tokens 12 --compare-plaintext
//! cargo run --release -p puma-examples --bin gpt2 -- --output-mode private --json
//! ```
//!
//! The default model is the `gpt2-shakespeare` checkpoint that ships in the repository's
//! `models/` folder; `--model DIR` takes any Hugging Face GPT-2 directory with
//! `config.json` and `model.safetensors`. The prompt is encoded (and the output decoded)
//! with the directory's own tokenizer (`tokenizer.json`, or `vocab.json` + `merges.txt`);
//! a directory without one gets GPT-2's built-in tokenizer, with a note on stderr.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{CommandFactory, Parser, ValueEnum};
use puma_core::proto::{ExpApprox, GeluFit};
use puma_layers::nn::{GeluApprox, LayerKind, SecureSettings};
use puma_layers::{Tokenizer, TokenizerSource};
use puma_runner::decoding_flags::{DecodingFlags, ModeFlag};
use puma_runner::diagnostics::error_chain as chain;
use puma_runner::gpt2::{
    DEFAULT_MODEL_DIR, Gpt2Report, RunOptions, check_prompt, load_model, run_secure,
};
use puma_runner::network_flags::NetworkFlags;
use puma_runner::streaming::LiveView;
use serde_json::{Value, json};

/// The exponential inside softmax.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SoftmaxExp {
    /// A degree-12 minimax polynomial of e^(x/2), squared once (11 rounds; ignores
    /// --softmax-squarings).
    Minimax,
    /// (1 + y + y²/2)^(2^t), y = x/2^t: second-order base, t ≥ 4.
    Taylor2,
    /// PUMA's (1 + x/2^t)^(2^t), t ≥ 3.
    Puma,
}

impl SoftmaxExp {
    fn name(self) -> &'static str {
        match self {
            SoftmaxExp::Minimax => "minimax",
            SoftmaxExp::Taylor2 => "taylor2",
            SoftmaxExp::Puma => "puma",
        }
    }
}

/// The GeLU approximation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Gelu {
    /// The precise protocol for the model's GeLU form (max error ≤ 1.3e-4).
    Precise,
    /// PUMA's piecewise shape refitted (minimax; max error 1.75e-3), PUMA's cost.
    Minimax,
    /// PUMA's piecewise polynomial (max error 0.0199).
    Puma,
}

impl Gelu {
    fn approx(self) -> GeluApprox {
        match self {
            Gelu::Precise => GeluApprox::Precise,
            Gelu::Minimax => GeluApprox::Piecewise(GeluFit::MINIMAX),
            Gelu::Puma => GeluApprox::Piecewise(GeluFit::PUMA),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Gelu::Precise => "precise",
            Gelu::Minimax => "minimax",
            Gelu::Puma => "puma",
        }
    }
}

/// Secure three-party GPT-2 greedy generation (PUMA-style replicated secret sharing).
///
/// P0 (client) holds the prompt and learns the output, P1 (model owner) holds the
/// weights, P2 helps; all three run on threads of this process over in-memory channels.
#[derive(Debug, Parser)]
#[command(name = "gpt2", version)]
struct Args {
    /// The prompt text (encoded by the model directory's tokenizer).
    #[arg(long, default_value = "ROMEO:", conflicts_with = "prompt_ids")]
    prompt: String,
    /// Token ids instead of text, comma-separated (e.g. 15496,995).
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    prompt_ids: Option<Vec<u32>>,
    /// The most tokens to generate (fewer if the model ends its text or a --stop string
    /// appears).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_new_tokens: u64,
    /// How tokens are picked and when generation ends.
    #[command(flatten)]
    decoding: DecodingFlags,
    /// A Hugging Face GPT-2 directory (config.json + model.safetensors, and its tokenizer
    /// files); default: the embedded models/gpt2-shakespeare.
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// What the client learns at each step.
    /// Squarings in softmax's exponential (more is more accurate; 2 rounds each):
    /// 4..=12 for taylor2, 3..=12 for puma; unused by minimax.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(3..=12))]
    softmax_squarings: u32,
    /// The exponential inside softmax.
    #[arg(long, value_enum, default_value_t = SoftmaxExp::Minimax)]
    softmax_exp: SoftmaxExp,
    /// The GeLU approximation (puma: PUMA's cheaper polynomial, ~100× the logit error).
    #[arg(long, value_enum, default_value_t = Gelu::Precise)]
    gelu: Gelu,
    /// Also run the plaintext f64 model and print its tokens and the max logit error.
    #[arg(long)]
    compare_plaintext: bool,
    /// Print one JSON object on stdout instead of the human-readable report.
    #[arg(long)]
    json: bool,
    /// Session id and seed of the parties' entropy (demo only: real parties use the OS).
    #[arg(long, default_value_t = 2024)]
    seed: u64,
    /// A simulated network between the parties (time per token as rounds cost it).
    #[command(flatten)]
    network: NetworkFlags,
}

fn main() -> ExitCode {
    let parsed = Args::try_parse().and_then(|a| {
        if a.softmax_exp == SoftmaxExp::Taylor2 && a.softmax_squarings < 4 {
            Err(Args::command().error(
                clap::error::ErrorKind::ValueValidation,
                "--softmax-exp taylor2 needs --softmax-squarings of at least 4",
            ))
        } else {
            Ok(a)
        }
    });
    let args = match parsed {
        Ok(a) => a,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version: print, exit 0
        Err(e) => {
            let msg = e.to_string();
            eprint!("{msg}");
            if !msg.contains("Usage:") {
                eprintln!("\n{}", Args::command().render_usage());
            }
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// Decodes ids to text, falling back to `<id>` for ids the tokenizer does not know.
fn decode(tok: &Tokenizer, ids: &[u32]) -> String {
    match tok.decode(ids) {
        Ok(t) => t,
        Err(_) => ids
            .iter()
            .map(|&id| tok.decode(&[id]).unwrap_or_else(|_| format!("<{id}>")))
            .collect(),
    }
}

fn run(args: &Args) -> Result<ExitCode, String> {
    let dir = args
        .model
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_MODEL_DIR));
    let max_new =
        usize::try_from(args.max_new_tokens).map_err(|_| "--max-new-tokens is too large")?;
    let mode = args.decoding.output_mode;
    let opts = RunOptions {
        max_new_tokens: max_new,
        settings: SecureSettings {
            softmax_exp: match args.softmax_exp {
                SoftmaxExp::Minimax => ExpApprox::Minimax,
                SoftmaxExp::Taylor2 => ExpApprox::Taylor2 {
                    squarings: args.softmax_squarings,
                },
                SoftmaxExp::Puma => ExpApprox::Puma {
                    squarings: args.softmax_squarings,
                },
            },
            gelu: args.gelu.approx(),
            ..SecureSettings::default()
        },
        compare_plaintext: args.compare_plaintext,
        seed: args.seed,
        network: args.network.shape(),
        ..RunOptions::default()
    };
    let mut opts = opts;

    let t_load = Instant::now();
    let model = load_model(&dir).map_err(|e| chain(&e))?;
    let load_secs = t_load.elapsed().as_secs_f64();
    let tok = Arc::new(Tokenizer::from_gpt2_dir(&dir).map_err(|e| chain(&e))?);
    if tok.source() == &TokenizerSource::BuiltinGpt2 {
        // Not silent: a fine-tune saved without its tokenizer files may need other ids.
        eprintln!(
            "note: {} has no tokenizer files; using the built-in GPT-2 tokenizer (r50k_base)",
            dir.display()
        );
    }
    let (prompt_text, prompt_ids) = match &args.prompt_ids {
        Some(ids) => (None, ids.clone()),
        None => (
            Some(args.prompt.clone()),
            tok.encode(&args.prompt).map_err(|e| chain(&e))?,
        ),
    };
    let cfg = model.config.clone();
    check_prompt(&cfg, &prompt_ids, max_new).map_err(|e| format!("bad prompt: {e}"))?;
    args.decoding.apply(&mut opts, &dir, &tok, cfg.vocab_size)?;
    let model_name = dir
        .canonicalize()
        .unwrap_or_else(|_| dir.clone())
        .display()
        .to_string();

    if !args.json {
        println!(
            "model: {model_name} ({} layers, width {}, {} heads, vocabulary {}), loaded in {load_secs:.2} s",
            cfg.n_layer, cfg.n_embd, cfg.n_head, cfg.vocab_size
        );
        println!("tokenizer: {}", tok.source());
        match &prompt_text {
            Some(t) => println!("prompt: {t:?} = ids {prompt_ids:?}"),
            None => println!(
                "prompt ids: {prompt_ids:?} = {:?}",
                decode(&tok, &prompt_ids)
            ),
        }
        println!(
            "3 parties in memory: P0 client (prompt, output), P1 model owner (weights), P2 helper; output mode {}, softmax exp {}, GeLU {}",
            mode.name(),
            match args.softmax_exp {
                SoftmaxExp::Minimax => "minimax".to_owned(),
                e => format!("{} with {} squarings", e.name(), args.softmax_squarings),
            },
            args.gelu.name(),
        );
    }

    // A bar while the model is shared and the prompt runs, then the text as it comes.
    let streams = !args.json && mode != ModeFlag::Private;
    let view = Arc::new(LiveView::new(
        cfg.n_layer,
        max_new,
        !args.json && std::io::stderr().is_terminal(),
        streams.then(|| Arc::clone(&tok)),
    ));
    if streams {
        print!(
            "\n{}",
            prompt_text
                .clone()
                .unwrap_or_else(|| decode(&tok, &prompt_ids))
        );
    }
    let observer = view.observer(cfg.n_layer, max_new);
    let mut opts = opts;
    opts.share_observer = Some(view.share_observer());
    let result = run_secure(model, &prompt_ids, &opts, Some(observer));
    view.finish();
    let report = result.map_err(|e| chain(&e))?;

    if args.json {
        let v = to_json(
            &report,
            &tok,
            &model_name,
            prompt_text.as_deref(),
            mode,
            args,
        );
        println!("{v}");
    } else {
        print_summary(&report, &tok, prompt_text.as_deref(), streams);
    }
    Ok(ExitCode::SUCCESS)
}

fn to_json(
    r: &Gpt2Report,
    tok: &Tokenizer,
    model: &str,
    prompt_text: Option<&str>,
    mode: ModeFlag,
    args: &Args,
) -> Value {
    let per_party = |f: &dyn Fn(usize) -> u64| -> Vec<u64> { (0..3).map(f).collect() };
    let layer_costs: Vec<Value> = r.costs[0]
        .layers
        .entries
        .iter()
        .map(|&(kind, _, epochs)| {
            json!({
                "kind": kind.name(),
                "bytes_per_party": per_party(&|p| bytes_of_kind(r, p, kind)),
                "epochs": epochs,
            })
        })
        .collect();
    let steps: Vec<Value> = (0..r.costs[0].steps.len())
        .map(|k| {
            json!({
                "step": k,
                "tokens": if k == 0 { r.prompt_ids.len() } else { 1 },
                "bytes_per_party": per_party(&|p| step_bytes(r, p, k)),
                "epochs": r.costs[0].steps.get(k).map_or(0, |s| s.1),
                "seconds": r.step_times.get(k).map(|t| t.as_secs_f64()),
            })
        })
        .collect();
    let plain = r.plaintext.as_ref();
    json!({
        "model": model,
        "config": {
            "n_layer": r.config.n_layer,
            "n_embd": r.config.n_embd,
            "n_head": r.config.n_head,
            "n_positions": r.config.n_positions,
            "vocab_size": r.config.vocab_size,
        },
        "output_mode": mode.name(),
        "softmax_exp": args.softmax_exp.name(),
        "softmax_squarings": args.softmax_squarings,
        "gelu": args.gelu.name(),
        "seed": args.seed,
        "prompt": prompt_text,
        "prompt_ids": r.prompt_ids,
        "secure_ids": r.secure_ids,
        "finish": r.finish.name(),
        "plaintext_ids": plain.map(|p| &p.ids),
        "ids_match": plain.map(|p| p.first_mismatch(&r.secure_ids).is_none()),
        "first_mismatch": plain.and_then(|p| p.first_mismatch(&r.secure_ids)),
        "plaintext_top2_margins": plain.map(|p| &p.margins),
        "max_abs_logit_error": plain.and_then(|p| p.max_logit_error),
        "text": decode(tok, &r.secure_ids),
        "full_text": format!("{}{}", decode(tok, &r.prompt_ids), decode(tok, &r.secure_ids)),
        "seconds": r.elapsed.as_secs_f64(),
        "share_model_seconds": r.share_time.as_secs_f64(),
        "bytes_per_party": per_party(&|p| r.stats[p].bytes_total()),
        "payload_bytes_per_party": per_party(&|p| r.stats[p].payload_bytes_total()),
        "rounds": r.rounds(),
        "share_model": {
            "bytes_per_party": per_party(&|p| r.costs[p].share_model.0),
            "epochs": r.costs[0].share_model.1,
        },
        "layer_costs": layer_costs,
        "client_input_bytes_per_party": per_party(&|p| unmetered_bytes(r, p)),
        "step_costs": steps,
    })
}

/// Payload bytes party `p` sent for layer kind `kind`.
fn bytes_of_kind(r: &Gpt2Report, p: usize, kind: LayerKind) -> u64 {
    r.costs
        .get(p)
        .and_then(|c| c.layers.entries.iter().find(|e| e.0 == kind))
        .map_or(0, |e| e.1)
}

/// Payload bytes party `p` sent outside the model sharing and outside every metered
/// layer kind: the client's one-hot inputs of the prompt and of each fed-back token.
fn unmetered_bytes(r: &Gpt2Report, p: usize) -> u64 {
    let metered: u64 = r.costs.get(p).map_or(0, |c| {
        c.share_model.0 + c.layers.entries.iter().map(|e| e.1).sum::<u64>()
    });
    r.stats
        .get(p)
        .map_or(0, |s| s.payload_bytes_total().saturating_sub(metered))
}

/// Payload bytes party `p` sent in step `k`.
fn step_bytes(r: &Gpt2Report, p: usize, k: usize) -> u64 {
    r.costs
        .get(p)
        .and_then(|c| c.steps.get(k))
        .map_or(0, |s| s.0)
}

fn mb(bytes: u64) -> String {
    format!("{:.3} MB", bytes as f64 / 1e6)
}

fn print_summary(r: &Gpt2Report, tok: &Tokenizer, prompt_text: Option<&str>, streamed: bool) {
    if !streamed {
        let prompt = prompt_text.map_or_else(|| decode(tok, &r.prompt_ids), str::to_owned);
        let generated = decode(tok, &r.secure_ids);
        println!();
        println!("{prompt}{generated}");
    }
    println!();
    println!("secure ids:    {:?}", r.secure_ids);
    println!("ended by {}", r.finish.describe());
    if let Some(p) = &r.plaintext {
        println!("plaintext ids: {:?}", p.ids);
        match p.first_mismatch(&r.secure_ids) {
            None => println!("secure and plaintext tokens match"),
            Some(k) => println!(
                "tokens differ from step {} on (plaintext top-2 margin there {:.4})",
                k + 1,
                p.margins.get(k).copied().unwrap_or(f64::NAN)
            ),
        }
        println!("step  secure token          plaintext token       margin");
        for (k, &sid) in r.secure_ids.iter().enumerate() {
            let pid = p.ids.get(k).copied();
            println!(
                "{:>4}  {:<20}  {:<20}  {:.4}",
                k + 1,
                format!("{sid} {:?}", decode(tok, &[sid])),
                pid.map_or_else(String::new, |id| format!("{id} {:?}", decode(tok, &[id]))),
                p.margins.get(k).copied().unwrap_or(f64::NAN)
            );
        }
        match p.max_logit_error {
            Some(e) => println!("max |secure logit − plaintext logit|: {e:.3e}"),
            None => println!("max logit error: n/a (logits stay secret in this output mode)"),
        }
    }
    println!();
    println!(
        "tokens: {} prompt + {} generated; wall time {:.2} s (model sharing {:.2} s, generation {:.2} s)",
        r.prompt_ids.len(),
        r.secure_ids.len(),
        r.elapsed.as_secs_f64(),
        r.share_time.as_secs_f64(),
        r.step_times.iter().map(|t| t.as_secs_f64()).sum::<f64>(),
    );
    println!("rounds: {}", r.rounds());
    for (p, s) in r.stats.iter().enumerate() {
        println!(
            "P{p}: sent {} ({} payload; model sharing {}, generation {})",
            mb(s.bytes_total()),
            mb(s.payload_bytes_total()),
            mb(r.costs[p].share_model.0),
            mb(r.costs[p].steps.iter().map(|x| x.0).sum()),
        );
    }
    println!();
    println!("generation cost by layer kind (payload sent per party, epochs):");
    println!(
        "  {:<18} {:>12} {:>12} {:>12} {:>7}",
        "kind", "P0", "P1", "P2", "epochs"
    );
    for &(kind, _, epochs) in &r.costs[0].layers.entries {
        println!(
            "  {:<18} {:>12} {:>12} {:>12} {:>7}",
            kind.name(),
            mb(bytes_of_kind(r, 0, kind)),
            mb(bytes_of_kind(r, 1, kind)),
            mb(bytes_of_kind(r, 2, kind)),
            epochs
        );
    }
    println!(
        "  {:<18} {:>12} {:>12} {:>12}",
        "not attributed",
        mb(unmetered_bytes(r, 0)),
        mb(unmetered_bytes(r, 1)),
        mb(unmetered_bytes(r, 2)),
    );
    println!("  (not attributed: bytes no layer kind claims; zero unless metering has a gap)");
    println!();
    println!("per step (payload sent per party, epochs, client time):");
    for k in 0..r.costs[0].steps.len() {
        let label = if k == 0 {
            format!("prompt ({} tokens)", r.prompt_ids.len())
        } else {
            format!("token {}", k + 1)
        };
        println!(
            "  {:<18} {:>12} {:>12} {:>12} {:>7} {:>8.3} s",
            label,
            mb(step_bytes(r, 0, k)),
            mb(step_bytes(r, 1, k)),
            mb(step_bytes(r, 2, k)),
            r.costs[0].steps.get(k).map_or(0, |s| s.1),
            r.step_times.get(k).map_or(0.0, |t| t.as_secs_f64()),
        );
    }
    let further: Vec<u64> = (1..r.costs[0].steps.len())
        .map(|k| (0..3).map(|p| step_bytes(r, p, k)).sum())
        .collect();
    let prompt_bytes: u64 = (0..3).map(|p| step_bytes(r, p, 0)).sum();
    if let (false, true) = (further.is_empty(), prompt_bytes > 0) {
        let avg = further.iter().sum::<u64>() as f64 / further.len() as f64;
        println!(
            "KV cache: a further token costs {} in total on average, {:.1}% of the prompt step's {} ({} tokens)",
            mb(avg as u64),
            100.0 * avg / prompt_bytes as f64,
            mb(prompt_bytes),
            r.prompt_ids.len()
        );
    }
}
