//! Per-protocol micro-benchmarks: elements per second of mul, trunc, lt, GeLU, softmax and
//! LayerNorm on the deterministic three-party simulator (all three parties' local work on
//! one thread, no network), and their bytes per element from the engine's counters.
//!
//! `cargo bench -p puma-core --bench protocols` prints a bytes-per-element table first, then
//! criterion's timings (throughput in elements/s).
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::future::Future;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use puma_core::sim::Sim;
use puma_core::{Ctx, Error, Shares, Width, proto};

/// GPT-2 base's sizes: 32 rows of width 768 (LayerNorm), 32×3072 activations (GeLU),
/// 12 heads × 32 × 32 scores (softmax).
const ELEMENTWISE: usize = 32 * 3072;
const LN_ROWS: usize = 32;
const LN_D: usize = 768;
const SM_ROWS: usize = 12 * 32;
const SM_COLS: usize = 32;

/// Runs `f` on fresh random sharings of `n` elements; returns the payload bytes summed
/// over the parties and the rounds.
fn run_once<F, Fut, T>(n: usize, f: F) -> (u64, u32)
where
    F: Fn(Ctx, Shares) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<T, Error>> + Send + 'static,
    T: Send + 'static,
{
    let out = Sim::new(1).run(move |_| {
        let f = f.clone();
        move |mut ctx| async move {
            let x = ctx.random_shares(n);
            f(ctx, x).await
        }
    });
    assert!(out.results.iter().all(Result::is_ok), "protocol failed");
    (out.payload_bytes().iter().sum(), out.rounds())
}

/// Prints the bytes per element of `f` on `n` elements (`units` elements of output), then
/// times it.
fn bench_one<F, Fut, T>(c: &mut Criterion, name: &str, n: usize, units: usize, f: F)
where
    F: Fn(Ctx, Shares) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<T, Error>> + Send + 'static,
    T: Send + 'static,
{
    let (bytes, rounds) = run_once(n, f.clone());
    println!(
        "{name:<24} {units:>7} elements {rounds:>4} rounds {:>9.2} bytes/element (3 parties)",
        bytes as f64 / units as f64
    );
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(units as u64));
    g.sample_size(10);
    g.bench_function("sim", |b| b.iter(|| run_once(n, f.clone())));
    g.finish();
}

fn bench(c: &mut Criterion) {
    let n = ELEMENTWISE;
    bench_one(c, "mul", n, n, |mut c, x| async move {
        proto::mul(&mut c, &x, &x).await
    });
    bench_one(c, "trunc d=18", n, n, |mut c, x| async move {
        proto::trunc(&mut c, &x, 18).await
    });
    bench_one(c, "lt k=64", 2 * n, n, |mut c, x| async move {
        let (a, b) = x.split_at(ELEMENTWISE)?;
        proto::lt(&mut c, &a, &b, Width::W64).await
    });
    bench_one(c, "gelu (PUMA fit)", n, n, |mut c, x| async move {
        proto::gelu(&mut c, &x).await
    });
    let sm = SM_ROWS * SM_COLS;
    bench_one(c, "softmax rows of 32", sm, sm, |mut c, x| async move {
        proto::softmax_rows(&mut c, &x, SM_ROWS, SM_COLS, 8).await
    });
    let ln = LN_ROWS * LN_D;
    bench_one(
        c,
        "layernorm rows of 768",
        ln + 2 * LN_D,
        ln,
        |mut c, x| async move {
            let (x, gb) = x.split_at(LN_ROWS * LN_D)?;
            let (g, b) = gb.split_at(LN_D)?;
            proto::layernorm_rows(&mut c, &x, LN_ROWS, LN_D, &g, &b, 1e-5).await
        },
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
