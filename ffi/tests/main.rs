//! The integration tests of puma-ffi, one module per file of this folder, built as one
//! test binary: `cargo test -p puma-ffi --test it` runs them all, `--test it FILE::`
//! one file's. One binary links once and compiles the generic code that the files share
//! once; a binary per file did both once per file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod abi;
mod api;
mod decoding;
mod examples;
mod header;
#[cfg(feature = "service")]
mod service;
