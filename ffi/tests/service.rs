//! The service client from Python over the C API (`examples/python/service_client.py`):
//! three `puma-serve` servers on 127.0.0.1 (the daemon, each on its own threads, over TCP
//! and TLS), an owner that uploads the Shakespeare GPT-2 and a tiny BERT, and the Python
//! client, an OS process outside the servers, that generates the plaintext model's greedy
//! ids and sentence embeddings within the secure model's bounds.

use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use puma_core::PartyId;
use puma_layers::bert::plain::mean_pool_normalized;
use puma_layers::bert::{BertBatch, PlainBert, load_bert};
use puma_layers::nn::SecureSettings;
use puma_serve::client::ServiceClient;
use puma_serve::config::{ServiceConfig, development_servers};
use puma_serve::daemon;
use puma_transports::tls::Identity;

use crate::examples::{built_library, ids_line, repo, shakespeare, show, tool};

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Three servers of one service, stopped on drop.
struct Servers {
    dir: tempfile::TempDir,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Servers {
    fn start() -> Servers {
        let dir = tempfile::tempdir().unwrap();
        let mut toml = String::from("peer_timeout_secs = 10\naccept_uploads = true\n");
        for p in PartyId::ALL {
            let i = p.index();
            Identity::generate(p)
                .unwrap()
                .write_pem_files(
                    &dir.path().join(format!("p{i}.cert.pem")),
                    &dir.path().join(format!("p{i}.key.pem")),
                    false,
                )
                .unwrap();
        }
        let ports = || {
            (0..3)
                .map(|_| format!("127.0.0.1:{}", free_port()))
                .collect::<Vec<_>>()
        };
        toml.push_str(&development_servers(&ports(), &ports()));
        std::fs::write(dir.path().join("service.toml"), toml).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let threads = PartyId::ALL
            .into_iter()
            .map(|p| {
                let cfg = ServiceConfig::from_file(&dir.path().join("service.toml")).unwrap();
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    daemon::run(
                        cfg,
                        p,
                        SecureSettings::default(),
                        Duration::from_secs(5),
                        stop,
                    )
                    .unwrap();
                })
            })
            .collect();
        Servers { dir, stop, threads }
    }

    fn config(&self) -> std::path::PathBuf {
        self.dir.path().join("service.toml")
    }

    /// A client, once all three servers answer with their peers up.
    fn client(&self) -> ServiceClient {
        let client =
            ServiceClient::new(&ServiceConfig::from_file(&self.config()).unwrap()).unwrap();
        let until = Instant::now() + Duration::from_secs(60);
        while !client
            .status()
            .is_ok_and(|r| r.iter().all(|s| s.peers_down.is_empty()))
        {
            assert!(Instant::now() < until, "the servers did not come up");
            std::thread::sleep(Duration::from_millis(100));
        }
        client
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn python(servers: &Servers, args: &[String]) -> String {
    let out = tool("python3")
        .arg(repo().join("examples/python/service_client.py"))
        .arg(servers.config())
        .args(args)
        .env("PUMA_FFI_LIB", built_library("libpuma_ffi.so"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.lines().any(|l| l == "ok"), "{}", show(&out));
    stdout
}

#[test]
fn a_python_client_generates_and_encodes_through_three_servers() {
    let servers = Servers::start();
    let owner = servers.client();
    let gpt2 = shakespeare_weights();
    owner
        .upload("shakespeare", &gpt2.0, &gpt2.1, |_, _| {})
        .unwrap();
    let tiny = repo().join("models/bert-tiny-random");
    let (cfg, w) = load_bert(&tiny).unwrap();
    owner
        .upload_encoder("tiny-bert", &cfg, &w, |_, _| {})
        .unwrap();
    drop(owner); // the owner is gone

    // Generation: the plaintext model's greedy ids, each streamed to the callback.
    let (prompt, want) = shakespeare(4);
    let mut args = vec!["generate".into(), "shakespeare".into(), "4".into()];
    args.extend(prompt.iter().map(u32::to_string));
    let stdout = python(&servers, &args);
    assert!(stdout.lines().any(|l| l == ids_line(&want)), "{stdout}");
    let tokens: Vec<&str> = stdout.lines().filter(|l| l.starts_with("token ")).collect();
    let streamed: Vec<String> = want
        .iter()
        .enumerate()
        .map(|(k, id)| format!("token {k}: {id}"))
        .collect();
    assert_eq!(tokens, streamed);

    // Encoding: two sequences' sentence embeddings against the plaintext model's.
    let seqs = [
        vec![101u32, 7592, 2088, 102],
        vec![101, 2129, 2214, 2024, 2017, 1029, 102],
    ];
    let args: Vec<String> = ["encode".to_string(), "tiny-bert".to_string()]
        .into_iter()
        .chain(
            seqs.iter()
                .map(|s| s.iter().map(u32::to_string).collect::<Vec<_>>().join(",")),
        )
        .collect();
    let stdout = python(&servers, &args);
    let got: Vec<Vec<f64>> = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("embedding "))
        .map(|l| {
            l.split_once(": ")
                .unwrap()
                .1
                .split(' ')
                .map(|v| v.parse().unwrap())
                .collect()
        })
        .collect();
    let pairs: Vec<(Vec<u32>, Vec<u32>)> =
        seqs.iter().map(|s| (s.clone(), vec![0; s.len()])).collect();
    let batch = BertBatch::padded(&pairs, 0).unwrap();
    let plain = PlainBert::new(cfg, w);
    let want = mean_pool_normalized(
        plain.forward(&batch).unwrap().last_hidden_state.view(),
        &batch,
    );
    assert_eq!(got.len(), 2);
    for (g, w) in got.iter().zip(want.rows()) {
        assert_eq!(g.len(), 64);
        let d = g
            .iter()
            .zip(w)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        // The in-process secure model's bound against the same plaintext model
        // (puma-layers' bert_secure tests), plus the 1e-6 of the printed digits.
        assert!(d <= 5e-3, "{d}");
    }
}

/// The Shakespeare GPT-2's config and weights, as its owner loads them.
fn shakespeare_weights() -> (puma_layers::Gpt2Config, puma_layers::Gpt2Weights) {
    puma_layers::load_gpt2(Path::new(&repo().join("models/gpt2-shakespeare"))).unwrap()
}
