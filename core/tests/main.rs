//! The integration tests of puma-core, one module per file of this folder, built as one
//! test binary: `cargo test -p puma-core --test it` runs them all, `--test it FILE::`
//! one file's. One binary links once and compiles the generic code that the files share
//! once; a binary per file did both once per file.
//! `leakage_zeroize.rs` stays a binary of its own: it installs a global allocator that
//! inspects every freed block.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod leakage_stats;
mod yield_block;

mod adversarial;
mod arithmetic;
mod compare;
mod cost_report;
mod dealing;
mod drafts;
mod engine;
mod equality;
mod gelu_layernorm;
mod leakage;
mod leakage_debug;
mod max_recip;
mod norm_activations;
mod sampling;
mod softmax;
mod yielding;
