//! Three `puma-party` OS processes on 127.0.0.1 (ephemeral ports): a complete secure
//! GPT-2 run on the tiny model, and a party killed mid-run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use puma_layers::gpt2::plain::PlainGpt2;
use puma_runner::gpt2::{TINY_MODEL_DIR, load_model};

const PARTY: &str = env!("CARGO_BIN_EXE_puma-party");
const KEYGEN: &str = env!("CARGO_BIN_EXE_keygen");
const PROMPT: [u32; 3] = [464, 2068, 7586];

fn pki(name: &str, transport: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("puma-party-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let st = Command::new(KEYGEN)
        .args(["--out", dir.to_str().unwrap(), "--transport", transport])
        .status()
        .unwrap();
    assert!(st.success());
    dir.join("parties.toml")
}

struct Party {
    child: Child,
    lines: Receiver<String>,
    stderr: Vec<String>,
}

impl Party {
    fn spawn(id: u8, config: &Path, extra: &[String]) -> Party {
        let mut child = Command::new(PARTY)
            .args([
                "--id",
                &id.to_string(),
                "--config",
                config.to_str().unwrap(),
            ])
            .args(["--model", TINY_MODEL_DIR, "--timeout", "10"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Party {
            child,
            lines,
            stderr: Vec::new(),
        }
    }

    /// Waits for a stderr line containing `needle`; returns it.
    fn wait_for(&mut self, needle: &str, limit: Duration) -> String {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.stderr.push(l.clone());
                    if l.contains(needle) {
                        return l;
                    }
                }
                Err(_) => panic!("no {needle:?} within {limit:?}; stderr: {:?}", self.stderr),
            }
        }
    }

    fn listening_addr(&mut self) -> String {
        let l = self.wait_for("listening on", Duration::from_secs(30));
        l.rsplit(' ').next().unwrap().to_string()
    }

    /// Waits for the exit (at most `limit`); returns the status, stdout and all stderr.
    fn finish(mut self, limit: Duration) -> (Option<i32>, String, String, Duration) {
        let t0 = Instant::now();
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                panic!("party did not exit within {limit:?}: {:?}", self.stderr);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = t0.elapsed();
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.stderr.push(l);
        }
        (status.code(), out, self.stderr.join("\n"), took)
    }
}

/// Starts P0, P1 and P2 on ephemeral ports, each learning the earlier ones' addresses.
fn start(config: &Path, client_args: &[String]) -> [Party; 3] {
    let listen = ["--listen".to_string(), "127.0.0.1:0".to_string()];
    let mut args0 = listen.to_vec();
    args0.extend_from_slice(client_args);
    let mut p0 = Party::spawn(0, config, &args0);
    let a0 = p0.listening_addr();
    let mut args1 = listen.to_vec();
    args1.extend(["--peer".into(), format!("0={a0}")]);
    let mut p1 = Party::spawn(1, config, &args1);
    let a1 = p1.listening_addr();
    let args2 = [
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--peer".into(),
        format!("0={a0}"),
        "--peer".into(),
        format!("1={a1}"),
    ];
    let p2 = Party::spawn(2, config, &args2);
    [p0, p1, p2]
}

fn client_args(n: usize) -> Vec<String> {
    let ids: Vec<String> = PROMPT.iter().map(u32::to_string).collect();
    vec![
        "--prompt-ids".into(),
        ids.join(","),
        "--max-new-tokens".into(),
        n.to_string(),
    ]
}

#[test]
fn three_processes_complete_a_secure_gpt2_run() {
    for transport in ["tcp", "quic"] {
        let config = pki(&format!("ok-{transport}"), transport);
        let n = 3;
        let [p0, p1, p2] = start(&config, &client_args(n));
        let (c2, _, e2, _) = p2.finish(Duration::from_secs(120));
        let (c1, out1, e1, _) = p1.finish(Duration::from_secs(30));
        let (c0, out0, e0, _) = p0.finish(Duration::from_secs(30));
        assert_eq!(c0, Some(0), "{transport} P0: {e0}");
        assert_eq!(c1, Some(0), "{transport} P1: {e1}");
        assert_eq!(c2, Some(0), "{transport} P2: {e2}");
        // Only the client prints a result: the plaintext model's greedy ids.
        let model = load_model(Path::new(TINY_MODEL_DIR)).unwrap();
        let plain = PlainGpt2::new(model.config, model.weights).unwrap();
        let want: Vec<String> = plain
            .generate_greedy(&PROMPT, n)
            .unwrap()
            .iter()
            .map(u32::to_string)
            .collect();
        assert!(
            out0.contains(&format!("ids: {}", want.join(","))),
            "{transport}: {out0}"
        );
        assert!(!out1.contains("ids:"), "{out1}");
    }
}

#[test]
fn killing_a_party_mid_run_ends_the_others_with_an_error_naming_it() {
    let config = pki("kill", "tcp");
    let [mut p0, p1, mut p2] = start(&config, &client_args(40));
    // Mid-run: the prompt step is done, many steps remain.
    p0.wait_for("step 1 of 40 done", Duration::from_secs(120));
    p2.child.kill().unwrap();
    let _ = p2.child.wait();
    let (c0, out0, e0, t0) = p0.finish(Duration::from_secs(20));
    let (c1, _, e1, t1) = p1.finish(Duration::from_secs(20));
    for (c, e, t, who) in [(c0, &e0, t0, "P0"), (c1, &e1, t1, "P1")] {
        assert_eq!(c, Some(1), "{who}: {e}");
        assert!(t < Duration::from_secs(10), "{who} took {t:?}");
        let last = e.lines().last().unwrap_or_default();
        assert!(
            last.contains("error") && last.contains("P2"),
            "{who}: {last}"
        );
    }
    assert!(!out0.contains("ids:"), "no partial result: {out0}");
}
