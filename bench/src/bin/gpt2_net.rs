//! Secure GPT-2 (the embedded Shakespeare model, prompt "ROMEO:", 8 tokens) with three
//! parties in one process over in-memory channels, TCP+TLS and QUIC on 127.0.0.1: the
//! same sessions, so the same ids and bytes; prints the wall time of each.
//!
//! ```sh
//! cargo run --release -p puma-bench --bin gpt2_net [-- --max-new-tokens 8] [--quic] [--json]
//! ```
//!
//! `--json` prints one [`NetRun`] object per transport instead of the text lines;
//! `scripts/bench-tables.sh` renders `BENCHMARKS.md`'s table from them.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use puma_bench::tables::NetRun;
use puma_core::{Config, PartyId};
use puma_layers::Tokenizer;
use puma_layers::nn::SecureSettings;
use puma_runner::gpt2::{CLIENT, DEFAULT_MODEL_DIR, OWNER, check_prompt, load_model};
use puma_runner::party::{DecoderJob, decoder_protocol};
use puma_transports::loopback::{self, Network};
use puma_transports::mem;

/// Secure GPT-2 (the embedded Shakespeare model) with three parties in one process, in
/// memory and over TCP+TLS (and QUIC) on 127.0.0.1: the same sessions, checked to give the
/// same ids and bytes; prints each one's wall time.
#[derive(Debug, Parser)]
#[command(
    name = "gpt2_net",
    version,
    after_help = "Limits: the prompt's tokens plus --max-new-tokens must fit the model's \
                  context (256 positions)."
)]
struct Args {
    /// The prompt.
    #[arg(long, default_value = "ROMEO:")]
    prompt: String,
    /// Tokens to generate.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_new_tokens: u64,
    /// Also run over QUIC.
    #[arg(long)]
    quic: bool,
    /// Print one JSON object per transport (the fields of `puma_bench::tables::NetRun`).
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let model = match load_model(Path::new(DEFAULT_MODEL_DIR)) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("gpt2_net: {e}");
            return ExitCode::from(2);
        }
    };
    let tok = match Tokenizer::from_dir(Path::new(DEFAULT_MODEL_DIR)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("gpt2_net: {e}");
            return ExitCode::from(2);
        }
    };
    let prompt: Arc<[u32]> = match tok.encode(&args.prompt) {
        Ok(ids) => ids.into(),
        Err(e) => {
            eprintln!("gpt2_net: {e}");
            return ExitCode::from(2);
        }
    };
    // At most 4096 (clap checked it).
    let max_new_tokens = usize::try_from(args.max_new_tokens).unwrap_or(1);
    if let Err(e) = check_prompt(&model.config, &prompt, max_new_tokens) {
        eprintln!(
            "gpt2_net: --prompt ({} tokens) with --max-new-tokens {max_new_tokens}: {e}",
            prompt.len()
        );
        return ExitCode::from(2);
    }
    let weights = Arc::new(model.weights);
    let make = |p: PartyId| {
        let job = DecoderJob {
            config: model.config.clone(),
            weights: (p == OWNER).then(|| Arc::clone(&weights)),
            prompt: (p == CLIENT).then(|| Arc::clone(&prompt)),
            max_new_tokens,
            // Fixed-length runs: the figures are for exactly this many tokens.
            eos: Vec::new(),
            rules: None,
            settings: SecureSettings::default(),
        };
        decoder_protocol(p, job, None)
    };
    let timeout = Duration::from_secs(60);
    let mut runs = vec!["memory"];
    runs.push("tcp+tls");
    if args.quic {
        runs.push("quic");
    }
    let mut base: Option<(Vec<u32>, u64, f64)> = None;
    for name in runs {
        let t0 = Instant::now();
        let outcome = match name {
            "memory" => mem::run3_with_timeout(Config::new(1), 1, timeout, make),
            "tcp+tls" => loopback::run3(Network::Tcp, Config::new(1), 1, timeout, make).0,
            _ => loopback::run3(Network::Quic, Config::new(1), 1, timeout, make).0,
        };
        let secs = t0.elapsed().as_secs_f64();
        let bytes: u64 = outcome
            .stats
            .iter()
            .map(|s| s.bytes_total() + s.setup_bytes_sent)
            .sum();
        let payload_bytes: u64 = outcome.stats.iter().map(|s| s.payload_bytes_total()).sum();
        let rounds = outcome.rounds();
        let ids = match outcome.into_results() {
            Ok([Ok(ids), _, _]) => ids,
            Ok([Err(differs), _, _]) => {
                eprintln!("gpt2_net: {name}: {differs}");
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("gpt2_net: {name}: {e}");
                return ExitCode::FAILURE;
            }
        };
        let text = tok.decode(&ids).unwrap_or_default();
        let ratio = base.as_ref().map_or(1.0, |b| secs / b.2);
        if args.json {
            let run = NetRun {
                transport: name.to_owned(),
                model: "gpt2-shakespeare".to_owned(),
                prompt: args.prompt.clone(),
                prompt_tokens: prompt.len(),
                new_tokens: ids.len(),
                ids: ids.clone(),
                text: text.clone(),
                rounds,
                frame_bytes: bytes,
                payload_bytes,
                seconds: secs,
            };
            match serde_json::to_string(&run) {
                Ok(line) => println!("{line}"),
                Err(e) => {
                    eprintln!("gpt2_net: {e}");
                    return ExitCode::FAILURE;
                }
            }
        } else {
            println!(
                "{name:8} {secs:7.2} s  ({ratio:.2}x memory)  {rounds} rounds  {bytes} bytes  ids {ids:?} {text:?}"
            );
        }
        match &base {
            None => base = Some((ids, bytes, secs)),
            Some((bids, bbytes, _)) => {
                if *bids != ids || *bbytes != bytes {
                    eprintln!("gpt2_net: {name} differs from the in-memory run");
                    return ExitCode::FAILURE;
                }
            }
        }
    }
    ExitCode::SUCCESS
}
