//! The `keygen` binary: argument forms, private key modes, and no partial output on a bad
//! argument.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const KEYGEN: &str = env!("CARGO_BIN_EXE_keygen");

fn fresh_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("puma-keygen-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn keygen(out: &Path, args: &[&str]) -> Output {
    Command::new(KEYGEN)
        .args(["--out", out.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap()
}

fn addrs(dir: &Path) -> Vec<String> {
    let toml = std::fs::read_to_string(dir.join("parties.toml")).unwrap();
    toml.lines()
        .filter_map(|l| l.strip_prefix("addr = "))
        .map(|a| a.trim_matches('"').to_string())
        .collect()
}

#[test]
fn hosts_are_taken_comma_or_space_separated() {
    let dir = fresh_dir("comma");
    let out = keygen(
        &dir,
        &["--hosts", "10.0.0.1,10.0.0.2,10.0.0.3", "--port", "7100"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        addrs(&dir),
        ["10.0.0.1:7100", "10.0.0.2:7101", "10.0.0.3:7102"]
    );
    let dir2 = fresh_dir("space");
    let out = keygen(&dir2, &["--hosts", "a.example", "b.example", "::1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        addrs(&dir2),
        ["a.example:7000", "b.example:7001", "[::1]:7002"]
    );
    let out = keygen(&fresh_dir("two"), &["--hosts", "10.0.0.1,10.0.0.2"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("three hosts"), "{err}");
    for d in [dir, dir2] {
        std::fs::remove_dir_all(d).unwrap();
    }
}

#[cfg(unix)]
#[test]
fn private_keys_are_mode_0600() {
    use std::os::unix::fs::PermissionsExt;
    let dir = fresh_dir("mode");
    let out = keygen(&dir, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for i in 0..3 {
        let mode = |n: String| std::fs::metadata(dir.join(n)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(format!("p{i}.key.pem")), 0o600, "p{i}.key.pem");
        assert_eq!(mode(format!("p{i}.cert.pem")), 0o644, "p{i}.cert.pem");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_bad_argument_writes_nothing() {
    // The ports P0..P2 would run past 65535: refused before any file is written.
    let dir = fresh_dir("port");
    let out = keygen(&dir, &["--port", "65534"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--port 65534") && err.contains("65533"),
        "{err}"
    );
    assert!(!dir.exists() || std::fs::read_dir(&dir).unwrap().next().is_none());

    // An existing file without --force: nothing is replaced or added.
    let dir = fresh_dir("exists");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("p2.key.pem"), "mine").unwrap();
    let out = keygen(&dir, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("p2.key.pem exists"), "{err}");
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(files.len(), 1);
    assert_eq!(
        std::fs::read_to_string(dir.join("p2.key.pem")).unwrap(),
        "mine"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
