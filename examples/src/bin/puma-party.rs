//! One party of secure GPT-2, LLaMA or BERT as an OS process, over TCP+TLS or QUIC.
//!
//! ```sh
//! cargo run --release -p puma-examples --bin keygen -- --out parties
//! cargo run --release -p puma-examples --bin puma-party -- --id 1 --config parties/parties.toml &
//! cargo run --release -p puma-examples --bin puma-party -- --id 2 --config parties/parties.toml &
//! cargo run --release -p puma-examples --bin puma-party -- --id 0 --config parties/parties.toml --prompt "ROMEO:"
//! ```
//!
//! P0 (client) holds the prompt and prints the generated text as it comes, token by token,
//! then its ids and the whole text (decoders), or the sentence embeddings (encoders); P1 (model owner) loads the weights; P2 helps. The architecture
//! comes from the checkpoint (`model_type` in `config.json`, or a `.gguf` file) or from
//! `--arch`; every party passes the same model path (the others read its configuration
//! only). Exit status: 0 on success, 1 when the session or the network
//! fails (the message names the peer), 2 for a bad command line, configuration or model.

use std::io::Write;
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use puma_core::{Config, PartyId, Session};
use puma_layers::bert::{BertBatch, BertConfig};
use puma_layers::llama::LlamaConfig;
use puma_layers::nn::{DecoderArch, Observer, Progress, SecureSettings, decoder_range_check};
use puma_layers::stopping::eos_ids;
use puma_layers::{Gpt2Config, Tokenizer, TokenizerSource};
use puma_runner::checkpoint::{self, ModelKind};
use puma_runner::decoder::check_prompt;
use puma_runner::decoding_flags::DecodingFlags;
use puma_runner::gpt2::RunOptions;
use puma_runner::gpt2::{CLIENT, DEFAULT_MODEL_DIR, OWNER, load_model};
use puma_runner::party::{
    ClientRules, DecoderJob, EncoderJob, PartiesConfig, PartyError, decoder_protocol,
    encoder_protocol, resolve,
};
use puma_runner::random_gpt2::{RandomShape, random_gpt2, shape_config};
use puma_runner::resources::{current_rss, peak_rss};
use puma_runner::streaming::LiveView;
use puma_transports::loopback::Network;
use puma_transports::net::NetOptions;
use puma_transports::tcp::Endpoints;
use puma_transports::{drive, quic, tcp};
use rand_core::{OsRng, TryRngCore};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Transport {
    /// TCP with mutual TLS.
    Tcp,
    /// QUIC.
    Quic,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Arch {
    /// From the checkpoint: `model_type` in `config.json`, or LLaMA for a `.gguf` file.
    Auto,
    /// GPT-2 (`GPT2LMHeadModel`).
    Gpt2,
    /// LLaMA-style decoders (`LlamaForCausalLM`, Hugging Face directory or GGUF).
    Llama,
    /// BERT / RoBERTa encoders (sentence embeddings).
    Bert,
}

/// One computing party of secure GPT-2, LLaMA or BERT (P0 client, P1 model owner, P2
/// helper).
#[derive(Debug, Parser)]
#[command(name = "puma-party", version)]
struct Args {
    /// This party's index: 0 (client), 1 (model owner) or 2 (helper).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=2))]
    id: u8,
    /// The shared configuration file (see `keygen`).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Listen here instead of this party's address in the file (e.g. 127.0.0.1:0).
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// A peer's address instead of the file's, as ID=ADDR (repeatable).
    #[arg(long, value_name = "ID=ADDR")]
    peer: Vec<String>,
    /// The transport instead of the file's.
    #[arg(long, value_enum)]
    transport: Option<Transport>,
    /// Longest wait for a peer in seconds, instead of the file's.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    timeout: Option<u64>,
    /// A Hugging Face checkpoint directory (GPT-2, LLaMA, BERT / RoBERTa) or a LLaMA GGUF
    /// file; default: the embedded models/gpt2-shakespeare. Every party passes the same
    /// model; only the owner reads the weights (the others its config, and the client its
    /// tokenizer).
    #[arg(long, value_name = "PATH", conflicts_with = "random_shape")]
    model: Option<PathBuf>,
    /// The architecture, if not detected from the checkpoint.
    #[arg(long, value_enum, default_value_t = Arch::Auto)]
    arch: Arch,
    /// Instead of a checkpoint: a published GPT-2 shape with seeded random weights (the
    /// owner builds them; the others only take the shape), for measurements.
    #[arg(long, value_enum, value_name = "SHAPE")]
    random_shape: Option<RandomShape>,
    /// With --random-shape: keep only the first N blocks.
    #[arg(long, value_name = "N", requires = "random_shape",
          value_parser = clap::value_parser!(u64).range(1..=64))]
    layers: Option<u64>,
    /// The prompt (client only); for an encoder, a sentence to embed (repeatable).
    #[arg(long, default_value = "ROMEO:", conflicts_with = "prompt_ids")]
    prompt: Vec<String>,
    /// Token ids instead of text, comma-separated (client only).
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    prompt_ids: Option<Vec<u32>>,
    /// Tokens to generate (client only; announced to the others).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_new_tokens: u64,
    /// How tokens are picked and when generation ends (client only; the client announces
    /// the rules, the others follow them).
    #[command(flatten)]
    decoding: DecodingFlags,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let me = PartyId::from_index(usize::from(args.id));
    match run(&args, me) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{me}: error: {e}");
            match e {
                PartyError::Config(_) | PartyError::Model(_) => ExitCode::from(2),
                PartyError::ModelDiffers(_) => ExitCode::FAILURE,
                _ => ExitCode::FAILURE,
            }
        }
    }
}

