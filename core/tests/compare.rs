//! Comparisons and conversions against plaintext: MSB, LT, B2A, bit injection, select.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use puma_core::sim::{Sim, reconstruct, reconstruct_bits};
use puma_core::{FixedPoint, PartyId, Shares, Width, proto};

/// Shares `vals` from P0, re-randomises every component (as after any product) and runs
/// `f` on them.
fn run_on_input<T, F, Fut>(seed: u64, vals: Vec<u64>, f: F) -> puma_core::sim::Outcome<T>
where
    T: Send + 'static,
    F: Fn(puma_core::Ctx, Shares) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<T, puma_core::Error>> + Send + 'static,
{
    let n = vals.len();
    Sim::new(seed).run(move |me| {
        let (f, v) = (f.clone(), vals.clone());
        move |mut ctx| async move {
            let x = proto::share_input(
                &mut ctx,
                PartyId::P0,
                (me == PartyId::P0).then_some(&v[..]),
                n,
            )
            .await?;
            let x = proto::mul(&mut ctx, &x, &Shares::from_public(me, &vec![1; n])).await?;
            f(ctx, x).await
        }
    })
}

/// [`run_on_input`] with a boolean result, opened.
fn run_bits<F, Fut>(
    seed: u64,
    vals: Vec<u64>,
    f: F,
) -> (Vec<u64>, puma_core::sim::Outcome<puma_core::BitShares>)
where
    F: Fn(puma_core::Ctx, Shares) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<puma_core::BitShares, puma_core::Error>>
        + Send
        + 'static,
{
    let out = run_on_input(seed, vals, f);
    let bits = reconstruct_bits(&[
        out.results[0].clone().unwrap(),
        out.results[1].clone().unwrap(),
        out.results[2].clone().unwrap(),
    ])
    .unwrap();
    (bits, out)
}

