//! Secure arithmetic against the plaintext ring: exactness, fixed-point error, uniformity.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use proptest::prelude::*;
use puma_core::sim::{Sim, reconstruct};
use puma_core::{FixedPoint, PartyId, Shares, proto};

/// Runs `f(ctx, x, y)` on fresh random sharings x, y of length n and returns the opened
/// x, y and output.
fn run_binary<F, Fut>(seed: u64, nx: usize, ny: usize, f: F) -> (Vec<u64>, Vec<u64>, Vec<u64>)
where
    F: Fn(puma_core::Ctx, Shares, Shares) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Shares, puma_core::Error>> + Send + 'static,
{
    let out = Sim::new(seed).run(move |_| {
        let f = f.clone();
        move |mut ctx| async move {
            let x = ctx.random_shares(nx);
            let y = ctx.random_shares(ny);
            let z = f(ctx, x.clone(), y.clone()).await?;
            Ok((x, y, z))
        }
    });
    let [a, b, c] = out.into_results().unwrap();
    let x = reconstruct(&[a.0, b.0, c.0]).unwrap();
    let y = reconstruct(&[a.1, b.1, c.1]).unwrap();
    let z = reconstruct(&[a.2, b.2, c.2]).unwrap();
    (x, y, z)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn mul_square_add_are_exact(seed in any::<u64>(), n in 0usize..40) {
        let (x, y, z) = run_binary(seed, n, n, |mut ctx, x, y| async move { proto::mul(&mut ctx, &x, &y).await });
        let want: Vec<u64> = x.iter().zip(&y).map(|(a, b)| a.wrapping_mul(*b)).collect();
        prop_assert_eq!(z, want);

        let (x, _, z) = run_binary(seed ^ 1, n, 0, |mut ctx, x, _| async move { proto::square(&mut ctx, &x).await });
        let want: Vec<u64> = x.iter().map(|a| a.wrapping_mul(*a)).collect();
        prop_assert_eq!(z, want);

        let (x, y, z) = run_binary(seed ^ 2, n, n, |_ctx, x, y| async move { x.sub(&y)?.add(&x) });
        let want: Vec<u64> = x.iter().zip(&y).map(|(a, b)| a.wrapping_sub(*b).wrapping_add(*a)).collect();
        prop_assert_eq!(z, want);
    }

    #[test]
    fn matmul_is_exact(seed in any::<u64>(), m in 1usize..6, k in 1usize..9, n in 1usize..6) {
        let (x, y, z) = run_binary(seed, m * k, k * n, move |mut ctx, x, y| async move {
            proto::matmul(&mut ctx, &x, &y, m, k, n).await
        });
        for i in 0..m {
            for j in 0..n {
                let want = (0..k).fold(0u64, |acc, t| acc.wrapping_add(x[i * k + t].wrapping_mul(y[t * n + j])));
                prop_assert_eq!(z[i * n + j], want);
            }
        }
    }

    /// Operands shared by an input owner (one component zero by construction, which the
    /// product skips) multiply exactly, whichever operand is the larger and whoever owns
    /// each, also after an in-place addition has made the component nonzero.
    #[test]
    fn matmul_of_input_shares_is_exact(
        seed in any::<u64>(), m in 1usize..6, k in 1usize..9, n in 1usize..6,
        ox in 0usize..3, oy in 0usize..3, add in any::<bool>(),
    ) {
        let owners = [PartyId::P0, PartyId::P1, PartyId::P2];
        let (ox, oy) = (owners[ox], owners[oy]);
        // Both orientations: x small and y large, and x large and y small.
        for (rows, cols) in [(m, n), (m * 9, 1)] {
            let xs: Vec<u64> = (0..(rows * k) as u64).map(|i| i.wrapping_mul(seed | 1) ^ 0x9E37).collect();
            let ys: Vec<u64> = (0..(k * cols) as u64).map(|i| i.wrapping_mul(seed >> 7 | 3) ^ 0x51).collect();
            let (xs2, ys2) = (xs.clone(), ys.clone());
            let out = Sim::new(seed).run(move |me| {
                let (xs, ys) = (xs2.clone(), ys2.clone());
                move |mut ctx| async move {
                    let x = proto::share_input(&mut ctx, ox, (me == ox).then_some(&xs[..]), xs.len()).await?;
                    let mut y = proto::share_input(&mut ctx, oy, (me == oy).then_some(&ys[..]), ys.len()).await?;
                    if add {
                        let r = ctx.random_shares(ys.len());
                        y.add_assign(&r)?;
                        y = y.sub(&r)?;
                    }
                    proto::matmul(&mut ctx, &x, &y, rows, k, cols).await
                }
            });
            let z = reconstruct(&out.into_results().unwrap()).unwrap();
            for i in 0..rows {
                for j in 0..cols {
                    let want = (0..k).fold(0u64, |acc, t| acc.wrapping_add(xs[i * k + t].wrapping_mul(ys[t * cols + j])));
                    prop_assert_eq!(z[i * cols + j], want);
                }
            }
        }
    }

    #[test]
    fn public_ops_are_exact(seed in any::<u64>(), c in any::<u64>(), n in 1usize..20) {
        let pubv: Vec<u64> = (0..n as u64).map(|i| i.wrapping_mul(c) ^ 0x55).collect();
        let p2 = pubv.clone();
        let (x, _, z) = run_binary(seed, n, 0, move |_ctx, x, _| {
            let p = p2.clone();
            async move { x.add_public(&p)?.scale(c).mul_public(&p) }
        });
        let want: Vec<u64> = x.iter().zip(&pubv).map(|(a, p)| a.wrapping_add(*p).wrapping_mul(c).wrapping_mul(*p)).collect();
        prop_assert_eq!(z, want);
    }

    /// Fixed-point products of operands up to |x| ≤ 2^12 are within 2 ulp of the exact
    /// product of the encoded operands.
    #[test]
    fn mul_fixed_within_two_ulp(seed in any::<u64>(), xs in proptest::collection::vec(-4096.0f64..=4096.0, 1..30)) {
        let fx = FixedPoint::default();
        let n = xs.len();
        let xe = fx.encode_slice(&xs).unwrap();
        let ye: Vec<u64> = xe.iter().rev().copied().collect();
        let (xi, yi) = (xe.clone(), ye.clone());
        let out = Sim::new(seed).run(move |me| {
            let (xi, yi) = (xi.clone(), yi.clone());
            move |mut ctx| async move {
                let x = proto::share_input(&mut ctx, PartyId::P0, (me == PartyId::P0).then_some(&xi[..]), n).await?;
                let y = proto::share_input(&mut ctx, PartyId::P1, (me == PartyId::P1).then_some(&yi[..]), n).await?;
                let z = proto::mul_fixed(&mut ctx, &x, &y).await?;
                proto::reveal_all(&mut ctx, &z).await
            }
        });
        let [z, z1, z2] = out.into_results().unwrap();
        prop_assert_eq!(&z, &z1);
        prop_assert_eq!(&z, &z2);
        for k in 0..n {
            let exact = (xe[k] as i64 as i128) * (ye[k] as i64 as i128);
            let got = (z[k] as i64 as i128) << fx.frac_bits();
            let err = (got - exact).abs();
            prop_assert!(err <= 2i128 << fx.frac_bits(), "error {} ulp", err as f64 / fx.scale());
        }
    }
}

