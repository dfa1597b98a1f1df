//! Peak memory of each party of secure GPT-2, measured with one party per OS process.
//!
//! ```sh
//! cargo build --release -p puma-examples --bin puma-party && cargo build --release -p puma-bench --bin party_memory \
//!   && target/release/party_memory [--layers L] [--new-tokens N] [--transport quic]
//! ```
//!
//! Writes a development PKI to a temporary folder, starts the three `puma-party` processes
//! (found next to this binary) on 127.0.0.1 with `--random-shape base` (GPT-2 base with
//! seeded random weights, 32 prompt tokens → N new tokens), waits for them, and prints each
//! party's peak resident set size (Linux `VmHWM` of its own process), its resident set
//! before connecting (at the owner: the plaintext f64 model it has built), and its peak and
//! resident set when the prompt step's first block was done (the model sharing behind it).
//! Exit status 0 only if all three parties succeed.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use clap::Parser;
use puma_core::PartyId;
use puma_transports::tls::Identity;

/// Per-party peak memory of secure GPT-2 base, one party per process over loopback.
#[derive(Debug, Parser)]
#[command(name = "party_memory", version)]
struct Args {
    /// GPT-2 base blocks to keep (12 is the whole model).
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u64).range(1..=12))]
    layers: u64,
    /// Tokens to generate after the 32-token prompt.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
    new_tokens: u64,
    /// The transport between the parties: tcp (TCP+TLS) or quic.
    #[arg(long, default_value = "tcp", value_parser = ["tcp", "quic"])]
    transport: String,
    /// Longest wait for a peer, in seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("party_memory: {e}");
            ExitCode::from(2)
        }
    }
}

/// One `puma-party` child whose stderr lines arrive on a channel.
struct Party {
    id: usize,
    child: Child,
    lines: Receiver<String>,
    stderr: Vec<String>,
}

impl Party {
    fn spawn(exe: &Path, id: usize, config: &Path, extra: &[String]) -> Result<Party, String> {
        let mut child = Command::new(exe)
            .args(["--id", &id.to_string(), "--config"])
            .arg(config)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", exe.display()))?;
        let (tx, lines) = channel();
        let err = child.stderr.take().ok_or("no stderr pipe")?;
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Party {
            id,
            child,
            lines,
            stderr: Vec::new(),
        })
    }

    /// The address from the party's "listening on" line.
    fn listening_addr(&mut self, limit: Duration) -> Result<String, String> {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let l = self.lines.recv_timeout(left).map_err(|_| {
                format!(
                    "P{} did not say where it listens: {:?}",
                    self.id, self.stderr
                )
            })?;
            self.stderr.push(l.clone());
            if l.contains("listening on") {
                return l
                    .rsplit(' ')
                    .next()
                    .map(str::to_string)
                    .ok_or_else(|| format!("P{}: bad line {l:?}", self.id));
            }
        }
    }

    /// Waits for the exit; returns success, stdout and all stderr lines.
    fn finish(mut self) -> Result<(bool, String, Vec<String>), String> {
        let status = self
            .child
            .wait()
            .map_err(|e| format!("P{}: {e}", self.id))?;
        let mut out = String::new();
        if let Some(mut s) = self.child.stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.stderr.push(l);
        }
        Ok((status.success(), out, self.stderr))
    }
}

/// Writes certificates, keys and a `parties.toml` (ephemeral ports) into `dir`.
fn write_pki(dir: &Path, transport: &str, timeout: u64) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut toml =
        format!("session_id = 1\ntransport = \"{transport}\"\ntimeout_secs = {timeout}\n");
    for p in PartyId::ALL {
        let i = p.index();
        let id = Identity::generate(p).map_err(|e| e.to_string())?;
        id.write_pem_files(
            &dir.join(format!("p{i}.cert.pem")),
            &dir.join(format!("p{i}.key.pem")),
            true,
        )
        .map_err(|e| e.to_string())?;
        toml.push_str(&format!(
            "\n[[party]]\nid = {i}\naddr = \"127.0.0.1:0\"\ncert = \"p{i}.cert.pem\"\nkey = \"p{i}.key.pem\"\n"
        ));
    }
    let path = dir.join("parties.toml");
    std::fs::write(&path, toml).map_err(|e| format!("cannot write parties.toml: {e}"))?;
    Ok(path)
}

