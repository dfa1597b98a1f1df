//! Secure sampling (`proto::sample_rows`) against the plaintext f64 distribution of Hugging
//! Face's warpers (temperature, top-k, top-p, min-p in that order): chi-squared tests over
//! 10^4 draws per configuration, filtered tokens never drawn, pinned rounds and bytes, and
//! typed errors for bad parameters. Run with `--release` (the draws take a while in debug).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop,
    missing_docs
)]

use crate::leakage_stats;

use leakage_stats::gamma_q;
use puma_core::proto::{self, SamplingParams};
use puma_core::sim::{Sim, reconstruct};
use puma_core::{ErrorKind, FixedPoint, PartyId, Shares};

/// Twelve well separated logits, not in sorted order (so ids are not ranks).
const LOGITS: [f64; 12] = [
    -0.3, 1.2, -1.9, 0.6, 1.5, -1.0, 0.0, -2.5, 0.9, -0.6, 0.3, -1.4,
];

/// Draws per configuration.
const DRAWS: usize = 10_000;

/// The distribution Hugging Face samples from: softmax(x/T), then top-k (keep z ≥ the
/// k-th largest), top-p (sort the renormalised kept probabilities ascending, drop those
/// whose cumulative sum is ≤ 1 − p), min-p (drop p_i < min_p·p_max), renormalised.
fn reference(x: &[f64], p: &SamplingParams) -> Vec<f64> {
    let v = x.len();
    let z: Vec<f64> = x.iter().map(|l| l / p.temperature).collect();
    let mut keep = vec![true; v];
    let probs = |keep: &[bool]| -> Vec<f64> {
        let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = (0..v)
            .map(|i| if keep[i] { (z[i] - m).exp() } else { 0.0 })
            .collect();
        let s: f64 = e.iter().sum();
        e.iter().map(|w| w / s).collect()
    };
    if let Some(k) = p.top_k {
        let mut s = z.clone();
        s.sort_by(|a, b| b.partial_cmp(a).unwrap());
        let thr = s[k - 1];
        for i in 0..v {
            keep[i] &= z[i] >= thr;
        }
    }
    if let Some(tp) = p.top_p {
        if tp < 1.0 {
            let pr = probs(&keep);
            let mut order: Vec<usize> = (0..v).filter(|&i| keep[i]).collect();
            order.sort_by(|&a, &b| z[a].partial_cmp(&z[b]).unwrap());
            let mut cum = 0.0;
            let last = *order.last().unwrap();
            for &i in &order {
                cum += pr[i];
                // A margin well above the protocol's grid and rounding, so the test
                // checks the semantics, not a coin flip at the boundary.
                assert!((cum - (1.0 - tp)).abs() > 1e-3, "top-p boundary too close");
                if cum <= 1.0 - tp && i != last {
                    keep[i] = false;
                }
            }
        }
    }
    if let Some(mp) = p.min_p {
        let pr = probs(&keep);
        let pmax = pr.iter().cloned().fold(0.0, f64::max);
        for i in 0..v {
            keep[i] &= pr[i] >= mp * pmax;
        }
    }
    probs(&keep)
}

/// The upper α point of chi-squared with `df` degrees of freedom (bisection on Q).
fn chi2_critical(df: usize, alpha: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 10.0 * df as f64 + 100.0);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if gamma_q(df as f64 / 2.0, mid / 2.0) > alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// Runs `sample_rows` on `rows` copies of `logits` (shared by P0) and opens the one-hot
/// rows and the ids; checks that every one-hot row has its single 1 at the id.
fn draw(seed: u64, logits: &[f64], rows: usize, params: SamplingParams) -> Vec<usize> {
    let fx = FixedPoint::default();
    let v = logits.len();
    let enc: Vec<u64> = (0..rows)
        .flat_map(|_| logits.iter().map(|x| fx.encode(*x).unwrap()))
        .collect();
    let n = enc.len();
    let out = Sim::new(seed).run(move |me| {
        let enc = enc.clone();
        move |mut ctx| async move {
            let x = proto::share_input(
                &mut ctx,
                PartyId::P0,
                (me == PartyId::P0).then_some(&enc[..]),
                n,
            )
            .await?;
            proto::sample_rows(&mut ctx, &x, rows, v, &params).await
        }
    });
    let res: Vec<(Shares, Shares)> = out
        .results
        .iter()
        .map(|r| r.as_ref().unwrap().clone())
        .collect();
    let onehot = reconstruct(&[res[0].0.clone(), res[1].0.clone(), res[2].0.clone()]).unwrap();
    let ids = reconstruct(&[res[0].1.clone(), res[1].1.clone(), res[2].1.clone()]).unwrap();
    assert_eq!(ids.len(), rows);
    for r in 0..rows {
        let id = ids[r] as usize;
        assert!(id < v, "id {id} out of range");
        for c in 0..v {
            assert_eq!(onehot[r * v + c], u64::from(c == id), "row {r} column {c}");
        }
    }
    ids.into_iter().map(|i| i as usize).collect()
}

