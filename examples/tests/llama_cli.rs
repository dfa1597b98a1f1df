//! The `llama` binary: JSON output on the tiny random model, exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::process::Command;

use puma_runner::llama::TINY_MODEL_DIR;

#[test]
fn json_run_on_the_tiny_model() {
    let out = Command::new(env!("CARGO_BIN_EXE_llama"))
        .args(["--model", TINY_MODEL_DIR, "--prompt", "Hello world"])
        .args(["--max-new-tokens", "2", "--compare-plaintext", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["prompt_ids"], serde_json::json!([19556, 905]));
    assert_eq!(v["ids"], serde_json::json!([905, 905]));
    assert_eq!(v["ids"], v["plaintext_ids"]);
    assert_eq!(v["text"], " world world");
    assert!(v["max_logit_error"].as_f64().unwrap() <= 5e-3);
    assert!(v["rounds"].as_u64().unwrap() > 0);
    assert_eq!(v["bytes_sent"].as_array().unwrap().len(), 3);
    assert!(v["seconds"].as_f64().unwrap() > 0.0);
}

#[test]
fn exit_codes() {
    let bad_flag = Command::new(env!("CARGO_BIN_EXE_llama"))
        .arg("--no-such-flag")
        .output()
        .unwrap();
    assert_eq!(bad_flag.status.code(), Some(2));
    let missing = Command::new(env!("CARGO_BIN_EXE_llama"))
        .args(["--model", "/nonexistent/model.gguf"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("does not exist"));
    let out_of_vocab = Command::new(env!("CARGO_BIN_EXE_llama"))
        .args(["--model", TINY_MODEL_DIR, "--prompt-ids", "49152"])
        .output()
        .unwrap();
    assert_eq!(out_of_vocab.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out_of_vocab.stderr).contains("bad prompt"));
}
