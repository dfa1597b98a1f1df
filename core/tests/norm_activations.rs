//! RMSNorm (with input scaling), the Chebyshev SiLU and tanh against f64 plaintext: accuracy
//! on the value ranges LLaMA and BERT produce (massive activations up to 2.5e4 for
//! RMSNorm), and pinned rounds and payload bytes.
//!
//! Error definitions used below, always against the f64 function of the decoded
//! fixed-point inputs (input rounding to the f = 18 grid is not counted):
//! - RMSNorm: elementwise |y − y_ref| / max(|y_ref|, 1), ε = 1e-5.
//! - SiLU: |y − SiLU(x)|.
//! - tanh: |y − tanh(x)|.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use puma_core::proto::{self, RmsScaling};
use puma_core::sim::{Outcome, Sim, reconstruct};
use puma_core::{Ctx, Error, ErrorKind, FixedPoint, PartyId, Shares};

const F: u32 = 18;
const EPS: f64 = 1e-5;
/// The public residual bound of LLaMA models with massive activations (SmolLM2: 2.5e4).
const BOUND: f64 = 32768.0;
/// SmolLM2-135M's hidden width.
const D: usize = 576;

fn fx() -> FixedPoint {
    FixedPoint::default()
}

/// Shares `vals` from P0, re-randomises every component (a product with public 1, as after
/// any multiplication), runs `g` and opens its output.
fn run_on<G, Fut>(seed: u64, vals: Vec<u64>, g: G) -> (Vec<u64>, Outcome<Shares>)
where
    G: Fn(Ctx, Shares) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Shares, Error>> + Send + 'static,
{
    run_at(seed, fx(), vals, g)
}

/// The largest |y − exact(x)| over the raw inputs and their opened outputs, both decoded
/// at `format` (also the other files' helper for formats other than f = 18).
pub(crate) fn max_error(format: FixedPoint, raw: &[u64], y: &[u64], exact: fn(f64) -> f64) -> f64 {
    raw.iter()
        .zip(y)
        .map(|(&r, &yv)| (format.decode(yv) - exact(format.decode(r))).abs())
        .fold(0.0, f64::max)
}

/// [`run_on`] in a session of fixed-point format `fixed` (also the other files' helper
/// for formats other than f = 18).
pub(crate) fn run_at<G, Fut>(
    seed: u64,
    fixed: FixedPoint,
    vals: Vec<u64>,
    g: G,
) -> (Vec<u64>, Outcome<Shares>)
where
    G: Fn(Ctx, Shares) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Shares, Error>> + Send + 'static,
{
    let n = vals.len();
    let mut cfg = puma_core::Config::new(seed);
    cfg.fixed = fixed;
    let out = Sim::new(seed).with_config(cfg).run(move |me| {
        let (g, v) = (g.clone(), vals.clone());
        move |mut ctx| async move {
            let x = proto::share_input(
                &mut ctx,
                PartyId::P0,
                (me == PartyId::P0).then_some(&v[..]),
                n,
            )
            .await?;
            let x = proto::mul(&mut ctx, &x, &Shares::from_public(me, &vec![1; n])).await?;
            g(ctx, x).await
        }
    });
    let opened = reconstruct(&[
        out.results[0].clone().unwrap(),
        out.results[1].clone().unwrap(),
        out.results[2].clone().unwrap(),
    ])
    .unwrap();
    (opened, out)
}

/// Runs `g` on `n` random shares (no input round): the costs of `g` alone.
fn costs<G, Fut>(n: usize, g: G) -> Outcome<Shares>
where
    G: Fn(Ctx, Shares) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Shares, Error>> + Send + 'static,
{
    Sim::new(5).run(move |_| {
        let g = g.clone();
        move |mut ctx| async move {
            let x = ctx.random_shares(n);
            g(ctx, x).await
        }
    })
}

