//! `puma-party` at a party that reads the model's config only (the client P0 and the
//! helper P2) refuses a config beyond the model size limits before it connects: exit
//! status 2 and a message naming the field, instead of an abort on an allocation of 16
//! bytes per parameter once connected.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

const PARTY: &str = env!("CARGO_BIN_EXE_puma-party");
const KEYGEN: &str = env!("CARGO_BIN_EXE_keygen");

#[test]
fn a_huge_vocabulary_at_a_non_owner_is_a_clear_error_before_connecting() {
    let dir = std::env::temp_dir().join(format!("puma-party-limits-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let st = Command::new(KEYGEN)
        .args(["--out", dir.join("pki").to_str().unwrap()])
        .status()
        .unwrap();
    assert!(st.success());
    let parties = dir.join("pki").join("parties.toml");
    let configs = [
        (
            "gpt2",
            r#"{"model_type": "gpt2", "n_layer": 4, "n_embd": 256, "n_head": 4,
                "n_positions": 256, "vocab_size": 1000000000000}"#,
        ),
        (
            "llama",
            r#"{"model_type": "llama", "vocab_size": 1000000000000, "hidden_size": 64,
                "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}"#,
        ),
        (
            "bert",
            r#"{"model_type": "bert", "vocab_size": 1000000000000, "hidden_size": 64,
                "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}"#,
        ),
    ];
    for (name, text) in configs {
        let model = dir.join(name);
        std::fs::create_dir_all(&model).unwrap();
        std::fs::write(model.join("config.json"), text).unwrap();
        for id in ["2", "0"] {
            let out = Command::new(PARTY)
                .args(["--id", id, "--config", parties.to_str().unwrap()])
                .args(["--model", model.to_str().unwrap(), "--timeout", "5"])
                .args(["--prompt-ids", "1,2"])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{name} P{id}: {err}");
            assert!(
                err.contains("vocab_size = 1000000000000 exceeds the limit of 262144"),
                "{name} P{id}: {err}"
            );
            assert!(!err.contains("connected"), "{name} P{id}: {err}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
