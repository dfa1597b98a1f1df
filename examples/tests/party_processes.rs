//! Three `puma-party` OS processes on 127.0.0.1 (ephemeral ports): complete secure runs of
//! every architecture whose client output equals the plaintext model's (decoders: tiny
//! GPT-2 and LLaMA, SmolLM2-135M) or the in-process run's (encoders: tiny BERT,
//! all-MiniLM-L6-v2), and a party killed mid-run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use puma_layers::Tokenizer;
use puma_layers::bert::BertBatch;
use puma_layers::bert::secure::Outputs;
use puma_layers::gguf::GgufFile;
use puma_layers::gpt2::plain::PlainGpt2;
use puma_layers::llama::plain::PlainLlama;
use puma_layers::nn::SecureSettings;
use puma_runner::gpt2::{TINY_MODEL_DIR, load_model};
use puma_runner::llama::SMOLLM2_GGUF;
use puma_runner::{bert, llama};

const PARTY: &str = env!("CARGO_BIN_EXE_puma-party");
const KEYGEN: &str = env!("CARGO_BIN_EXE_keygen");
const PROMPT: [u32; 3] = [464, 2068, 7586];
/// `--timeout` of the tiny models' runs (a peer's death is noticed sooner: the link breaks).
const TINY_TIMEOUT: u64 = 10;
/// `--timeout` of the real models' runs: generous for a busy machine.
const REAL_TIMEOUT: u64 = 120;

/// The real-model tests hold gigabytes each (SmolLM2's three parties about 6 GB): one at a
/// time.
static REAL_MODELS: Mutex<()> = Mutex::new(());