/// At least 10^7 truncations of values up to |x| ≤ 2^20 (real): every output is ⌊x/2^f⌋ or
/// ⌊x/2^f⌋ + 1, never a large error. Also the edges of the valid range ±2^62.
#[test]
fn ten_million_truncations_have_no_large_error() {
    let f = FixedPoint::default().frac_bits();
    let batch = 1_000_000usize;
    let mut total = 0usize;
    let mut plus_one = 0usize;
    for seed in 0..10u64 {
        let out = Sim::new(1000 + seed).run(move |_| {
            move |mut ctx| async move {
                let vals: Vec<u64> = (0..batch as u64)
                    .map(|i| {
                        let h = i.wrapping_mul(0x9e37_79b9_7f4a_7c15)
                            ^ seed.wrapping_mul(0xd1b5_4a32_d192_ed03);
                        let h = h ^ (h >> 29);
                        ((h % (1u64 << 39)) as i64 - (1i64 << 38)) as u64
                    })
                    .collect();
                let me = ctx.me();
                let xs = proto::share_input(
                    &mut ctx,
                    PartyId::P0,
                    (me == PartyId::P0).then_some(&vals[..]),
                    batch,
                )
                .await?;
                // Truncation follows a product in every real use, whose reshare leaves all
                // components uniform; multiplying by a public sharing of 1 reproduces that.
                let xs =
                    proto::mul(&mut ctx, &xs, &Shares::from_public(me, &vec![1; batch])).await?;
                let y = proto::trunc(&mut ctx, &xs, f).await?;
                Ok((vals, y))
            }
        });
        let [a, b, c] = out.into_results().unwrap();
        let vals = a.0;
        let y = reconstruct(&[a.1, b.1, c.1]).unwrap();
        for (v, y) in vals.iter().zip(&y) {
            let floor = (*v as i64) >> f;
            let d = (*y as i64) - floor;
            assert!(
                d == 0 || d == 1,
                "x = {} truncated to {}",
                *v as i64,
                *y as i64
            );
            plus_one += d as usize;
        }
        total += batch;
    }
    assert!(total >= 10_000_000);
    // Stochastic rounding: about half the outputs round up for uniform low bits.
    let frac = plus_one as f64 / total as f64;
    assert!((frac - 0.5).abs() < 0.01, "round-up fraction {frac}");
}

