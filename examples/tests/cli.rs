//! Command-line conventions of the user programs: `--help` and `--version` print and exit 0
//! without starting a run, and absurd sizes are refused with an error naming the flag and
//! its limit (a usage error, not an abort on allocation).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use puma_runner::linear::MAX_ELEMENTS;

/// Every user program and flags its usage text must name.
const PROGRAMS: [(&str, &str, &[&str]); 6] = [
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
    ("keygen", env!("CARGO_BIN_EXE_keygen"), &["--out"]),
];

/// Far less than any run takes, far more than printing a usage text.
const QUICK: Duration = Duration::from_secs(10);

fn run(exe: &str, args: &[&str]) -> (Output, Duration) {
    let t = Instant::now();
    let out = Command::new(exe).args(args).output().unwrap();
    (out, t.elapsed())
}

#[test]
fn every_program_prints_help_and_version_without_running() {
    for (name, exe, flags) in PROGRAMS {
        let (out, took) = run(exe, &["--help"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name} --help: {:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(took < QUICK, "{name} --help took {took:?}");
        assert!(
            stdout.contains(&format!("Usage: {name}")),
            "{name} --help:\n{stdout}"
        );
        for flag in ["--help", "--version"].iter().chain(flags) {
            assert!(
                stdout.contains(flag),
                "{name} --help names no {flag}:\n{stdout}"
            );
        }
        let (out, took) = run(exe, &["--version"]);
        assert!(out.status.success(), "{name} --version: {:?}", out.status);
        assert!(took < QUICK, "{name} --version took {took:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("{name} {}", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn demo_help_states_the_size_limit() {
    let (out, _) = run(env!("CARGO_BIN_EXE_demo"), &["--help"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&MAX_ELEMENTS.to_string()), "{stdout}");
}

/// Runs `exe` with `args`, which it must refuse with a usage error (exit status 2, not an
/// abort) whose message names every one of `needles` (the flag and its limit).
fn refused(exe: &str, args: &[&str], needles: &[&str]) {
    let (out, took) = run(exe, args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{exe} {args:?}: {:?}\n{stderr}",
        out.status
    );
    assert!(took < QUICK, "{exe} {args:?} took {took:?}");
    for n in needles {
        assert!(stderr.contains(n), "{exe} {args:?}: no {n:?} in\n{stderr}");
    }
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
