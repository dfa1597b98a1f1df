//! The secure inference service as its users run it: three `puma-serve` OS processes on
//! 127.0.0.1, an owner that uploads the Shakespeare GPT-2 with `puma-client upload` and
//! exits, and `puma-client generate` processes, several at once, each token-identical to
//! the plaintext model's greedy ids. A client killed mid-request ends only its own
//! request; a server killed mid-request fails the request naming it, and once restarted
//! from its share store (the owner long gone) serves again; a store of another party is
//! refused; a planted prompt reaches no server's log or files. all-MiniLM-L6-v2 and
//! SmolLM2-135M go through the same servers: sentence embeddings like the reference's,
//! token-identical generation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use puma_layers::Tokenizer;
use puma_layers::gguf::GgufFile;
use puma_layers::gpt2::plain::PlainGpt2;
use puma_layers::llama::plain::PlainLlama;
use puma_serve::config::development_servers;

use crate::party_processes::{minilm, smollm2};

const SERVE: &str = env!("CARGO_BIN_EXE_puma-serve");
const CLIENT: &str = env!("CARGO_BIN_EXE_puma-client");
const KEYGEN: &str = env!("CARGO_BIN_EXE_keygen");
const SHAKESPEARE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/gpt2-shakespeare");
const MODEL: &str = "shakespeare";

/// Three servers of one service, each an OS process logging to a file; killed on drop.
struct Service {
    dir: tempfile::TempDir,
    servers: [Option<Child>; 3],
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Service {
    /// A development PKI and a service.toml on six free ports; no server started.
    fn new() -> Service {
        let dir = tempfile::tempdir().unwrap();
        let st = Command::new(KEYGEN)
            .args(["--out", dir.path().to_str().unwrap()])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
        let mut toml = String::from(
            "peer_timeout_secs = 10\nmax_running = 4\nmax_queued = 16\nqueue_wait_secs = 60\n\
             deadline_secs = 300\naccept_uploads = true\n",
        );
        let ports = || {
            (0..3)
                .map(|_| format!("127.0.0.1:{}", free_port()))
                .collect::<Vec<_>>()
        };
        toml.push_str(&development_servers(&ports(), &ports()));
        std::fs::write(dir.path().join("service.toml"), toml).unwrap();
        Service {
            dir,
            servers: [None, None, None],
        }
    }

    /// A service whose three servers are up and connected to each other.
    fn running() -> Service {
        let mut svc = Service::new();
        for i in 0..3 {
            svc.start(i);
        }
        svc.wait_ready();
        svc
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("service.toml")
    }

    fn log(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("server{i}.log"))
    }