#[test]
fn truncation_edges_of_the_valid_range() {
    let edges: Vec<u64> = [
        0i64,
        -1,
        1,
        (1 << 62) - 1,
        -(1 << 62),
        (1 << 62) - (1 << 18),
        -(1 << 62) + 1,
        (1 << 18) - 1,
        -(1 << 18),
    ]
    .iter()
    .map(|&v| v as u64)
    .collect();
    for d in [1u32, 18, 21, 40, 62] {
        for seed in 0..20 {
            let vals = edges.clone();
            let n = vals.len();
            let out = Sim::new(seed).run(move |me| {
                let vals = vals.clone();
                move |mut ctx| async move {
                    let x = proto::share_input(
                        &mut ctx,
                        PartyId::P2,
                        (me == PartyId::P2).then_some(&vals[..]),
                        n,
                    )
                    .await?;
                    proto::trunc(&mut ctx, &x, d).await
                }
            });
            let y = reconstruct(&out.into_results().unwrap()).unwrap();
            for (v, y) in edges.iter().zip(&y) {
                let floor = (*v as i64) >> d;
                let diff = (*y as i64).wrapping_sub(floor);
                assert!(
                    diff == 0 || diff == 1,
                    "d={d} x={} y={}",
                    *v as i64,
                    *y as i64
                );
            }
        }
    }
}

fn chi_squared(counts: &[u64]) -> f64 {
    let total: u64 = counts.iter().sum();
    let e = total as f64 / counts.len() as f64;
    counts.iter().map(|&c| (c as f64 - e).powi(2) / e).sum()
}

/// Each party's components of a constant input look uniform: chi-squared over 256 bins of
/// the top and bottom bytes (255 degrees of freedom; the bound is ≈ 6.5 standard deviations).
#[test]
fn single_party_shares_of_a_constant_are_uniform() {
    let n = 1 << 17;
    let constant = FixedPoint::default().encode(3.25).unwrap();
    let out = Sim::new(77).run(move |me| {
        move |mut ctx| async move {
            let vals = vec![constant; n];
            let x = proto::share_input(
                &mut ctx,
                PartyId::P1,
                (me == PartyId::P1).then_some(&vals[..]),
                n,
            )
            .await?;
            let one = Shares::from_public(me, &vec![1u64 << 18; n]);
            let y = proto::mul(&mut ctx, &x, &one).await?;
            Ok((x, y))
        }
    });
    let [p0, p1, p2] = out.into_results().unwrap();
    // Input: P0 holds (0, v − F) and P2 holds (F, 0); P1 (the owner) knows v anyway.
    // Product: every component of every party is re-masked by the zero sharing.
    let views: Vec<(&str, &[u64])> = vec![
        ("input P0.b", p0.0.components().1),
        ("input P2.a", p2.0.components().0),
        ("mul P0.a", p0.1.components().0),
        ("mul P0.b", p0.1.components().1),
        ("mul P1.a", p1.1.components().0),
        ("mul P2.b", p2.1.components().1),
    ];
    for (name, v) in views {
        for shift in [0u32, 56] {
            let mut counts = vec![0u64; 256];
            for x in v {
                counts[((x >> shift) & 0xff) as usize] += 1;
            }
            let chi = chi_squared(&counts);
            assert!(
                chi < 255.0 + 6.5 * (2.0f64 * 255.0).sqrt(),
                "{name} byte@{shift}: chi² = {chi}"
            );
            assert!(
                chi > 255.0 - 6.5 * (2.0f64 * 255.0).sqrt(),
                "{name} byte@{shift}: chi² = {chi} too regular"
            );
        }
    }
}