/// How far the embeddings of two secure runs may differ. Both runs compute the same
/// fixed-point approximations (exponential, reciprocal, square root), so most of their
/// error against the plaintext model is common to both (measured 1.7e-5 on the tiny BERT,
/// 2.2e-5 on MiniLM, either run); only the truncations' stochastic rounding (+0 or +1 unit
/// of 2^-18 ≈ 3.8e-6, drawn from each run's own randomness) differs, plus 5e-7 from the
/// printed 6 decimals. Measured over 6 runs: at most 4.3e-6 (tiny) and 8.1e-6 (MiniLM);
/// the bound is 13 units, a hundred times tighter than [`TO_PLAINTEXT`].
const BETWEEN_RUNS: f64 = 5e-5;
/// The secure-vs-plaintext bound on sentence embeddings (as in layers/tests/bert_secure.rs).
const TO_PLAINTEXT: f64 = 5e-3;
/// Smallest cosine between the two runs' embeddings of a sentence.
const MIN_COSINE: f64 = 0.9999;

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
    /// Party `id` on `model`, waiting at most `timeout` seconds for a peer.
    fn spawn(id: u8, config: &Path, model: &str, timeout: u64, extra: &[String]) -> Party {
        let mut child = Command::new(PARTY)
            .args([
                "--id",
                &id.to_string(),
                "--config",
                config.to_str().unwrap(),
            ])
            .args(["--model", model, "--timeout", &timeout.to_string()])
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

    /// The address it listens on (the owner loads its weights first).
    fn listening_addr(&mut self) -> String {
        let l = self.wait_for("listening on", Duration::from_secs(120));
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

/// Starts P0, P1 and P2 on `model` on ephemeral ports, each learning the earlier ones'
/// addresses.
fn start(config: &Path, model: &str, timeout: u64, client_args: &[String]) -> [Party; 3] {
    start_on(config, [model; 3], timeout, client_args)
}

/// [`start`] with each party's own `--model`.
fn start_on(config: &Path, models: [&str; 3], timeout: u64, client_args: &[String]) -> [Party; 3] {
    let listen = ["--listen".to_string(), "127.0.0.1:0".to_string()];
    let mut args0 = listen.to_vec();
    args0.extend_from_slice(client_args);
    let mut p0 = Party::spawn(0, config, models[0], timeout, &args0);
    let a0 = p0.listening_addr();
    let mut args1 = listen.to_vec();
    args1.extend(["--peer".into(), format!("0={a0}")]);
    let mut p1 = Party::spawn(1, config, models[1], timeout, &args1);
    let a1 = p1.listening_addr();
    let args2 = [
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--peer".into(),
        format!("0={a0}"),
        "--peer".into(),
        format!("1={a1}"),
    ];
    let p2 = Party::spawn(2, config, models[2], timeout, &args2);
    [p0, p1, p2]
}

/// Runs the three parties on `model` over `transport` to the end (at most `limit`):
/// asserts that all succeed and that only the client prints; returns its stdout and the
/// wall time from the first spawn.
fn run_to_end(
    name: &str,
    transport: &str,
    model: &str,
    timeout: u64,
    client_args: &[String],
    limit: Duration,
) -> (String, Duration) {
    let config = pki(name, transport);
    let t0 = Instant::now();
    let [p0, p1, p2] = start(&config, model, timeout, client_args);
    let (c2, out2, e2, _) = p2.finish(limit);
    let (c1, out1, e1, _) = p1.finish(Duration::from_secs(30));
    let (c0, out0, e0, _) = p0.finish(Duration::from_secs(30));
    let took = t0.elapsed();
    assert_eq!(c0, Some(0), "{name} P0: {e0}");
    assert_eq!(c1, Some(0), "{name} P1: {e1}");
    assert_eq!(c2, Some(0), "{name} P2: {e2}");
    assert_eq!((out1.as_str(), out2.as_str()), ("", ""), "{name}");
    let _ = std::fs::remove_dir_all(config.parent().unwrap());
    (out0, took)
}

fn client_args(n: usize) -> Vec<String> {
    decoder_args(&PROMPT, n)
}

/// The client's arguments of a decoder run on prompt ids.
fn decoder_args(prompt: &[u32], n: usize) -> Vec<String> {
    vec![
        "--prompt-ids".into(),
        join(prompt),
        "--max-new-tokens".into(),
        n.to_string(),
    ]
}

fn join(ids: &[u32]) -> String {
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    ids.join(",")
}

/// The text the client printed token by token before its `ids:` line (the streamed text
/// ends its own line).
fn streamed_text(out: &str) -> &str {
    out.split_once("\nids: ")
        .map(|(streamed, _)| streamed)
        .unwrap_or_else(|| panic!("no ids line after the streamed text: {out}"))
}

/// The client's streamed text is the whole text of its final `text:` line.
#[track_caller]
fn streamed_is_the_final_text(out: &str) {
    let text = format!("text: {:?}", streamed_text(out));
    assert!(out.lines().any(|l| l == text), "want {text:?}: {out}");
}

/// The ids of the client's `ids: 1,2,3` line.
fn printed_ids(out: &str) -> Vec<u32> {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("ids: "))
        .unwrap_or_else(|| panic!("no ids line: {out}"));
    line.split(',').map(|v| v.parse().unwrap()).collect()
}

/// The client's `embedding i: v1,v2,...` lines, in order.
fn printed_embeddings(out: &str) -> Vec<Vec<f64>> {
    let mut rows = Vec::new();
    for l in out.lines() {
        let (head, vals) = l.split_once(": ").unwrap();
        assert_eq!(head, format!("embedding {}", rows.len()), "{out}");
        rows.push(vals.split(',').map(|v| v.parse().unwrap()).collect());
    }
    rows
}

/// The largest |a − b| and the smallest cosine of corresponding rows.
fn distance(a: &[Vec<f64>], b: &[Vec<f64>]) -> (f64, f64) {
    assert_eq!(a.len(), b.len());
    let (mut max_abs, mut min_cos) = (0.0f64, 1.0f64);
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.len(), y.len());
        let dot: f64 = x.iter().zip(y).map(|(p, q)| p * q).sum();
        let norm = |v: &[f64]| v.iter().map(|p| p * p).sum::<f64>().sqrt();
        min_cos = min_cos.min(dot / (norm(x) * norm(y)));
        for (p, q) in x.iter().zip(y) {
            max_abs = max_abs.max((p - q).abs());
        }
    }
    (max_abs, min_cos)
}

