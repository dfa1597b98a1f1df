//! Equality tests against plaintext, with pinned rounds and bytes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use puma_core::sim::{Sim, reconstruct_bits};
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
