//! A thin client of the secure inference service (three `puma-serve` servers), and the
//! model owner's upload.
//!
//! ```sh
//! puma-client --config svc/service.toml status
//! puma-client --config svc/service.toml upload --name shakespeare --model models/gpt2-shakespeare
//! puma-client --config svc/service.toml generate --model shakespeare \
//!     --tokenizer models/gpt2-shakespeare --prompt "JULIET:" --max-new-tokens 12
//! puma-client --config svc/service.toml upload --name minilm --model target/models/minilm-l6
//! puma-client --config svc/service.toml encode --model minilm \
//!     --tokenizer target/models/minilm-l6 --sentence "A man is eating food."
//! ```
//!
//! `generate` tokenizes locally, deals the prompt to the three servers (two seeds and one
//! correction vector; no server learns it), prints each token as the servers' shares of it
//! arrive and agree, and stops at the model's end-of-sequence ids (from `--tokenizer`'s
//! `generation_config.json`, `config.json` or GGUF metadata). `encode` runs a BERT /
//! RoBERTa encoder the same way on sentences and prints what it asked for (sentence
//! embeddings by default). `upload` deals a GPT-2, LLaMA or BERT / RoBERTa checkpoint
//! (Hugging Face directory or GGUF file) to the servers, which keep their parts in their
//! share stores; the owner can then go offline. Exit status: 0 on success,
//! 1 when a server refuses or fails the request (the message names it), 2 for a bad
//! command line, configuration, model or prompt.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use puma_layers::Tokenizer;
use puma_layers::stopping::eos_ids;
use puma_runner::checkpoint::{self, ModelKind};
use puma_runner::random_gpt2::{RandomShape, random_gpt2};
use puma_serve::client::{ClientError, GenerateOptions, ServiceClient};
use puma_serve::config::ServiceConfig;
use puma_serve::protocol::{WireMode, WireOutputs, WireSampling};

/// A client of the secure inference service, and the owner's upload.
#[derive(Parser, Debug)]
#[command(name = "puma-client", version, about)]
struct Args {
    /// The service's configuration file (service.toml: the servers' client addresses and
    /// certificates).
    #[arg(long)]
    config: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Each server's models, requests and counters.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Deal a checkpoint to the three servers (the model owner); they store and serve it.
    Upload {
        /// The name to serve it under (letters, digits, '-', '_', '.').
        #[arg(long)]
        name: String,
        /// The checkpoint: a Hugging Face directory or a GGUF file.
        #[arg(long, required_unless_present = "random_shape")]
        model: Option<PathBuf>,
        /// Instead of a checkpoint: a published GPT-2 shape with seeded random weights,
        /// for measurements.
        #[arg(long, value_enum, value_name = "SHAPE", conflicts_with = "model")]
        random_shape: Option<RandomShape>,
        /// With --random-shape: keep only the first N blocks.
        #[arg(long, value_name = "N", requires = "random_shape",
              value_parser = clap::value_parser!(u64).range(1..=64))]
        layers: Option<u64>,
        /// Its architecture (default: from the checkpoint).
        #[arg(long, value_enum, default_value_t = Arch::Auto)]
        arch: Arch,
    },
    /// Generate text from a prompt on the servers; only this client learns it.
    Generate(GenerateArgs),
    /// Run an encoder (BERT, RoBERTa) on sentences on the servers; only this client
    /// learns the result.
    Encode(EncodeArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Arch {
    /// From the checkpoint.
    Auto,
    /// GPT-2.
    Gpt2,
    /// LLaMA-style decoders.
    Llama,
    /// BERT / RoBERTa encoders.
    Bert,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Mean-pooled, L2-normalised sentence embeddings (sentence-transformers').
    Embeddings,
    /// The pooled output of the first token.
    Pooled,
    /// The classification logits.
    Logits,
    /// The encoder output of every token.
    Hidden,
}

#[derive(clap::Args, Debug)]
struct EncodeArgs {
    /// The model's name on the servers.
    #[arg(long)]
    model: String,
    /// The checkpoint directory whose tokenizer to use (tokenizer.json, vocab.txt, or
    /// vocab.json + merges.txt); its weights are not read.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// A sentence; repeat for a batch.
    #[arg(long)]
    sentence: Vec<String>,
    /// A sequence as token ids (comma-separated, special tokens included), instead of
    /// text; repeat for a batch.
    #[arg(long)]
    ids: Vec<String>,
    /// What to learn; repeat for several.
    #[arg(long, value_enum, default_values_t = [Output::Embeddings])]
    output: Vec<Output>,
    /// The longest the request may take.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86400))]
    deadline_secs: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Each token as it is produced.
    SecureArgmax,
    /// All tokens at the end (the servers learn only when it ends).
    Private,
}

#[derive(clap::Args, Debug)]
struct GenerateArgs {
    /// The model's name on the servers.
    #[arg(long)]
    model: String,
    /// The checkpoint directory or GGUF file whose tokenizer (and end-of-sequence ids) to
    /// use; its weights are not read.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// A prompt; repeat for a batch.
    #[arg(long)]
    prompt: Vec<String>,
    /// A prompt as token ids (comma-separated), instead of text.
    #[arg(long, value_delimiter = ',')]
    prompt_ids: Vec<u32>,
    /// The most tokens to generate per prompt.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    max_new_tokens: u32,
    /// What this client learns as generation goes.
    #[arg(long, value_enum, default_value_t = Mode::SecureArgmax)]
    output_mode: Mode,
    /// Draw tokens at this temperature instead of the argmax.
    #[arg(long)]
    temperature: Option<f64>,
    /// With --temperature: keep the k most likely tokens.
    #[arg(long)]
    top_k: Option<usize>,
    /// With --temperature: keep the most likely tokens up to this mass.
    #[arg(long)]
    top_p: Option<f64>,
    /// With --temperature: keep tokens at least this fraction as likely as the best.
    #[arg(long)]
    min_p: Option<f64>,
    /// Generate past the end-of-sequence ids.
    #[arg(long)]
    ignore_eos: bool,
    /// The longest the request may take.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=86400))]
    deadline_secs: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// A failure and its exit status.
struct Failure(u8, String);

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        let code = match e {
            ClientError::Config(_) | ClientError::Request(_) => 2,
            _ => 1,
        };
        Failure(code, e.to_string())
    }
}

fn bad(e: impl std::fmt::Display) -> Failure {
    Failure(2, e.to_string())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, msg)) => {
            eprintln!("puma-client: {msg}");
            ExitCode::from(code)
        }
    }
}

