//! One computing server of the secure inference service, as a long-running process.
//!
//! ```sh
//! cargo run --release -p puma-examples --bin keygen -- --out svc --service
//! cargo run --release -p puma-examples --bin puma-serve -- --config svc/service.toml --id 0 &
//! cargo run --release -p puma-examples --bin puma-serve -- --config svc/service.toml --id 1 &
//! cargo run --release -p puma-examples --bin puma-serve -- --config svc/service.toml --id 2 &
//! cargo run --release -p puma-examples --bin puma-client -- --config svc/service.toml \
//!     upload --name shakespeare --model models/gpt2-shakespeare
//! cargo run --release -p puma-examples --bin puma-client -- --config svc/service.toml \
//!     generate --model shakespeare --tokenizer models/gpt2-shakespeare --prompt "JULIET:"
//! ```
//!
//! The server loads the share stores in its store folder, connects to the other two
//! servers (and reconnects when one comes back after a loss), and serves clients and
//! owners on its client address. It logs one `key=value` line per event on standard
//! error, never a secret. SIGTERM or SIGINT stops it: it accepts nothing new and lets the
//! running requests finish (at most `--grace-secs`). Exit status: 0 after a signal, 2 when
//! it cannot start (configuration, store, address).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::Parser;
use puma_core::PartyId;
use puma_layers::nn::SecureSettings;
use puma_serve::config::ServiceConfig;
use puma_serve::daemon;

/// One computing server of the secure inference service.
#[derive(Parser, Debug)]
#[command(name = "puma-serve", version, about)]
struct Args {
    /// The service's configuration file (service.toml).
    #[arg(long)]
    config: PathBuf,
    /// This server's party index (0, 1 or 2).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=2))]
    id: u8,
    /// How long running requests may go on after SIGTERM.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=3600))]
    grace_secs: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let me = match args.id {
        0 => PartyId::P0,
        1 => PartyId::P1,
        _ => PartyId::P2,
    };
    let cfg = match ServiceConfig::from_file(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("puma-serve: {e}");
            return ExitCode::from(2);
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    match daemon::run(
        cfg,
        me,
        SecureSettings::default(),
        Duration::from_secs(args.grace_secs),
        stop,
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("puma-serve: {e}");
            ExitCode::from(2)
        }
    }
}
