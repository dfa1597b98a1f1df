//! Dealing from outside the parties: shares dealt with seeds compute like any other, only
//! one vector travels, and the way back catches a party that sends a wrong share.

use proptest::prelude::*;
use puma_core::dealing::{self, Component, Dealt, Mismatch, Span};
use puma_core::sim::Sim;
use puma_core::{FixedPoint, PartyId, Shares, proto};

fn seeds(salt: u8) -> [[u8; 32]; 2] {
    [[salt; 32], [salt.wrapping_add(101); 32]]
}

/// Each party's shares of a dealt vector.
fn dealt_shares(values: &[u64], span: Span) -> [Shares; 3] {
    let [d0, d1, d2] = dealing::deal(values, &seeds(3), span);
    let n = values.len();
    [
        d0.into_shares(PartyId::P0, n, span).unwrap(),
        d1.into_shares(PartyId::P1, n, span).unwrap(),
        d2.into_shares(PartyId::P2, n, span).unwrap(),
    ]
}

fn reconstruct_shares(s: &[Shares; 3]) -> Result<Vec<u64>, Mismatch> {
    dealing::reconstruct([s[0].components(), s[1].components(), s[2].components()])
}

#[test]
fn only_one_vector_is_sent_and_p0_gets_seeds_alone() {
    let values: Vec<u64> = (0..1000u64).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
    let [d0, d1, d2] = dealing::deal(&values, &seeds(1), Span::whole(4));
    assert!(matches!(
        (&d0.first, &d0.second),
        (Component::Seed(_), Component::Seed(_))
    ));
    let (Component::Values(a), Component::Values(b)) = (&d1.second, &d2.first) else {
        panic!("P1's second and P2's first component are the correction");
    };
    assert_eq!(a, b);
    assert_eq!(a.len(), 1000);
    // The correction is masked: it is not the values.
    assert_ne!(a, &values);
    // Debug shows no material.
    let shown = format!("{d0:?} {d1:?} {d2:?}");
    assert!(!shown.contains(&values[7].to_string()), "{shown}");
    assert!(shown.contains("Values(len 1000)"), "{shown}");
}

#[test]
fn dealt_shares_compute_like_any_others() {
    // x dealt from outside, y dealt too; the parties multiply and open the product to P2.
    let fx = FixedPoint::default();
    let xs: Vec<f64> = (0..64).map(|i| i as f64 * 0.25 - 8.0).collect();
    let ys: Vec<f64> = (0..64).map(|i| 3.0 - i as f64 * 0.125).collect();
    let (ex, ey) = (fx.encode_slice(&xs).unwrap(), fx.encode_slice(&ys).unwrap());
    let sx = dealt_shares(&ex, Span::whole(0));
    let sy = dealt_shares(&ey, Span::whole(1));
    let out = Sim::new(11).run(|me| {
        let (x, y) = (sx[me.index()].clone(), sy[me.index()].clone());
        move |mut ctx| async move {
            let z = proto::mul_fixed(&mut ctx, &x, &y).await?;
            proto::reveal_to(&mut ctx, &z, PartyId::P2).await
        }
    });
    let [_, _, at_p2] = out.into_results().unwrap();
    for ((z, x), y) in at_p2.unwrap().iter().zip(&xs).zip(&ys) {
        assert!((fx.decode(*z) - x * y).abs() <= 2.0 / fx.scale(), "{x}·{y}");
    }
}

#[test]
fn a_long_vector_dealt_in_chunks_equals_it_dealt_whole() {
    let values: Vec<u64> = (0..10_007u64).map(|i| i * i).collect();
    let whole = dealt_shares(&values, Span::whole(9));
    let mut parts: [Vec<(Vec<u64>, Vec<u64>)>; 3] = Default::default();
    for start in (0..values.len()).step_by(1000) {
        let end = (start + 1000).min(values.len());
        let span = Span {
            stream: 9,
            start: start as u64,
        };
        let chunk = dealt_shares(&values[start..end], span);
        for (p, s) in chunk.iter().enumerate() {
            let (a, b) = s.components();
            parts[p].push((a.to_vec(), b.to_vec()));
        }
    }
    for (p, s) in whole.iter().enumerate() {
        let a: Vec<u64> = parts[p].iter().flat_map(|(a, _)| a.clone()).collect();
        let b: Vec<u64> = parts[p].iter().flat_map(|(_, b)| b.clone()).collect();
        assert_eq!((a.as_slice(), b.as_slice()), s.components(), "P{p}");
    }
    assert_eq!(reconstruct_shares(&whole).unwrap(), values);
}

#[test]
fn a_wrong_share_on_the_way_back_names_its_two_possible_senders() {
    let values: Vec<u64> = (0..50).collect();
    let good = dealt_shares(&values, Span::whole(2));
    assert_eq!(reconstruct_shares(&good).unwrap(), values);
    for liar in 0..3 {
        for which in 0..2 {
            let mut parts: Vec<(Vec<u64>, Vec<u64>)> = good
                .iter()
                .map(|s| (s.components().0.to_vec(), s.components().1.to_vec()))
                .collect();
            let slot = if which == 0 {
                &mut parts[liar].0
            } else {
                &mut parts[liar].1
            };
            slot[17] ^= 1;
            let err = dealing::reconstruct([
                (&parts[0].0, &parts[0].1),
                (&parts[1].0, &parts[1].1),
                (&parts[2].0, &parts[2].1),
            ])
            .unwrap_err();
            // P_liar's first component is x_liar, its second x_{liar+1}.
            let component = (liar + which) % 3;
            assert_eq!(err.component, component, "P{liar} component {which}");
            assert!(err.holders.contains(&PartyId::ALL[liar]), "{err}");
            assert_eq!(err.index, 17);
            assert!(err.to_string().contains(&format!("P{liar}")), "{err}");
        }
    }
    // A party that returns both components short is caught too, without a panic.
    let short: Vec<(Vec<u64>, Vec<u64>)> = good
        .iter()
        .enumerate()
        .map(|(p, s)| {
            let (a, b) = s.components();
            let n = if p == 1 { 40 } else { 50 };
            (a[..n].to_vec(), b[..n].to_vec())
        })
        .collect();
    let err = dealing::reconstruct([
        (&short[0].0, &short[0].1),
        (&short[1].0, &short[1].1),
        (&short[2].0, &short[2].1),
    ])
    .unwrap_err();
    assert!(err.holders.contains(&PartyId::P1), "{err}");
}

#[test]
fn a_message_for_another_party_or_of_another_length_is_refused() {
    let values = [1u64, 2, 3];
    let [d0, d1, _] = dealing::deal(&values, &seeds(5), Span::whole(0));
    let err = d0.into_shares(PartyId::P1, 3, Span::whole(0)).unwrap_err();
    assert!(err.to_string().contains("another party"), "{err}");
    let err = d1.into_shares(PartyId::P1, 4, Span::whole(0)).unwrap_err();
    assert!(err.to_string().contains("length"), "{err}");
    let odd = Dealt {
        party: PartyId::P2,
        first: Component::Values(vec![1, 2]),
        second: Component::Seed([0; 32]),
    };
    assert!(odd.into_shares(PartyId::P2, 3, Span::whole(0)).is_err());
}

proptest! {
    #[test]
    fn any_vector_reconstructs(values in proptest::collection::vec(any::<u64>(), 0..300),
                               stream in any::<u64>(), start in 0u64..1_000_000) {
        let span = Span { stream, start };
        let s = dealt_shares(&values, span);
        prop_assert_eq!(reconstruct_shares(&s).unwrap(), values);
    }
}
