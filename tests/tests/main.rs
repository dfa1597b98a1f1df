//! The integration tests of puma-tests, one module per file of this folder, built as one
//! test binary: `cargo test -p puma-tests --test it` runs them all, `--test it FILE::`
//! one file's. One binary links once and compiles the generic code that the files share
//! once; a binary per file did both once per file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod decoding;
mod gpt2_costs;
mod gpt2_shakespeare;
mod gpt2_sharing;
mod kv_cache;
mod outside_client;
mod small_vocab;
mod test_layout;