    /// Starts server `i` (appending to its log).
    fn start(&mut self, i: usize) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log(i))
            .unwrap();
        let child = Command::new(SERVE)
            .args(["--config", self.config().to_str().unwrap()])
            .args(["--id", &i.to_string()])
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.servers[i] = Some(child);
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.servers[i].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn client(&self, args: &[&str]) -> Command {
        let mut c = Command::new(CLIENT);
        c.args(["--config", self.config().to_str().unwrap()])
            .args(args);
        c
    }

    /// Waits until every server answers `status` with both peers up.
    fn wait_ready(&self) {
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let out = self.client(&["status", "--json"]).output().unwrap();
            if out.status.success() {
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                let up = v
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|s| s["peers_down"].as_array().unwrap().is_empty());
                if up {
                    return;
                }
            }
            assert!(
                Instant::now() < until,
                "the servers did not come up: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn logs(&self) -> String {
        (0..3)
            .map(|i| std::fs::read_to_string(self.log(i)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The owner uploads the Shakespeare GPT-2 and exits.
    fn upload(&self) {
        self.upload_model(MODEL, SHAKESPEARE);
    }

    /// The owner uploads checkpoint `path` as `name` and exits.
    fn upload_model(&self, name: &str, path: &str) {
        let out = self
            .client(&["upload", "--name", name, "--model", path])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "upload: {}\n{}",
            show(&out),
            self.logs()
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("model hash"));
    }

    /// A `generate` client for `ids`, `max_new` tokens, with JSON output.
    fn generate(&self, ids: &[u32], max_new: usize) -> Command {
        self.generate_with(MODEL, ids, max_new)
    }

    /// A `generate` client of model `name` for `ids`, `max_new` tokens, with JSON output.
    fn generate_with(&self, name: &str, ids: &[u32], max_new: usize) -> Command {
        let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
        let mut c = self.client(&[
            "generate",
            "--model",
            name,
            "--prompt-ids",
            &ids.join(","),
            "--max-new-tokens",
            &max_new.to_string(),
            "--json",
        ]);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        for i in 0..3 {
            self.kill(i);
        }
    }
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The ids of a `generate --json` run.
fn ids_of(out: &Output) -> Vec<u32> {
    assert!(out.status.success(), "{}", show(out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["ids"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// Prompts of the Shakespeare model and their plaintext greedy continuations.
fn prompts(plain: &PlainGpt2, max_new: usize) -> Vec<(Vec<u32>, Vec<u32>)> {
    let tok = puma_layers::Tokenizer::from_gpt2_dir(Path::new(SHAKESPEARE)).unwrap();
    ["JULIET:", "ROMEO:\nWhat", "First Citizen:", "KING HENRY"]
        .iter()
        .map(|t| {
            let ids = tok.encode(t).unwrap();
            let want = plain.generate_greedy(&ids, max_new).unwrap();
            (ids, want)
        })
        .collect()
}

/// Every file under `dir`, recursively.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn twenty_requests_four_at_a_time_are_token_identical_and_the_prompt_stays_secret() {
    const MAX_NEW: usize = 3;
    let plain = PlainGpt2::load(Path::new(SHAKESPEARE)).unwrap();
    let cases = prompts(&plain, MAX_NEW);
    let mut svc = Service::running();
    svc.upload();

    // 20 requests in five waves of four concurrent client processes.
    for wave in 0..5 {
        let running: Vec<_> = cases
            .iter()
            .map(|(ids, want)| (svc.generate(ids, MAX_NEW).spawn().unwrap(), want))
            .collect();
        for (child, want) in running {
            let out = child.wait_with_output().unwrap();
            assert_eq!(&ids_of(&out), want, "wave {wave}: {}", svc.logs());
        }
    }

    // A distinctive prompt, as text through the client's own tokenizer.
    let planted = "Zanzibar quokkas whistle";
    let tok = puma_layers::Tokenizer::from_gpt2_dir(Path::new(SHAKESPEARE)).unwrap();
    let planted_ids = tok.encode(planted).unwrap();
    let want = plain.generate_greedy(&planted_ids, MAX_NEW).unwrap();
    let out = svc
        .client(&[
            "generate",
            "--model",
            MODEL,
            "--tokenizer",
            SHAKESPEARE,
            "--prompt",
            planted,
            "--max-new-tokens",
            &MAX_NEW.to_string(),
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(ids_of(&out), want);

    let status = svc.client(&["status", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    for s in v.as_array().unwrap() {
        assert_eq!(s["served"], 21, "{v}");
        assert_eq!(s["failed"], 0, "{v}");
        assert_eq!(s["models"][0]["name"], MODEL, "{v}");
    }
    for i in 0..3 {
        svc.kill(i);
    }

    // Neither the text, nor its ids (as a list in any log, or as little-endian words in
    // any file), is in the servers' logs or stores.
    let id_list = |sep: &str| {
        planted_ids
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(sep)
    };
    let logs = svc.logs();
    assert!(logs.contains("request.done"), "{logs}");
    for needle in [
        planted.to_string(),
        id_list(","),
        id_list(", "),
        id_list(" "),
    ] {
        assert!(!logs.contains(&needle), "{needle:?} is in a server log");
    }
    let words: Vec<u8> = planted_ids
        .iter()
        .flat_map(|&id| u64::from(id).to_le_bytes())
        .collect();
    let words32: Vec<u8> = planted_ids
        .iter()
        .flat_map(|&id| id.to_le_bytes())
        .collect();
    for f in files(svc.dir.path()) {
        let bytes = std::fs::read(&f).unwrap();
        for needle in [planted.as_bytes(), &words, &words32] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{} holds the planted prompt",
                f.display()
            );
        }
    }
}

#[test]
fn killed_clients_and_servers_end_only_their_requests_and_a_server_restarts_from_its_store() {
    const LONG: usize = 40;
    const SHORT: usize = 3;
    let plain = PlainGpt2::load(Path::new(SHAKESPEARE)).unwrap();
    let (ids, want) = prompts(&plain, SHORT).swap_remove(0);
    let mut svc = Service::running();
    svc.upload();

    // A client killed mid-request: the request beside it completes correctly.
    let mut doomed = svc.generate(&ids, LONG).spawn().unwrap();
    let other = svc.generate(&ids, SHORT).spawn().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    doomed.kill().unwrap();
    let _ = doomed.wait();
    assert_eq!(ids_of(&other.wait_with_output().unwrap()), want);
    // The killed request ended at all three servers (one failed request each), and a new
    // one is served.
    assert_eq!(ids_of(&svc.generate(&ids, SHORT).output().unwrap()), want);
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let v: serde_json::Value =
            serde_json::from_slice(&svc.client(&["status", "--json"]).output().unwrap().stdout)
                .unwrap();
        let servers = v.as_array().unwrap();
        if servers
            .iter()
            .all(|s| s["failed"] == 1 && s["running"] == 0)
        {
            assert!(servers.iter().all(|s| s["served"] == 2), "{v}");
            break;
        }
        assert!(Instant::now() < until, "{v}\n{}", svc.logs());
        std::thread::sleep(Duration::from_millis(200));
    }

    // A request past its deadline ends at the servers with a timeout, and frees its slot.
    let out = svc
        .generate(&ids, LONG)
        .args(["--deadline-secs", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("deadline"), "{err}");
    assert_eq!(ids_of(&svc.generate(&ids, SHORT).output().unwrap()), want);

    // A server killed mid-request: the request fails, naming it, well within the
    // deadline.
    let victim = svc.generate(&ids, LONG).spawn().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    svc.kill(2);
    let started = Instant::now();
    let out = victim.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("P2"), "the error names the lost server: {err}");
    assert!(started.elapsed() < Duration::from_secs(30), "{err}");

    // Restarted from its store (the owner is gone): it reconnects and serves again.
    svc.start(2);
    svc.wait_ready();
    assert_eq!(ids_of(&svc.generate(&ids, SHORT).output().unwrap()), want);
    assert!(
        std::fs::read_to_string(svc.log(2))
            .unwrap()
            .contains("event=model.loaded model=shakespeare"),
        "{}",
        svc.logs()
    );

    // Server 0 given server 1's store refuses to start, naming the file and the party.
    svc.kill(0);
    let mine = svc.dir.path().join("p0-store/shakespeare.pumastore");
    std::fs::copy(svc.dir.path().join("p1-store/shakespeare.pumastore"), &mine).unwrap();
    let out = Command::new(SERVE)
        .args(["--config", svc.config().to_str().unwrap(), "--id", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", show(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("shakespeare.pumastore") && err.contains("P1"),
        "{err}"
    );
}

#[test]
fn smollm2_through_the_service_is_token_identical() {
    let Some((path, _one)) = smollm2() else {
        return;
    };
    const MAX_NEW: usize = 3;
    let p = Path::new(&path);
    let tok = Tokenizer::from_gguf(&GgufFile::open(p).unwrap(), p).unwrap();
    let model = puma_runner::llama::load_model(p).unwrap();
    let plain = PlainLlama::new(model.config, model.weights).unwrap();
    let cases: Vec<(Vec<u32>, Vec<u32>)> = ["The capital of France is", "Whales are"]
        .iter()
        .map(|t| {
            let ids = tok.encode(t).unwrap();
            let want = plain.generate_greedy(&ids, MAX_NEW).unwrap();
            (ids, want)
        })
        .collect();
    // The reference implementation's first greedy ids (models/smollm2-135m/reference).
    assert_eq!(cases[0].1, [7042, 30, 198]);
    drop(plain);

    let svc = Service::running();
    let t0 = Instant::now();
    svc.upload_model("smollm2", &path);
    let upload = t0.elapsed();
    // Both prompts at once (concurrency at scale is the Shakespeare tests' job: a SmolLM2
    // request costs CI's two cores about 12 s).
    let running: Vec<_> = cases
        .iter()
        .map(|(ids, want)| {
            (
                svc.generate_with("smollm2", ids, MAX_NEW).spawn().unwrap(),
                want,
            )
        })
        .collect();
    for (child, want) in running {
        assert_eq!(
            &ids_of(&child.wait_with_output().unwrap()),
            want,
            "{}",
            svc.logs()
        );
    }
    eprintln!(
        "smollm2 through the service: upload {upload:.1?}, two requests {:.1?}",
        t0.elapsed() - upload
    );
}

#[test]
fn minilm_embeddings_through_the_service_match_the_reference() {
    let Some((dir, _one)) = minilm() else {
        return;
    };
    // The reference's sentences and their sentence-transformers embeddings
    // (models/minilm-l6/reference.safetensors).
    let bytes = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../models/minilm-l6/reference.safetensors"
    ))
    .unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let sentences: Vec<String> =
        serde_json::from_str(&meta.metadata().as_ref().unwrap()["sentences"]).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let reference: Vec<Vec<f64>> = st
        .tensor("embeddings")
        .unwrap()
        .data()
        .chunks_exact(4)
        .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
        .collect::<Vec<f64>>()
        .chunks(384)
        .map(<[f64]>::to_vec)
        .collect();
    assert!(sentences.len() >= 20 && reference.len() == sentences.len());

    let svc = Service::running();
    let t0 = Instant::now();
    svc.upload_model("minilm", &dir);
    let upload = t0.elapsed();
    // Eight requests, four at a time, one sentence each (concurrency at scale is the
    // Shakespeare tests' job; all fixture sentences are the in-process test's).
    let mut worst: f64 = 1.0;
    for group in (0..8).collect::<Vec<usize>>().chunks(4) {
        let running: Vec<_> = group
            .iter()
            .map(|&i| {
                let child = svc
                    .client(&[
                        "encode",
                        "--model",
                        "minilm",
                        "--tokenizer",
                        &dir,
                        "--sentence",
                        &sentences[i],
                        "--json",
                    ])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                (i, child)
            })
            .collect();
        for (i, child) in running {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{}\n{}", show(&out), svc.logs());
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let e: Vec<f64> = v["embeddings"][0]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .collect();
            let r = &reference[i];
            let dot: f64 = e.iter().zip(r).map(|(a, b)| a * b).sum();
            let norm = |x: &[f64]| x.iter().map(|a| a * a).sum::<f64>().sqrt();
            let cos = dot / (norm(&e) * norm(r));
            assert!(cos >= 0.9999, "sentence {i}: cosine {cos}");
            worst = worst.min(cos);
        }
    }
    eprintln!(
        "minilm through the service: upload {upload:.1?}, 8 requests in {:.1?}, min cosine \
         to the reference {worst:.7}",
        t0.elapsed() - upload
    );
    // The servers learned no sentence.
    let logs = svc.logs();
    assert!(!logs.contains(&sentences[0]) && logs.contains("request.done"));
}
