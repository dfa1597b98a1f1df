//! Speculative verification on shares (`proto::accept_drafts`): the accepted count and the
//! pick after it equal the plaintext rule for every pattern of matching drafts, rounds and
//! bytes are the documented ones, and bad shapes are typed errors.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use puma_core::proto;
use puma_core::sim::{Sim, reconstruct};
use puma_core::{ErrorKind, PartyId, Shares};

/// One check: the model's picks (`k + 1` ids) and the drafts (`k` ids) over a vocabulary
/// of `v`. Returns (count, next one-hot, next id) opened, rounds, bytes per party.
fn check(picks: &[u32], drafts: &[u32], v: usize) -> (u64, Vec<u64>, u64, u32, [u64; 3]) {
    let k = drafts.len();
    let hot = |ids: &[u32]| -> Vec<u64> {
        ids.iter()
            .flat_map(|&id| (0..v).map(move |c| u64::from(c == id as usize)))
            .collect()
    };
    let mut input = hot(picks);
    input.extend(picks.iter().map(|&i| u64::from(i)));
    input.extend(hot(drafts));
    let n = input.len();
    let mut sim = Sim::new(11);
    let out = sim.run(move |me| {
        let input = input.clone();
        move |mut ctx| async move {
            let x = proto::share_input(
                &mut ctx,
                PartyId::P0,
                (me == PartyId::P0).then_some(&input[..]),
                n,
            )
            .await?;
            let (picked, rest) = x.split_at((k + 1) * v)?;
            let (ids, drafted) = rest.split_at(k + 1)?;
            let before = ctx.meter();
            let acc = proto::accept_drafts(&mut ctx, &picked, &ids, &drafted, k, v).await?;
            let bytes = ctx.meter().payload_bytes_sent - before.payload_bytes_sent;
            Ok((acc, bytes))
        }
    });
    // One round shares the input.
    let rounds = out.rounds() - 1;
    let res: Vec<_> = out.results.into_iter().map(|r| r.unwrap()).collect();
    let open = |f: &dyn Fn(&proto::Accepted) -> Shares| {
        reconstruct(&[f(&res[0].0), f(&res[1].0), f(&res[2].0)]).unwrap()
    };
    let count = open(&|a| a.count.clone())[0];
    let next = open(&|a| a.next.clone());
    let next_id = open(&|a| a.next_id.clone())[0];
    let bytes = [res[0].1, res[1].1, res[2].1];
    (count, next, next_id, rounds, bytes)
}

/// The plaintext rule: drafts accepted while each equals the pick before it.
fn expected(picks: &[u32], drafts: &[u32]) -> usize {
    drafts.iter().zip(picks).take_while(|(d, p)| d == p).count()
}

#[test]
fn every_pattern_of_matches_gives_the_greedy_prefix_and_next_pick() {
    let v = 23;
    for k in 1..=5usize {
        for mask in 0..(1u32 << k) {
            // Bit j of the mask: draft j + 1 equals the pick of row j.
            let picks: Vec<u32> = (0..=k as u32).map(|j| (7 * j + 3) % v as u32).collect();
            let drafts: Vec<u32> = (0..k)
                .map(|j| {
                    if mask >> j & 1 == 1 {
                        picks[j]
                    } else {
                        (picks[j] + 1 + j as u32) % v as u32
                    }
                })
                .collect();
            let (count, next, next_id, _, _) = check(&picks, &drafts, v);
            let n = expected(&picks, &drafts);
            assert_eq!(count, n as u64, "k {k} mask {mask:b}");
            assert_eq!(next_id, u64::from(picks[n]), "k {k} mask {mask:b}");
            let want: Vec<u64> = (0..v).map(|c| u64::from(c == picks[n] as usize)).collect();
            assert_eq!(next, want, "k {k} mask {mask:b}");
        }
    }
}

#[test]
fn rounds_and_bytes_are_the_documented_ones() {
    let v = 50_257;
    for (k, rounds) in [(1usize, 2u32), (2, 3), (4, 4), (5, 5), (8, 5)] {
        let picks: Vec<u32> = (0..=k as u32).map(|j| j * 1000).collect();
        let drafts: Vec<u32> = picks[..k].to_vec();
        let (count, _, next_id, r, bytes) = check(&picks, &drafts, v);
        assert_eq!(count, k as u64);
        assert_eq!(next_id, u64::from(picks[k]));
        assert_eq!(r, rounds, "rounds at k = {k}");
        let l = (k as f64).log2().ceil() as usize;
        let elements = k + k * l - ((1 << l) - 1) + v + 1;
        assert_eq!(bytes, [8 * elements as u64; 3], "bytes at k = {k}");
    }
}

#[test]
fn shapes_that_do_not_match_are_misuse() {
    let out = Sim::new(1).run(|me| {
        move |mut ctx| async move {
            let z = |n| Shares::zeros(me, n);
            let errs = [
                proto::accept_drafts(&mut ctx, &z(8), &z(2), &z(4), 0, 4).await,
                proto::accept_drafts(&mut ctx, &z(8), &z(2), &z(3), 1, 4).await,
                proto::accept_drafts(&mut ctx, &z(8), &z(1), &z(4), 1, 4).await,
                proto::accept_drafts(&mut ctx, &z(7), &z(2), &z(4), 1, 4).await,
            ];
            Ok(errs
                .iter()
                .map(|e| e.as_ref().err().map(|e| e.kind()))
                .collect::<Vec<_>>())
        }
    });
    for r in out.results {
        assert_eq!(r.unwrap(), vec![Some(ErrorKind::Misuse); 4]);
    }
}