/// A real model's path (`var` overrides `default`), or `None` after printing `SKIPPED` when
/// it has not been fetched; with `PUMA_REQUIRE_REAL_MODELS=1` (as in CI) its absence fails.
fn real_model(var: &str, default: &str, fetch: &str) -> Option<String> {
    let path = std::env::var(var).unwrap_or_else(|_| default.to_string());
    if Path::new(&path).exists() {
        return Some(path);
    }
    assert_ne!(
        std::env::var("PUMA_REQUIRE_REAL_MODELS").as_deref(),
        Ok("1"),
        "{path} is missing and PUMA_REQUIRE_REAL_MODELS=1: run {fetch}"
    );
    eprintln!("SKIPPED: {path} not found (run {fetch} or set {var})");
    None
}

#[test]
fn three_processes_complete_a_secure_gpt2_run() {
    let n = 3;
    // The plaintext model's greedy ids.
    let model = load_model(Path::new(TINY_MODEL_DIR)).unwrap();
    let plain = PlainGpt2::new(model.config, model.weights).unwrap();
    let want = plain.generate_greedy(&PROMPT, n).unwrap();
    for transport in ["tcp", "quic"] {
        let (out, _) = run_to_end(
            &format!("ok-{transport}"),
            transport,
            TINY_MODEL_DIR,
            TINY_TIMEOUT,
            &client_args(n),
            Duration::from_secs(120),
        );
        assert_eq!(printed_ids(&out), want, "{transport}: {out}");
        streamed_is_the_final_text(&out);
    }
}

/// The client's prompt: ids, or text it tokenizes itself.
enum Prompt<'a> {
    Ids,
    Text(&'a str),
}

/// A LLaMA-style decoder over TCP against the plaintext model (`prompt` are its ids):
/// the client's ids equal the plaintext greedy ids, and its text is their decoding,
/// printed token by token as the client learned them. Returns the ids.
fn decoder_matches_plaintext(
    name: &str,
    model: &str,
    prompt: &[u32],
    given: Prompt<'_>,
    n: usize,
    tok: &Tokenizer,
    timeout: u64,
) -> Vec<u32> {
    let want = {
        let loaded = llama::load_model(Path::new(model)).unwrap();
        let plain = PlainLlama::new(loaded.config, loaded.weights).unwrap();
        plain.generate_greedy(prompt, n).unwrap()
    };
    let args = match given {
        Prompt::Ids => decoder_args(prompt, n),
        Prompt::Text(t) => ["--prompt", t, "--max-new-tokens", &n.to_string()]
            .map(String::from)
            .to_vec(),
    };
    let (out, over_tcp) = run_to_end(
        name,
        "tcp",
        model,
        timeout,
        &args,
        Duration::from_secs(1200),
    );
    eprintln!("{name}: ids {want:?}; three processes over TCP {over_tcp:.1?}");
    let ids = printed_ids(&out);
    assert_eq!(ids, want, "{name}: {out}");
    let text = format!("text: {:?}", tok.decode(&ids).unwrap());
    assert!(out.lines().any(|l| l == text), "{name}: {out}");
    // Printed token by token as the client learned them: the same text.
    assert_eq!(streamed_text(&out), tok.decode(&ids).unwrap(), "{name}");
    ids
}

#[test]
fn three_processes_run_the_tiny_llama_like_the_plaintext_model() {
    let tok = Tokenizer::from_dir(Path::new(llama::TINY_MODEL_DIR)).unwrap();
    let ids = decoder_matches_plaintext(
        "llama-tiny",
        llama::TINY_MODEL_DIR,
        &[65, 42, 1812, 314],
        Prompt::Ids,
        4,
        &tok,
        TINY_TIMEOUT,
    );
    // The random model repeats the prompt's last token.
    assert_eq!(ids, [314; 4]);
}