fn run(args: &Args) -> Result<(), Failure> {
    let cfg = ServiceConfig::from_file(&args.config).map_err(bad)?;
    let client = ServiceClient::new(&cfg)?;
    match &args.command {
        Command::Status { json } => status(&client, *json),
        Command::Upload {
            name,
            model,
            arch,
            random_shape,
            layers,
        } => match (model, random_shape) {
            (_, Some(r)) => {
                let shape = r.shape();
                let layers = layers.map_or(shape.layers, |l| l as usize);
                let (cfg, w) = random_gpt2(shape, layers);
                let hash = client.upload(name, &cfg, &w, progress_bar())?;
                println!("uploaded {name}: model hash {hash}");
                Ok(())
            }
            (Some(m), None) => upload(&client, name, m, *arch),
            (None, None) => Err(bad("give --model PATH or --random-shape SHAPE")),
        },
        Command::Generate(g) => generate(&client, g),
        Command::Encode(e) => encode(&client, e),
    }
}

fn status(client: &ServiceClient, json: bool) -> Result<(), Failure> {
    let reports = client.status()?;
    if json {
        println!("{}", serde_json::to_string_pretty(&reports).map_err(bad)?);
        return Ok(());
    }
    for r in &reports {
        let models: Vec<String> = r
            .models
            .iter()
            .map(|m| {
                let kind = if m.encoder.is_some() {
                    "encoder"
                } else {
                    "decoder"
                };
                format!("{} ({kind}, vocab {})", m.name, m.vocab)
            })
            .collect();
        println!(
            "server {}: models [{}]; running {}, queued {}; served {}, failed {}; \
             {} rounds, {} bytes sent; peers down {:?}",
            r.party,
            models.join(", "),
            r.running,
            r.queued,
            r.served,
            r.failed,
            r.rounds,
            r.bytes_sent,
            r.peers_down
        );
    }
    Ok(())
}

