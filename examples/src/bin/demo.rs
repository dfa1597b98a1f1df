//! The main job so far: a secure fixed-point linear layer y = x·W + b among three parties
//! on three threads, revealed to the client only, checked against f64.
//!
//! Usage: `demo [--rows N] [--k K] [--n N] [--seed S]` (defaults: 4 × 64 · 64 × 32).

use std::process::ExitCode;

use clap::Parser;
use puma_runner::linear::{DemoError, LinearDemo, MAX_ELEMENTS, run_linear};

/// The largest acceptable error against the f64 plaintext.
const TOLERANCE: f64 = 1e-3;

/// A secure fixed-point linear layer y = x·W + b among three parties in memory: x (rows × k)
/// from the client P0, W (k × n) and b (n) from the model owner P1, y revealed to the client
/// and checked against f64.
#[derive(Debug, Parser)]
#[command(
    name = "demo",
    version,
    after_help = "Limits: each of x (rows × k), W (k × n) and y (rows × n) may have at most \
                  4194304 (2^22) elements, 32 MiB of f64; larger sizes are refused before \
                  anything is allocated."
)]
struct Args {
    /// Rows of x (tokens).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=MAX_ELEMENTS as u64))]
    rows: u64,
    /// Input features (columns of x, rows of W).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=MAX_ELEMENTS as u64))]
    k: u64,
    /// Output features (columns of W and y).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=MAX_ELEMENTS as u64))]
    n: u64,
    /// Seed of the pseudo-random data and of the parties' entropy.
    #[arg(long, default_value_t = 2024)]
    seed: u64,
}

/// The run the arguments ask for, its sizes checked against [`MAX_ELEMENTS`].
fn demo(args: &Args) -> Result<LinearDemo, String> {
    // Each size is at most MAX_ELEMENTS (clap checked it), so it fits a usize.
    let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    let demo = LinearDemo {
        rows: size(args.rows),
        k: size(args.k),
        n: size(args.n),
        seed: args.seed,
    };
    match demo.elements() {
        Ok(_) => Ok(demo),
        Err(DemoError::TooLarge {
            dims: [a, b],
            elements,
        }) => Err(format!(
            "--{a} × --{b} = {elements} elements is more than the limit of {MAX_ELEMENTS} (2^22) per matrix"
        )),
        Err(e) => Err(e.to_string()),
    }
}

fn main() -> ExitCode {
    let demo = match demo(&Args::parse()) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("demo: error: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "secure linear layer y = x·W + b: x {}×{} (client P0), W {}×{} and b {} (model owner P1), 3 parties in memory",
        demo.rows, demo.k, demo.k, demo.n, demo.n
    );
    let report = match run_linear(demo) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "max abs error vs f64: {:.3e} (tolerance {TOLERANCE:.0e})",
        report.max_abs_err
    );
    println!(
        "wall time:            {:.3} ms",
        report.elapsed.as_secs_f64() * 1e3
    );
    println!("rounds:               {}", report.rounds());
    for (i, s) in report.stats.iter().enumerate() {
        println!(
            "P{i}: sent {:>7} bytes in {:>2} frames ({:>7} payload bytes, setup {} bytes), received {:>7} bytes",
            s.bytes_total(),
            s.frames_sent.iter().sum::<u64>(),
            s.payload_bytes_total(),
            s.setup_bytes_sent,
            s.bytes_received.iter().sum::<u64>(),
        );
    }
    if let (Some(y), Some(r)) = (report.y.first(), report.reference.first()) {
        println!("y[0][0] = {y:.6} (f64: {r:.6})");
    }
    if report.max_abs_err.is_finite() && report.max_abs_err <= TOLERANCE {
        println!("OK");
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "FAILED: error {:.3e} exceeds {TOLERANCE:.0e}",
            report.max_abs_err
        );
        ExitCode::FAILURE
    }
}