/// SmolLM2-135M's GGUF path and the real-model lock held while a test uses it, or `None`
/// (see [`real_model`]).
pub(crate) fn smollm2() -> Option<(String, MutexGuard<'static, ()>)> {
    let path = real_model(
        "PUMA_SMOLLM2_GGUF",
        SMOLLM2_GGUF,
        "scripts/fetch-smollm2.sh",
    )?;
    Some((
        path,
        REAL_MODELS.lock().unwrap_or_else(PoisonError::into_inner),
    ))
}

/// all-MiniLM-L6-v2's directory and the real-model lock held while a test uses it, or
/// `None` (see [`real_model`]).
pub(crate) fn minilm() -> Option<(String, MutexGuard<'static, ()>)> {
    let dir = real_model(
        "PUMA_MINILM_DIR",
        bert::MINILM_DIR,
        "scripts/fetch-minilm.sh",
    )?;
    Some((
        dir,
        REAL_MODELS.lock().unwrap_or_else(PoisonError::into_inner),
    ))
}

#[test]
fn three_processes_run_smollm2_like_the_plaintext_model() {
    let Some((path, _one)) = smollm2() else {
        return;
    };
    let path_ref = Path::new(&path);
    let tok = Tokenizer::from_gguf(&GgufFile::open(path_ref).unwrap(), path_ref).unwrap();
    // The client tokenizes the text itself. The prompt's ids and the first greedy ids are
    // those of models/smollm2-135m/reference.safetensors (prompt p1).
    let text = "The capital of France is";
    let prompt = tok.encode(text).unwrap();
    assert_eq!(prompt, [504, 3575, 282, 4649, 314]);
    let ids = decoder_matches_plaintext(
        "smollm2",
        &path,
        &prompt,
        Prompt::Text(text),
        3,
        &tok,
        REAL_TIMEOUT,
    );
    assert_eq!(ids, [7042, 30, 198]);
    assert_eq!(tok.decode(&ids).unwrap(), " Paris.\n");
}

/// An encoder over TCP on `sentences` against the in-process run and the plaintext model:
/// the client's embeddings are within [`BETWEEN_RUNS`] and [`MIN_COSINE`] of the in-process
/// run's, both within [`TO_PLAINTEXT`] of the plaintext model's.
fn encoder_matches_in_process(name: &str, dir: &str, sentences: &[&str], timeout: u64) {
    let model = bert::load_model(Path::new(dir)).unwrap();
    let tok = Tokenizer::from_dir(Path::new(dir)).unwrap();
    // The client's batch: each sentence alone, token type 0, padded with 0.
    let seqs: Vec<(Vec<u32>, Vec<u32>)> = sentences
        .iter()
        .map(|s| {
            let ids = tok.encode(s).unwrap();
            let types = vec![0; ids.len()];
            (ids, types)
        })
        .collect();
    let batch = BertBatch::padded(&seqs, 0).unwrap();
    let outputs = Outputs {
        embeddings: true,
        ..Outputs::default()
    };
    let t0 = Instant::now();
    let report = bert::run_secure(&model, &batch, outputs, SecureSettings::default(), 7).unwrap();
    let in_process_time = t0.elapsed();
    let d = model.config.hidden_size;
    let in_process: Vec<Vec<f64>> = report
        .client
        .embeddings
        .as_ref()
        .unwrap()
        .chunks(d)
        .map(<[f64]>::to_vec)
        .collect();
    let plain = bert::compare_plain(&model, &batch, &report.client).unwrap();
    let plain: Vec<Vec<f64>> = plain
        .embeddings
        .rows()
        .into_iter()
        .map(|r| r.to_vec())
        .collect();
    drop(model);
    let mut args = Vec::new();
    for s in sentences {
        args.extend(["--prompt".to_string(), (*s).to_string()]);
    }
    let (out, over_tcp) = run_to_end(name, "tcp", dir, timeout, &args, Duration::from_secs(1200));
    let printed = printed_embeddings(&out);
    assert_eq!(printed.len(), sentences.len(), "{out}");
    let (between, cos) = distance(&printed, &in_process);
    let (to_plain, _) = distance(&printed, &plain);
    let (in_process_to_plain, _) = distance(&in_process, &plain);
    eprintln!(
        "{name}: in process {in_process_time:.1?}, three processes over TCP {over_tcp:.1?}; \
         max |processes - in process| {between:.2e}, min cosine {cos:.8}; max |processes - \
         plaintext| {to_plain:.2e}, max |in process - plaintext| {in_process_to_plain:.2e}"
    );
    assert!(to_plain <= TO_PLAINTEXT, "{name}: {to_plain}");
    assert!(
        in_process_to_plain <= TO_PLAINTEXT,
        "{name}: {in_process_to_plain}"
    );
    assert!(between <= BETWEEN_RUNS, "{name}: {between}");
    assert!(cos >= MIN_COSINE, "{name}: {cos}");
}

