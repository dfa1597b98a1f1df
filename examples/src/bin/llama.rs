//! Secure LLaMA-style text generation: three parties on three threads in one process.
//!
//! The client (P0) holds the prompt and alone learns the generated tokens; the model owner
//! (P1) holds the weights; P2 helps. Every layer (RMSNorm, RoPE, grouped-query attention
//! with a secret KV cache, SwiGLU) runs on 2-out-of-3 replicated secret shares.
//!
//! ```sh
//! bash scripts/fetch-smollm2.sh   # SmolLM2-135M-Instruct (Q4_1 GGUF) into target/models
//! cargo run --release -p puma-examples --bin llama -- --chat "What is the largest animal?" --compare-plaintext
//! cargo run --release -p puma-examples --bin llama -- --model models/llama-tiny-random --prompt "Hello world" --json
//! ```
//!
//! `--model` takes a LLaMA GGUF file (F32/F16/Q4_1/Q8_0) or a Hugging Face
//! `LlamaForCausalLM` directory (`config.json`, `model.safetensors`, `tokenizer.json`);
//! the default is the fetched SmolLM2 GGUF.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use puma_layers::Tokenizer;
use puma_layers::gguf::GgufFile;
use puma_layers::nn::OutputMode;
use puma_layers::nn::{SecureSettings, SiluApprox};
use puma_runner::decoding_flags::DecodingFlags;
use puma_runner::diagnostics::error_chain as chain;
use puma_runner::llama::{
    LlamaReport, RunOptions, SMOLLM2_GGUF, check_prompt, load_model, run_secure,
};
use puma_runner::network_flags::NetworkFlags;
use puma_runner::streaming::LiveView;
use serde_json::json;

/// The SiLU of the MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Silu {
    /// `proto::silu_chebyshev` (15 rounds, max error 1.5e-4).
    Precise,
    /// PUMA's piecewise polynomial (8 rounds, error up to 0.015).
    Piecewise,
}

