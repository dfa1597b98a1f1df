//! The integration tests of puma-layers, one module per file of this folder, built as one
//! test binary: `cargo test -p puma-layers --test it` runs them all, `--test it FILE::`
//! one file's. One binary links once and compiles the generic code that the files share
//! once; a binary per file did both once per file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod bert_common;
mod common;
mod llama_common;

mod bert_plain;
mod bert_secure;
mod bert_tokenizer;
mod checkpoint;
mod gguf;
mod gpt2_plain;
mod hostile_files;
mod leakage_gpt2;
mod llama_plain;
mod llama_secure;
mod llama_tokenizer;
mod model_limits;
mod store;
mod streamed;
mod tokenizer;
