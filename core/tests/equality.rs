//! Equality, one-hot of secret ids and the secure embedding, against plaintext.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use puma_core::sim::{Sim, reconstruct, reconstruct_bits};
use puma_core::{PartyId, Shares, Width, proto};

fn pseudo(i: u64, salt: u64) -> u64 {
    let mut z = i.wrapping_add(salt.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Shares `vals` from `owner`, re-randomised as after any product.
async fn input(
    ctx: &mut puma_core::Ctx,
    owner: PartyId,
    vals: &[u64],
) -> Result<Shares, puma_core::Error> {
    let me = ctx.me();
    let n = vals.len();
    let x = proto::share_input(ctx, owner, (me == owner).then_some(vals), n).await?;
    proto::mul(ctx, &x, &Shares::from_public(me, &vec![1; n])).await
}

#[test]
fn eq_is_exact_on_ring_and_fixed_point_values() {
    let n = 100_000u64;
    // Half the pairs equal; the others differ in one random bit or at random.
    let xs: Vec<u64> = (0..n).map(|i| pseudo(i, 1) >> 2).collect();
    let ys: Vec<u64> = (0..n)
        .map(|i| match i % 4 {
            0 | 1 => xs[i as usize],
            2 => xs[i as usize] ^ (1 << (pseudo(i, 2) % 64)),
            _ => pseudo(i, 3) >> 2,
        })
        .collect();
    let (x2, y2) = (xs.clone(), ys.clone());
    let out = Sim::new(1).run(move |_| {
        let (x2, y2) = (x2.clone(), y2.clone());
        move |mut ctx| async move {
            let x = input(&mut ctx, PartyId::P0, &x2).await?;
            let y = input(&mut ctx, PartyId::P1, &y2).await?;
            let e64 = proto::eq(&mut ctx, &x, &y, Width::W64).await?;
            // Fixed point |x| ≤ 2^20 real: x − y < 2^40 raw, a 41-bit ring is exact.
            let c: Vec<u64> = y2.iter().map(|v| v & ((1 << 39) - 1)).collect();
            let xn = input(
                &mut ctx,
                PartyId::P2,
                &x2.iter().map(|v| v & ((1 << 39) - 1)).collect::<Vec<_>>(),
            )
            .await?;
            let e41 = proto::eq_public(&mut ctx, &xn, &c, Width::new(41).unwrap()).await?;
            Ok((e64, e41))
        }
    });
    let [a, b, c] = out.into_results().unwrap();
    let e64 = reconstruct_bits(&[a.0, b.0, c.0]).unwrap();
    let e41 = reconstruct_bits(&[a.1, b.1, c.1]).unwrap();
    for k in 0..n as usize {
        assert_eq!(e64[k] == 1, xs[k] == ys[k]);
        let m = (1u64 << 39) - 1;
        assert_eq!(e41[k] == 1, xs[k] & m == ys[k] & m);
    }
}

#[test]
fn eq_costs() {
    for (k, rounds) in [(64u32, 7u32), (16, 5)] {
        let w = Width::new(k).unwrap();
        let n = 24usize;
        let out = Sim::new(2).run(move |_| {
            move |mut ctx| async move {
                let x = ctx.random_shares(n);
                proto::eq_public(&mut ctx, &x, &vec![0; n], w).await
            }
        });
        assert_eq!(out.rounds(), rounds);
        let k = k as usize;
        // Each party inputs k bits for its third and does k − 1 ANDs per element.
        assert_eq!(
            out.payload_bytes(),
            [(k * n / 3 / 8 + (k - 1) * n / 8) as u64; 3],
            "k = {k}"
        );
    }
}

#[test]
fn one_hot_of_gpt2_ids_is_exact() {
    let vocab = 50257usize;
    let ids: Vec<u64> = vec![0, 50256, 464, 1, 25000, 50256];
    let n = ids.len();
    let ids2 = ids.clone();
    let out = Sim::new(3).run(move |_| {
        let ids = ids2.clone();
        move |mut ctx| async move {
            let x = input(&mut ctx, PartyId::P1, &ids).await?;
            proto::one_hot(&mut ctx, &x, vocab, Width::new(16).unwrap()).await
        }
    });
    let hot = reconstruct_bits(&out.into_results().unwrap()).unwrap();
    assert_eq!(hot.len(), n * vocab);
    for (t, id) in ids.iter().enumerate() {
        for j in 0..vocab {
            assert_eq!(hot[t * vocab + j] == 1, j as u64 == *id, "token {t}, j {j}");
        }
    }
}

#[test]
fn embedding_selects_exact_rows() {
    let (vocab, d) = (300usize, 5usize);
    let table: Vec<u64> = (0..(vocab * d) as u64).map(|i| pseudo(i, 9)).collect();
    let ids: Vec<u64> = vec![7, 299, 0, 7];
    let (t2, i2) = (table.clone(), ids.clone());
    let out = Sim::new(4).run(move |_| {
        let (t, i) = (t2.clone(), i2.clone());
        move |mut ctx| async move {
            let tab = input(&mut ctx, PartyId::P2, &t).await?;
            let x = input(&mut ctx, PartyId::P0, &i).await?;
            proto::embed(&mut ctx, &x, &tab, vocab, d, Width::new(9).unwrap()).await
        }
    });
    let rows = reconstruct(&out.into_results().unwrap()).unwrap();
    for (t, id) in ids.iter().enumerate() {
        let id = *id as usize;
        assert_eq!(&rows[t * d..(t + 1) * d], &table[id * d..(id + 1) * d]);
    }
}

#[test]
fn one_hot_and_embedding_costs() {
    let (vocab, d, n) = (50257usize, 8usize, 3usize);
    let out = Sim::new(5).run(move |_| {
        move |mut ctx| async move {
            let ids = ctx.random_shares(n);
            proto::one_hot(&mut ctx, &ids, vocab, Width::new(16).unwrap()).await
        }
    });
    assert_eq!(out.rounds(), 5);
    // P0 inputs 16 bits per token; every party does 15 ANDs per (token, id), in the
    // AND-tree levels of 8, 4, 2 and 1 ANDs.
    let ands: u64 = [8u64, 4, 2, 1]
        .iter()
        .map(|w| (w * (vocab * n) as u64).div_ceil(8))
        .sum();
    assert_eq!(
        out.payload_bytes(),
        [ands + (16 * n as u64).div_ceil(8), ands, ands]
    );

    let out = Sim::new(6).run(move |_| {
        move |mut ctx| async move {
            let ids = ctx.random_shares(n);
            let table = ctx.random_shares(vocab * d);
            proto::embed(&mut ctx, &ids, &table, vocab, d, Width::new(16).unwrap()).await
        }
    });
    assert_eq!(out.rounds(), 7);
    let b2a = 384 * (vocab * n) as u64 / 3 / 8; // vocab·n is divisible by 3 here
    assert_eq!((vocab * n) % 3, 0);
    let total: u64 = out.payload_bytes().iter().sum();
    assert_eq!(
        total,
        3 * ands + (16 * n as u64).div_ceil(8) + 3 * b2a + 3 * 8 * (n * d) as u64
    );
}