fn upload(
    client: &ServiceClient,
    name: &str,
    path: &std::path::Path,
    arch: Arch,
) -> Result<(), Failure> {
    let kind = match arch {
        Arch::Gpt2 => ModelKind::Gpt2,
        Arch::Llama => ModelKind::Llama,
        Arch::Bert => ModelKind::Bert,
        Arch::Auto => checkpoint::detect(path).map_err(bad)?,
    };
    let progress = progress_bar();
    let hash = match kind {
        ModelKind::Gpt2 => {
            let m = puma_runner::gpt2::load_model(path).map_err(bad)?;
            client.upload(name, &m.config, &m.weights, progress)?
        }
        ModelKind::Llama => {
            let m = puma_runner::llama::load_model(path).map_err(bad)?;
            client.upload(name, &m.config, &m.weights, progress)?
        }
        ModelKind::Bert => {
            let m = puma_runner::bert::load_model(path).map_err(bad)?;
            client.upload_encoder(name, &m.config, &m.weights, progress)?
        }
    };
    println!("uploaded {name}: model hash {hash}");
    Ok(())
}

/// Reports an upload's progress on standard error: tensors dealt of all.
fn progress_bar() -> impl FnMut(usize, usize) {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("dealing {pos}/{len} tensors {wide_bar} {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    move |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
        if done == total {
            bar.finish_and_clear();
        }
    }
}

fn generate(client: &ServiceClient, g: &GenerateArgs) -> Result<(), Failure> {
    let tok: Option<Tokenizer> = match &g.tokenizer {
        Some(p) => {
            let kind = checkpoint::detect(p).map_err(bad)?;
            Some(checkpoint::tokenizer(p, kind).map_err(bad)?)
        }
        None => None,
    };
    let mut prompts: Vec<Vec<u32>> = Vec::new();
    for text in &g.prompt {
        let t = tok
            .as_ref()
            .ok_or_else(|| bad("--prompt needs --tokenizer (or pass --prompt-ids)"))?;
        let ids = t.encode(text).map_err(bad)?;
        if ids.is_empty() {
            return Err(bad(format!("the prompt {text:?} has no tokens")));
        }
        prompts.push(ids);
    }
    if !g.prompt_ids.is_empty() {
        prompts.push(g.prompt_ids.clone());
    }
    if prompts.is_empty() {
        return Err(bad("give --prompt TEXT or --prompt-ids IDS"));
    }
    let eos = match (&g.tokenizer, g.ignore_eos) {
        (Some(p), false) => eos_ids(p).map_err(bad)?,
        _ => Vec::new(),
    };
    let sampling = match g.temperature {
        Some(temperature) => Some(WireSampling {
            temperature,
            top_k: g.top_k,
            top_p: g.top_p,
            min_p: g.min_p,
        }),
        None if g.top_k.is_some() || g.top_p.is_some() || g.min_p.is_some() => {
            return Err(bad("--top-k, --top-p and --min-p need --temperature"));
        }
        None => None,
    };
    let opts = GenerateOptions {
        max_new: g.max_new_tokens as usize,
        mode: match g.output_mode {
            Mode::SecureArgmax => WireMode::SecureArgmax,
            Mode::Private => WireMode::Private,
        },
        eos,
        sampling,
        deadline: Duration::from_secs(g.deadline_secs),
    };
    let stream = !g.json && prompts.len() == 1;
    let mut shown: Vec<u32> = Vec::new();
    let mut printed = String::new();
    let out = client.generate(&g.model, &prompts, &opts, |got| {
        if !stream {
            return;
        }
        shown.extend(got.iter().map(|&(_, id)| id));
        // Print what the text grew by: tokens may join into characters only later.
        if let Some(t) = &tok
            && let Ok(text) = t.decode(&shown)
            && let Some(new) = text.strip_prefix(printed.as_str())
        {
            print!("{new}");
            let _ = std::io::stdout().flush();
            printed = text;
        }
    })?;
    let texts: Vec<Option<String>> = out
        .ids
        .iter()
        .map(|ids| tok.as_ref().and_then(|t| t.decode(ids).ok()))
        .collect();
    if g.json {
        let v = serde_json::json!({
            "ids": out.ids,
            "texts": texts,
            "rounds": out.rounds,
            "server_bytes": out.server_bytes,
            "client_sent": out.client_sent,
            "client_received": out.client_received,
            "first_ids_secs": out.first_ids.map(|d| d.as_secs_f64()),
            "total_secs": out.total.as_secs_f64(),
        });
        println!("{v}");
        return Ok(());
    }
    if stream {
        println!();
    } else {
        for (i, (ids, text)) in out.ids.iter().zip(&texts).enumerate() {
            match text {
                Some(t) => println!("[{i}] {t}"),
                None => println!("[{i}] {ids:?}"),
            }
        }
    }
    eprintln!(
        "ids {:?}; {:.2} s (first ids after {:.2} s), {} rounds; client sent {} bytes, \
         received {}",
        out.ids,
        out.total.as_secs_f64(),
        out.first_ids.map_or(0.0, |d| d.as_secs_f64()),
        out.rounds,
        out.client_sent,
        out.client_received
    );
    Ok(())
}

