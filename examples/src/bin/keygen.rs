//! A development PKI for three parties: a self-signed certificate and key per party, and
//! a `parties.toml` that pins them.
//!
//! ```sh
//! cargo run -p puma-examples --bin keygen -- --out parties
//! cargo run -p puma-examples --bin keygen -- --out parties --hosts 10.0.0.1,10.0.0.2,10.0.0.3 --port 7000
//! ```
//!
//! Writes `p0.cert.pem`, `p0.key.pem`, … and `parties.toml` into the folder; with
//! `--service`, also the `service.toml` of three `puma-serve` servers (server i's peers
//! connect on port `--port` plus i, its clients on `--client-port` plus i; store folders
//! `p0-store`, …). For three hosts, give each host the files, all three certificates and
//! only its own key.
//! Development only: real parties make their own keys and exchange certificates.

use std::path::PathBuf;
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
    /// The parties' hosts P0,P1,P2: three values, comma- or space-separated.
    #[arg(
        long,
        value_delimiter = ',',
        num_args = 1..=3,
        default_value = "127.0.0.1,127.0.0.1,127.0.0.1"
    )]
    hosts: Vec<String>,
    /// The first port; party i listens on port + i (at most 65533).
    #[arg(long, default_value_t = 7000)]
    port: u16,
    /// The transport written to the file: tcp or quic.
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "quic"])]
    transport: String,
    /// The session id written to the file.
    #[arg(long, default_value_t = 1)]
    session_id: u64,
    /// Also write service.toml, for three puma-serve servers.
    #[arg(long)]
    service: bool,
    /// With --service: the first port for clients; server i listens on it + i.
    #[arg(long, default_value_t = 7100)]
    client_port: u16,
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

/// The `host:port` each party listens on, checked before anything is written.
fn addresses(args: &Args, first: u16, flag: &str) -> Result<Vec<String>, String> {
    if args.hosts.len() != 3 {
        return Err(format!(
            "--hosts needs three hosts (P0,P1,P2), got {}: {}",
            args.hosts.len(),
            args.hosts.join(",")
        ));
    }
    let mut out = Vec::with_capacity(3);
    for (i, host) in args.hosts.iter().enumerate() {
        let host = host.trim();
        if host.is_empty() || host.contains(char::is_whitespace) || host.contains('"') {
            return Err(format!(
                "--hosts: host {i} ({host:?}) is not a host name or address"
            ));
        }
        let port = u16::try_from(i)
            .ok()
            .and_then(|i| first.checked_add(i))
            .ok_or_else(|| {
                format!(
                    "{flag} {first}: the parties need ports {first}..{}, beyond 65535 (at most 65533)",
                    u32::from(first) + 2
                )
            })?;
        // A bare IPv6 address needs brackets before the port.
        out.push(if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        });
    }
    Ok(out)
}

fn run(args: &Args) -> Result<(), String> {
    let addrs = addresses(args, args.port, "--port")?;
    let client_addrs = if args.service {
        addresses(args, args.client_port, "--client-port")?
    } else {
        Vec::new()
    };
    let names: Vec<PathBuf> = (0..3)
        .flat_map(|i| [format!("p{i}.cert.pem"), format!("p{i}.key.pem")])
        .chain(["parties.toml".to_string()])
        .chain(args.service.then(|| "service.toml".to_string()))
        .map(|n| args.out.join(n))
        .collect();
    // All or nothing: refuse before writing the first file.
    if !args.force {
        if let Some(p) = names.iter().find(|p| p.exists()) {
            return Err(format!("{} exists (use --force)", p.display()));
        }
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| format!("cannot create {}: {e}", args.out.display()))?;
    let mut toml = format!(
        "# Three puma-rs parties (development PKI made by keygen).\n\
         session_id = {}\ntransport = \"{}\"\ntimeout_secs = 30\n",
        args.session_id, args.transport
    );
    for (p, addr) in PartyId::ALL.into_iter().zip(&addrs) {
        let i = p.index();
        let id = Identity::generate(p).map_err(|e| e.to_string())?;
        id.write_pem_files(
            &args.out.join(format!("p{i}.cert.pem")),
            &args.out.join(format!("p{i}.key.pem")),
            args.force,
        )
        .map_err(|e| e.to_string())?;
        toml.push_str(&format!(
            "\n[[party]]\nid = {i}\naddr = \"{addr}\"\ncert = \"p{i}.cert.pem\"\nkey = \"p{i}.key.pem\"\n"
        ));
    }
    let toml_path = args.out.join("parties.toml");
    if toml_path.exists() && !args.force {
        return Err(format!("{} exists (use --force)", toml_path.display()));
    }
    std::fs::write(&toml_path, &toml)
        .map_err(|e| format!("cannot write {}: {e}", toml_path.display()))?;
    if args.service {
        let mut svc = String::from(
            "# Three puma-serve servers (development PKI made by keygen).\n\
             peer_timeout_secs = 30\nmax_running = 4\nmax_queued = 16\nqueue_wait_secs = 60\n\
             deadline_secs = 600\naccept_uploads = true\n",
        );
        svc.push_str(&puma_serve::config::development_servers(
            &addrs,
            &client_addrs,
        ));
        let path = args.out.join("service.toml");
        std::fs::write(&path, &svc).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    println!(
        "wrote p0..p2 certificates, keys (mode 0600) and parties.toml{} to {}",
        if args.service {
            " and service.toml"
        } else {
            ""
        },
        args.out.display()
    );
    Ok(())
}
