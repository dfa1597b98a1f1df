//! The checks of the command-line conventions every program of the workspace follows
//! (`--help` and `--version` exit 0 at once; absurd sizes are usage errors naming the flag
//! and its limit). Included by the `cli` tests of `puma-examples` and `puma-bench`, each
//! with its own list of programs.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Far less than any run of a program takes (they load or build a model first; some run
/// for minutes), and far more than printing a usage text.
pub const QUICK: Duration = Duration::from_secs(10);

/// Runs `exe` with `args`; returns its output and how long it took.
pub fn run(exe: &str, args: &[&str]) -> (Output, Duration) {
    let t = Instant::now();
    let out = Command::new(exe).args(args).output().unwrap();
    (out, t.elapsed())
}

/// `name --help` prints a usage text naming `--help`, `--version` and every one of `flags`,
/// and `name --version` prints `name VERSION`; both exit 0 within [`QUICK`].
pub fn prints_help_and_version(name: &str, exe: &str, flags: &[&str]) {
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

/// Runs `exe` with `args`, which it must refuse with a usage error (exit status 2, not an
/// abort) whose message names every one of `needles` (the flag and its limit).
pub fn refused(exe: &str, args: &[&str], needles: &[&str]) {
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