#[test]
fn input_and_reveal_reach_only_their_receivers() {
    let vals: Vec<u64> = vec![1, 2, 3, u64::MAX];
    let v2 = vals.clone();
    let out = Sim::new(5).run(move |me| {
        let v = v2.clone();
        move |mut ctx| async move {
            let x = proto::share_input(
                &mut ctx,
                PartyId::P1,
                (me == PartyId::P1).then_some(&v[..]),
                4,
            )
            .await?;
            let to_p2 = proto::reveal_to(&mut ctx, &x, PartyId::P2).await?;
            let all = proto::reveal_all(&mut ctx, &x).await?;
            Ok((to_p2, all))
        }
    });
    let [a, b, c] = out.into_results().unwrap();
    assert_eq!(a.0, None);
    assert_eq!(b.0, None);
    assert_eq!(c.0, Some(vals.clone()));
    for r in [a.1, b.1, c.1] {
        assert_eq!(r, vals);
    }
}

#[test]
fn misuse_is_a_typed_error() {
    let out = Sim::new(9).run(|me| {
        move |mut ctx| async move {
            // P0 claims to own an input but passes the wrong length.
            let v = [1u64, 2];
            proto::share_input(
                &mut ctx,
                PartyId::P0,
                (me == PartyId::P0).then_some(&v[..]),
                3,
            )
            .await
        }
    });
    assert_eq!(
        out.results[0].as_ref().unwrap_err().kind(),
        puma_core::ErrorKind::Misuse
    );
    // P1 never waits for P0 in this protocol and may finish; P2 waits and is told.
    let p2 = out.results[2].as_ref().unwrap_err().kind();
    assert!(
        matches!(p2, puma_core::ErrorKind::Aborted { by: PartyId::P0 }),
        "{p2:?}"
    );
}

#[test]
fn batched_matmul_is_exact_and_costs_one_round() {
    let (batch, m, k, n) = (4usize, 3usize, 5usize, 2usize);
    let (x, y, z) = run_binary(
        12,
        batch * m * k,
        batch * k * n,
        move |mut ctx, x, y| async move {
            proto::matmul_batch(&mut ctx, &x, &y, batch, (m, k, n)).await
        },
    );
    for b in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let want = (0..k).fold(0u64, |acc, t| {
                    acc.wrapping_add(
                        x[b * m * k + i * k + t].wrapping_mul(y[b * k * n + t * n + j]),
                    )
                });
                assert_eq!(z[b * m * n + i * n + j], want);
            }
        }
    }
    let out = Sim::new(13).run(move |_| {
        move |mut ctx| async move {
            let x = ctx.random_shares(batch * m * k);
            let y = ctx.random_shares(batch * k * n);
            proto::matmul_batch(&mut ctx, &x, &y, batch, (m, k, n)).await
        }
    });
    assert_eq!(out.rounds(), 1);
    assert_eq!(out.payload_bytes(), [8 * (batch * m * n) as u64; 3]);
}