/// Secure three-party greedy generation with a LLaMA-style decoder.
#[derive(Debug, Parser)]
#[command(name = "llama", version)]
struct Args {
    /// The prompt text (the model's byte-level BPE; special tokens such as <|im_start|>
    /// are recognised).
    #[arg(long, default_value = "The capital of France is", conflicts_with_all = ["prompt_ids", "chat"])]
    prompt: String,
    /// A user message wrapped in the ChatML template of instruct models.
    #[arg(long, conflicts_with = "prompt_ids")]
    chat: Option<String>,
    /// Token ids instead of text, comma-separated.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    prompt_ids: Option<Vec<u32>>,
    /// The most tokens to generate (fewer if the model ends its answer or a --stop string
    /// appears).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_new_tokens: u64,
    /// How tokens are picked and when generation ends.
    #[command(flatten)]
    decoding: DecodingFlags,
    /// A LLaMA GGUF file or a Hugging Face directory; default: the fetched SmolLM2 GGUF.
    #[arg(long, value_name = "PATH")]
    model: Option<PathBuf>,
    /// The SiLU approximation.
    #[arg(long, value_enum, default_value_t = Silu::Precise)]
    silu: Silu,
    /// Also run the plaintext f64 model and print its tokens and the max logit error.
    #[arg(long)]
    compare_plaintext: bool,
    /// Print one JSON object on stdout instead of the human-readable report.
    #[arg(long)]
    json: bool,
    /// Session id and seed of the parties' entropy (demo only).
    #[arg(long, default_value_t = 2024)]
    seed: u64,
    /// A simulated network between the parties (time per token as rounds cost it).
    #[command(flatten)]
    network: NetworkFlags,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            eprint!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// The model's tokenizer: from the GGUF metadata, or the directory's tokenizer files.
fn tokenizer(path: &Path) -> Result<Tokenizer, String> {
    if path.extension().is_some_and(|e| e == "gguf") {
        let file = GgufFile::open(path).map_err(|e| chain(&e))?;
        Tokenizer::from_gguf(&file, path).map_err(|e| chain(&e))
    } else {
        Tokenizer::from_dir(path).map_err(|e| chain(&e))
    }
}

fn run(args: &Args) -> Result<(), String> {
    let path = args
        .model
        .clone()
        .unwrap_or_else(|| PathBuf::from(SMOLLM2_GGUF));
    if !path.exists() {
        return Err(format!(
            "{} does not exist (run scripts/fetch-smollm2.sh, or pass --model)",
            path.display()
        ));
    }
    let tok = Arc::new(tokenizer(&path)?);
    let prompt_text = match (&args.prompt_ids, &args.chat) {
        (Some(_), _) => None,
        (None, Some(msg)) => Some(format!(
            "<|im_start|>user\n{msg}<|im_end|>\n<|im_start|>assistant\n"
        )),
        (None, None) => Some(args.prompt.clone()),
    };
    let prompt_ids = match (&args.prompt_ids, &prompt_text) {
        (Some(ids), _) => ids.clone(),
        (None, Some(t)) => tok.encode(t).map_err(|e| chain(&e))?,
        (None, None) => Vec::new(),
    };
    let max_new =
        usize::try_from(args.max_new_tokens).map_err(|_| "--max-new-tokens is too large")?;
    let mode = args.decoding.output_mode.output_mode();
    let opts = RunOptions {
        max_new_tokens: max_new,
        settings: SecureSettings {
            silu: match args.silu {
                Silu::Precise => SiluApprox::Precise,
                Silu::Piecewise => SiluApprox::Piecewise,
            },
            ..SecureSettings::default()
        },
        compare_plaintext: args.compare_plaintext,
        seed: args.seed,
        network: args.network.shape(),
        ..RunOptions::default()
    };
    let mut opts = opts;
    let t_load = Instant::now();
    let model = load_model(&path).map_err(|e| chain(&e))?;
    let load_secs = t_load.elapsed().as_secs_f64();
    let cfg = model.config.clone();
    check_prompt(&cfg, &prompt_ids, max_new).map_err(|e| format!("bad prompt: {e}"))?;
    args.decoding
        .apply(&mut opts, &path, &tok, cfg.vocab_size)?;
    if !args.json {
        println!(
            "model: {} ({} layers, width {}, {} heads / {} KV heads, vocabulary {}), loaded in {load_secs:.2} s",
            path.display(),
            cfg.num_hidden_layers,
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.vocab_size
        );
        println!("prompt ids ({}): {prompt_ids:?}", prompt_ids.len());
        println!("running 3 parties in memory: P0 client, P1 model owner, P2 helper ...");
    }
    // A bar while the model is shared and the prompt runs, then the text as it comes.
    let streams = !args.json && mode != OutputMode::Private;
    let view = Arc::new(LiveView::new(
        cfg.num_hidden_layers,
        max_new,
        !args.json && std::io::stderr().is_terminal(),
        streams.then(|| Arc::clone(&tok)),
    ));
    if streams {
        print!("\n{}", text(&tok, &prompt_ids));
    }
    let observer = view.observer(cfg.num_hidden_layers, max_new);
    let mut opts = opts;
    opts.share_observer = Some(view.share_observer());
    let result = run_secure(model, &[prompt_ids], &opts, Some(observer));
    view.finish();
    let report = result.map_err(|e| chain(&e))?;
    if args.json {
        println!("{}", to_json(&report, &tok));
    } else {
        print_summary(&report, &tok);
    }
    Ok(())
}

fn text(tok: &Tokenizer, ids: &[u32]) -> String {
    tok.decode(ids).unwrap_or_else(|e| e.to_string())
}

fn to_json(r: &LlamaReport, tok: &Tokenizer) -> serde_json::Value {
    let p = r.prompts.first();
    let plain = p.and_then(|p| p.plaintext.as_ref());
    json!({
        "model": {
            "layers": r.config.num_hidden_layers,
            "hidden_size": r.config.hidden_size,
            "heads": r.config.num_attention_heads,
            "kv_heads": r.config.num_key_value_heads,
            "vocab_size": r.config.vocab_size,
        },
        "prompt_ids": p.map(|p| p.prompt_ids.clone()),
        "ids": p.map(|p| p.secure_ids.clone()),
        "finish": p.map(|p| p.finish.name()),
        "text": p.map(|p| text(tok, &p.secure_ids)),
        "plaintext_ids": plain.map(|c| c.ids.clone()),
        "max_logit_error": plain.and_then(|c| c.max_logit_error),
        "min_plaintext_margin": plain.map(|c| c.margins.iter().copied().fold(f64::INFINITY, f64::min)),
        "bytes_sent": r.stats.iter().map(|s| s.payload_bytes_total()).collect::<Vec<_>>(),
        "model_sharing_bytes": r.share_bytes,
        "step_bytes_client": p.map(|p| p.step_costs.iter().map(|c| c.0).collect::<Vec<_>>()),
        "rounds": r.rounds(),
        "seconds": r.elapsed.as_secs_f64(),
        "sharing_seconds": r.share_time.as_secs_f64(),
        "generation_seconds": p.map(|p| p.time.as_secs_f64()),
    })
}

fn print_summary(r: &LlamaReport, tok: &Tokenizer) {
    for p in &r.prompts {
        println!("secure ids: {:?}", p.secure_ids);
        println!("ended by {}", p.finish.describe());
        println!("secure text: {:?}", text(tok, &p.secure_ids));
        if let Some(c) = &p.plaintext {
            println!("plaintext ids: {:?}", c.ids);
            let same = c.ids == p.secure_ids;
            println!("secure == plaintext: {same}");
            if let Some(e) = c.max_logit_error {
                println!("max |secure - plaintext logit|: {e:.3e}");
            }
        }
        println!(
            "generation: {:.2} s for {} tokens; client bytes per step: {:?}",
            p.time.as_secs_f64(),
            p.secure_ids.len(),
            p.step_costs.iter().map(|c| c.0).collect::<Vec<_>>()
        );
    }
    println!(
        "model sharing: {:.1} MB from the owner in {:.2} s",
        r.share_bytes as f64 / 1e6,
        r.share_time.as_secs_f64()
    );
    println!(
        "total: {:.2} s, {} rounds, payload bytes sent per party: {:?}",
        r.elapsed.as_secs_f64(),
        r.rounds(),
        r.stats
            .iter()
            .map(|s| s.payload_bytes_sent)
            .collect::<Vec<_>>()
    );
    println!("client bytes / epochs by layer kind:");
    for (k, b, e) in &r.layer_costs.entries {
        println!("  {k:18} {:>12.3} MB {e:>7}", *b as f64 / 1e6);
    }
}
