//! The integration tests of puma-serve, one module per file of this folder, built as one
//! test binary: `cargo test -p puma-serve --test it` runs them all, `--test it FILE::` one
//! file's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod admission;
mod protocol;
mod service;
