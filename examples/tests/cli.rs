//! Command-line conventions of the user programs: `--help` and `--version` print and exit 0
//! without starting a run, and absurd sizes are refused with an error naming the flag and
//! its limit (a usage error, not an abort on allocation).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/cli_conventions.rs"]
mod cli_conventions;

use cli_conventions::{prints_help_and_version, refused, run};

use puma_runner::linear::MAX_ELEMENTS;

/// Every user program and flags its usage text must name.
const PROGRAMS: [(&str, &str, &[&str]); 8] = [
    (
        "demo",
        env!("CARGO_BIN_EXE_demo"),
        &["--rows", "--k", "--n", "--seed"],
    ),
    (
        "gpt2",
        env!("CARGO_BIN_EXE_gpt2"),
        &["--prompt", "--max-new-tokens", "--model", "--json"],
    ),
    (
        "bert",
        env!("CARGO_BIN_EXE_bert"),
        &["--model", "--sentence", "--tokens", "--json"],
    ),
    (
        "llama",
        env!("CARGO_BIN_EXE_llama"),
        &["--prompt", "--max-new-tokens", "--model", "--json"],
    ),
    (
        "puma-party",
        env!("CARGO_BIN_EXE_puma-party"),
        &["--id", "--config", "--max-new-tokens"],
    ),
    (
        "keygen",
        env!("CARGO_BIN_EXE_keygen"),
        &["--out", "--service"],
    ),
    (
        "puma-serve",
        env!("CARGO_BIN_EXE_puma-serve"),
        &["--config", "--id", "--grace-secs"],
    ),
    (
        "puma-client",
        env!("CARGO_BIN_EXE_puma-client"),
        &["--config", "status", "upload", "generate"],
    ),
];

#[test]
fn every_program_prints_help_and_version_without_running() {
    for (name, exe, flags) in PROGRAMS {
        prints_help_and_version(name, exe, flags);
    }
}

#[test]
fn demo_help_states_the_size_limit() {
    let (out, _) = run(env!("CARGO_BIN_EXE_demo"), &["--help"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&MAX_ELEMENTS.to_string()), "{stdout}");
}

#[test]
fn absurd_sizes_are_refused_naming_the_flag_and_limit() {
    let demo = env!("CARGO_BIN_EXE_demo");
    let limit = MAX_ELEMENTS.to_string();
    // Each size is allowed alone; their product would be 8 TB of f64 (it used to abort on
    // allocation).
    refused(
        demo,
        &["--rows", "1000000", "--k", "1000000"],
        &["--rows × --k", "1000000000000 elements", &limit],
    );
    refused(
        demo,
        &["--rows", "1", "--k", "4000000", "--n", "4000000"],
        &["--k × --n", &limit],
    );
    refused(
        demo,
        &["--n", "100000000000"],
        &["--n", &format!("1..={limit}")],
    );
    refused(demo, &["--rows", "0"], &["--rows"]);
    refused(
        env!("CARGO_BIN_EXE_gpt2"),
        &["--max-new-tokens", "1000000000"],
        &["--max-new-tokens", "1..=4096"],
    );
    refused(
        env!("CARGO_BIN_EXE_llama"),
        &["--max-new-tokens", "1000000000"],
        &["--max-new-tokens", "1..=4096"],
    );
    refused(
        env!("CARGO_BIN_EXE_bert"),
        &["--tokens", "1000000000"],
        &["--tokens", "2..=512"],
    );
    refused(
        env!("CARGO_BIN_EXE_puma-party"),
        &[
            "--id",
            "0",
            "--config",
            "parties.toml",
            "--max-new-tokens",
            "1000000000",
        ],
        &["--max-new-tokens", "1..=4096"],
    );
}

/// Sizes within the limit still run, with the new argument parsing.
#[test]
fn demo_runs_a_wide_layer_within_the_limit() {
    let (out, _) = run(
        env!("CARGO_BIN_EXE_demo"),
        &["--rows", "2", "--k", "64", "--n", "4096"],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{:?}\n{stdout}", out.status);
    assert!(
        stdout.contains("x 2×64") && stdout.ends_with("OK\n"),
        "{stdout}"
    );
}

#[test]
fn speculation_outside_secure_argmax_greedy_is_refused_naming_what_it_needs() {
    let gpt2 = env!("CARGO_BIN_EXE_gpt2");
    refused(gpt2, &["--speculate", "0"], &["--speculate", "1..=16"]);
    for extra in [
        &[][..],
        &["--output-mode", "secure-argmax", "--temperature", "0.8"],
    ] {
        let mut args = vec!["--speculate", "4"];
        args.extend_from_slice(extra);
        let (out, _) = run(gpt2, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("--speculate needs --output-mode secure-argmax and greedy decoding"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_draft_corpus_needs_speculation_and_a_readable_nonempty_text() {
    let gpt2 = env!("CARGO_BIN_EXE_gpt2");
    refused(
        gpt2,
        &["--draft-corpus", "corpus.txt"],
        &["--draft-corpus", "--speculate"],
    );
    let dir = std::env::temp_dir().join(format!("puma-cli-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty.txt");
    std::fs::write(&empty, "").unwrap();
    let latin1 = dir.join("latin1.txt");
    std::fs::write(&latin1, b"caf\xe9").unwrap();
    let missing = dir.join("missing.txt");
    for (file, why) in [
        (&missing, "cannot read the draft corpus"),
        (&latin1, "cannot read the draft corpus"),
        (&empty, "the draft corpus is empty"),
    ] {
        let path = file.to_str().unwrap();
        let args = [
            "--output-mode",
            "secure-argmax",
            "--speculate",
            "4",
            "--draft-corpus",
            path,
        ];
        let (out, _) = run(gpt2, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{path}: {stderr}");
        assert!(
            stderr.contains(why) && stderr.contains(path),
            "{path}: {stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
