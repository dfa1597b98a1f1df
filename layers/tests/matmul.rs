//! Secret tensor products in the simulator against ndarray's f64 products.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use ndarray::Array2;
use puma_core::sim::Sim;
use puma_core::{FixedPoint, PartyId};
use puma_layers::{SecretTensor, matmul_fixed, plain};

/// A deterministic pseudo-random matrix with entries in (−scale, scale).
fn matrix(rows: usize, cols: usize, seed: u64, scale: f64) -> Array2<f64> {
    let mut s = seed;
    Array2::from_shape_fn((rows, cols), |_| {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let u = (s >> 11) as f64 / (1u64 << 53) as f64;
        (2.0 * u - 1.0) * scale
    })
}

#[test]
fn secret_matmul_matches_ndarray_within_two_ulp() {
    let fx = FixedPoint::default();
    let (m, k, n) = (5, 7, 3);
    let x = matrix(m, k, 1, 8.0);
    // The model owner holds Wᵀ (as a Linear layer stores it); the protocol transposes.
    let w = matrix(k, n, 2, 2.0);
    let wt = w.t().to_owned();
    let xe = plain::encode_array2(fx, &x).unwrap();
    let wte = plain::encode_array2(fx, &wt).unwrap();

    let out = Sim::new(3).run(move |me| {
        let (xe, wte) = (xe.clone(), wte.clone());
        move |mut ctx| async move {
            let xs = SecretTensor::share_input(
                &mut ctx,
                PartyId::P0,
                (me == PartyId::P0).then_some(&xe[..]),
                vec![m, k],
            )
            .await?;
            let wts = SecretTensor::share_input(
                &mut ctx,
                PartyId::P1,
                (me == PartyId::P1).then_some(&wte[..]),
                vec![n, k],
            )
            .await?;
            let ws = wts.transpose2d()?;
            let y = matmul_fixed(&mut ctx, &xs, &ws).await?;
            assert_eq!(y.shape(), &[m, n]);
            Ok(y.reveal_to(&mut ctx, PartyId::P0).await?)
        }
    });
    // share_input, matmul, trunc, reveal.
    assert_eq!(out.rounds(), 4);
    let [y0, y1, y2] = out.into_results().unwrap();
    assert!(y1.is_none() && y2.is_none());
    let y = plain::decode_array2(fx, &y0.unwrap(), m, n).unwrap();

    // Reference 1: the f64 product of the *encoded* inputs, which the ring computes exactly
    // before the truncation: at most 2 ulp apart.
    let x_enc = plain::decode_array2(fx, &plain::encode_array2(fx, &x).unwrap(), m, k).unwrap();
    let w_enc = plain::decode_array2(fx, &plain::encode_array2(fx, &w).unwrap(), k, n).unwrap();
    let exact = x_enc.dot(&w_enc);
    let ulp = 1.0 / fx.scale();
    for ((i, j), &v) in y.indexed_iter() {
        assert!(
            (v - exact[[i, j]]).abs() <= 2.0 * ulp,
            "({i},{j}): {v} vs {}",
            exact[[i, j]]
        );
    }
    // Reference 2: the f64 product of the original reals. Encoding moves each input by at
    // most half an ulp, so each of the k terms moves by at most (|x| + |w|)/2 ulp.
    let reference = x.dot(&w);
    let bound = (2.0 + k as f64 * (8.0 + 2.0) / 2.0) * ulp;
    let max_err = y
        .iter()
        .zip(reference.iter())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    assert!(max_err <= bound, "max error {max_err} > {bound}");
    // The values are not trivially small: the product really was computed.
    assert!(reference.iter().any(|v| v.abs() > 1.0));
}
