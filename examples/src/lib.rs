//! Runnable examples of puma-rs, and the pieces they share.
//!
//! - `demo` (`cargo run --release -p puma-examples --bin demo`): the current main job,
//!   a secure fixed-point linear layer among three parties on three threads; see
//!   [`linear`].

pub mod linear;
