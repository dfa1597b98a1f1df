//! Runnable examples of puma-rs, and the pieces they share.
//!
//! - `gpt2` (`cargo run --release -p puma-examples --bin gpt2`): the main job, secure
//!   GPT-2 greedy generation among three parties on three threads (client, model owner,
//!   helper) with the embedded `gpt2-shakespeare` model; see [`gpt2`].
//! - `demo` (`cargo run --release -p puma-examples --bin demo`): a secure fixed-point
//!   linear layer among three parties on three threads; see [`linear`].
//! - `gpt2_base` and `bench_models` (`cargo run --release -p puma-examples --bin
//!   bench_models -- --json`): benchmarks on GPT-2 shapes with random weights; see
//!   [`random_gpt2`].

pub mod gpt2;
pub mod linear;
pub mod random_gpt2;