/// Draws `DRAWS` tokens and checks them against the reference: filtered tokens never
/// appear, and the chi-squared statistic over the kept tokens stays below its critical
/// value at α = 1e-3.
fn check_distribution(seed: u64, params: SamplingParams, kept: usize) {
    let expected = reference(&LOGITS, &params);
    let support: Vec<usize> = (0..LOGITS.len()).filter(|&i| expected[i] > 0.0).collect();
    assert_eq!(
        support.len(),
        kept,
        "{params:?}: reference keeps {support:?}"
    );
    let ids = draw(seed, &LOGITS, DRAWS, params);
    let mut counts = vec![0usize; LOGITS.len()];
    for id in ids {
        counts[id] += 1;
    }
    let mut stat = 0.0;
    for i in 0..LOGITS.len() {
        if expected[i] == 0.0 {
            assert_eq!(counts[i], 0, "{params:?}: filtered token {i} drawn");
        } else {
            let e = expected[i] * DRAWS as f64;
            assert!(
                e >= 5.0,
                "{params:?}: expected count {e} too small for the test"
            );
            stat += (counts[i] as f64 - e).powi(2) / e;
        }
    }
    let crit = chi2_critical(kept - 1, 1e-3);
    eprintln!(
        "{params:?}: chi2 = {stat:.2} (df {}, critical {crit:.2})",
        kept - 1
    );
    assert!(
        stat < crit,
        "{params:?}: chi-squared {stat:.2} ≥ {crit:.2}, counts {counts:?}"
    );
}

#[test]
fn chi_squared_critical_values_match_tables() {
    assert!((chi2_critical(11, 1e-3) - 31.264).abs() < 1e-2);
    assert!((chi2_critical(4, 1e-3) - 18.467).abs() < 1e-2);
    assert!((chi2_critical(1, 1e-3) - 10.828).abs() < 1e-2);
}

#[test]
fn temperature_one_matches_softmax() {
    check_distribution(1, SamplingParams::with_temperature(1.0), 12);
}

#[test]
fn temperature_below_one_sharpens() {
    check_distribution(2, SamplingParams::with_temperature(0.7), 12);
}

#[test]
fn top_k_keeps_the_k_largest() {
    let p = SamplingParams {
        top_k: Some(5),
        ..SamplingParams::with_temperature(1.0)
    };
    check_distribution(3, p, 5);
}

#[test]
fn top_p_keeps_the_smallest_likely_set() {
    let p = SamplingParams {
        top_p: Some(0.8),
        ..SamplingParams::with_temperature(1.0)
    };
    check_distribution(4, p, 5);
}

#[test]
fn min_p_drops_the_unlikely() {
    let p = SamplingParams {
        min_p: Some(0.2),
        ..SamplingParams::with_temperature(1.0)
    };
    check_distribution(5, p, 6);
}

#[test]
fn all_filters_in_transformers_order() {
    // top-k keeps 8, top-p on those keeps 6, min-p removes one more.
    let p = SamplingParams {
        temperature: 0.8,
        top_k: Some(8),
        top_p: Some(0.9),
        min_p: Some(0.2),
    };
    check_distribution(6, p, 5);
}

#[test]
fn top_k_one_is_the_argmax() {
    let p = SamplingParams {
        top_k: Some(1),
        ..SamplingParams::with_temperature(1.3)
    };
    let ids = draw(7, &LOGITS, 48, p);
    assert!(ids.iter().all(|&i| i == 4), "{ids:?}");
}

/// Costs of one call on public shares (no input round).
fn costs(rows: usize, v: usize, params: SamplingParams) -> (u32, [u64; 3]) {
    let fx = FixedPoint::default();
    let vals: Vec<u64> = (0..rows * v)
        .map(|i| fx.encode(LOGITS[i % 12] * 3.0).unwrap())
        .collect();
    let out = Sim::new(9).run(move |me| {
        let vals = vals.clone();
        move |mut ctx| async move {
            let x = Shares::from_public(me, &vals);
            proto::sample_rows(&mut ctx, &x, rows, v, &params)
                .await
                .map(drop)
        }
    });
    for r in &out.results {
        r.as_ref().unwrap();
    }
    (out.rounds(), out.payload_bytes())
}

fn ceil_log2(x: u32) -> u32 {
    32 - (x - 1).leading_zeros()
}
/// Rounds and bits of one comparison in Z_2^k (docs/PROTOCOLS.md, Notation).
fn r_lt(k: u32) -> u32 {
    1 + ceil_log2(k - 1)
}
fn lt(k: u32) -> u64 {
    u64::from(13 * k - 18 - 3 * ceil_log2(k - 1))
}

