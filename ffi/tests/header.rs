//! `include/puma.h` is what cbindgen generates from the sources today.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;

/// Generates the header from `src/` with `cbindgen.toml`.
fn generate() -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen could not generate the header");
    let mut out = Vec::new();
    bindings.write(&mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn checked_in_header_is_current() {
    let fresh = generate();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/puma.h");
    if std::env::var_os("PUMA_WRITE_HEADER").is_some() {
        std::fs::write(&path, &fresh).unwrap();
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap();
    assert!(
        checked_in == fresh,
        "ffi/include/puma.h is out of date: run scripts/ffi-header.sh and commit it"
    );
    // The generation sees every module: spot-check a few declarations.
    for decl in [
        "typedef struct puma_session puma_session;",
        "puma_status puma_session_poll(",
        "puma_status puma_session_start_gpt2_forward(",
        "PUMA_ERR_INVALID_HANDLE = 10,",
        "#define PUMA_MAX_FRAME_LEN 4194304",
    ] {
        assert!(fresh.contains(decl), "header lacks `{decl}`");
    }
}
