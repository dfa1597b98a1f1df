//! A development PKI for three parties: a self-signed certificate and key per party, and
//! a `parties.toml` that pins them.
//!
//! ```sh
//! cargo run -p puma-examples --bin keygen -- --out parties
//! cargo run -p puma-examples --bin keygen -- --out parties --hosts 10.0.0.1,10.0.0.2,10.0.0.3 --port 7000
//! ```
//!
//! Writes `p0.cert.pem`, `p0.key.pem`, … and `parties.toml` into the folder. For three
//! hosts, give each host the file, all three certificates and only its own key.
//! Development only: real parties make their own keys and exchange certificates.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use puma_core::PartyId;
use puma_transports::tls::Identity;

/// Writes a development PKI and a parties.toml for three parties.
#[derive(Debug, Parser)]
#[command(name = "keygen", version)]
struct Args {
    /// Output folder (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The parties' hosts, comma-separated (P0,P1,P2).
    #[arg(
        long,
        value_delimiter = ',',
        num_args = 3,
        default_value = "127.0.0.1,127.0.0.1,127.0.0.1"
    )]
    hosts: Vec<String>,
    /// The first port; party i listens on port + i.
    #[arg(long, default_value_t = 7000)]
    port: u16,
    /// The transport written to the file: tcp or quic.
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "quic"])]
    transport: String,
    /// The session id written to the file.
    #[arg(long, default_value_t = 1)]
    session_id: u64,
    /// Overwrite existing files.
    #[arg(long)]
    force: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keygen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write(path: &Path, text: &str, force: bool) -> Result<(), String> {
    if path.exists() && !force {
        return Err(format!("{} exists (use --force)", path.display()));
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn run(args: &Args) -> Result<(), String> {
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    let mut toml = format!(
        "# Three puma-rs parties (development PKI made by keygen).\n\
         session_id = {}\ntransport = \"{}\"\ntimeout_secs = 30\n",
        args.session_id, args.transport
    );
    for (p, host) in PartyId::ALL.into_iter().zip(&args.hosts) {
        let i = p.index();
        let id = Identity::generate(p).map_err(|e| e.to_string())?;
        write(
            &args.out.join(format!("p{i}.cert.pem")),
            &id.cert_pem(),
            args.force,
        )?;
        write(
            &args.out.join(format!("p{i}.key.pem")),
            &id.key_pem(),
            args.force,
        )?;
        let port = args
            .port
            .checked_add(i as u16)
            .ok_or("the port range overflows")?;
        let addr = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        toml.push_str(&format!(
            "\n[[party]]\nid = {i}\naddr = \"{addr}\"\ncert = \"p{i}.cert.pem\"\nkey = \"p{i}.key.pem\"\n"
        ));
    }
    write(&args.out.join("parties.toml"), &toml, args.force)?;
    println!(
        "wrote p0..p2 certificates and keys and parties.toml to {}",
        args.out.display()
    );
    Ok(())
}
