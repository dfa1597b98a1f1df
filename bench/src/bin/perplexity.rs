//! Secure perplexity of a GPT-2 checkpoint on a token slice, beside the plaintext f64 model.
//!
//! Each window is one secure forward pass (three parties in memory, P0 the client, P1 the
//! model owner) whose logits for every position are revealed to the client, which scores
//! the next token of each position. Usage:
//!
//! ```text
//! perplexity [--windows N] [--window-len L] [--squarings T] [--json]
//! ```
//! The windows must fit the slice (windows × window length ≤ 1,024 tokens) and each window
//! the model's context (256 positions for the Shakespeare model).
//! Defaults: the embedded Shakespeare GPT-2 and the fixture's held-out slice of 1,024
//! tokens as 4 windows of 256 (reference perplexity 50.529740).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use puma_core::{Config, PartyId};
use puma_layers::gpt2::plain::PlainGpt2;
use puma_layers::nn::{SecureSettings, SharedDecoder, forward_logits};
use puma_runner::gpt2::{DEFAULT_MODEL_DIR, load_model};

const REFERENCE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../layers/tests/fixtures/gpt2-shakespeare/reference.safetensors"
);

/// Mean negative log-likelihood of each row's next token (row t predicts ids[t + 1]).
fn mean_nll(logits: &[f64], vocab: usize, ids: &[u32]) -> f64 {
    let mut total = 0.0;
    let mut count = 0usize;
    for t in 0..ids.len().saturating_sub(1) {
        let row = &logits[t * vocab..(t + 1) * vocab];
        let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        total += lse - row[ids[t + 1] as usize];
        count += 1;
    }
    total / count.max(1) as f64
}

fn read_slice() -> Result<Vec<u32>, String> {
    let bytes = std::fs::read(REFERENCE).map_err(|e| format!("{REFERENCE}: {e}"))?;
    let st = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| e.to_string())?;
    let t = st
        .tensor("val_slice.input_ids")
        .map_err(|e| e.to_string())?;
    Ok(t.data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as u32)
        .collect())
}

/// Secure perplexity of the embedded Shakespeare GPT-2 on the fixture's held-out slice
/// (1,024 tokens), beside the plaintext f64 model.
#[derive(Debug, Parser)]
#[command(
    name = "perplexity",
    version,
    after_help = "Limits: --windows × --window-len must not exceed the slice's 1024 tokens, \
                  and --window-len the model's context (256 positions)."
)]
struct Args {
    /// Windows to score, one secure forward pass each.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=1024))]
    windows: u64,
    /// Tokens per window (at least 2: each position scores the next token).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(2..=1024))]
    window_len: u64,
    /// Use the second-order softmax exponential with this many squarings instead of the
    /// default minimax one.
    #[arg(long, value_parser = clap::value_parser!(u32).range(3..=12))]
    squarings: Option<u32>,
    /// Print one JSON object (per-window and overall figures) instead of the text lines.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Both are bounded by clap (≤ 1024).
    let windows = usize::try_from(args.windows).unwrap_or(1);
    let window_len = usize::try_from(args.window_len).unwrap_or(2);
    let mut settings = SecureSettings::default();
    if let Some(squarings) = args.squarings {
        settings.softmax_exp = puma_core::proto::ExpApprox::Taylor2 { squarings };
    }
    let ids = match read_slice() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if windows * window_len > ids.len() {
        eprintln!(
            "error: --windows × --window-len = {windows} × {window_len} = {} tokens, but the slice has {}",
            windows * window_len,
            ids.len()
        );
        return ExitCode::from(2);
    }
    let model = match load_model(std::path::Path::new(DEFAULT_MODEL_DIR)) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let plain = match PlainGpt2::new(model.config.clone(), model.weights.clone()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    if window_len > model.config.n_positions {
        eprintln!(
            "error: --window-len {window_len} is more than the model's context of {} positions",
            model.config.n_positions
        );
        return ExitCode::from(2);
    }
    let vocab = model.config.vocab_size;
    let (mut secure_nll, mut plain_nll, mut max_err) = (0.0, 0.0, 0.0f64);
    let mut per_window = Vec::with_capacity(windows);
    let shared = Arc::new((model.config.clone(), model.weights.clone()));
    let start = Instant::now();
    for w in 0..windows {
        let Some(window) = ids.get(w * window_len..(w + 1) * window_len) else {
            eprintln!(
                "error: the slice has fewer than {} tokens",
                (w + 1) * window_len
            );
            return ExitCode::FAILURE;
        };
        let window = window.to_vec();
        let plain_logits = match plain.forward(&window) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let plain_flat: Vec<f64> = plain_logits.iter().copied().collect();
        let t0 = Instant::now();
        let out = puma_transports::mem::run3(Config::new(100 + w as u64), 7 + w as u64, |me| {
            let shared = shared.clone();
            let window = window.clone();
            move |mut ctx| async move {
                let (cfg, weights) = &*shared;
                let m = SharedDecoder::share(
                    &mut ctx,
                    PartyId::P1,
                    cfg,
                    (me == PartyId::P1).then_some(weights),
                )
                .await?;
                let ids = (me == PartyId::P0).then_some(&window[..]);
                forward_logits(&mut ctx, &m, PartyId::P0, ids, window.len(), &settings).await
            }
        });
        let [p0, _, _] = out.results;
        let logits = match p0 {
            Ok(Some(l)) => l,
            Ok(None) => {
                eprintln!("error: the client got no logits");
                return ExitCode::FAILURE;
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
        };
        let err = logits
            .iter()
            .zip(&plain_flat)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f64::max);
        max_err = max_err.max(err);
        let (s, p) = (
            mean_nll(&logits, vocab, &window),
            mean_nll(&plain_flat, vocab, &window),
        );
        let secs = t0.elapsed().as_secs_f64();
        if args.json {
            per_window.push(serde_json::json!({
                "secure_nll": s,
                "plaintext_nll": p,
                "max_logit_error": err,
                "seconds": secs,
            }));
        } else {
            println!(
                "window {w}: secure NLL {s:.6}, plaintext NLL {p:.6}, max |logit error| {err:.3e}, {secs:.1} s"
            );
        }
        secure_nll += s / windows as f64;
        plain_nll += p / windows as f64;
    }
    let (sp, pp) = (secure_nll.exp(), plain_nll.exp());
    if args.json {
        let obj = serde_json::json!({
            "model": "gpt2-shakespeare",
            "windows": windows,
            "window_len": window_len,
            "softmax_squarings": args.squarings,
            "secure_perplexity": sp,
            "plaintext_perplexity": pp,
            "relative_difference": (sp - pp).abs() / pp,
            "max_logit_error": max_err,
            "seconds": start.elapsed().as_secs_f64(),
            "per_window": per_window,
        });
        println!("{obj}");
        return ExitCode::SUCCESS;
    }
    println!(
        "perplexity: secure {sp:.6}, plaintext {pp:.6}, relative difference {:.3e}; max |logit error| {max_err:.3e}; {:.1} s",
        (sp - pp).abs() / pp,
        start.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}