fn run(args: &Args, me: PartyId) -> Result<(), PartyError> {
    let mut file = PartiesConfig::from_file(&args.config)?;
    if let Some(t) = args.transport {
        file.transport = match t {
            Transport::Tcp => Network::Tcp,
            Transport::Quic => Network::Quic,
        };
    }
    if let Some(s) = args.timeout {
        file.timeout = Duration::from_secs(s);
    }
    for p in &args.peer {
        let (id, addr) = p
            .split_once('=')
            .ok_or_else(|| PartyError::Config(format!("--peer {p:?}: expected ID=ADDR")))?;
        let idx: usize = id
            .parse()
            .ok()
            .filter(|i| *i < 3)
            .ok_or_else(|| PartyError::Config(format!("--peer {p:?}: bad party id")))?;
        if let Some(e) = file.parties.get_mut(idx) {
            e.addr = addr.to_string();
        }
    }
    let (identity, pins) = file.identity_and_pins(me)?;

    // Load what this party holds before opening the network.
    let path = args
        .model
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_MODEL_DIR));
    let arch = match (args.arch, args.random_shape) {
        (_, Some(_)) => Arch::Gpt2,
        (Arch::Auto, None) => detect_arch(&path)?,
        (a, None) => a,
    };
    let max_new = usize::try_from(args.max_new_tokens).unwrap_or(usize::MAX);
    let (model, tokenizer) = match arch {
        Arch::Gpt2 => load_gpt2_party(args, me, &path)?,
        Arch::Llama => load_llama_party(args, me, &path)?,
        Arch::Bert | Arch::Auto => load_bert_party(args, me, &path)?,
    };
    // The client prints each token's text as it learns it (decoders).
    let layers = match &model {
        PartyModel::Gpt2(j) => j.config.spec().map(|s| s.layers).ok(),
        PartyModel::Llama(j) => j.config.spec().map(|s| s.layers).ok(),
        PartyModel::Bert(..) => None,
    };
    let view = match (layers, &tokenizer) {
        (Some(layers), Some(tok)) if me == CLIENT => Some((
            Arc::new(LiveView::new(layers, max_new, false, Some(Arc::clone(tok)))),
            layers,
        )),
        _ => None,
    };
    let streamed = view
        .as_ref()
        .map(|(v, layers)| v.observer(*layers, max_new));
    // What this party holds before the protocol (the owner's plaintext model).
    let loaded_rss = current_rss();

    // Bind, say where, connect.
    let listen = args
        .listen
        .clone()
        .unwrap_or_else(|| file.entry(me).addr.clone());
    let mut endpoints = Endpoints {
        me,
        peers: [None; 3],
    };
    for p in PartyId::ALL {
        if p.index() < me.index() {
            if let Some(slot) = endpoints.peers.get_mut(p.index()) {
                *slot = Some(resolve(&file.entry(p).addr)?);
            }
        }
    }
    let session_cfg = Config::new(file.session_id);
    let opts = NetOptions {
        timeout: file.timeout,
        max_frame_len: session_cfg.max_frame_len,
        ..NetOptions::default()
    };
    let bind_err =
        |e: std::io::Error| PartyError::Config(format!("cannot listen on {listen}: {e}"));
    let t0 = Instant::now();
    let link = match file.transport {
        Network::Tcp => {
            // P2 accepts nobody over TCP and needs no listener.
            let listener = if me == PartyId::P2 {
                None
            } else {
                Some(TcpListener::bind(resolve(&listen)?).map_err(bind_err)?)
            };
            match &listener {
                Some(l) => announce(me, "tcp", &l.local_addr().map_err(bind_err)?.to_string()),
                None => announce(me, "tcp", "none (P2 dials its peers)"),
            }
            tcp::connect(&endpoints, listener, &identity, &pins, opts)
        }
        Network::Quic => {
            let socket = UdpSocket::bind(resolve(&listen)?).map_err(bind_err)?;
            announce(
                me,
                "quic",
                &socket.local_addr().map_err(bind_err)?.to_string(),
            );
            quic::connect(&endpoints, socket, &identity, &pins, opts)
        }
    };
    let link = link.map_err(PartyError::Connect)?;
    eprintln!("{me}: connected to both peers");

    let mut entropy = [0u8; 32];
    OsRng
        .try_fill_bytes(&mut entropy)
        .map_err(|e| PartyError::Config(format!("no OS randomness: {e}")))?;
    // Peak and current RSS when the prompt step's first block is done: the model sharing
    // (and the embedding) are behind, inference has begun.
    let first_block: Arc<std::sync::OnceLock<(Option<u64>, Option<u64>)>> = Arc::default();
    let seen = first_block.clone();
    let observer: Observer = Arc::new(move |ev: Progress| {
        if let Some(text) = &streamed {
            text(ev);
        }
        match ev {
            Progress::Step { step } if me == CLIENT => {
                eprintln!("{me}: step {} of {max_new} done", step + 1);
            }
            Progress::Layer { step: 0, layer: 0 } => {
                let _ = seen.set((peak_rss(), current_rss()));
            }
            _ => {}
        }
    });
    let observer = Some(observer);
    let timeout = file.timeout;
    let (output, stats) = match model {
        PartyModel::Gpt2(job) => {
            let r = run_session(
                session_cfg,
                me,
                entropy,
                decoder_protocol(me, job, observer),
                link,
                timeout,
            )?;
            (Output::Ids(r.0.map_err(PartyError::ModelDiffers)?), r.1)
        }
        PartyModel::Llama(job) => {
            let r = run_session(
                session_cfg,
                me,
                entropy,
                decoder_protocol(me, job, observer),
                link,
                timeout,
            )?;
            (Output::Ids(r.0.map_err(PartyError::ModelDiffers)?), r.1)
        }
        PartyModel::Bert(job, d) => {
            let r = run_session(
                session_cfg,
                me,
                entropy,
                encoder_protocol(me, job),
                link,
                timeout,
            )?;
            (
                Output::Embeddings(r.0.map_err(PartyError::ModelDiffers)?, d),
                r.1,
            )
        }
    };
    // The streamed text ends its line before the report.
    if let Some((v, _)) = &view {
        v.finish();
    }
    eprintln!(
        "{me}: done in {:.2} s: {} rounds, {} bytes sent",
        t0.elapsed().as_secs_f64(),
        stats.rounds,
        stats.bytes_total() + stats.setup_bytes_sent
    );
    // Memory of this party alone (one party per process); `party_memory` reads this line.
    if let (Some(peak), Some(loaded), Some((Some(peak1), Some(rss1)))) =
        (peak_rss(), loaded_rss, first_block.get().copied())
    {
        eprintln!(
            "{me}: memory: peak RSS {peak} bytes, RSS before connecting {loaded} bytes, \
             peak RSS until the first block {peak1} bytes, RSS then {rss1} bytes"
        );
    }
    // Only the client learns the output, and only after the whole session succeeded.
    if me == CLIENT {
        let mut out = std::io::stdout().lock();
        match (output, &tokenizer) {
            (Output::Ids(ids), tok) => {
                let list: Vec<String> = ids.iter().map(u32::to_string).collect();
                let _ = writeln!(out, "ids: {}", list.join(","));
                if let Some(tok) = tok {
                    let _ = writeln!(out, "text: {:?}", decode(tok, &ids));
                }
            }
            (Output::Embeddings(e, d), _) => {
                for (i, row) in e.chunks(d.max(1)).enumerate() {
                    let vals: Vec<String> = row.iter().map(|v| format!("{v:.6}")).collect();
                    let _ = writeln!(out, "embedding {i}: {}", vals.join(","));
                }
            }
        }
    }
    Ok(())
}

