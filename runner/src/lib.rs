//! Runnable examples of puma-rs, and the pieces they share.
//!
//! - `gpt2` (`cargo run --release -p puma-examples --bin gpt2`): the main job, secure
//!   GPT-2 greedy generation among three parties on three threads (client, model owner,
//!   helper) with the embedded `gpt2-shakespeare` model; see [`gpt2`].
//! - `bert` (`cargo run --release -p puma-examples --bin bert`): secure sentence
//!   embeddings and classification with BERT / RoBERTa checkpoints; see [`bert`].
//! - `demo` (`cargo run --release -p puma-examples --bin demo`): a secure fixed-point
//!   linear layer among three parties on three threads; see [`linear`].
//! - `gpt2_base` and `bench_models` (`cargo run --release -p puma-examples --bin
//!   bench_models -- --json`): benchmarks on GPT-2 shapes with random weights; see
//!   [`random_gpt2`].
//! - `llama` (`cargo run --release -p puma-examples --bin llama`): secure greedy generation
//!   with LLaMA-style decoders (HF checkpoints or GGUF); see [`llama`].
//! - `keygen` and `puma-party`: a development PKI, and one party of secure GPT-2 per OS
//!   process over TCP+TLS or QUIC; see [`party`].

pub mod bert;
pub mod checkpoint;
pub mod decoder;
pub mod decoding_flags;
pub mod diagnostics;
pub mod gpt2;
pub mod linear;
pub mod llama;
pub mod network_flags;
pub mod party;
pub mod random_gpt2;
pub mod resources;
pub mod streaming;