/// `[peak, before connecting, peak until the first block, RSS then]` in bytes from a
/// party's memory line.
fn memory_line(lines: &[String]) -> Option<[u64; 4]> {
    let l = lines.iter().find(|l| l.contains("memory: peak RSS"))?;
    let nums: Vec<u64> = l
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    nums.try_into().ok()
}

fn run(args: &Args) -> Result<bool, String> {
    let exe = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name("puma-party");
    if !exe.exists() {
        return Err(format!(
            "{} is missing: build it first (cargo build --release -p puma-examples --bin puma-party)",
            exe.display()
        ));
    }
    let dir = std::env::temp_dir().join(format!("puma-party-memory-{}", std::process::id()));
    let config = write_pki(&dir, &args.transport, args.timeout)?;
    let prompt: Vec<String> = (0..32u32)
        .map(|i| ((i * 1543 + 17) % 50257).to_string())
        .collect();
    let common = [
        "--random-shape".to_string(),
        "base".into(),
        "--layers".into(),
        args.layers.to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
    ];
    let wait = Duration::from_secs(args.timeout);
    let t0 = Instant::now();
    // P0 listens first; P1 dials P0 and listens; P2 dials both (as in the parties' file).
    let mut a0 = common.to_vec();
    a0.extend([
        "--prompt-ids".into(),
        prompt.join(","),
        "--max-new-tokens".into(),
        args.new_tokens.to_string(),
    ]);
    let mut p0 = Party::spawn(&exe, 0, &config, &a0)?;
    let addr0 = p0.listening_addr(wait)?;
    let mut a1 = common.to_vec();
    a1.extend(["--peer".into(), format!("0={addr0}")]);
    let mut p1 = Party::spawn(&exe, 1, &config, &a1)?;
    let addr1 = p1.listening_addr(wait)?;
    let mut a2 = common.to_vec();
    a2.extend([
        "--peer".into(),
        format!("0={addr0}"),
        "--peer".into(),
        format!("1={addr1}"),
    ]);
    let p2 = Party::spawn(&exe, 2, &config, &a2)?;
    let mut ok = true;
    let mut rows = Vec::new();
    for p in [p0, p1, p2] {
        let id = p.id;
        let (success, out, err) = p.finish()?;
        if !success {
            ok = false;
            eprintln!("P{id} failed:\n{}", err.join("\n"));
        }
        if !out.is_empty() {
            print!("P{id} output: {out}");
        }
        if let Some(done) = err.iter().find(|l| l.contains("done in")) {
            println!("{done}");
        }
        rows.push((id, memory_line(&err)));
    }
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "GPT-2 base shape, {} layers, 32 → {} tokens, one party per process over {} on 127.0.0.1 ({:.1} s)",
        args.layers,
        args.new_tokens,
        args.transport,
        t0.elapsed().as_secs_f64()
    );
    let role = ["client", "model owner", "helper"];
    for (id, mem) in rows {
        let name = role.get(id).copied().unwrap_or("");
        match mem {
            Some([peak, before, peak1, rss1]) => println!(
                "P{id} ({name}): peak RSS {:.3} GB; before connecting {:.3} GB; when the prompt's first block was done: peak so far {:.3} GB, resident {:.3} GB",
                peak as f64 / 1e9,
                before as f64 / 1e9,
                peak1 as f64 / 1e9,
                rss1 as f64 / 1e9
            ),
            None => {
                ok = false;
                println!("P{id} ({name}): no memory figure");
            }
        }
    }
    Ok(ok)
}