/// What the client learns.
enum Output {
    /// A decoder's generated ids.
    Ids(Vec<u32>),
    /// An encoder's sentence embeddings (`batch × d`) and `d`.
    Embeddings(Vec<f64>, usize),
}

/// This party's model and input.
enum PartyModel {
    Gpt2(DecoderJob<Gpt2Config>),
    Llama(DecoderJob<LlamaConfig>),
    Bert(EncoderJob, usize),
}

/// The generated ids as text, or as a list when the tokenizer cannot decode them.
fn decode(tok: &Tokenizer, ids: &[u32]) -> String {
    tok.decode(ids).unwrap_or_else(|_| format!("{ids:?}"))
}

/// How long a party that failed waits for its peers to close their connections.
const FAILED_LINGER: Duration = Duration::from_millis(500);

/// Runs one session over `link`; returns the client's output and the session's counters.
fn run_session<T: Send + 'static, F, Fut>(
    cfg: Config,
    me: PartyId,
    entropy: [u8; 32],
    protocol: F,
    mut link: puma_transports::net::NetLink,
    timeout: Duration,
) -> Result<(T, puma_core::Stats), PartyError>
where
    F: FnOnce(puma_core::Ctx) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, puma_core::Error>> + Send + 'static,
{
    let mut session =
        Session::new(cfg, me, entropy, protocol).map_err(|e| PartyError::Config(e.to_string()))?;
    let result = drive(&mut session, &mut link, timeout);
    // After a success the peers close at once, and lingering lets them read our last
    // frames. After a failure a peer may be stalled (often the very cause): waiting the
    // full timeout for its close would double the time until the error is reported.
    let linger = if result.is_ok() {
        timeout
    } else {
        FAILED_LINGER.min(timeout)
    };
    let closing = link.finish(linger);
    let out = result.map_err(|error| PartyError::Session {
        error,
        broken: closing.broken,
    })?;
    Ok((out, session.stats()))
}

