//! Every integration test file of the workspace is built. A crate whose integration tests
//! form one binary (`autotests = false`, `tests/main.rs` with one module per file) builds
//! only the files that `tests/main.rs` declares or that its Cargo.toml names as a target of
//! their own: a new file that neither names would silently never run.
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
