//! The ring matmul kernel against an f64 GEMM (`matrixmultiply`) of the same shape, in the
//! same run, on GPT-2's shapes.
//!
//! `cargo bench -p puma-layers --bench kernel` uses all cores for both (the ring kernel
//! through `ThreadedKernel`, matrixmultiply through its `threading` feature);
//! `MATMUL_NUM_THREADS=1 cargo bench -p puma-layers --bench kernel` runs both on one
//! thread. Before the criterion groups it prints a table of best-of-N times and the
//! ring/f64 ratio per shape.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use puma_core::kernel::{DetectedKernel, MatmulKernel};
use puma_layers::kernel::ThreadedKernel;

/// (name, m, k, n): GPT-2's linear layers for 32 tokens, a square product, the LM head for
/// the last position; then products of a few rows, as a KV-cached step (1 row), a batch of
/// prompts (2, 3) or a draft's verification (6) makes them: SmolLM2's MLP and LM head and
/// GPT-2's first MLP product; last, the LM head as the decoders compute it, `head · hiddenᵀ`
/// (vocabulary rows, a column per position).
const SHAPES: [(&str, usize, usize, usize); 16] = [
    ("qkv 32x768x2304", 32, 768, 2304),
    ("attn-proj 32x768x768", 32, 768, 768),
    ("fc 32x768x3072", 32, 768, 3072),
    ("fc-proj 32x3072x768", 32, 3072, 768),
    ("square 768x768x768", 768, 768, 768),
    ("medium-fc 32x1024x4096", 32, 1024, 4096),
    ("lm-head 1x768x50257", 1, 768, 50257),
    ("fc 1x768x3072", 1, 768, 3072),
    ("fc 2x576x1536", 2, 576, 1536),
    ("fc-proj 3x1536x576", 3, 1536, 576),
    ("fc 6x768x3072", 6, 768, 3072),
    ("lm-head 2x576x49152", 2, 576, 49152),
    ("lm-head 12x576x49152", 12, 576, 49152),
    ("head-t 50257x768x1", 50257, 768, 1),
    ("head-t 49152x576x2", 49152, 576, 2),
    ("head-t 49152x576x3", 49152, 576, 3),
];

fn threads() -> usize {
    std::env::var("MATMUL_NUM_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn ring_kernel() -> ThreadedKernel {
    ThreadedKernel::with_inner(Arc::new(DetectedKernel::new()), threads())
}

fn inputs(m: usize, k: usize, n: usize) -> (Vec<u64>, Vec<u64>, Vec<f64>, Vec<f64>) {
    let mut s = 0x1234_5678_u64;
    let mut next = move || {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        (s ^ (s >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9)
    };
    let a: Vec<u64> = (0..m * k).map(|_| next()).collect();
    let b: Vec<u64> = (0..k * n).map(|_| next()).collect();
    let af = a.iter().map(|&x| (x >> 40) as f64).collect();
    let bf = b.iter().map(|&x| (x >> 40) as f64).collect();
    (a, b, af, bf)
}

fn dgemm(a: &[f64], b: &[f64], c: &mut [f64], m: usize, k: usize, n: usize) {
    // SAFETY: row-major m×k, k×n, m×n buffers of exactly those lengths.
    #[allow(unsafe_code)]
    unsafe {
        matrixmultiply::dgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            k as isize,
            1,
            b.as_ptr(),
            n as isize,
            1,
            1.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

fn best_of(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn ratio_table() {
    let kernel = ring_kernel();
    // The portable kernel on the same threads, to show what the SIMD kernel buys.
    let portable = ThreadedKernel::with_inner(Arc::new(DetectedKernel::portable()), threads());
    println!(
        "ring kernel: {} thread(s), {:?}",
        kernel.threads(),
        DetectedKernel::new().kind()
    );
    println!(
        "{:<24} {:>10} {:>10} {:>7} {:>11} {:>11} {:>12}",
        "shape", "ring ms", "f64 ms", "ratio", "ring GMAC/s", "f64 GMAC/s", "portable ms"
    );
    for (name, m, k, n) in SHAPES {
        let (a, b, af, bf) = inputs(m, k, n);
        let mut c = vec![0u64; m * n];
        let mut cf = vec![0f64; m * n];
        let reps = 7;
        let ring = best_of(reps, || kernel.matmul_acc(&a, &b, &mut c, m, k, n));
        let f64t = best_of(reps, || dgemm(&af, &bf, &mut cf, m, k, n));
        let port = best_of(reps, || portable.matmul_acc(&a, &b, &mut c, m, k, n));
        let macs = (m * k * n) as f64;
        println!(
            "{name:<24} {:>10.3} {:>10.3} {:>7.2} {:>11.2} {:>11.2} {:>12.3}",
            ring * 1e3,
            f64t * 1e3,
            ring / f64t,
            macs / ring / 1e9,
            macs / f64t / 1e9,
            port * 1e3
        );
        black_box((&c, &cf));
    }
}

fn bench(c: &mut Criterion) {
    ratio_table();
    let kernel = ring_kernel();
    for (name, m, k, n) in SHAPES {
        let (a, b, af, bf) = inputs(m, k, n);
        let mut g = c.benchmark_group(name);
        g.throughput(Throughput::Elements((m * k * n) as u64));
        g.sample_size(10);
        let mut out = vec![0u64; m * n];
        g.bench_function("ring u64", |bch| {
            bch.iter(|| kernel.matmul_acc(&a, &b, &mut out, m, k, n))
        });
        let mut outf = vec![0f64; m * n];
        g.bench_function("f64 matrixmultiply", |bch| {
            bch.iter(|| dgemm(&af, &bf, &mut outf, m, k, n))
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