fn pseudo(i: u64, salt: u64) -> u64 {
    let mut z = i.wrapping_add(salt.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[test]
fn msb_is_exact_on_random_ring_values_and_edges() {
    let n = 100_000u64;
    let mut vals: Vec<u64> = (0..n).map(|i| pseudo(i, 1)).collect();
    vals.extend_from_slice(&[0, 1, u64::MAX, 1 << 63, (1 << 63) - 1, (1 << 63) + 1]);
    let (bits, _) = run_bits(1, vals.clone(), |mut ctx, x| async move {
        proto::msb(&mut ctx, &x, Width::W64).await
    });
    for (v, b) in vals.iter().zip(&bits) {
        assert_eq!(*b, v >> 63, "msb({v:#x})");
    }
}

#[test]
fn lt_is_exact_on_62_bit_values_and_fixed_point() {
    let n = 100_000u64;
    // Random signed 62-bit values: differences stay below 2^63.
    let xs: Vec<u64> = (0..n)
        .map(|i| ((pseudo(i, 2) as i64) >> 2) as u64)
        .collect();
    let ys: Vec<u64> = (0..n)
        .map(|i| ((pseudo(i, 3) as i64) >> 2) as u64)
        .collect();
    let (x2, y2) = (xs.clone(), ys.clone());
    let cat: Vec<u64> = xs.iter().chain(&ys).copied().collect();
    let (bits, out) = run_bits(2, cat, move |mut ctx, v| async move {
        let (x, y) = v.split_at(n as usize)?;
        proto::lt(&mut ctx, &x, &y, Width::W64).await
    });
    assert_eq!(out.rounds(), 2 + 7);
    for k in 0..n as usize {
        assert_eq!(bits[k] == 1, (x2[k] as i64) < (y2[k] as i64));
    }
    // Fixed point, |x| ≤ 2^20 real: raw differences < 2^39, so a 41-bit ring suffices.
    let fx = FixedPoint::default();
    let xs: Vec<u64> = (0..n)
        .map(|i| {
            fx.encode(
                ((pseudo(i, 4) % (1 << 41)) as f64 / (1u64 << 20) as f64) - 1.0 * (1 << 20) as f64,
            )
            .unwrap()
        })
        .collect();
    let cs: Vec<u64> = (0..n)
        .map(|i| {
            if i % 5 == 0 {
                xs[i as usize]
            } else {
                fx.encode(((pseudo(i, 5) % 2_000_000) as f64) - 1e6)
                    .unwrap()
            }
        })
        .collect();
    let (x2, c2) = (xs.clone(), cs.clone());
    let (bits, out) = run_bits(3, xs, move |mut ctx, x| {
        let c = c2.clone();
        async move { proto::lt_public(&mut ctx, &x, &c, Width::new(41).unwrap()).await }
    });
    assert_eq!(out.rounds(), 2 + 7);
    for k in 0..n as usize {
        assert_eq!(
            bits[k] == 1,
            (x2[k] as i64) < (cs[k] as i64),
            "{} < {}",
            x2[k] as i64,
            cs[k] as i64
        );
    }
}

#[test]
fn narrow_msb_at_the_edges_of_its_range() {
    for form in [proto::MsbForm::OneRound, proto::MsbForm::TwoRound] {
        for k in [2u32, 3, 16, 18, 32, 33, 40, 63, 64] {
            let w = Width::new(k).unwrap();
            let half = 1i64.checked_shl(k - 1).unwrap_or(i64::MIN);
            let mut vals: Vec<i64> = vec![0, 1, -1];
            if k > 2 {
                vals.extend_from_slice(&[2, -2]);
            }
            if k < 64 {
                vals.extend_from_slice(&[half - 1, -half, half - 2, -half + 1]);
            }
            // Random values across the range, so that every carry pattern occurs.
            vals.extend((0..60u64).map(|i| {
                let r = pseudo(i, u64::from(k));
                // A signed value of k bits: the low k bits, sign-extended.
                ((r << (64 - k)) as i64) >> (64 - k)
            }));
            let raw: Vec<u64> = vals.iter().map(|&v| v as u64).collect();
            let (bits, out) = run_bits(k as u64, raw, move |mut ctx, x| async move {
                proto::msb_with(&mut ctx, &x, w, form).await
            });
            let l = 32 - (k - 1).leading_zeros() - u32::from((k - 1).is_power_of_two());
            let first = match form {
                proto::MsbForm::OneRound => 1,
                proto::MsbForm::TwoRound => 2,
            };
            assert_eq!(out.rounds(), 2 + first + l, "k = {k}, {form:?}");
            assert_eq!(proto::msb_rounds_with(k, form), first + l, "k = {k}");
            for (v, b) in vals.iter().zip(&bits) {
                assert_eq!(*b == 1, *v < 0, "k = {k}, v = {v}, {form:?}");
            }
        }
    }
}

#[test]
fn msb_costs_match_the_formula() {
    for (k, rounds) in [(64u32, 7u32), (40, 7), (32, 6), (18, 6), (16, 5)] {
        let w = Width::new(k).unwrap();
        let n = 24usize;
        for form in [proto::MsbForm::OneRound, proto::MsbForm::TwoRound] {
            let out = Sim::new(7).run(move |_| {
                move |mut ctx| async move {
                    let x = ctx.random_shares(n);
                    proto::msb_with(&mut ctx, &x, w, form).await
                }
            });
            let (first_rounds, first_bits) = match form {
                // y's input (k bits) and the OT: two offers to each chooser, one helper
                // string from each.
                proto::MsbForm::OneRound => (1, 7 * u64::from(k) - 6),
                // y's input and the two masked parts.
                proto::MsbForm::TwoRound => (2, 3 * u64::from(k) - 2),
            };
            assert_eq!(out.rounds(), rounds - 1 + first_rounds, "k = {k}, {form:?}");
            assert_eq!(proto::msb_rounds_with(k, form), rounds - 1 + first_rounds);
            let l = 32 - (k - 2).leading_zeros();
            let (k, l) = (k as u64, l as u64);
            // The tree: two ANDs per pair but the lowest, one bit from each party per AND.
            let per_party_bits = first_bits * n as u64 / 3 + (2 * k - 4 - l) * n as u64;
            assert_eq!(
                out.payload_bytes(),
                [per_party_bits / 8; 3],
                "k = {k}, {form:?}"
            );
            let total = match form {
                proto::MsbForm::OneRound => 13 * k - 18 - 3 * l,
                proto::MsbForm::TwoRound => 9 * k - 14 - 3 * l,
            };
            assert_eq!(3 * per_party_bits, total * n as u64);
        }
    }
    assert_eq!(proto::msb_rounds(18), 6);
}

/// Several public thresholds in one call: [y]^B is input once per element, so the call
/// costs k bits per element less per threshold beyond the first than separate comparisons;
/// every bit is the sign of x − c_j.
#[test]
fn carry_tree_thresholds_share_the_input_and_stay_exact() {
    let k = 18u32;
    let w = Width::new(k).unwrap();
    let thresholds: Vec<u64> = vec![(-66i64) as u64, 64, 0];
    let mut vals: Vec<i64> = vec![-67, -66, -65, 63, 64, 65, 0, -1, 1];
    vals.extend_from_slice(&[(1 << 16) - 1 - 66, -(1 << 16) + 66]);
    vals.extend((0..40u64).map(|i| ((pseudo(i, 5) << 48) as i64) >> 48));
    let raw: Vec<u64> = vals.iter().map(|&v| v as u64).collect();
    let n = vals.len();
    for form in [proto::MsbForm::OneRound, proto::MsbForm::TwoRound] {
        let th = thresholds.clone();
        let (bits, out) = run_bits(3, raw.clone(), move |mut ctx, x| {
            let th = th.clone();
            async move { proto::lt_thresholds_carry(&mut ctx, &x, &th, w, form).await }
        });
        assert_eq!(bits.len(), 3 * n);
        for (j, c) in thresholds.iter().enumerate() {
            for (i, v) in vals.iter().enumerate() {
                assert_eq!(
                    bits[j * n + i] == 1,
                    *v < *c as i64,
                    "{form:?}: {v} < {}",
                    *c as i64
                );
            }
        }
        assert_eq!(out.rounds(), 2 + proto::msb_rounds_with(k, form));
    }
    // Bits: 24 elements, 2 thresholds.
    let n = 24usize;
    for form in [proto::MsbForm::OneRound, proto::MsbForm::TwoRound] {
        let out = Sim::new(7).run(move |_| {
            move |mut ctx| async move {
                let x = ctx.random_shares(n);
                proto::lt_thresholds_carry(&mut ctx, &x, &[5, 1 << 10], w, form).await
            }
        });
        let (k, l) = (u64::from(k), 5u64);
        let per_threshold = match form {
            proto::MsbForm::OneRound => 6 * (k - 1),
            proto::MsbForm::TwoRound => 2 * (k - 1),
        };
        let tree = 6 * k - 12 - 3 * l;
        let total = (k + 2 * (per_threshold + tree)) * n as u64;
        assert_eq!(out.payload_bytes(), [total / 24; 3], "{form:?}");
    }
    let none = Sim::new(7).run(move |_| {
        move |mut ctx| async move {
            let x = ctx.random_shares(3);
            proto::lt_thresholds_carry(&mut ctx, &x, &[], w, proto::MsbForm::OneRound).await
        }
    });
    assert!(
        none.results
            .iter()
            .all(|r| matches!(r, Err(e) if e.kind() == puma_core::ErrorKind::Misuse))
    );
}

#[test]
fn b2a_mul_bit_and_select_are_exact() {
    let n = 100_000usize;
    let out = Sim::new(9).run(move |_| {
        move |mut ctx| async move {
            let r = ctx.random_shares(n);
            let bits = proto::msb(&mut ctx, &r, Width::W64).await?;
            let x = ctx.random_shares(n);
            let y = ctx.random_shares(n);
            let a = proto::b2a(&mut ctx, &bits).await?;
            let s = proto::select(&mut ctx, &bits, &x, &y).await?;
            Ok((r, a, x, y, s))
        }
    });
    let [p0, p1, p2] = out.into_results().unwrap();
    let r = reconstruct(&[p0.0, p1.0, p2.0]).unwrap();
    let a = reconstruct(&[p0.1, p1.1, p2.1]).unwrap();
    let x = reconstruct(&[p0.2, p1.2, p2.2]).unwrap();
    let y = reconstruct(&[p0.3, p1.3, p2.3]).unwrap();
    let s = reconstruct(&[p0.4, p1.4, p2.4]).unwrap();
    for k in 0..n {
        let b = r[k] >> 63;
        assert_eq!(a[k], b);
        assert_eq!(s[k], if b == 1 { x[k] } else { y[k] });
    }
}

#[test]
fn b2a_costs_one_round_and_256_bits() {
    let n = 30usize;
    let out = Sim::new(10).run(move |me| {
        move |mut ctx| async move {
            let b = puma_core::BitShares::from_public(me, Width::BIT, &vec![1; n]);
            proto::b2a(&mut ctx, &b).await
        }
    });
    assert_eq!(out.rounds(), 1);
    // Each party plays each role on n/3 elements: (128 + 64 + 64) · n/3 bits.
    assert_eq!(out.payload_bytes(), [(256 * n / 3 / 8) as u64; 3]);
    assert_eq!(
        reconstruct(&out.into_results().unwrap()).unwrap(),
        vec![1; n]
    );
}

/// `proto::lt_thresholds` on `vals` ([`run_on_input`]), opened: one vector of bits per
/// threshold.
fn run_thresholds(
    seed: u64,
    vals: Vec<u64>,
    thresholds: Vec<u64>,
    w: Width,
) -> (Vec<Vec<u64>>, u32) {
    let out = run_on_input(seed, vals, move |mut ctx, x| {
        let t = thresholds.clone();
        async move { proto::lt_thresholds(&mut ctx, &x, &t, w).await }
    });
    let rounds = out.rounds();
    let [p0, p1, p2] = out.into_results().unwrap();
    let bits = p0
        .into_iter()
        .zip(p1)
        .zip(p2)
        .map(|((a, b), c)| reconstruct(&[a, b, c]).unwrap())
        .collect();
    (bits, rounds)
}

#[test]
fn lt_thresholds_is_exact_at_every_width_and_at_the_edges() {
    for k in [2u32, 3, 18, 25, 32, 63, 64] {
        let w = Width::new(k).unwrap();
        let half = 1i128 << (k - 1);
        // Thresholds and values in [−2^(k−2), 2^(k−2)): every difference is in range.
        let quarter = (half / 2).max(1) as i64;
        let span = |r: u64| ((r % (2 * quarter as u64)) as i64 - quarter) as u64;
        let mut ts: Vec<u64> = vec![0];
        if k > 2 {
            ts.extend((0..3).map(|i| span(pseudo(i, 40 + u64::from(k)))));
        }
        let mut vals: Vec<u64> = (0..3000).map(|i| span(pseudo(i, u64::from(k)))).collect();
        // Around each threshold, and the ends of the range for t = 0.
        for &t in &ts {
            for d in [-2i64, -1, 0, 1] {
                vals.push((t as i64).wrapping_add(d) as u64);
            }
        }
        vals.extend([(half - 1) as i64 as u64, (-half) as i64 as u64]);
        let (bits, rounds) = run_thresholds(u64::from(k), vals.clone(), ts.clone(), w);
        assert_eq!(rounds, 2 + 3, "k = {k}");
        assert_eq!(bits.len(), ts.len());
        let sign = |v: u64| {
            let shifted = (v as i64) << (64 - k) >> (64 - k);
            shifted < 0
        };
        for (t, b) in ts.iter().zip(&bits) {
            for (v, got) in vals.iter().zip(b) {
                // t = 0 also takes the values at the ends of the range.
                let want = sign(v.wrapping_sub(*t));
                assert_eq!(*got, u64::from(want), "k = {k}, x = {v:#x}, t = {t:#x}");
            }
        }
    }
}

#[test]
fn lt_thresholds_costs_three_rounds_and_match_the_formula() {
    for (k, m, bits) in [
        (63u32, 43usize, 560 + 1266 * 43),
        (25, 7, 170 + 634 * 7),
        (18, 2, 0),
    ] {
        let w = Width::new(k).unwrap();
        let n = 24usize;
        let out = Sim::new(11).run(move |_| {
            move |mut ctx| async move {
                let x = ctx.random_shares(n);
                let ts: Vec<u64> = (0..m as u64).map(|j| j << 3).collect();
                proto::lt_thresholds(&mut ctx, &x, &ts, w).await
            }
        });
        assert_eq!(out.rounds(), 3, "k = {k}");
        assert_eq!(proto::LT_THRESHOLDS_ROUNDS, 3);
        let formula = proto::lt_thresholds_bits(k, m as u64);
        if bits > 0 {
            assert_eq!(formula, bits, "k = {k}");
        }
        // p = 19 at k = 18 (W = 5): 36 + 85 + 2·(180 + 384).
        if k == 18 {
            assert_eq!(formula, 36 + 85 + 2 * (180 + 384));
        }
        // Each party plays each role on 8 elements; every message is whole bytes.
        assert_eq!(
            out.payload_bytes(),
            [formula * n as u64 / 3 / 8; 3],
            "k = {k}"
        );
    }
}

#[test]
fn masked_msb_is_exact_at_the_edges_and_costs_three_rounds() {
    for k in [2u32, 3, 20, 22, 32, 64] {
        let w = Width::new(k).unwrap();
        let half = 1i128 << (k - 1);
        let mut vals: Vec<i64> = vec![0, 1, -1];
        vals.extend([(half - 1) as i64, (-half) as i64]);
        if k > 3 {
            vals.extend([(half - 2) as i64, (-half + 1) as i64, 2, -2]);
        }
        let quarter = (half / 2) as i64;
        vals.extend(
            (0..2000)
                .map(|i| (pseudo(i, 90 + u64::from(k)) % (2 * quarter as u64)) as i64 - quarter),
        );
        let raw: Vec<u64> = vals.iter().map(|&v| v as u64).collect();
        let (bits, out) = run_bits(u64::from(k), raw, move |mut ctx, x| async move {
            proto::msb_masked(&mut ctx, &x, w).await
        });
        assert_eq!(out.rounds(), 2 + 3, "k = {k}");
        for (v, b) in vals.iter().zip(&bits) {
            assert_eq!(*b == 1, *v < 0, "k = {k}, v = {v}");
        }
    }
    // Bits: 2k + (k − 1)·W + 2k·W + 1; with 8 elements per role block every message is whole
    // bytes except R2's bits (8 of them: one byte).
    for (k, bits) in [(22u32, 370u64), (32, 635)] {
        let w = Width::new(k).unwrap();
        let n = 24usize;
        let out = Sim::new(12).run(move |_| {
            move |mut ctx| async move {
                let x = ctx.random_shares(n);
                proto::msb_masked(&mut ctx, &x, w).await
            }
        });
        assert_eq!(out.rounds(), 3, "k = {k}");
        assert_eq!(proto::msb_masked_bits(k), bits);
        assert_eq!(out.payload_bytes(), [bits * n as u64 / 3 / 8; 3], "k = {k}");
    }
}
