//! The main job so far: a secure fixed-point linear layer y = x·W + b among three parties
//! on three threads, revealed to the client only, checked against f64.
//!
//! Usage: `demo [--rows N] [--k K] [--n N] [--seed S]` (defaults: 4 × 64 · 64 × 32).

use std::process::ExitCode;

use puma_runner::linear::{LinearDemo, run_linear};

/// The largest acceptable error against the f64 plaintext.
const TOLERANCE: f64 = 1e-3;

fn parse_args() -> Result<LinearDemo, String> {
    let mut demo = LinearDemo::default();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num: u64 = value
            .parse()
            .map_err(|_| format!("{flag}: `{value}` is not a number"))?;
        let size = || usize::try_from(num).map_err(|_| format!("{flag}: {num} is too large"));
        match flag.as_str() {
            "--rows" => demo.rows = size()?,
            "--k" => demo.k = size()?,
            "--n" => demo.n = size()?,
            "--seed" => demo.seed = num,
            _ => return Err(format!("unknown argument `{flag}`")),
        }
    }
    Ok(demo)
}

fn main() -> ExitCode {
    let demo = match parse_args() {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}\nusage: demo [--rows N] [--k K] [--n N] [--seed S]");
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