fn encode(client: &ServiceClient, e: &EncodeArgs) -> Result<(), Failure> {
    let mut seqs: Vec<(Vec<u32>, Vec<u32>)> = Vec::new();
    if !e.sentence.is_empty() {
        let dir = e
            .tokenizer
            .as_ref()
            .ok_or_else(|| bad("--sentence needs --tokenizer (or pass --ids)"))?;
        let tok = Tokenizer::from_dir(dir).map_err(bad)?;
        for text in &e.sentence {
            let ids = tok.encode(text).map_err(bad)?;
            if ids.is_empty() {
                return Err(bad(format!("the sentence {text:?} has no tokens")));
            }
            let types = vec![0; ids.len()];
            seqs.push((ids, types));
        }
    }
    for list in &e.ids {
        let ids = list
            .split(',')
            .map(|t| t.trim().parse::<u32>())
            .collect::<Result<Vec<u32>, _>>()
            .map_err(|_| {
                bad(format!(
                    "--ids {list:?}: expected comma-separated token ids"
                ))
            })?;
        let types = vec![0; ids.len()];
        seqs.push((ids, types));
    }
    if seqs.is_empty() {
        return Err(bad("give --sentence TEXT or --ids IDS"));
    }
    let outputs = WireOutputs {
        hidden: e.output.contains(&Output::Hidden),
        pooled: e.output.contains(&Output::Pooled),
        logits: e.output.contains(&Output::Logits),
        embeddings: e.output.contains(&Output::Embeddings),
    };
    let out = client.encode(
        &e.model,
        &seqs,
        outputs,
        Duration::from_secs(e.deadline_secs),
    )?;
    let rows = |v: &Option<Vec<f64>>, n: usize| -> Option<Vec<Vec<f64>>> {
        v.as_ref()
            .map(|v| v.chunks(v.len() / n.max(1)).map(<[f64]>::to_vec).collect())
    };
    let tokens: usize = seqs.iter().map(|(ids, _)| ids.len()).sum();
    let fields = [
        ("embeddings", rows(&out.embeddings, seqs.len())),
        ("pooled", rows(&out.pooled, seqs.len())),
        ("logits", rows(&out.logits, seqs.len())),
        ("hidden", rows(&out.hidden, tokens)),
    ];
    if e.json {
        let mut obj = serde_json::json!({
            "rounds": out.rounds,
            "seconds": out.total.as_secs_f64(),
            "client_sent_bytes": out.client_sent,
        });
        for (name, v) in &fields {
            if let Some(v) = v {
                obj[*name] = serde_json::json!(v);
            }
        }
        println!("{obj}");
        return Ok(());
    }
    for (name, v) in &fields {
        let Some(v) = v else { continue };
        for (i, row) in v.iter().enumerate() {
            let head: Vec<String> = row.iter().take(8).map(|x| format!("{x:.5}")).collect();
            let more = if row.len() > 8 { ", …" } else { "" };
            println!(
                "{name}[{i}] ({} values): [{}{more}]",
                row.len(),
                head.join(", ")
            );
        }
    }
    eprintln!(
        "{} sequence(s), {} tokens: {:.2} s, {} rounds, {} bytes sent by this client",
        seqs.len(),
        tokens,
        out.total.as_secs_f64(),
        out.rounds,
        out.client_sent
    );
    Ok(())
}
