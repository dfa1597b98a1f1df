//! The integration tests of puma-examples, one module per file of this folder, built as one
//! test binary: `cargo test -p puma-examples --test it` runs them all, `--test it FILE::`
//! one file's. One binary links once and compiles the generic code that the files share
//! once; a binary per file did both once per file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod bert_cli;
mod cli;
mod gpt2_secure;
mod keygen;
mod llama_cli;
mod party_limits;
mod party_processes;
mod service;