/// The architecture of the checkpoint at `path` ([`checkpoint::detect`]).
fn detect_arch(path: &std::path::Path) -> Result<Arch, PartyError> {
    Ok(match checkpoint::detect(path).map_err(PartyError::Model)? {
        ModelKind::Gpt2 => Arch::Gpt2,
        ModelKind::Llama => Arch::Llama,
        ModelKind::Bert => Arch::Bert,
    })
}

fn model_err(e: impl std::fmt::Display) -> PartyError {
    PartyError::Model(e.to_string())
}

/// GPT-2: the owner's checkpoint (or seeded random weights of a published shape), the
/// others' config, the client's prompt.
fn load_gpt2_party(
    args: &Args,
    me: PartyId,
    dir: &std::path::Path,
) -> Result<(PartyModel, Option<Arc<Tokenizer>>), PartyError> {
    let (config, weights) = if let Some(r) = args.random_shape {
        let shape = r.shape();
        let layers = args
            .layers
            .map_or(shape.layers, |l| usize::try_from(l).unwrap_or(shape.layers));
        if me == OWNER {
            let (c, w) = random_gpt2(shape, layers);
            (c, Some(Arc::new(w)))
        } else {
            (shape_config(shape, layers), None)
        }
    } else if me == OWNER {
        let m = load_model(dir).map_err(model_err)?;
        (m.config, Some(Arc::new(m.weights)))
    } else {
        (
            Gpt2Config::from_file(&dir.join("config.json")).map_err(model_err)?,
            None,
        )
    };
    let tok = if me == CLIENT {
        // Random weights of a published shape use GPT-2's vocabulary: the built-in one.
        let tok = if args.random_shape.is_some() {
            Tokenizer::gpt2()
        } else {
            Tokenizer::from_gpt2_dir(dir)
        };
        let tok = tok.map_err(model_err)?;
        if args.random_shape.is_none() && tok.source() == &TokenizerSource::BuiltinGpt2 {
            eprintln!(
                "{me}: {} has no tokenizer files; using the built-in GPT-2 tokenizer (r50k_base)",
                dir.display()
            );
        }
        Some(tok)
    } else {
        None
    };
    let tok = tok.map(Arc::new);
    // Random weights have no end-of-sequence rule: they generate the tokens asked for.
    let eos = if args.random_shape.is_some() {
        Vec::new()
    } else {
        eos_ids(dir).map_err(model_err)?
    };
    let job = decoder_job(args, config, weights, tok.as_ref(), dir, eos)?;
    Ok((PartyModel::Gpt2(job), tok))
}

