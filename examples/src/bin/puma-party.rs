//! One party of secure GPT-2 as an OS process, over TCP+TLS or QUIC.
//!
//! ```sh
//! cargo run --release -p puma-examples --bin keygen -- --out parties
//! cargo run --release -p puma-examples --bin puma-party -- --id 1 --config parties/parties.toml &
//! cargo run --release -p puma-examples --bin puma-party -- --id 2 --config parties/parties.toml &
//! cargo run --release -p puma-examples --bin puma-party -- --id 0 --config parties/parties.toml --prompt "ROMEO:"
//! ```
//!
//! P0 (client) holds the prompt and prints the generated text; P1 (model owner) loads
//! the weights; P2 helps. Exit status: 0 on success, 1 when the session or the network
//! fails (the message names the peer), 2 for a bad command line, configuration or model.

use std::io::Write;
use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use puma_core::{Config, PartyId, Session};
use puma_layers::nn::{Observer, Progress, SecureSettings};
use puma_layers::{Gpt2Config, Gpt2Tokenizer};
use puma_runner::gpt2::{CLIENT, DEFAULT_MODEL_DIR, OWNER, load_model};
use puma_runner::party::{Gpt2Job, PartiesConfig, PartyError, gpt2_protocol, resolve};
use puma_runner::random_gpt2::{
    GPT2_BASE, GPT2_LARGE, GPT2_MEDIUM, Gpt2Shape, current_rss, peak_rss, random_gpt2, shape_config,
};
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
enum RandomShape {
    /// GPT-2 base: 12 layers, width 768 (124 M parameters).
    Base,
    /// GPT-2 medium: 24 layers, width 1024.
    Medium,
    /// GPT-2 large: 36 layers, width 1280.
    Large,
}

impl RandomShape {
    fn shape(self) -> Gpt2Shape {
        match self {
            RandomShape::Base => GPT2_BASE,
            RandomShape::Medium => GPT2_MEDIUM,
            RandomShape::Large => GPT2_LARGE,
        }
    }
}

/// One computing party of secure GPT-2 (P0 client, P1 model owner, P2 helper).
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
    /// A Hugging Face GPT-2 directory; default: the embedded models/gpt2-shakespeare.
    /// All parties must use the same architecture; only the owner reads the weights.
    #[arg(long, value_name = "DIR", conflicts_with = "random_shape")]
    model: Option<PathBuf>,
    /// Instead of a checkpoint: a published GPT-2 shape with seeded random weights (the
    /// owner builds them; the others only take the shape), for measurements.
    #[arg(long, value_enum, value_name = "SHAPE")]
    random_shape: Option<RandomShape>,
    /// With --random-shape: keep only the first N blocks.
    #[arg(long, value_name = "N", requires = "random_shape",
          value_parser = clap::value_parser!(u64).range(1..=64))]
    layers: Option<u64>,
    /// The prompt (client only).
    #[arg(long, default_value = "ROMEO:", conflicts_with = "prompt_ids")]
    prompt: String,
    /// Token ids instead of text, comma-separated (client only).
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    prompt_ids: Option<Vec<u32>>,
    /// Tokens to generate (client only; announced to the others).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=4096))]
    max_new_tokens: u64,
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
    let dir = args
        .model
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_MODEL_DIR));
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
        let m = load_model(&dir).map_err(|e| PartyError::Model(e.to_string()))?;
        (m.config, Some(Arc::new(m.weights)))
    } else {
        let c = Gpt2Config::from_file(&dir.join("config.json"))
            .map_err(|e| PartyError::Model(e.to_string()))?;
        (c, None)
    };
    let tokenizer = if me == CLIENT {
        Some(Gpt2Tokenizer::new().map_err(|e| PartyError::Model(e.to_string()))?)
    } else {
        None
    };
    let prompt: Option<Arc<[u32]>> = match (&tokenizer, &args.prompt_ids) {
        (None, _) => None,
        (Some(_), Some(ids)) => Some(ids.as_slice().into()),
        (Some(t), None) => Some(t.encode(&args.prompt).into()),
    };
    if let Some(p) = &prompt {
        config
            .check_ids(p, 0)
            .map_err(|e| PartyError::Model(format!("bad prompt: {e}")))?;
    }

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
    let mut link = link.map_err(PartyError::Connect)?;
    eprintln!("{me}: connected to both peers");

    let mut entropy = [0u8; 32];
    OsRng
        .try_fill_bytes(&mut entropy)
        .map_err(|e| PartyError::Config(format!("no OS randomness: {e}")))?;
    let max_new = usize::try_from(args.max_new_tokens).unwrap_or(usize::MAX);
    // Peak and current RSS when the prompt step's first block is done: the model sharing
    // (and the embedding) are behind, inference has begun.
    let first_block: Arc<std::sync::OnceLock<(Option<u64>, Option<u64>)>> = Arc::default();
    let seen = first_block.clone();
    let observer: Observer = Arc::new(move |ev: Progress| match ev {
        Progress::Step { step } if me == CLIENT => {
            eprintln!("{me}: step {} of {max_new} done", step + 1);
        }
        Progress::Layer { step: 0, layer: 0 } => {
            let _ = seen.set((peak_rss(), current_rss()));
        }
        _ => {}
    });
    let observer = Some(observer);
    let job = Gpt2Job {
        config,
        weights,
        prompt: prompt.clone(),
        max_new_tokens: max_new,
        settings: SecureSettings::default(),
    };
    let mut session = Session::new(session_cfg, me, entropy, gpt2_protocol(me, job, observer))
        .map_err(|e| PartyError::Config(e.to_string()))?;
    let result = drive(&mut session, &mut link, file.timeout);
    let closing = link.finish(file.timeout);
    let ids = result.map_err(|error| PartyError::Session {
        error,
        broken: closing.broken,
    })?;
    let stats = session.stats();
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
    if let Some(tok) = tokenizer {
        // Only the client learns the output, and only after the whole session succeeded.
        let text = tok.decode(&ids).unwrap_or_else(|_| format!("{ids:?}"));
        let mut out = std::io::stdout().lock();
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        let _ = writeln!(out, "ids: {}", list.join(","));
        let _ = writeln!(out, "text: {text:?}");
    }
    Ok(())
}

fn announce(me: PartyId, transport: &str, addr: &str) {
    // The integration tests read this line to learn ephemeral ports.
    eprintln!("{me}: {transport} listening on {addr}");
}