/// Products deeper than a work budget's blocks of all rows (the one-hot rows times the
/// embedding table) are cut in depth: exact for one-hot rows (a zero component), for an
/// input-shared Y (a zero component) and for dense sharings, with a last block shorter
/// than the others.
#[test]
fn deep_products_under_a_small_budget_are_exact() {
    // 12 rows by 1003 by 24: 2·12·24 = 576 work units per row of Y, so a budget of
    // 57,600 cuts 10 blocks of 100 rows of Y and one of 3 (a block of all rows and 24
    // columns would take 2·1003·12·24).
    let (m, k, n) = (12usize, 1003usize, 24usize);
    let mut cfg = puma_core::Config::new(31);
    cfg.work_budget = 57_600;
    let hot: Vec<u32> = (0..m).map(|i| (i * 389 % k) as u32).collect();
    let table: Vec<u64> = (0..k * n)
        .map(|i| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .collect();
    let (h, t) = (hot.clone(), table.clone());
    let out = Sim::new(31).with_config(cfg).run(move |me| {
        let (h, t) = (h.clone(), t.clone());
        move |mut ctx| async move {
            let owner = PartyId::P1;
            let y =
                proto::share_input(&mut ctx, owner, (me == owner).then_some(&t[..]), k * n).await?;
            let x = proto::share_one_hot(
                &mut ctx,
                PartyId::P0,
                (me == PartyId::P0).then_some(&h[..]),
                m,
                1,
                k,
            )
            .await?;
            // Dense sharings: sums of two sharings have no zero component.
            let (r, s) = (ctx.random_shares(m * k), ctx.random_shares(k * n));
            let xd = x.add(&r)?;
            let yd = y.add(&s)?;
            let hot_y = proto::matmul(&mut ctx, &x, &y, m, k, n).await?;
            let dense = proto::matmul(&mut ctx, &xd, &yd, m, k, n).await?;
            let hot_dense = proto::matmul(&mut ctx, &x, &yd, m, k, n).await?;
            let opened = [&xd, &yd, &hot_y, &dense, &hot_dense];
            let mut v = Vec::new();
            for z in opened {
                v.push(proto::reveal_all(&mut ctx, z).await?);
            }
            Ok(v)
        }
    });
    let [v, ..] = out.into_results().unwrap();
    let product = |x: &[u64], y: &[u64]| -> Vec<u64> {
        let mut z = vec![0u64; m * n];
        for i in 0..m {
            for t in 0..k {
                for j in 0..n {
                    z[i * n + j] =
                        z[i * n + j].wrapping_add(x[i * k + t].wrapping_mul(y[t * n + j]));
                }
            }
        }
        z
    };
    let mut one_hot = vec![0u64; m * k];
    for (i, &c) in hot.iter().enumerate() {
        one_hot[i * k + c as usize] = 1;
    }
    let rows: Vec<u64> = hot
        .iter()
        .flat_map(|&c| table[c as usize * n..(c as usize + 1) * n].to_vec())
        .collect();
    assert_eq!(v[2], rows, "one-hot rows times an input-shared table");
    assert_eq!(v[3], product(&v[0], &v[1]), "dense times dense");
    assert_eq!(
        v[4],
        product(&one_hot, &v[1]),
        "one-hot rows times a dense table"
    );
}

/// One-hot rows shared from point-function keys open to the rows themselves (a repeated
/// column to a single one), in one round, for 2·8·(11 + 2·levels) bytes per column named
/// from the owner and none from the others; a column outside the row is refused.
#[test]
fn one_hot_rows_open_to_the_rows_and_cost_two_keys_per_column() {
    // GPT-2's vocabulary (13 levels: 6283 leaves of 8), a small odd width, one of 8.
    for (width, per_row, owner) in [
        (50257usize, 1usize, PartyId::P0),
        (37, 2, PartyId::P1),
        (8, 3, PartyId::P2),
    ] {
        let rows = 5;
        let hot: Vec<u32> = (0..rows * per_row)
            .map(|i| {
                if per_row == 3 && i % 3 == 2 {
                    ((i - 1) * 7 % width) as u32
                } else {
                    (i * 7919 % width) as u32
                }
            })
            .collect();
        let h = hot.clone();
        let out = Sim::new(width as u64).run(move |me| {
            let h = h.clone();
            move |mut ctx| async move {
                let x = proto::share_one_hot(
                    &mut ctx,
                    owner,
                    (me == owner).then_some(&h[..]),
                    rows,
                    per_row,
                    width,
                )
                .await?;
                proto::reveal_all(&mut ctx, &x).await
            }
        });
        // Sharing in 1 round, the opening in 1.
        assert_eq!(out.rounds(), 2, "width {width}");
        let bytes = out.payload_bytes();
        let levels = (width.div_ceil(8) as f64).log2().ceil() as u64;
        let keys = 2 * 8 * (11 + 2 * levels) * (rows * per_row) as u64;
        // The opening sends each party's component once: 8·rows·width each.
        let opening = 8 * (rows * width) as u64;
        let o = owner as usize;
        for (p, b) in bytes.iter().enumerate() {
            let want = opening + if p == o { keys } else { 0 };
            assert_eq!(*b, want, "width {width}, party {p}");
        }
        let [z, ..] = out.into_results().unwrap();
        let mut want = vec![0u64; rows * width];
        for (i, &c) in hot.iter().enumerate() {
            want[(i / per_row) * width + c as usize] = 1;
        }
        assert_eq!(z, want, "width {width}");
    }
    let out = Sim::new(3).run(move |me| {
        move |mut ctx| async move {
            proto::share_one_hot(
                &mut ctx,
                PartyId::P0,
                (me == PartyId::P0).then_some(&[7u32][..]),
                1,
                1,
                7,
            )
            .await
            .map(|_| ())
        }
    });
    assert!(out.into_results().is_err());
}
