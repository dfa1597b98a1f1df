//! The `bert` example binary: JSON output, plaintext comparison and exit codes, on the
//! tiny random BERT shipped in the repository (fast), and the orchestration's typed errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

use puma_layers::bert::secure::Outputs;
use puma_layers::bert::{BertBatch, BertError};
use puma_layers::nn::SecureSettings;
use puma_runner::bert::{BertRunError, TINY_MODEL_DIR, load_model, run_secure};
use serde_json::Value;

fn bert() -> Command {
    Command::new(env!("CARGO_BIN_EXE_bert"))
}

#[test]
fn classify_json_reports_outputs_errors_and_costs() {
    let out = bert()
        .args([
            "--model",
            TINY_MODEL_DIR,
            "--task",
            "classify",
            "--compare-plaintext",
            "--json",
        ])
        .args([
            "--sentence",
            "Hello world",
            "--sentence",
            "How old are you?",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // The tokenizer's ids for the fixture's first input.
    assert_eq!(v["ids"][0], serde_json::json!([101, 7592, 2088, 102]));
    assert_eq!(v["logits"].as_array().unwrap().len(), 2);
    assert_eq!(v["logits"][0].as_array().unwrap().len(), 2);
    let err = v["plaintext"]["logits_max_abs_error"].as_f64().unwrap();
    assert!(err <= 5e-4, "logit error {err}");
    let pooled = v["plaintext"]["pooled_max_abs_error"].as_f64().unwrap();
    assert!(pooled <= 5e-3, "pooled error {pooled}");
    assert!(v["rounds"].as_u64().unwrap() > 100);
    let bytes: Vec<u64> = v["bytes_per_party"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_u64().unwrap())
        .collect();
    // The owner sends the weights: 8 bytes per parameter at least.
    let share = v["share_model_bytes_per_party"][1].as_u64().unwrap();
    assert!(
        share >= 8 * 2_000_000 && bytes[1] >= share,
        "{bytes:?} {share}"
    );
    assert!(v["seconds"].as_f64().unwrap() > 0.0);
    assert!(v["embeddings"].is_null());
}

#[test]
fn bad_arguments_and_missing_models_fail_cleanly() {
    let out = bert().args(["--softmax-squarings", "2"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = bert()
        .args(["--model", "/nonexistent/bert", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not exist"));
    let out = bert()
        .args(["--model", TINY_MODEL_DIR, "--ids", "101,30522,102"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    // The first id past the vocabulary of 30522, named with its place.
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("token id 30522 (sequence 0, position 1)") && err.contains("30522"),
        "{err}"
    );
    let out = bert()
        .args(["--model", TINY_MODEL_DIR, "--ids", "101,x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn orchestration_errors_are_typed() {
    let model = load_model(std::path::Path::new(TINY_MODEL_DIR)).unwrap();
    let too_long = BertBatch::single(&vec![101; 600]);
    let err = run_secure(
        &model,
        &too_long,
        Outputs {
            embeddings: true,
            ..Outputs::default()
        },
        SecureSettings::default(),
        1,
    );
    assert!(matches!(err, Err(BertRunError::Bert(BertError::Input(_)))));
    let mut no_head = model.clone();
    no_head.weights.classifier = None;
    let err = run_secure(
        &no_head,
        &BertBatch::single(&[101, 102]),
        Outputs {
            logits: true,
            ..Outputs::default()
        },
        SecureSettings::default(),
        1,
    );
    assert!(matches!(
        err,
        Err(BertRunError::Bert(BertError::MissingHead(_)))
    ));
}
