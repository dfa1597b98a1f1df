//! Every integration test file of the workspace is built. A crate whose integration tests
//! form one binary (`autotests = false`, `tests/main.rs` with one module per file) builds
//! only the files that `tests/main.rs` declares or that its Cargo.toml names as a target of
//! their own: a new file that neither names would silently never run. Likewise a library
//! or program built without a test harness (`test = false`) must have no unit test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::fs;
use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The workspace's member folders, from the `members = [..]` line of its Cargo.toml.
fn members() -> Vec<String> {
    let manifest = fs::read_to_string(workspace().join("Cargo.toml")).unwrap();
    let line = manifest
        .lines()
        .find(|l| l.trim_start().starts_with("members"))
        .expect("a members line");
    line.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The files of `crate_dir/tests/*.rs` that no test target builds.
fn unbuilt_test_files(crate_dir: &Path) -> Vec<String> {
    let manifest = fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    let tests = crate_dir.join("tests");
    if !manifest.contains("autotests = false") || !tests.is_dir() {
        return Vec::new();
    }
    let main = fs::read_to_string(tests.join("main.rs")).unwrap_or_default();
    let mut missing = Vec::new();
    for entry in fs::read_dir(&tests).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let Some(stem) = name.strip_suffix(".rs") else {
            continue;
        };
        let declared = main.lines().any(|l| l.trim() == format!("mod {stem};"));
        let own_target = manifest.contains(&format!("path = \"tests/{name}\""));
        if !declared && !own_target {
            missing.push(format!("{}/tests/{name}", crate_dir.display()));
        }
    }
    missing
}

/// The `.rs` files under `dir` (recursively), skipping `src/bin` when `skip_bins`.
fn rust_files(dir: &Path, skip_bins: bool, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if !(skip_bins && path.ends_with("src/bin")) {
                rust_files(&path, skip_bins, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The sources of `crate_dir`'s targets marked `test = false` that hold a unit test (which
/// `cargo test` would then never build).
fn untested_unit_tests(crate_dir: &Path) -> Vec<PathBuf> {
    let manifest = fs::read_to_string(crate_dir.join("Cargo.toml")).unwrap();
    let mut sources = Vec::new();
    // The manifest's tables, each as its header line and its body.
    for table in manifest.split("\n[").skip(1) {
        if !table.lines().any(|l| l.trim() == "test = false") {
            continue;
        }
        let path = table.lines().find_map(|l| {
            let v = l.trim().strip_prefix("path = \"")?;
            Some(v.trim_end_matches('"').to_owned())
        });
        if table.starts_with("lib]") {
            rust_files(&crate_dir.join("src"), true, &mut sources);
        } else if table.starts_with("[bin]]") {
            sources.push(crate_dir.join(path.expect("a [[bin]] with test = false names its path")));
        }
    }
    sources
        .into_iter()
        .filter(|p| {
            let text = fs::read_to_string(p).unwrap();
            text.contains("#[test]") || text.contains("cfg(test)")
        })
        .collect()
}

#[test]
fn targets_without_a_test_harness_have_no_unit_test() {
    let found: Vec<PathBuf> = members()
        .iter()
        .flat_map(|m| untested_unit_tests(&workspace().join(m)))
        .collect();
    assert!(
        found.is_empty(),
        "unit tests in a target with `test = false` never run: drop that line: {found:?}"
    );
}

#[test]
fn a_unit_test_without_a_harness_is_found() {
    let dir = std::env::temp_dir().join(format!("puma-test-harness-{}", std::process::id()));
    fs::create_dir_all(dir.join("src/bin")).unwrap();
    fs::write(
        dir.join("Cargo.toml"),
        concat!(
            "[package]\nname = \"x\"\n\n[lib]\ntest = false\n\n",
            "[[bin]]\nname = \"a\"\npath = \"src/bin/a.rs\"\ntest = false\n\n",
            "[[bin]]\nname = \"b\"\npath = \"src/bin/b.rs\"\n",
        ),
    )
    .unwrap();
    fs::write(dir.join("src/lib.rs"), "mod m;\n").unwrap();
    fs::write(dir.join("src/m.rs"), "#[cfg(test)]\nmod tests {}\n").unwrap();
    fs::write(dir.join("src/bin/a.rs"), "#[test]\nfn t() {}\n").unwrap();
    fs::write(dir.join("src/bin/b.rs"), "#[test]\nfn t() {}\n").unwrap();
    let mut found = untested_unit_tests(&dir);
    found.sort();
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found, vec![dir.join("src/bin/a.rs"), dir.join("src/m.rs")]);
}

#[test]
fn every_integration_test_file_is_built() {
    let members = members();
    assert!(members.len() >= 9, "members: {members:?}");
    let missing: Vec<String> = members
        .iter()
        .flat_map(|m| unbuilt_test_files(&workspace().join(m)))
        .collect();
    assert!(
        missing.is_empty(),
        "declare these in their crate's tests/main.rs (`mod NAME;`): {missing:?}"
    );
}

#[test]
fn a_file_left_out_is_found() {
    let dir = std::env::temp_dir().join(format!("puma-test-layout-{}", std::process::id()));
    fs::create_dir_all(dir.join("tests")).unwrap();
    fs::write(
        dir.join("Cargo.toml"),
        concat!(
            "[package]\nautotests = false\n\n",
            "[[test]]\nname = \"it\"\npath = \"tests/main.rs\"\n\n",
            "[[test]]\nname = \"own\"\npath = \"tests/own.rs\"\n",
        ),
    )
    .unwrap();
    fs::write(dir.join("tests/main.rs"), "mod kept;\n").unwrap();
    for f in ["kept.rs", "own.rs", "forgotten.rs"] {
        fs::write(dir.join("tests").join(f), "").unwrap();
    }
    let missing = unbuilt_test_files(&dir);
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        missing,
        vec![format!("{}/tests/forgotten.rs", dir.display())]
    );
}