#[test]
fn three_processes_run_the_tiny_bert_like_the_in_process_run() {
    encoder_matches_in_process(
        "bert-tiny",
        bert::TINY_MODEL_DIR,
        &["Hello world", "How old are you?"],
        TINY_TIMEOUT,
    );
}

#[test]
fn three_processes_run_minilm_like_the_in_process_run() {
    let Some((dir, _one)) = minilm() else {
        return;
    };
    encoder_matches_in_process(
        "minilm",
        &dir,
        &[
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "The girl is carrying a baby.",
        ],
        REAL_TIMEOUT,
    );
}

#[test]
fn killing_a_party_mid_run_ends_the_others_with_an_error_naming_it() {
    let config = pki("kill", "tcp");
    let [mut p0, p1, mut p2] = start(&config, TINY_MODEL_DIR, TINY_TIMEOUT, &client_args(40));
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

#[test]
fn parties_on_different_models_say_so_at_once() {
    // P2 holds the Shakespeare GPT-2's config, the others the tiny GPT-2's: same
    // architecture, other shapes.
    let config = pki("models", "tcp");
    let shakespeare = puma_runner::gpt2::DEFAULT_MODEL_DIR;
    let parties = start_on(
        &config,
        [TINY_MODEL_DIR, TINY_MODEL_DIR, shakespeare],
        TINY_TIMEOUT,
        &client_args(2),
    );
    for (i, p) in parties.into_iter().enumerate() {
        let (code, out, err, took) = p.finish(Duration::from_secs(30));
        assert_eq!(code, Some(1), "P{i}: {err}");
        assert!(
            took < Duration::from_secs(TINY_TIMEOUT),
            "P{i} took {took:?}"
        );
        let last = err.lines().last().unwrap_or_default();
        // P2 differs from both; P0 and P1 each name P2.
        let culprits = if i == 2 { "P0 and P1 run" } else { "P2 runs" };
        assert!(
            last.contains("model fingerprint differs") && last.contains(culprits),
            "P{i}: {last}"
        );
        assert!(!out.contains("ids:"), "P{i}: {out}");
    }
    let _ = std::fs::remove_dir_all(config.parent().unwrap());
}

#[cfg(unix)]
#[test]
fn a_stalled_party_ends_the_others_within_one_timeout() {
    // SIGSTOP keeps P2's connections open but silent: the others must give up after
    // `--timeout` without progress, not twice that.
    let timeout = 4;
    let config = pki("stall", "tcp");
    let [mut p0, p1, p2] = start(&config, TINY_MODEL_DIR, timeout, &client_args(40));
    p0.wait_for("step 1 of 40 done", Duration::from_secs(120));
    let pid = p2.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let stopped = Instant::now();
    let (c0, _, e0, _) = p0.finish(Duration::from_secs(30));
    let t0 = stopped.elapsed();
    let (c1, _, e1, _) = p1.finish(Duration::from_secs(30));
    let t1 = stopped.elapsed();
    let _ = Command::new("kill").args(["-KILL", &pid]).status();
    let mut p2 = p2;
    let _ = p2.child.wait();
    // One timeout, plus the half second a failed party lingers and some scheduling slack;
    // twice the timeout (8 s) fails.
    let limit = Duration::from_secs(timeout) + Duration::from_millis(2500);
    for (c, e, t, who) in [(c0, &e0, t0, "P0"), (c1, &e1, t1, "P1")] {
        assert_eq!(c, Some(1), "{who}: {e}");
        assert!(t < limit, "{who} took {t:?} (timeout {timeout} s): {e}");
        let last = e.lines().last().unwrap_or_default();
        assert!(last.contains("error"), "{who}: {last}");
    }
    let _ = std::fs::remove_dir_all(config.parent().unwrap());
}

#[test]
fn an_empty_prompt_is_refused_before_connecting() {
    let config = pki("empty", "tcp");
    let cases: [(&str, &[&str]); 4] = [
        (TINY_MODEL_DIR, &["--prompt", ""]),
        (llama::TINY_MODEL_DIR, &["--prompt", ""]),
        (bert::TINY_MODEL_DIR, &["--prompt", " "]),
        (bert::TINY_MODEL_DIR, &["--prompt", "Hello", "--prompt", ""]),
    ];
    for (model, extra) in cases {
        let out = Command::new(PARTY)
            .args(["--id", "0", "--config", config.to_str().unwrap()])
            .args([
                "--model",
                model,
                "--listen",
                "127.0.0.1:0",
                "--timeout",
                "5",
            ])
            .args(extra)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{model} {extra:?}: {err}");
        assert!(!err.contains("listening"), "{model} {extra:?}: {err}");
        assert!(err.contains("empty"), "{err}");
    }
    let _ = std::fs::remove_dir_all(config.parent().unwrap());
}

#[test]
fn the_client_announces_its_decoding_rules_to_the_other_processes() {
    // Only the client is given the rules; the others follow what it announces.
    let n = 4;
    let model = load_model(Path::new(TINY_MODEL_DIR)).unwrap();
    let plain = PlainGpt2::new(model.config, model.weights).unwrap();
    let want = plain.generate_greedy(&PROMPT, n).unwrap();
    let tok = Tokenizer::from_gpt2_dir(Path::new(TINY_MODEL_DIR)).unwrap();
    // Secure argmax with drafts: the greedy ids. Drawing among the top 1: the greedy ids
    // too, through the sampling protocol. A stop string (the text of the first two
    // tokens): the ids up to the first whose text contains it.
    let stop = tok.decode(&want[..2]).unwrap();
    let stop_at = (1..=n)
        .find(|&m| tok.decode(&want[..m]).unwrap().contains(&stop))
        .unwrap();
    for (name, extra, ids) in [
        (
            "speculate",
            vec!["--output-mode", "secure-argmax", "--speculate", "2"],
            &want[..],
        ),
        (
            "top-k-1",
            vec!["--top-k", "1", "--temperature", "0.7"],
            &want[..],
        ),
        ("stop", vec!["--stop", stop.as_str()], &want[..stop_at]),
    ] {
        let mut args = client_args(n);
        args.extend(extra.iter().map(|a| a.to_string()));
        let (out, _) = run_to_end(
            &format!("rules-{name}"),
            "tcp",
            TINY_MODEL_DIR,
            TINY_TIMEOUT,
            &args,
            Duration::from_secs(120),
        );
        assert_eq!(printed_ids(&out), ids, "{name}: {out}");
        streamed_is_the_final_text(&out);
    }
}
