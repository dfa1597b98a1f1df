//! Max, argmax and the reciprocal against plaintext: exactness of max/argmax (ties: the
//! first maximum wins), relative error of the reciprocal, pinned rounds and bytes.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::needless_range_loop,
    missing_docs
)]

use puma_core::proto::{self, MaxMethod};
use puma_core::sim::{Outcome, Sim, reconstruct};
use puma_core::{Ctx, Error, FixedPoint, PartyId, Shares, Width};

/// Shares `vals` from P0, re-randomises every component (a product with public 1, as after
/// any multiplication), runs `g` and opens each of its outputs.
fn run_on<G, Fut>(seed: u64, vals: Vec<u64>, g: G) -> (Vec<Vec<u64>>, Outcome<Vec<Shares>>)
where
    G: Fn(Ctx, Shares) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Vec<Shares>, Error>> + Send + 'static,
{
    let n = vals.len();
    let out = Sim::new(seed).run(move |me| {
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
    let res: Vec<Vec<Shares>> = out
        .results
        .iter()
        .map(|r| r.as_ref().unwrap().clone())
        .collect();
    let opened = (0..res[0].len())
        .map(|k| reconstruct(&[res[0][k].clone(), res[1][k].clone(), res[2][k].clone()]).unwrap())
        .collect();
    (opened, out)
}

/// Runs `g` on `n` random shares (no input round): the costs of `g` alone.
fn costs<G, Fut>(n: usize, g: G) -> Outcome<Vec<Shares>>
where
    G: Fn(Ctx, Shares) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Vec<Shares>, Error>> + Send + 'static,
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
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Plaintext max and first argmax of each row (values read as signed).
fn reference(vals: &[u64], rows: usize, cols: usize) -> (Vec<u64>, Vec<usize>) {
    let mut maxima = Vec::with_capacity(rows);
    let mut arg = Vec::with_capacity(rows);
    for r in 0..rows {
        let row = &vals[r * cols..(r + 1) * cols];
        let mut best = 0;
        for (i, v) in row.iter().enumerate() {
            if (*v as i64) > (row[best] as i64) {
                best = i;
            }
        }
        maxima.push(row[best]);
        arg.push(best);
    }
    (maxima, arg)
}

fn check_argmax(vals: &[u64], rows: usize, cols: usize, max: &[u64], onehot: &[u64]) {
    let (m, a) = reference(vals, rows, cols);
    assert_eq!(max, &m[..], "maxima ({rows}×{cols})");
    for r in 0..rows {
        for c in 0..cols {
            assert_eq!(
                onehot[r * cols + c],
                u64::from(c == a[r]),
                "one-hot at row {r} col {c} ({rows}×{cols})"
            );
        }
    }
}

/// Rows with many ties: values drawn from a small set, so equal maxima are common.
fn tied_values(n: usize, salt: u64, scale: u64) -> Vec<u64> {
    (0..n as u64)
        .map(|i| (((pseudo(i, salt) % 7) as i64 - 3) as u64).wrapping_mul(scale))
        .collect()
}

#[test]
fn max_and_argmax_are_exact_on_62_bit_values_with_ties() {
    // Random signed 62-bit values: differences stay below 2^63 (width 64). Every method,
    // row lengths around the all-pairs/tournament boundaries.
    let cases: &[(usize, usize, MaxMethod)] = &[
        (600, 1, MaxMethod::default()),
        (500, 2, MaxMethod::default()),
        (400, 3, MaxMethod::default()),
        (300, 32, MaxMethod::default()),
        (100, 33, MaxMethod::default()),
        (40, 100, MaxMethod::default()),
        (200, 7, MaxMethod::Tournament),
        (60, 65, MaxMethod::Tournament),
        (100, 12, MaxMethod::AllPairs),
        (50, 40, MaxMethod::Hybrid { all_pairs_max: 5 }),
    ];
    for (t, &(rows, cols, method)) in cases.iter().enumerate() {
        let n = rows * cols;
        let mut vals: Vec<u64> = (0..n as u64)
            .map(|i| ((pseudo(i, 10 + t as u64) as i64) >> 2) as u64)
            .collect();
        // Every other row: ties among a few values (including negative maxima).
        for r in (0..rows).step_by(2) {
            let tie = tied_values(cols, 100 + r as u64, 1 << 40);
            vals[r * cols..(r + 1) * cols].copy_from_slice(&tie);
        }
        let (opened, _) = run_on(t as u64, vals.clone(), move |mut ctx, x| async move {
            let (m, o) =
                proto::argmax_rows_with(&mut ctx, &x, rows, cols, Width::W64, method).await?;
            let m2 = proto::max_rows_with(&mut ctx, &x, rows, cols, Width::W64, method).await?;
            Ok(vec![m, o, m2])
        });
        check_argmax(&vals, rows, cols, &opened[0], &opened[1]);
        assert_eq!(opened[0], opened[2]);
    }
}

#[test]
fn max_is_exact_on_fixed_point_in_a_41_bit_ring() {
    // |x| ≤ 2^20 real: raw |x| ≤ 2^38, differences < 2^39 < 2^40: a 41-bit ring suffices.
    let fx = FixedPoint::default();
    let (rows, cols) = (3200usize, 32usize);
    let n = rows * cols;
    let mut vals: Vec<u64> = (0..n as u64)
        .map(|i| {
            let u = (pseudo(i, 7) % (1u64 << 40)) as f64 / (1u64 << 40) as f64;
            fx.encode((2.0 * u - 1.0) * (1u64 << 20) as f64).unwrap()
        })
        .collect();
    // Range ends and ties.
    vals[0] = fx.encode((1u64 << 20) as f64).unwrap();
    vals[1] = fx.encode(-((1u64 << 20) as f64)).unwrap();
    vals[cols] = fx.encode(-((1u64 << 20) as f64)).unwrap();
    vals[cols + 1] = fx.encode((1u64 << 20) as f64).unwrap();
    for r in (2..rows).step_by(3) {
        let tie = tied_values(cols, 500 + r as u64, 1 << 30);
        vals[r * cols..(r + 1) * cols].copy_from_slice(&tie);
    }
    let w = Width::new(41).unwrap();
    let (opened, out) = run_on(41, vals.clone(), move |mut ctx, x| async move {
        let (m, o) = proto::argmax_rows(&mut ctx, &x, rows, cols, w).await?;
        Ok(vec![m, o])
    });
    check_argmax(&vals, rows, cols, &opened[0], &opened[1]);
    // A bulk call (all pairs of 32 would compare 3200·496 pairs, and all pairs of 16 after
    // one level 3200·136, both over 2^16): input (1) + re-randomisation (1) + two levels
    // of R_LT + 2 = 9 at k = 41 + all pairs of 8: 7 + 3 + 2.
    assert_eq!(out.rounds(), 2 + 2 * 9 + 12);
}

#[test]
fn max_costs_are_pinned() {
    // All pairs over rows of 32 in Z_2^32: 13 rounds; 200886 bits per row in total. (The
    // default takes all pairs while the call compares at most 2^16 pairs, 132 rows of 32;
    // 384 rows are a bulk call, pinned at the end.)
    let w32 = Width::new(32).unwrap();
    let all = MaxMethod::AllPairs;
    for rows in [1usize, 3, 384] {
        let out = costs(rows * 32, move |mut ctx, x| async move {
            Ok(vec![
                proto::max_rows_with(&mut ctx, &x, rows, 32, w32, all).await?,
            ])
        });
        assert_eq!(out.rounds(), 13, "rows = {rows}");
        let bytes = out.payload_bytes();
        let total: u64 = bytes.iter().sum();
        println!("max 32: rows {rows}: bytes {bytes:?}, total {total}");
        // Packing rounds up per record: at most a few bytes per record over the formula.
        let formula_bits = 200_886 * rows as u64;
        assert!(
            total * 8 >= formula_bits && total * 8 < formula_bits + 8 * 200,
            "{total}"
        );
    }
    // 384 rows (e.g. 12 heads × 32 queries): the same 13 rounds, and exactly 200886 bits
    // per row in total, a third per party (8370.25 bytes per row and party).
    let out = costs(384 * 32, move |mut ctx, x| async move {
        Ok(vec![
            proto::max_rows_with(&mut ctx, &x, 384, 32, w32, all).await?,
        ])
    });
    assert_eq!(out.rounds(), 13);
    assert_eq!(out.payload_bytes(), [3_214_176; 3]);
    assert_eq!(3 * 3_214_176 * 8, 200_886 * 384);
    // One row of 32 (roles split 10/11/11 pairs' worth of work unevenly).
    let out = costs(32, move |mut ctx, x| async move {
        Ok(vec![proto::max_rows(&mut ctx, &x, 1, 32, w32).await?])
    });
    assert_eq!(out.payload_bytes(), [8382, 8366, 8374]);
    // Argmax of the same rows: no extra round, no extra byte (the one-hot is the B2A'd
    // winner vector of the single level).
    let out = costs(384 * 32, move |mut ctx, x| async move {
        let (m, o) = proto::argmax_rows_with(&mut ctx, &x, 384, 32, w32, all).await?;
        Ok(vec![m, o])
    });
    assert_eq!(out.rounds(), 13);
    assert_eq!(out.payload_bytes(), [3_214_176; 3]);
    // Tournament over rows of 32 at k = 32: 5 levels of R_LT + 2 = 8 rounds; per pair
    // LT + B2A + reshare = 383 + 256 + 192 = 831 bits, 31 pairs per row.
    let out = costs(384 * 32, move |mut ctx, x| async move {
        let m = proto::max_rows_with(&mut ctx, &x, 384, 32, w32, MaxMethod::Tournament).await?;
        Ok(vec![m])
    });
    assert_eq!(out.rounds(), 40);
    let total: u64 = out.payload_bytes().iter().sum();
    println!("tournament 32: {:?}", out.payload_bytes());
    assert!(total * 8 >= 831 * 31 * 384 && total * 8 < 831 * 31 * 384 + 8 * 400);
    // The default over the 384 rows: all pairs would compare 190464 pairs, over the budget
    // of 2^16, and one level down to 16 compares 384·(16 + 120) = 52224: one level (8
    // rounds, 16 pairs of 831 bits per row) and all pairs of 16 (6 + 4 + 2 rounds,
    // 120·383 + 3·15·14 + 15·256 + 192 = 50622 bits per row).
    let out = costs(384 * 32, move |mut ctx, x| async move {
        Ok(vec![proto::max_rows(&mut ctx, &x, 384, 32, w32).await?])
    });
    assert_eq!(out.rounds(), 20);
    let total: u64 = out.payload_bytes().iter().sum();
    let formula = 384 * (16 * 831 + 50_622);
    println!("default 384 × 32: {:?}", out.payload_bytes());
    assert!(
        total * 8 >= formula && total * 8 < formula + 8 * 400,
        "{total}"
    );
}

#[test]
fn vocabulary_argmax_by_hybrid_tournament() {
    // One row of GPT-2's 50257 logits (|logit| < 2^20). In Z_2^41: R_LT = 7.
    // Hybrid { 32 }: 11 tournament levels bring 50257 down to 25, then all pairs of 25:
    // 11·9 + 7 + 5 + 2 = 113 rounds. The default (budget 2^16 comparisons): 9 levels down
    // to 99, then all pairs of 99: 9·9 + 7 + 7 + 2 = 97 rounds, 50158 + 4851 = 55009
    // comparisons instead of 50232 + 300 = 50532.
    let fx = FixedPoint::default();
    let n = 50_257usize;
    let mut vals: Vec<u64> = (0..n as u64)
        .map(|i| {
            fx.encode(((pseudo(i, 77) % 2_000_000) as f64) / 1e5 - 10.0)
                .unwrap()
        })
        .collect();
    // A tie for the maximum: the first one must win.
    let top = fx.encode(123.5).unwrap();
    vals[31_000] = top;
    vals[40_000] = top;
    vals[7] = fx.encode(123.25).unwrap();
    let w = Width::new(41).unwrap();
    let n8 = 8 * n as u64;
    for (method, rounds, bytes) in [
        (
            MaxMethod::Hybrid { all_pairs_max: 32 },
            113,
            [2_589_675, 2_589_576, 2_589_669],
        ),
        (MaxMethod::default(), 97, [2_670_321, 2_670_272, 2_670_349]),
    ] {
        let (opened, out) = run_on(9, vals.clone(), move |mut ctx, x| async move {
            let (m, o) = proto::argmax_rows_with(&mut ctx, &x, 1, n, w, method).await?;
            Ok(vec![m, o])
        });
        check_argmax(&vals, 1, n, &opened[0], &opened[1]);
        assert_eq!(opened[1][31_000], 1);
        assert_eq!(out.rounds(), 2 + rounds, "{method:?}");
        // Minus the input (8n from P0) and the re-randomisation (8n each): the argmax
        // alone sends `bytes` (Hybrid { 32 }: 7.77 MB in total; the default 8.01 MB).
        let b = out.payload_bytes();
        println!(
            "{method:?}: argmax bytes {:?}",
            [b[0] - 2 * n8, b[1] - n8, b[2] - n8]
        );
        assert_eq!(b, [bytes[0] + 2 * n8, bytes[1] + n8, bytes[2] + n8]);
    }
}

#[test]
fn default_max_takes_all_pairs_over_a_cached_step_within_the_budget() {
    // A KV-cached step: one query row per head (12) over n keys. All pairs while
    // 12·n(n−1)/2 ≤ 2^16 (n ≤ 105): the rounds of all pairs, R_LT + ⌈log2(n−1)⌉ + 2 in
    // Z_2^32, instead of the tournament levels of Hybrid { 32 }.
    let w32 = Width::new(32).unwrap();
    for (n, rounds, hybrid_rounds) in [(33usize, 13u32, 20u32), (65, 14, 28), (105, 15, 29)] {
        let rows = 12;
        let vals: Vec<u64> = (0..(rows * n) as u64)
            .map(|i| ((pseudo(i, 3 + n as u64) as i64) >> 34) as u64)
            .collect();
        let (opened, out) = run_on(n as u64, vals.clone(), move |mut ctx, x| async move {
            let m = proto::max_rows(&mut ctx, &x, rows, n, w32).await?;
            Ok(vec![m])
        });
        for r in 0..rows {
            let want = vals[r * n..(r + 1) * n]
                .iter()
                .map(|&v| v as i64)
                .max()
                .unwrap();
            assert_eq!(opened[0][r] as i64, want, "n = {n}, row {r}");
        }
        assert_eq!(out.rounds(), 2 + rounds, "n = {n}");
        let hybrid = costs(rows * n, move |mut ctx, x| async move {
            let h = MaxMethod::Hybrid { all_pairs_max: 32 };
            Ok(vec![
                proto::max_rows_with(&mut ctx, &x, rows, n, w32, h).await?,
            ])
        });
        assert_eq!(hybrid.rounds(), hybrid_rounds, "n = {n}");
        // Bytes: 12 rows of n(n−1)/2 comparisons of 383 bits, AND trees, B2A and sums.
        let all = costs(rows * n, move |mut ctx, x| async move {
            Ok(vec![proto::max_rows(&mut ctx, &x, rows, n, w32).await?])
        });
        let bits = 8 * all.payload_bytes().iter().sum::<u64>();
        let m = n as u64;
        let formula = 12 * (m * (m - 1) / 2 * 383 + 3 * (m - 1) * (m - 2) + 256 * (m - 1) + 192);
        println!("n = {n}: all pairs {bits} bits (formula {formula})");
        assert!(
            bits >= formula && bits < formula + 8 * 200,
            "n = {n}: {bits} vs {formula}"
        );
    }
    // One more key than the budget allows: 12·106·105/2 = 66780 > 2^16, so the default
    // halves once (rows of 53, all pairs): 8 + 6 + 6 + 2 = 22 rounds, not Hybrid { 32 }'s
    // 2·8 + 6 + 5 + 2 = 29.
    let out = costs(12 * 106, move |mut ctx, x| async move {
        Ok(vec![proto::max_rows(&mut ctx, &x, 12, 106, w32).await?])
    });
    assert_eq!(out.rounds(), 22);
}

/// Log-uniform inputs over [2^−10, 2^20] (raw 2^8 … 2^38) plus edges: powers of two,
/// one below and one above them, and the ends of the contract 2^8 ≤ X < 2^39.
fn recip_inputs(n: usize) -> Vec<u64> {
    let mut raw: Vec<u64> = (0..n as u64)
        .map(|i| {
            let t = (pseudo(i, 31) >> 11) as f64 / (1u64 << 53) as f64;
            (2f64.powf(8.0 + 30.0 * t)).round() as u64
        })
        .collect();
    for j in 8..39u32 {
        raw.extend_from_slice(&[1 << j, (1 << j) + 1, (1 << (j + 1)) - 1]);
    }
    raw.push((1 << 39) - 1);
    raw
}

/// Relative errors |y·x − 1| at the decoded input, split by whether 1/x ≥ 2^−4.
fn recip_errors(raw: &[u64], out: &[u64], out_bits: u32) -> (f64, f64) {
    let (mut big, mut all) = (0f64, 0f64);
    for (&x, &y) in raw.iter().zip(out) {
        let xr = x as f64 / (1u64 << 18) as f64;
        let yr = (y as i64) as f64 / 2f64.powi(out_bits as i32);
        let rel = (yr * xr - 1.0).abs();
        all = all.max(rel);
        if 1.0 / xr >= 1.0 / 16.0 {
            big = big.max(rel);
        }
    }
    (big, all)
}

#[test]
fn reciprocal_relative_error_over_2_pow_minus_10_to_2_pow_20() {
    // 10^5 log-uniform points and edges, output at f + 20 fractional bits. In four runs of
    // a quarter each: the comparisons' zero tests hold k words per element and threshold
    // (40 × 92 here), which for all points at once took 16 GB in the simulator's three
    // parties.
    let raw = recip_inputs(100_000);
    let mut got = Vec::with_capacity(raw.len());
    for (i, part) in raw.chunks(raw.len().div_ceil(4)).enumerate() {
        let (opened, out) = run_on(21 + i as u64, part.to_vec(), move |mut ctx, x| async move {
            Ok(vec![
                proto::reciprocal_extra(&mut ctx, &x, 8, 38, 20).await?,
            ])
        });
        // Input + re-randomisation + 6 rounds.
        assert_eq!(out.rounds(), 2 + 6);
        got.extend_from_slice(&opened[0]);
    }
    let (_, all) = recip_errors(&raw, &got, 38);
    println!(
        "reciprocal, extra 20: max rel {all:.3e} over {} inputs",
        raw.len()
    );
    assert!(all <= 1e-4, "extra = 20: {all}");
}

/// Small raw inputs, every X in [4, 4096) (lo = 2, hi = 11: octaves whose integer
/// thresholds sit a fraction of a unit from the sub-segment bounds): 1/x and 1/√x within
/// the fits' relative error, so no X lands outside its sub-segment.
#[test]
fn reciprocal_and_rsqrt_on_small_raw_inputs() {
    let raw: Vec<u64> = (4..4096).collect();
    let (opened, out) = run_on(23, raw.clone(), move |mut ctx, x| async move {
        Ok(vec![
            proto::reciprocal(&mut ctx, &x, 2, 11).await?,
            proto::rsqrt(&mut ctx, &x, 2, 11, 0).await?,
        ])
    });
    // hi ≤ 21: u needs no truncation, so 5 rounds each (one call after the other), after
    // the input's 2.
    assert_eq!(out.rounds(), 2 + 5 + 5);
    let (mut worst_r, mut worst_q) = (0f64, 0f64);
    for (i, &x) in raw.iter().enumerate() {
        let xr = x as f64 / (1u64 << 18) as f64;
        let r = (opened[0][i] as i64) as f64 / (1u64 << 18) as f64;
        let q = (opened[1][i] as i64) as f64 / (1u64 << 18) as f64;
        worst_r = worst_r.max((r * xr - 1.0).abs());
        worst_q = worst_q.max((q * xr.sqrt() - 1.0).abs());
    }
    println!("small inputs: reciprocal {worst_r:.3e}, rsqrt {worst_q:.3e}");
    assert!(worst_r <= 5e-6, "reciprocal {worst_r}");
    assert!(worst_q <= 5e-6, "rsqrt {worst_q}");
}

#[test]
fn reciprocal_at_f_bits_is_limited_by_the_output_grid_only() {
    // Output at f = 18 bits: relative error ≤ 1e-4 wherever 1/x ≥ 2^−4; below, the grid
    // 2^−18 dominates (absolute error ≤ a few 2^−18).
    let raw = recip_inputs(20_000);
    let (opened, _) = run_on(22, raw.clone(), move |mut ctx, x| async move {
        Ok(vec![proto::reciprocal(&mut ctx, &x, 8, 38).await?])
    });
    let (big, _) = recip_errors(&raw, &opened[0], 18);
    let mut abs = 0f64;
    for (&x, &y) in raw.iter().zip(&opened[0]) {
        let xr = x as f64 / (1u64 << 18) as f64;
        if 1.0 / xr < 1.0 / 16.0 {
            abs = abs.max(((y as i64) as f64 / (1u64 << 18) as f64 - 1.0 / xr).abs());
        }
    }
    println!("reciprocal, extra 0: max rel {big:.3e} (1/x >= 2^-4), max abs {abs:.3e} (below)");
    assert!(big <= 1e-4, "{big}");
    assert!(abs <= 3.0 / (1u64 << 18) as f64, "{abs}");
}

#[test]
fn reciprocal_costs_are_pinned() {
    // lo = 8, hi = 38 (x ∈ [2^−10, 2^20]), extra = 20: 6 rounds; n = 24 elements.
    let out = costs(24, |mut ctx, x| async move {
        Ok(vec![
            proto::reciprocal_extra(&mut ctx, &x, 8, 38, 20).await?,
        ])
    });
    assert_eq!(out.rounds(), 6);
    // 118,150 bits per element in total (the segment method's formula,
    // `reciprocal_bits`): the 92 comparisons (three sub-segments in each of 31 octaves) at
    // k = 40 cost 79,802 of them.
    assert_eq!(out.payload_bytes(), [118_150; 3]);
    assert_eq!(proto::reciprocal_bits(18, 8, 38, 20).unwrap(), 118_150);
    assert_eq!(proto::lt_thresholds_bits(40, 92), 79_802);
    // Softmax sums of rows of 32: lo = 17, hi = 22, extra = 12: 6 rounds.
    let out = costs(24, |mut ctx, x| async move {
        Ok(vec![
            proto::reciprocal_extra(&mut ctx, &x, 17, 22, 12).await?,
        ])
    });
    assert_eq!(out.rounds(), 6);
    // 17,091 bits per element: X cut by 8 bits (96), the 17 comparisons in Z_2^16
    // (9,355), u for the octave above 2^21 (68), t² (6·276) and the 18 segments.
    assert_eq!(out.payload_bytes(), [17_091; 3]);
    assert_eq!(proto::reciprocal_bits(18, 17, 22, 12).unwrap(), 17_091);
    assert_eq!(proto::lt_thresholds_bits(16, 17), 9_355);
    assert!(proto::reciprocal_bits(18, 1, 38, 0).is_err());
}

#[test]
fn default_max_of_a_bulk_call_halves_its_all_pairs_down_to_eight() {
    // 3000 rows of 16, Z_2^32 (R_LT = 6): the hybrid's all pairs of 16 compare
    // 3000·120 = 360000 pairs, and one level down to 8 still 3000·(8 + 28) = 108000, both
    // over the budget of 2^16: the threshold stops at the floor of 8. Rounds: one level
    // (R_LT + 2) and all pairs of 8 (R_LT + 3 + 2), 19 instead of the hybrid's 12.
    let (rows, n) = (3000usize, 16usize);
    let w32 = Width::new(32).unwrap();
    let vals: Vec<u64> = (0..(rows * n) as u64)
        .map(|i| ((pseudo(i, 41) as i64) >> 34) as u64)
        .collect();
    let (opened, out) = run_on(16, vals.clone(), move |mut ctx, x| async move {
        Ok(vec![proto::max_rows(&mut ctx, &x, rows, n, w32).await?])
    });
    let (want, _) = reference(&vals, rows, n);
    assert_eq!(opened[0], want);
    assert_eq!(out.rounds(), 2 + 19);
    // Bytes: 108000 comparisons of 383 bits, 3000·(8·256 + 8·192) for the level's B2A and
    // sums, 3000·(7·256 + 192 + 3·7·6) for the last level's B2A, sum and AND tree.
    let all = costs(rows * n, move |mut ctx, x| async move {
        Ok(vec![proto::max_rows(&mut ctx, &x, rows, n, w32).await?])
    });
    let bits = 8 * all.payload_bytes().iter().sum::<u64>();
    let r = rows as u64;
    let formula = r * (36 * 383 + 8 * (256 + 192) + 7 * 256 + 192 + 3 * 7 * 6);
    println!("bulk call: {bits} bits (formula {formula})");
    assert!(
        bits >= formula && bits < formula + 8 * 200,
        "{bits} vs {formula}"
    );
    // The hybrid it replaces: all pairs of 16 in 12 rounds, 2.6 times the bits
    // (120·383 + 3·15·14 + 15·256 + 192 = 50622 per row).
    let hybrid = costs(rows * n, move |mut ctx, x| async move {
        let h = MaxMethod::Hybrid { all_pairs_max: 32 };
        Ok(vec![
            proto::max_rows_with(&mut ctx, &x, rows, n, w32, h).await?,
        ])
    });
    assert_eq!(hybrid.rounds(), 12);
    let hybrid_bits = 8 * hybrid.payload_bytes().iter().sum::<u64>();
    let hybrid_formula = r * 50_622;
    assert!(
        hybrid_bits >= hybrid_formula && hybrid_bits < hybrid_formula + 8 * 200,
        "{hybrid_bits} vs {hybrid_formula}"
    );
}
