//! Ring matmul speed by row count, for the shapes the models multiply: products of m rows
//! (a KV-cached step: 1; a batch or a draft: a few; a prompt: tens) by a weight matrix.
//!
//! ```text
//! cargo run --release -p puma-core --example kernel_rows
//! ```
//!
//! Prints, for each shape and m, the time of one `c += a · b` with the detected kernel, and
//! the multiply-adds and the bytes of B per second. Times on a shared machine are noisy:
//! compare builds side by side, several runs each.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::Instant;

use puma_core::kernel::{DetectedKernel, MatmulKernel};

fn main() {
    let kernel = DetectedKernel::new();
    println!("kernel: {:?}", kernel.kind());
    println!(
        "{:>5} {:>6} {:>4}  {:>10}  {:>9}  {:>9}",
        "k", "n", "m", "time (ms)", "G mul/s", "B GB/s"
    );
    // SmolLM2's MLP (576 → 1536 → 576), GPT-2 base's (768 → 3072), SmolLM2's LM head.
    for (k, n) in [
        (576usize, 1536usize),
        (1536, 576),
        (768, 3072),
        (576, 49152),
    ] {
        let b: Vec<u64> = (0..k * n)
            .map(|i| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        for m in [1usize, 2, 3, 4, 6, 12, 32, 64, 128] {
            let a: Vec<u64> = (0..m * k).map(|i| i as u64 * 7 + 1).collect();
            let mut c = vec![0u64; m * n];
            // About 2·10^9 multiply-adds per row, after one warm-up product.
            let reps = (2_000_000_000 / (k * n * m)).max(3);
            kernel.matmul_acc(&a, &b, &mut c, m, k, n);
            let t = Instant::now();
            for _ in 0..reps {
                kernel.matmul_acc(&a, &b, &mut c, m, k, n);
            }
            let dt = t.elapsed().as_secs_f64() / reps as f64;
            println!(
                "{k:>5} {n:>6} {m:>4}  {:>10.3}  {:>9.2}  {:>9.2}",
                dt * 1e3,
                (m * k * n) as f64 / dt / 1e9,
                (k * n * 8) as f64 / dt / 1e9
            );
        }
    }
}