fn pseudo(i: u64, salt: u64) -> u64 {
    let mut z = i.wrapping_add(salt.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Uniform in [0, 1).
fn unif(i: u64, salt: u64) -> f64 {
    (pseudo(i, salt) >> 11) as f64 / (1u64 << 53) as f64
}

/// Standard normal (Box–Muller), deterministic.
fn normal(i: u64, salt: u64) -> f64 {
    let u1 = unif(i, salt).max(1e-300);
    let u2 = unif(i, salt ^ 0x5555);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// f64 RMSNorm of one row.
fn rmsnorm_ref(x: &[f64], g: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter().zip(g).map(|(v, g)| v * r * g).collect()
}

/// The scaling by the formula in real logarithms, as [`RmsScaling::new`] documents it.
fn scaling_by_logs(d: usize, bound: f64, f: u32) -> Option<(u32, u32)> {
    let lb = bound.log2();
    let k = (2.0 * lb + 2.0 * f as f64 - 61.0).ceil().max(0.0) as u32;
    let g = (61.0 - (d as f64).log2() - 2.0 * lb).floor();
    (g >= f as f64).then(|| (k, (g as u32).min(2 * f - k).min(f + 8)))
}

#[test]
fn rms_scaling_matches_its_formula() {
    // The default bound 2^15 at SmolLM2's width: x scaled by 2^−5, squares at 21 bits.
    assert_eq!(
        RmsScaling::new(D, BOUND, F).unwrap(),
        RmsScaling { k: 5, g: 21 }
    );
    // A small bound needs no scaling; the square precision is capped at f + 8.
    assert_eq!(
        RmsScaling::new(64, 1.0, F).unwrap(),
        RmsScaling { k: 0, g: 26 }
    );
    let mut checked = 0;
    for d in [1usize, 2, 3, 64, 576, 768, 2048, 4096, 8192, 1 << 20] {
        for bound in [
            1.0, 1.5, 2.0, 100.0, 1000.0, 4096.0, 8191.9, 8192.0, 8192.1, 24926.0, 32768.0,
            32769.0, 65536.0, 1e6, 1e9,
        ] {
            for f in [8u32, 12, 18, 20, 24] {
                let got = RmsScaling::new(d, bound, f).ok().map(|s| (s.k, s.g));
                assert_eq!(
                    got,
                    scaling_by_logs(d, bound, f),
                    "d {d} bound {bound} f {f}"
                );
                checked += usize::from(got.is_some());
            }
        }
    }
    assert!(checked > 300, "{checked}");
    for (d, bound, f) in [
        (0, 2.0, F),
        (8, 0.5, F),
        (8, f64::NAN, F),
        (8, f64::INFINITY, F),
    ] {
        let e = RmsScaling::new(d, bound, f).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Misuse);
    }
}

/// Runs RMSNorm on rows of `d` and returns the worst |y − y_ref| / max(|y_ref|, 1) per row.
fn check_rmsnorm(seed: u64, x: &[f64], g: &[f64], d: usize) -> Vec<f64> {
    check_rmsnorm_at(seed, fx(), BOUND, x, Some(g), d, 10)
}

/// [`check_rmsnorm`] in format `fx` with residual bound `bound`, without γ (the unscaled
/// form) if `g` is `None`, asserting `rounds` for the RMSNorm itself (after the input's two).
fn check_rmsnorm_at(
    seed: u64,
    fx: FixedPoint,
    bound: f64,
    x: &[f64],
    g: Option<&[f64]>,
    d: usize,
    rounds: u32,
) -> Vec<f64> {
    let rows = x.len() / d;
    let mut vals = fx.encode_slice(x).unwrap();
    let scaled = g.is_some();
    if let Some(g) = g {
        vals.extend(fx.encode_slice(g).unwrap());
    }
    let (y, out) = run_at(seed, fx, vals.clone(), move |mut ctx, v| async move {
        let (x, g) = v.split_at(rows * d)?;
        if scaled {
            proto::rms_norm_rows(&mut ctx, &x, rows, d, &g, EPS, bound).await
        } else {
            proto::rms_norm_rows_unscaled(&mut ctx, &x, rows, d, EPS, bound).await
        }
    });
    assert_eq!(out.rounds(), 2 + rounds);
    let dec = fx.decode_slice(&vals);
    let ones = vec![1.0; d];
    let gd = if scaled { &dec[rows * d..] } else { &ones[..] };
    (0..rows)
        .map(|r| {
            let want = rmsnorm_ref(&dec[r * d..(r + 1) * d], gd, EPS);
            want.iter()
                .enumerate()
                .map(|(k, w)| (fx.decode(y[r * d + k]) - w).abs() / w.abs().max(1.0))
                .fold(0.0, f64::max)
        })
        .collect()
}

/// γ like a trained LLaMA norm: mostly around 1, some channels up to 2.5, the
/// massive-activation channel damped.
fn llama_gamma(d: usize, salt: u64) -> Vec<f64> {
    (0..d as u64)
        .map(|k| match k {
            14 => 0.05,
            _ if k % 37 == 0 => 2.5 * unif(k, salt),
            _ => 0.6 + 0.8 * unif(k, salt),
        })
        .collect()
}

/// Rows of 576 like SmolLM2's residual stream: normal bulk of standard deviation 0.3 to 3,
/// massive activations up to 2.5e4 in a fixed channel (and the bound itself, ±32768), a
/// second outlier channel of a few thousand, rows without outliers.
#[test]
fn rmsnorm_on_rows_with_massive_activations() {
    let rows = 8;
    let mut x = Vec::with_capacity(rows * D);
    for r in 0..rows as u64 {
        let sd = [0.3, 1.0, 3.0, 1.0, 0.5, 2.0, 1.0, 0.8][r as usize];
        for k in 0..D as u64 {
            let mut v = sd * normal(r * D as u64 + k, 51);
            match (r, k) {
                (0..=3, 14) => v = 24926.0 - 1500.0 * r as f64,
                (4, 14) => v = -BOUND,
                (5, 14) => v = BOUND,
                (0..=5, 260) => v = -3000.0 + 450.0 * r as f64,
                _ => {}
            }
            x.push(v);
        }
    }
    let g = llama_gamma(D, 52);
    let worst = check_rmsnorm(21, &x, &g, D);
    println!("rmsnorm (massive activations) worst per row: {worst:?}");
    let outliers = worst[..6].iter().copied().fold(0.0, f64::max);
    let plain = worst[6..].iter().copied().fold(0.0, f64::max);
    println!("rmsnorm: outlier rows {outliers:.3e}, rows without outliers {plain:.3e}");
    // Measured 1.1e-5 and 5.7e-6 (the output grid 2^−f is 3.8e-6).
    assert!(outliers <= 5e-5, "{outliers}");
    assert!(plain <= 5e-5, "{plain}");
    // Without γ (LLaMA's block norms, γ folded into the next weights): y = x·r.
    let worst = check_rmsnorm_at(31, fx(), BOUND, &x, None, D, 10);
    println!("rmsnorm unscaled (massive activations) worst per row: {worst:?}");
    let w = worst.iter().copied().fold(0.0, f64::max);
    assert!(w <= 5e-5, "{w}");
}

/// Rows of tiny values (RMS 1e-3 to 1e-2, where ε counts and 1/√(mean(x²) + ε) reaches
/// 300), at the same bound 2^15: any rounding of the squares shows most here.
#[test]
fn rmsnorm_on_rows_of_tiny_values() {
    let scales = [1e-2, 4e-3, 1e-3, 2e-2];
    let mut x = Vec::new();
    for (r, s) in scales.iter().enumerate() {
        for k in 0..D as u64 {
            x.push(s * normal(r as u64 * D as u64 + k, 61));
        }
    }
    let g = llama_gamma(D, 62);
    let worst = check_rmsnorm(22, &x, &g, D);
    println!("rmsnorm (tiny rows) worst per row: {worst:?}");
    // Measured 7.7e-5 (RMS 1e-3; 5.2e-5 at RMS 4e-3): the row's sum of squares is exact
    // up to its one truncation (7.7e-4 when each square was taken as x·trunc(x, 5)).
    let w = worst.iter().copied().fold(0.0, f64::max);
    assert!(w <= 2e-4, "{w}");
    let worst = check_rmsnorm_at(32, fx(), BOUND, &x, None, D, 10);
    println!("rmsnorm unscaled (tiny rows) worst per row: {worst:?}");
    let w = worst.iter().copied().fold(0.0, f64::max);
    assert!(w <= 2e-4, "{w}");
}

/// LLaMA-7B's width (4096) at bound 2^15: the cross parts of the sum of squares would pass
/// 2^62 over a whole row, so they are summed and truncated in 25 blocks of 170 elements.
/// At f = 24 with bound 2^15 not even one element's cross part fits, so the squares are
/// truncated one by one (x scaled by 2^−k first): one round more.
#[test]
fn rmsnorm_sums_squares_in_blocks_and_one_by_one() {
    let d = 4096;
    let mut x = Vec::with_capacity(2 * d);
    for r in 0..2u64 {
        for k in 0..d as u64 {
            let v = match (r, k) {
                (0, 1512) => 24926.0,
                (0, 2533) => -BOUND,
                (1, 7) => -3000.0,
                _ => [0.8, 0.05][r as usize] * normal(r * d as u64 + k, 71),
            };
            x.push(v);
        }
    }
    let g = llama_gamma(d, 72);
    let worst = check_rmsnorm_at(23, fx(), BOUND, &x, Some(&g), d, 10);
    println!("rmsnorm, rows of 4096 (blocks): worst per row {worst:?}");
    let w = worst.iter().copied().fold(0.0, f64::max);
    assert!(w <= 5e-5, "{w}");

    let fx24 = FixedPoint::new(24).unwrap();
    let d = 64;
    // |x·γ| < 2^(62 − 2f) = 2^14 at f = 24: outliers of 5000 against γ ≤ 2.5.
    let x: Vec<f64> = (0..2 * d as u64)
        .map(|i| match i {
            5 => 5000.0,
            70 => -4000.0,
            _ => [1.5, 20.0][(i / d as u64) as usize] * normal(i, 73),
        })
        .collect();
    let g = llama_gamma(d, 74);
    let worst = check_rmsnorm_at(24, fx24, BOUND, &x, Some(&g), d, 11);
    println!("rmsnorm, f = 24, bound 2^15 (one by one): worst per row {worst:?}");
    let w = worst.iter().copied().fold(0.0, f64::max);
    assert!(w <= 1e-3, "{w}");
}

/// RMSNorm of rows of 576 at bound 2^15: 10 rounds whatever the number of rows; with a
/// number of rows divisible by 24 each party sends exactly 477,985 bits per row.
#[test]
fn rmsnorm_costs_are_pinned() {
    for (rows, want) in [(1usize, [21224u64, 18476, 20294]), (24, [477_985; 3])] {
        let out = Sim::new(8).run(move |_| {
            move |mut ctx| async move {
                let x = ctx.random_shares(rows * D);
                let g = ctx.random_shares(D);
                proto::rms_norm_rows(&mut ctx, &x, rows, D, &g, EPS, BOUND).await
            }
        });
        assert_eq!(out.rounds(), 10, "rows = {rows}");
        let bytes = out.payload_bytes();
        println!("rmsnorm, {rows} row(s) of {D}: bytes per party {bytes:?}");
        assert_eq!(bytes, want, "rows = {rows}");
    }
    // Without γ: the product x·r truncated by f + 8, 192 + 4·26 = 296 bits per element.
    for (rows, want) in [(1usize, [14888u64, 12140, 13958]), (24, [325_921; 3])] {
        let out = Sim::new(8).run(move |_| {
            move |mut ctx| async move {
                let x = ctx.random_shares(rows * D);
                proto::rms_norm_rows_unscaled(&mut ctx, &x, rows, D, EPS, BOUND).await
            }
        });
        assert_eq!(out.rounds(), 10, "rows = {rows}");
        let bytes = out.payload_bytes();
        println!("rmsnorm unscaled, {rows} row(s) of {D}: bytes per party {bytes:?}");
        assert_eq!(bytes, want, "rows = {rows}");
    }
    // rsqrt alone on 24 row sums (lo = ⌊log2(576·1e-5·2^21)⌋ = 13, hi = 60, c = 576·2^3):
    // 6 rounds, 155,026 bits per row (`rsqrt_bits`): the 95 comparisons (two per octave)
    // on keys cut by 4 bits, at k = 58, cost 103,058 bits.
    let out = costs(24, |mut ctx, s| async move {
        proto::rsqrt_scaled(&mut ctx, &s, 13, 60, 8, 576 << 3).await
    });
    assert_eq!(out.rounds(), 6);
    assert_eq!(out.payload_bytes(), [155_026; 3]);
    assert_eq!(proto::rsqrt_bits(18, 13, 60, 8, 576 << 3).unwrap(), 155_026);
    assert_eq!(proto::lt_thresholds_bits(58, 95), 103_058);
    // Per element: x·γ truncated by 14 and xg·r truncated by 30, each truncation fused
    // into its product's reshare. Per row: the sum of squares by limbs (c = 2f − g = 15,
    // one block of 576): the high parts' sum reshared in Z_2^49, the cross parts' sum
    // reshared and truncated by 15.
    let per_element = (192 + 4 * 14) + (192 + 4 * 30);
    assert_eq!(per_element, 560);
    let squares = 3 * (64 - 15) + (192 + 4 * 15);
    assert_eq!(D as u64 * per_element + squares + 155_026, 477_985);
}

fn silu_exact(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// The Chebyshev SiLU on 120,001 points of [−30, 30] (steps of 5e-4), 98,305 points of
/// [−12, 12] (steps of 2^-12), 20,000 LLaMA-like gate inputs, both sides of every cut
/// (the sign test near 0 and 3/16, the range test near ±11.4375 and ±11.5625) and values
/// out to the range ends −4095.875 and 4096 − 2^-18: max |y − SiLU(x)| ≤ 1.6e-4, exactly 0 or x beyond the
/// range test.
#[test]
fn silu_chebyshev_accuracy() {
    let fx = fx();
    let ulp = 1.0 / fx.scale();
    let mut xs: Vec<f64> = (-60_000..=60_000).map(|i| f64::from(i) * 5e-4).collect();
    xs.extend((-49_152..=49_152).map(|i| f64::from(i) / 4096.0));
    for c in [0.0, 3.0 / 16.0, 183.0 / 16.0, 185.0 / 16.0, 11.0, 12.0] {
        for d in [-2.0 * ulp, -ulp, 0.0, ulp, 2.0 * ulp] {
            xs.push(c + d);
            xs.push(-c + d);
        }
    }
    xs.extend_from_slice(&[
        100.0, -100.0, 1000.5, -1000.5, 4095.0, -4095.0, 4095.8, -4095.8,
    ]);
    // LLaMA's gate pre-activations: roughly normal, standard deviation 1 to 3, and a few
    // heavy tails.
    xs.extend((0..20_000u64).map(|i| (1.0 + 2.0 * unif(i, 92)) * normal(i, 91)));
    xs.extend((0..2_000u64).map(|i| 20.0 * normal(i, 93)));
    let raw = fx.encode_slice(&xs).unwrap();
    let (y, out) = run_on(51, raw.clone(), |mut ctx, x| async move {
        proto::silu_chebyshev(&mut ctx, &x).await
    });
    assert_eq!(out.rounds(), 2 + 16);
    let (mut worst, mut at, mut sum) = (0.0f64, 0.0, 0.0);
    for (&r, &yv) in raw.iter().zip(&y) {
        let x = fx.decode(r);
        let e = (fx.decode(yv) - silu_exact(x)).abs();
        sum += e;
        if e > worst {
            worst = e;
            at = x;
        }
        if x >= 185.0 / 16.0 {
            assert_eq!(yv, r, "silu_chebyshev({x}) must be x");
        }
        if x <= -185.0 / 16.0 {
            assert_eq!(yv, 0, "silu_chebyshev({x}) must be 0");
        }
    }
    println!(
        "silu_chebyshev: {} points, max |err| {worst:.3e} at x = {at}, mean {:.3e}",
        xs.len(),
        sum / xs.len() as f64
    );
    // Fit 1.41e-4 in plaintext, cut 1.23e-4 (g(11.4375)); the issue asks for 2e-4.
    assert!(worst <= 1.6e-4, "{worst} at {at}");
}

/// The Chebyshev SiLU: 16 rounds, 2282 bits per element (a third per party; 2374 with Q
/// made in the powers' ring Z_2^62 instead of the final sum's Z_2^42, 2510 with
/// the one-round B2A of the sign and the powers and final sum over Z_2^64, 2778 with r·G over
/// Z_2^64 instead of Z_2^20 and a lift), a sixth of the 13,176 of the softmax-based SiLU
/// it replaced (36 rounds).
#[test]
fn silu_chebyshev_costs_are_pinned() {
    let n = 96usize;
    let out = costs(n, |mut ctx, x| async move {
        proto::silu_chebyshev(&mut ctx, &x).await
    });
    assert_eq!(out.rounds(), 16);
    assert_eq!(out.payload_bytes(), [2282 * n as u64 / 24; 3]);
    // The two comparisons in Z_2^17 alone: 191 bits each, 5 rounds.
    let w = puma_core::Width::new(17).unwrap();
    let lt = costs(n, move |mut ctx, x| async move {
        let b = proto::msb(&mut ctx, &x, w).await?;
        Ok(Shares::zeros(b.party(), 0))
    });
    assert_eq!(
        (lt.rounds(), lt.payload_bytes()),
        (5, [191 * n as u64 / 24; 3])
    );
    // As first built, with today's comparisons: sign 191 + B2A 320 + s·x 192; v 192 + 6·23;
    // {a_3, T_2²} 2·(192 + 6·30); Q 192 + 6·18; the final fused products 192 + 6·42;
    // range 191 + two-round B2A 192; join 192.
    assert_eq!(
        191 + 320
            + 192
            + (192 + 6 * 23)
            + 2 * (192 + 6 * 30)
            + (192 + 6 * 18)
            + (192 + 6 * 42)
            + 191
            + 192
            + 192,
        3096
    );
}

/// The Chebyshev SiLU in other fixed-point formats than f = 18: its powers keep their own
/// fractional bits (f + 6 for z and T_2, 18 for the rest), so the error stays the fit's
/// and the cut's (1.5e-4) plus the output's rounding, below 2 ulps of 2^−f. Points:
/// [−16, 16] in steps of 2^−6, both sides of the cuts and values far outside. (At f = 22
/// and 23 the coefficients of z and T_2, at 36 − f bits, measured 2.3e-4 and 2.1e-4; those
/// formats are now refused.)
#[test]
fn silu_chebyshev_accuracy_in_other_formats() {
    let mut xs: Vec<f64> = (-1024..=1024).map(|i| f64::from(i) / 64.0).collect();
    xs.extend_from_slice(&[-11.5625, -11.4375, 11.4375, 11.5625, -30.0, 30.0, -500.0]);
    for f in [12u32, 16, 20, 21] {
        let format = FixedPoint::new(f).unwrap();
        let raw = format.encode_slice(&xs).unwrap();
        let (y, _) = run_at(
            60 + u64::from(f),
            format,
            raw.clone(),
            |mut ctx, x| async move { proto::silu_chebyshev(&mut ctx, &x).await },
        );
        let worst = max_error(format, &raw, &y, silu_exact);
        println!("silu_chebyshev at f = {f}: max |err| {worst:.3e}");
        let bound = 1.5e-4 + 2.0 * (-f64::from(f)).exp2();
        assert!(worst <= bound, "f = {f}: {worst} > {bound}");
    }
}

/// The Chebyshev SiLU refuses fixed-point formats outside 12..=21 fractional bits (at 22
/// and 23 its error passed 2e-4: see `silu_chebyshev_accuracy_in_other_formats`) and maps
/// empty inputs to empty outputs.
#[test]
fn silu_chebyshev_formats() {
    for (f, ok) in [
        (11u32, false),
        (12, true),
        (21, true),
        (22, false),
        (23, false),
        (40, false),
    ] {
        let mut cfg = puma_core::Config::new(4);
        cfg.fixed = FixedPoint::new(f).unwrap();
        let out = Sim::new(12).with_config(cfg).run(|me| {
            move |mut ctx: Ctx| async move {
                let x = ctx.random_shares(3);
                let a = proto::silu_chebyshev(&mut ctx, &x).await;
                let e = proto::silu_chebyshev(&mut ctx, &Shares::zeros(me, 0)).await;
                Ok((
                    a.err().map(|e| e.kind()),
                    e.map(|e| e.len()).map_err(|e| e.kind()),
                ))
            }
        });
        for (a, e) in out.into_results().unwrap() {
            if ok {
                assert_eq!((a, e), (None, Ok(0)), "f = {f}");
            } else {
                assert_eq!(a, Some(ErrorKind::Misuse), "f = {f}");
                assert_eq!(e, Err(ErrorKind::Misuse), "f = {f}");
            }
        }
    }
}

/// tanh on 24,001 points of [−12, 12] (both signs, zero, saturation), BERT-pooler-like
/// normal inputs (76,000) and edges up to the range end: 100,009 points.
#[test]
fn tanh_accuracy() {
    let fx = fx();
    let mut xs: Vec<f64> = (-12_000..=12_000).map(|i| f64::from(i) * 1e-3).collect();
    let ulp = 1.0 / fx.scale();
    xs.extend_from_slice(&[ulp, -ulp, 7.0, -7.0, 100.0, -100.0, 4095.0, -4095.0]);
    xs.extend((0..76_000u64).map(|i| 3.0 * normal(i, 81)));
    let raw = fx.encode_slice(&xs).unwrap();
    let (y, out) = run_on(41, raw.clone(), |mut ctx, x| async move {
        proto::tanh(&mut ctx, &x).await
    });
    assert_eq!(out.rounds(), 2 + 27);
    assert_eq!(y[12_000], 0, "tanh(0)");
    let (mut worst, mut at) = (0.0f64, 0.0);
    for (&r, &yv) in raw.iter().zip(&y) {
        let x = fx.decode(r);
        let e = (fx.decode(yv) - x.tanh()).abs();
        if e > worst {
            worst = e;
            at = x;
        }
    }
    println!("tanh: worst |err| {worst:.3e} at x = {at}");
    // Measured 1.2e-5 (the output grid 2^−f is 3.8e-6).
    assert!(worst <= 2.5e-5, "{worst} at {at}");
}

/// tanh: 27 rounds, 11,643 bits per element (a third per party).
#[test]
fn tanh_costs_are_pinned() {
    let n = 96usize;
    let out = costs(
        n,
        |mut ctx, x| async move { proto::tanh(&mut ctx, &x).await },
    );
    assert_eq!(out.rounds(), 27);
    assert_eq!(out.payload_bytes(), [11_643 * n as u64 / 24; 3]);
    // Sign 383, B2A 256, s·x 192, negExp (Minimax) 2186, reciprocal 8122 (three octaves
    // of three sub-segments, the 8 comparisons on keys cut by 8 bits), (1 − e)·r with its
    // truncation by f + 12 fused 312, s·t 192.
    assert_eq!(383 + 256 + 192 + 2186 + 8122 + 312 + 192, 11_643);
    assert_eq!(proto::reciprocal_bits(18, 17, 19, 12).unwrap(), 8122);
}

/// Empty inputs give empty outputs; bad shapes and parameters are typed errors.
#[test]
fn empty_inputs_and_misuse() {
    let out = Sim::new(9).run(move |me| {
        move |mut ctx| async move {
            let e = Shares::zeros(me, 0);
            let g = Shares::zeros(me, 4);
            let a = proto::rms_norm_rows(&mut ctx, &e, 0, 4, &g, EPS, BOUND).await?;
            let b = proto::silu_chebyshev(&mut ctx, &e).await?;
            let c = proto::tanh(&mut ctx, &e).await?;
            Ok([a.len(), b.len(), c.len()])
        }
    });
    for r in out.into_results().unwrap() {
        assert_eq!(r, [0; 3]);
    }
    let out = Sim::new(10).run(move |me| {
        move |mut ctx| async move {
            let x = Shares::zeros(me, 8);
            let g = Shares::zeros(me, 4);
            let mut kinds = Vec::new();
            for (rows, d, gl, eps, bound) in [
                (2, 4, 3, EPS, BOUND),          // γ of the wrong length
                (3, 4, 4, EPS, BOUND),          // x of the wrong length
                (2, 0, 0, EPS, BOUND),          // d = 0
                (usize::MAX, 2, 2, EPS, BOUND), // rows·d overflows
                (2, 4, 4, 0.0, BOUND),          // ε = 0
                (2, 4, 4, f64::NAN, BOUND),     // ε not a number
                (2, 4, 4, 1e-9, BOUND),         // d·ε·2^g < 1
                (2, 4, 4, 1e30, BOUND),         // ε beyond the ring
                (2, 4, 4, EPS, 0.5),            // bound below 1
                (2, 4, 4, EPS, 1e12),           // no scaling fits
            ] {
                let gg = g.slice(0..gl)?;
                let r = proto::rms_norm_rows(&mut ctx, &x, rows, d, &gg, eps, bound).await;
                kinds.push(r.err().map(|e| e.kind()));
            }
            Ok(kinds)
        }
    });
    for kinds in out.into_results().unwrap() {
        assert_eq!(kinds, vec![Some(ErrorKind::Misuse); 10]);
    }
    // Formats the SiLU and the exponential refuse are typed errors.
    let mut cfg = puma_core::Config::new(4);
    cfg.fixed = FixedPoint::new(40).unwrap();
    let out = Sim::new(11).with_config(cfg).run(|_| {
        |mut ctx: Ctx| async move {
            let x = ctx.random_shares(3);
            let a = proto::silu_chebyshev(&mut ctx, &x).await;
            let b = proto::tanh(&mut ctx, &x).await;
            Ok([a.err().map(|e| e.kind()), b.err().map(|e| e.kind())])
        }
    });
    for r in out.into_results().unwrap() {
        assert_eq!(r, [Some(ErrorKind::Misuse); 2]);
    }
}

/// `v` read as a signed value of Z_2^k.
fn signed_in(v: u64, k: u32) -> u64 {
    (((v << (64 - k)) as i64) >> (64 - k)) as u64
}

/// The gated MLP's narrow path: SiLU lifted into Z_2^56 only (2242 bits, 40 fewer than
/// into Z_2^64), then its product with the up projection summed in Z_2^56 and truncated
/// into Z_2^64 (2·56 + 64 + 4·26 = 280 bits): SiLU(g)·u to the SiLU's accuracy times |u|.
#[test]
fn silu_into_a_narrow_ring_feeds_a_product_in_that_ring() {
    let fx = fx();
    let ring = puma_core::Width::new(56).unwrap();
    let mut xs: Vec<f64> = (-24_000..=24_000).map(|i| f64::from(i) * 5e-4).collect();
    xs.extend((0..4_000u64).map(|i| 3.0 * normal(i, 71)));
    xs.extend_from_slice(&[-4095.8, 4095.8, -100.0, 100.0]);
    let raw = fx.encode_slice(&xs).unwrap();
    let (y, out) = run_on(52, raw.clone(), move |mut ctx, x| async move {
        proto::silu_chebyshev_into(&mut ctx, &x, ring).await
    });
    assert_eq!(out.rounds(), 2 + 16);
    let mut worst = 0.0f64;
    for (&r, &yv) in raw.iter().zip(&y) {
        let x = fx.decode(r);
        worst = worst.max((fx.decode(signed_in(yv, 56)) - silu_exact(x)).abs());
    }
    assert!(worst <= 1.6e-4, "{worst}");

    // Costs, and the product with u (x itself here) finished from Z_2^56.
    let n = 96usize;
    let act = costs(n, move |mut ctx, x| async move {
        proto::silu_chebyshev_into(&mut ctx, &x, ring).await
    });
    assert_eq!(act.rounds(), 16);
    assert_eq!(act.payload_bytes(), [2242 * n as u64 / 24; 3]);
    let f = fx.frac_bits();
    let prod = costs(n, move |mut ctx, x| async move {
        let s = proto::mul_summands(&x, &x)?;
        proto::reshare_trunc_summands(&mut ctx, s, ring, f, puma_core::Width::W64).await
    });
    assert_eq!(prod.rounds(), 2);
    assert_eq!(prod.payload_bytes(), [280 * n as u64 / 24; 3]);

    // Values: SiLU(x)·x from the narrow SiLU, against f64, up to |x| = 300 (the product
    // within ±2^18, Z_2^56's range at 2f fractional bits).
    let xs: Vec<f64> = (0..3_000u64).map(|i| 100.0 * normal(i, 72)).collect();
    let raw = fx.encode_slice(&xs).unwrap();
    let (y, _) = run_on(53, raw.clone(), move |mut ctx, x| async move {
        let a = proto::silu_chebyshev_into(&mut ctx, &x, ring).await?;
        let s = proto::mul_summands(&a, &x)?;
        proto::reshare_trunc_summands(&mut ctx, s, ring, f, puma_core::Width::W64).await
    });
    for (&r, &yv) in raw.iter().zip(&y) {
        let x = fx.decode(r);
        let want = silu_exact(x) * x;
        let err = (fx.decode(yv) - want).abs();
        assert!(err <= 1.6e-4 * x.abs().max(1.0) + 1e-5, "x = {x}: {err}");
    }
}