/// LLaMA: a Hugging Face directory or a GGUF file.
fn load_llama_party(
    args: &Args,
    me: PartyId,
    path: &std::path::Path,
) -> Result<(PartyModel, Option<Arc<Tokenizer>>), PartyError> {
    let gguf = path.extension().is_some_and(|e| e == "gguf");
    let (config, weights) = if me == OWNER {
        let m = puma_runner::llama::load_model(path).map_err(model_err)?;
        (m.config, Some(Arc::new(m.weights)))
    } else if gguf {
        let f = puma_layers::gguf::GgufFile::open(path).map_err(model_err)?;
        (LlamaConfig::from_gguf(&f).map_err(model_err)?, None)
    } else {
        (
            LlamaConfig::from_file(&path.join("config.json")).map_err(model_err)?,
            None,
        )
    };
    let tok = match (me == CLIENT, gguf) {
        (false, _) => None,
        (true, true) => {
            let f = puma_layers::gguf::GgufFile::open(path).map_err(model_err)?;
            Some(Tokenizer::from_gguf(&f, path).map_err(model_err)?)
        }
        (true, false) => Some(Tokenizer::from_dir(path).map_err(model_err)?),
    };
    let tok = tok.map(Arc::new);
    let eos = eos_ids(path).map_err(model_err)?;
    let job = decoder_job(args, config, weights, tok.as_ref(), path, eos)?;
    Ok((PartyModel::Llama(job), tok))
}

