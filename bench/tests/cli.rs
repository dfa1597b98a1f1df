//! Command-line conventions of the benchmark programs: `--help` and `--version` print and
//! exit 0 without starting a run, absurd sizes are refused with an error naming the flag
//! and its limit (not an abort), and `gpt2_net --json` carries what `BENCHMARKS.md`'s
//! generated table is rendered from, which must equal the table in the document.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../examples/tests/support/cli_conventions.rs"]
mod cli_conventions;

use cli_conventions::{prints_help_and_version, refused, run};

use puma_bench::tables::{self, NetRun};

/// Every benchmark program and flags its usage text must name.
const PROGRAMS: [(&str, &str, &[&str]); 8] = [
    (
        "bench_models",
        env!("CARGO_BIN_EXE_bench_models"),
        &["--models", "--whole", "--scaled", "--json"],
    ),
    (
        "gpt2_base",
        env!("CARGO_BIN_EXE_gpt2_base"),
        &["--new-tokens", "--layers", "--lan"],
    ),
    (
        "gpt2_net",
        env!("CARGO_BIN_EXE_gpt2_net"),
        &["--prompt", "--max-new-tokens", "--quic", "--json"],
    ),
    (
        "decoding",
        env!("CARGO_BIN_EXE_decoding"),
        &["--tokens", "--drafts", "--wan"],
    ),
    ("llama_cost", env!("CARGO_BIN_EXE_llama_cost"), &[]),
    (
        "party_memory",
        env!("CARGO_BIN_EXE_party_memory"),
        &["--layers", "--new-tokens", "--transport", "--timeout"],
    ),
    (
        "perplexity",
        env!("CARGO_BIN_EXE_perplexity"),
        &["--windows", "--window-len", "--squarings", "--json"],
    ),
    (
        "bench_tables",
        env!("CARGO_BIN_EXE_bench_tables"),
        &["--doc", "--check", "--stamp"],
    ),
];

#[test]
fn every_program_prints_help_and_version_without_running() {
    for (name, exe, flags) in PROGRAMS {
        prints_help_and_version(name, exe, flags);
    }
}

#[test]
fn absurd_sizes_are_refused_naming_the_flag_and_limit() {
    let exe = |n: &str| PROGRAMS.iter().find(|p| p.0 == n).unwrap().1;
    refused(
        exe("gpt2_base"),
        &["--layers", "1000000"],
        &["--layers", "1..=12"],
    );
    refused(
        exe("gpt2_base"),
        &["--new-tokens", "1000000000"],
        &["--new-tokens", "1..=64"],
    );
    refused(
        exe("party_memory"),
        &["--layers", "1000"],
        &["--layers", "1..=12"],
    );
    refused(
        exe("gpt2_net"),
        &["--max-new-tokens", "1000000000000"],
        &["--max-new-tokens", "1..=4096"],
    );
    // Within the flag's range but beyond the model's context of 256 positions.
    refused(
        exe("gpt2_net"),
        &["--max-new-tokens", "300"],
        &["--max-new-tokens 300", "256"],
    );
    refused(
        exe("perplexity"),
        &["--window-len", "1000000000"],
        &["--window-len", "2..=1024"],
    );
    refused(
        exe("perplexity"),
        &["--windows", "1000", "--window-len", "1000"],
        &["--windows × --window-len", "1000000 tokens", "1024"],
    );
    refused(
        exe("perplexity"),
        &["--windows", "2", "--window-len", "512"],
        &["--window-len 512", "256 positions"],
    );
    refused(
        exe("bench_models"),
        &["--single", "gpt2-base", "1000000"],
        &["--single", "between 1 and 12"],
    );
    refused(
        exe("bench_models"),
        &["--models", "gpt2-huge"],
        &["--models", "gpt2-huge", "bert-large"],
    );
}

/// `gpt2_net --json` on the 8-token Shakespeare run: one record per transport with every
/// field the renderer reads, equal across transports, and the table rendered from them is
/// the one in `BENCHMARKS.md` (regenerate it with `scripts/bench-tables.sh`).
#[test]
fn gpt2_net_json_renders_the_table_in_benchmarks_md() {
    let (out, _) = run(env!("CARGO_BIN_EXE_gpt2_net"), &["--json"]);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let runs: Vec<NetRun> = tables::parse_lines(&stdout).unwrap();
    let transports: Vec<&str> = runs.iter().map(|r| r.transport.as_str()).collect();
    assert_eq!(transports, ["memory", "tcp+tls"]);
    let run = &runs[0];
    assert_eq!(
        (run.prompt.as_str(), run.prompt_tokens, run.new_tokens),
        ("ROMEO:", 3, 8)
    );
    assert_eq!(run.ids.len(), 8);
    assert!(run.payload_bytes > 0 && run.frame_bytes > run.payload_bytes);
    let table = tables::gpt2_net_table(&runs).unwrap();
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../BENCHMARKS.md")).unwrap();
    let in_doc = tables::generated_section(&doc, tables::GPT2_NET).unwrap();
    assert_eq!(
        in_doc, table,
        "BENCHMARKS.md's gpt2_net table is stale: run scripts/bench-tables.sh"
    );
}

/// `perplexity --json` on one short window: the overall and per-window figures, the
/// secure perplexity within 1e-3 of the plaintext one.
#[test]
fn perplexity_json_carries_the_figures() {
    let (out, _) = run(
        env!("CARGO_BIN_EXE_perplexity"),
        &["--windows", "1", "--window-len", "16", "--json"],
    );
    assert!(
        out.status.success(),
        "{:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["windows"].as_u64(), v["window_len"].as_u64()),
        (Some(1), Some(16))
    );
    let (sp, pp) = (
        v["secure_perplexity"].as_f64().unwrap(),
        v["plaintext_perplexity"].as_f64().unwrap(),
    );
    assert!(pp > 1.0 && ((sp - pp) / pp).abs() <= 1e-3, "{sp} vs {pp}");
    assert_eq!(
        v["relative_difference"].as_f64(),
        Some((sp - pp).abs() / pp)
    );
    let windows = v["per_window"].as_array().unwrap();
    assert_eq!(windows.len(), 1);
    let nll = windows[0]["plaintext_nll"].as_f64().unwrap();
    assert!((nll.exp() - pp).abs() <= 1e-9 * pp, "{nll} vs {pp}");
    assert!(v["max_logit_error"].as_f64().unwrap() < 0.05);
}