/// The doc comment's formula for rows of v = 16, f = 18 (B = 6, kd = 33, kc = 6,
/// b = 24, ks = 49, N = 12); the maximum of 16 by all pairs: 12 rounds and
/// 120·383 + 3·15·14 + 256·15 + 192 = 50622 bits per row.
fn formula(p: &SamplingParams) -> (u32, u64) {
    let (v, n_steps) = (16u64, 12u64);
    let (kd, kc, ks) = (33, 6, 49);
    let (r_max, bits_max) = (12, 50622u64);
    let t = u32::from(p.temperature != 1.0);
    let (k, tp, mp) = (p.top_k.is_some(), p.top_p.is_some(), p.min_p.is_some());
    let any = k || tp || mp;
    let search = |pred_rounds: u32| n_steps as u32 * (r_lt(kd) + 1 + pred_rounds + 1);
    let rounds = t
        + r_max
        + 11u32.max(if k { search(r_lt(kc)) } else { 0 })
        + if tp {
            2 * u32::from(k) + search(1 + r_lt(33))
        } else {
            0
        }
        + u32::from(mp && (k || tp))
        + 2 * u32::from(any)
        + r_lt(ks)
        + 2;
    let b = |c: bool| u64::from(c);
    // trunc(30), negExp (Minimax), B2A and B2A + product, in bits per element.
    let (trunc30, neg_exp, b2a, mul_bit) = (184, 2186, 256, 448);
    let bits = b(t == 1) * v * trunc30
        + bits_max
        + neg_exp * v
        + 24 * b2a
        + 192
        + (v - 1) * lt(ks)
        + b2a * v
        + b(mp) * (383 * v + 3 * v * b(k || tp))
        + b(any) * mul_bit * v
        + b(k) * (n_steps * v * (lt(kd) + b2a + 3) + n_steps * lt(kc) + (n_steps - 1) * b2a)
        + b(tp)
            * (mul_bit * v * b(k)
                + n_steps * v * (lt(kd) + b2a + 3)
                + n_steps * (192 + lt(33))
                + (n_steps - 1) * b2a);
    (rounds, bits)
}

#[test]
fn pinned_rounds_and_bytes_match_the_formula() {
    let rows = 24;
    let cases = [
        (SamplingParams::with_temperature(1.0), 32, 105_045),
        (SamplingParams::with_temperature(0.7), 33, 107_989),
        (
            SamplingParams {
                top_k: Some(3),
                ..SamplingParams::with_temperature(1.0)
            },
            167,
            241_401,
        ),
        (
            SamplingParams {
                top_p: Some(0.5),
                ..SamplingParams::with_temperature(1.0)
            },
            214,
            247_845,
        ),
        (
            SamplingParams {
                min_p: Some(0.1),
                ..SamplingParams::with_temperature(1.0)
            },
            34,
            118_341,
        ),
        (
            SamplingParams {
                temperature: 0.8,
                top_k: Some(8),
                top_p: Some(0.9),
                min_p: Some(0.2),
            },
            351,
            393_321,
        ),
    ];
    for (p, rounds, bits_per_row) in cases {
        let (r, bytes) = costs(rows, 16, p);
        let total: u64 = bytes.iter().sum();
        let (fr, fb) = formula(&p);
        eprintln!(
            "{p:?}: {r} rounds, {} bits per row, bytes {bytes:?}; formula {fr}, {fb}",
            total * 8 / rows as u64
        );
        assert_eq!((r, total * 8), (fr, fb * rows as u64), "{p:?}: formula");
        assert_eq!(
            (r, total * 8 / rows as u64),
            (rounds, bits_per_row),
            "{p:?}: pinned"
        );
    }
}

#[test]
fn bad_parameters_are_typed_errors() {
    let base = SamplingParams::with_temperature(1.0);
    let bad = [
        SamplingParams::with_temperature(0.0),
        SamplingParams::with_temperature(-1.0),
        SamplingParams::with_temperature(f64::NAN),
        SamplingParams::with_temperature(f64::INFINITY),
        SamplingParams {
            top_k: Some(0),
            ..base
        },
        SamplingParams {
            top_k: Some(13),
            ..base
        },
        SamplingParams {
            top_p: Some(0.0),
            ..base
        },
        SamplingParams {
            top_p: Some(1.5),
            ..base
        },
        SamplingParams {
            top_p: Some(f64::NAN),
            ..base
        },
        SamplingParams {
            min_p: Some(1.0),
            ..base
        },
        SamplingParams {
            min_p: Some(-0.1),
            ..base
        },
    ];
    for p in bad {
        assert_eq!(
            p.validate(12).unwrap_err().kind(),
            ErrorKind::Misuse,
            "{p:?}"
        );
    }
    assert!(base.validate(12).is_ok());
    // The protocol refuses them too, and shapes that do not match, before any message.
    let run = |p: SamplingParams, len: usize, rows: usize, v: usize| {
        let out = Sim::new(3).run(move |me| {
            move |mut ctx| async move {
                let x = Shares::from_public(me, &vec![0; len]);
                proto::sample_rows(&mut ctx, &x, rows, v, &p)
                    .await
                    .map(drop)
            }
        });
        assert_eq!(out.payload_bytes(), [0, 0, 0]);
        out.results
    };
    for p in bad {
        for r in run(p, 24, 2, 12) {
            assert_eq!(r.unwrap_err().kind(), ErrorKind::Misuse, "{p:?}");
        }
    }
    for (len, rows, v) in [(23, 2, 12), (24, 3, 12), (0, 0, 0)] {
        for r in run(base, len, rows, v) {
            assert_eq!(r.unwrap_err().kind(), ErrorKind::Misuse, "{len} {rows} {v}");
        }
    }
}