/// A decoder's job: at the client (`tok` is its tokenizer), the prompt ids from
/// `--prompt-ids` or the encoded `--prompt`, checked against the model, and the decoding
/// rules of its flags (`model`: the checkpoint, for its end-of-sequence ids).
fn decoder_job<A: DecoderArch>(
    args: &Args,
    config: A,
    weights: Option<Arc<A::Weights>>,
    tok: Option<&Arc<Tokenizer>>,
    model: &std::path::Path,
    eos: Vec<u32>,
) -> Result<DecoderJob<A>, PartyError> {
    let max_new = usize::try_from(args.max_new_tokens).unwrap_or(usize::MAX);
    if let Some(w) = &weights {
        // The owner refuses, before connecting, weights the protocols would compute wrong.
        let fx = Config::new(0).fixed;
        let settings = SecureSettings::default();
        if let Some(e) = decoder_range_check(&config, w, &settings, fx).map_err(model_err)? {
            return Err(PartyError::Model(e.to_string()));
        }
    }
    let (prompt, rules) = match tok {
        Some(tok) => {
            let ids = match &args.prompt_ids {
                Some(ids) => ids.clone(),
                None => tok.encode(&args.prompt.join(" ")).map_err(model_err)?,
            };
            check_prompt(&config, &ids, max_new)
                .map_err(|e| PartyError::Model(format!("bad prompt: {e}")))?;
            let vocab = config.spec().map_err(model_err)?.vocab;
            let mut opts = RunOptions::default();
            args.decoding
                .apply(&mut opts, model, tok, vocab)
                .map_err(PartyError::Config)?;
            let rules = ClientRules {
                decoding: opts.decoding(),
                stop: opts.stop,
            };
            (Some(ids.into()), Some(rules))
        }
        None => (None, None),
    };
    Ok(DecoderJob {
        config,
        weights,
        prompt,
        max_new_tokens: max_new,
        eos,
        rules,
        settings: SecureSettings::default(),
    })
}

/// BERT / RoBERTa: sentence embeddings of the client's sentences.
fn load_bert_party(
    args: &Args,
    me: PartyId,
    dir: &std::path::Path,
) -> Result<(PartyModel, Option<Arc<Tokenizer>>), PartyError> {
    let (config, weights) = if me == OWNER {
        let (c, w) = puma_layers::bert::load_bert(dir).map_err(model_err)?;
        (c, Some(Arc::new(w)))
    } else {
        (
            BertConfig::from_file(&dir.join("config.json")).map_err(model_err)?,
            None,
        )
    };
    let batch = if me == CLIENT {
        let seqs: Vec<(Vec<u32>, Vec<u32>)> = match &args.prompt_ids {
            Some(ids) => vec![(ids.clone(), vec![0; ids.len()])],
            None => {
                // Refused before connecting: the peers would wait for a session that
                // cannot start.
                if let Some(i) = args.prompt.iter().position(|t| t.trim().is_empty()) {
                    return Err(PartyError::Model(format!(
                        "--prompt number {} is empty: give the sentence to embed",
                        i + 1
                    )));
                }
                let tok = Tokenizer::from_dir(dir).map_err(model_err)?;
                args.prompt
                    .iter()
                    .map(|t| {
                        let ids = tok.encode(t).map_err(model_err)?;
                        let types = vec![0; ids.len()];
                        Ok((ids, types))
                    })
                    .collect::<Result<_, PartyError>>()?
            }
        };
        let batch = BertBatch::padded(&seqs, 0).map_err(model_err)?;
        batch
            .check(&config)
            .map_err(|e| PartyError::Model(format!("bad input: {e}")))?;
        Some(batch)
    } else {
        None
    };
    let d = config.hidden_size;
    let job = EncoderJob {
        config,
        weights,
        batch,
        settings: SecureSettings::default(),
    };
    Ok((PartyModel::Bert(job, d), None))
}

fn announce(me: PartyId, transport: &str, addr: &str) {
    // The integration tests read this line to learn ephemeral ports.
    eprintln!("{me}: {transport} listening on {addr}");
}
