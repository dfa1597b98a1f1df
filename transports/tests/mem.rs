//! The threaded in-memory transport against the deterministic simulator, and its faults.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::time::{Duration, Instant};

use puma_core::sim::Sim;
use puma_core::{Config, ErrorKind, FixedPoint, PartyId, Session, proto};
use puma_transports::mem::{self, MemLink};
use puma_transports::{Link, Recv, TransportError, drive};

use crate::common;

/// Reals spread over several magnitudes and both signs, plus a few edge values.
fn reals(n: usize, salt: u64) -> Vec<f64> {
    (0..n as u64)
        .map(|i| {
            let h = (i + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt;
            let u = (h >> 11) as f64 / (1u64 << 53) as f64; // [0, 1)
            let mag = [0.01, 1.0, 30.0, 900.0][(i % 4) as usize];
            (2.0 * u - 1.0) * mag
        })
        .collect()
}

#[test]
fn mul_fixed_over_threads_matches_plaintext_and_simulator() {
    let fx = FixedPoint::default();
    let n = 48;
    let xs = reals(n, 1);
    let ys = reals(n, 2);
    let xe = fx.encode_slice(&xs).unwrap();
    let ye = fx.encode_slice(&ys).unwrap();
    let cfg = Config::new(42);
    let seed = 5;

    let make = |xe: Vec<u64>, ye: Vec<u64>| {
        move |me: PartyId| {
            let (xe, ye) = (xe.clone(), ye.clone());
            move |mut ctx: puma_core::Ctx| async move {
                let x = proto::share_input(
                    &mut ctx,
                    PartyId::P0,
                    (me == PartyId::P0).then_some(&xe[..]),
                    n,
                )
                .await?;
                let y = proto::share_input(
                    &mut ctx,
                    PartyId::P1,
                    (me == PartyId::P1).then_some(&ye[..]),
                    n,
                )
                .await?;
                let z = proto::mul_fixed(&mut ctx, &x, &y).await?;
                proto::reveal_to(&mut ctx, &z, PartyId::P2).await
            }
        }
    };

    let threaded = mem::run3(cfg.clone(), seed, make(xe.clone(), ye.clone()));
    let simulated = Sim::new(seed)
        .with_config(cfg)
        .run(make(xe.clone(), ye.clone()));

    // Same costs, party by party: rounds, frames, bytes, payload, setup.
    common::assert_same_costs(&threaded.stats, &simulated.stats, "threads");
    // share_input + mul + trunc + reveal.
    assert_eq!(threaded.rounds(), 4);
    assert!(threaded.stats.iter().all(|s| s.bytes_total() > 0));

    let [r0, r1, r2] = threaded.into_results().unwrap();
    assert_eq!(r0, None);
    assert_eq!(r1, None);
    let z = r2.unwrap();
    // Same entropy derivation, so even the stochastic truncation agrees bit for bit.
    let [_, _, sim_z] = simulated.into_results().unwrap();
    assert_eq!(Some(z.clone()), sim_z);

    let ulp = 1.0 / fx.scale();
    for k in 0..n {
        // Exact product of the encoded inputs: the only error left is the truncation.
        let exact = fx.decode(xe[k]) * fx.decode(ye[k]);
        let got = fx.decode(z[k]);
        assert!((got - exact).abs() <= 2.0 * ulp, "k={k}: {got} vs {exact}");
        // And close to the product of the original reals.
        let bound = 2.0 * ulp + (xs[k].abs() + ys[k].abs() + 1.0) * ulp;
        assert!((got - xs[k] * ys[k]).abs() <= bound, "k={k}");
    }
}

#[test]
fn chunked_frames_over_threads_match_simulator() {
    // A small frame limit splits every record into many frames.
    let fx = FixedPoint::default();
    let (m, k, n) = (3, 5, 4);
    let a = fx.encode_slice(&reals(m * k, 3)).unwrap();
    let b = fx.encode_slice(&reals(k * n, 4)).unwrap();
    let mut cfg = Config::new(9);
    cfg.max_frame_len = 128;
    let make = |a: Vec<u64>, b: Vec<u64>| {
        move |me: PartyId| {
            let (a, b) = (a.clone(), b.clone());
            move |mut ctx: puma_core::Ctx| async move {
                let x = proto::share_input(
                    &mut ctx,
                    PartyId::P0,
                    (me == PartyId::P0).then_some(&a[..]),
                    m * k,
                )
                .await?;
                let y = proto::share_input(
                    &mut ctx,
                    PartyId::P2,
                    (me == PartyId::P2).then_some(&b[..]),
                    k * n,
                )
                .await?;
                let z = proto::matmul(&mut ctx, &x, &y, m, k, n).await?;
                proto::reveal_all(&mut ctx, &z).await
            }
        }
    };
    let threaded = mem::run3(cfg.clone(), 11, make(a.clone(), b.clone()));
    let simulated = Sim::new(11)
        .with_config(cfg)
        .run(make(a.clone(), b.clone()));
    common::assert_same_costs(&threaded.stats, &simulated.stats, "threads");
    // Each party's 12 ring elements of matmul output alone need more than one 128-byte frame.
    assert!(
        threaded
            .stats
            .iter()
            .all(|s| s.frames_sent.iter().sum::<u64>() > 3)
    );

    let expected: Vec<u64> = (0..m * n)
        .map(|ij| {
            let (i, j) = (ij / n, ij % n);
            (0..k).fold(0u64, |acc, t| {
                acc.wrapping_add(a[i * k + t].wrapping_mul(b[t * n + j]))
            })
        })
        .collect();
    for r in threaded.into_results().unwrap() {
        assert_eq!(r, expected);
    }
}

fn lone_session(me: PartyId) -> Session<Vec<u64>> {
    let e = mem::entropy_from_seed(3)[me.index()];
    Session::new(
        Config::new(1),
        me,
        e,
        move |mut ctx: puma_core::Ctx| async move {
            let x = proto::share_input(
                &mut ctx,
                PartyId::P1,
                (me == PartyId::P1).then_some(&[5u64][..]),
                1,
            )
            .await?;
            proto::reveal_all(&mut ctx, &x).await
        },
    )
    .unwrap()
}

#[test]
fn silent_peer_ends_in_timeout_and_aborts_the_others() {
    let [l0, mut l1, mut l2] = mem::links();
    let mut s0 = lone_session(PartyId::P0);
    let timeout = Duration::from_millis(150);
    let start = Instant::now();
    // P1 and P2 stay connected but never send: P0 waits for P1's setup seed.
    let r = std::thread::spawn(move || {
        let mut l0 = l0;
        let r = drive(&mut s0, &mut l0, timeout);
        (r, l0)
    })
    .join()
    .unwrap();
    let (r, _l0) = r;
    let elapsed = start.elapsed();
    match r {
        Err(TransportError::Core(e)) => {
            assert_eq!(
                e.kind(),
                ErrorKind::Timeout {
                    waiting_for: PartyId::P1
                }
            );
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(elapsed >= timeout, "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");

    // P2 got P0's setup frame, then an abort; P1 got an abort. A real P1 session fed that
    // abort fails with `Aborted { by: P0 }` without waiting for its own timeout.
    let Recv::Frame { from, bytes: setup } = l2.recv(Duration::from_secs(1)).unwrap() else {
        panic!()
    };
    assert_eq!(from, PartyId::P0);
    let Recv::Frame { from, .. } = l2.recv(Duration::from_secs(1)).unwrap() else {
        panic!()
    };
    assert_eq!(from, PartyId::P0);
    assert!(!setup.is_empty());

    let mut s1 = lone_session(PartyId::P1);
    let start = Instant::now();
    let r1 = drive(&mut s1, &mut l1, Duration::from_secs(20));
    match r1 {
        Err(TransportError::Core(e)) => {
            assert_eq!(e.kind(), ErrorKind::Aborted { by: PartyId::P0 })
        }
        other => panic!("expected an abort, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn vanished_peer_is_a_disconnect_not_a_hang() {
    let [mut l0, l1, l2] = mem::links();
    drop(l1); // P1 goes away before sending anything.
    let mut s0 = lone_session(PartyId::P0);
    let start = Instant::now();
    let r = drive(&mut s0, &mut l0, Duration::from_secs(20));
    assert!(
        matches!(r, Err(TransportError::Disconnected { peer: PartyId::P1 })),
        "{r:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(5));
    drop(l2);
}

#[test]
fn panicking_party_fails_everyone_fast() {
    let start = Instant::now();
    let out = mem::run3_with_timeout(Config::new(2), 1, Duration::from_secs(20), |me| {
        move |mut ctx: puma_core::Ctx| async move {
            let x = proto::share_input(
                &mut ctx,
                PartyId::P0,
                (me == PartyId::P0).then_some(&[7u64][..]),
                1,
            )
            .await?;
            if me == PartyId::P2 {
                panic!("P2's protocol code is broken");
            }
            proto::reveal_all(&mut ctx, &x).await
        }
    });
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let [r0, r1, r2] = out.results;
    assert!(
        matches!(r2, Err(TransportError::Panicked { party: PartyId::P2 })),
        "{r2:?}"
    );
    // P1 needs P2's reveal message: it fails with a disconnect from P2.
    assert!(
        matches!(r1, Err(TransportError::Disconnected { peer: PartyId::P2 })),
        "{r1:?}"
    );
    // P0 needs only P1's message, so it may finish; but if its own message to P2 was lost
    // it reports the disconnect rather than a success.
    match r0 {
        Ok(v) => assert_eq!(v, vec![7]),
        Err(TransportError::Disconnected { peer: PartyId::P2 }) => {}
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn link_reports_the_sender_and_closes_in_order() {
    let [mut l0, l1, mut l2] = mem::links();
    let mut l1 = l1;
    l1.send(PartyId::P0, vec![1, 2, 3]).unwrap();
    l1.send(PartyId::P0, vec![4]).unwrap();
    l2.send(PartyId::P0, vec![9]).unwrap();
    assert!(l1.send(PartyId::P1, vec![0]).is_err());
    drop(l1);
    let t = Duration::from_millis(500);
    assert_eq!(
        l0.recv(t).unwrap(),
        Recv::Frame {
            from: PartyId::P1,
            bytes: vec![1, 2, 3]
        }
    );
    assert_eq!(
        l0.recv(t).unwrap(),
        Recv::Frame {
            from: PartyId::P1,
            bytes: vec![4]
        }
    );
    assert_eq!(
        l0.recv(t).unwrap(),
        Recv::Frame {
            from: PartyId::P2,
            bytes: vec![9]
        }
    );
    assert_eq!(l0.recv(t).unwrap(), Recv::Closed { peer: PartyId::P1 });
    assert_eq!(l0.recv(Duration::from_millis(20)).unwrap(), Recv::TimedOut);
    // Sending to a dropped party fails with a disconnect.
    assert!(matches!(
        l2.send(PartyId::P1, vec![1]),
        Err(TransportError::Disconnected { peer: PartyId::P1 })
    ));
    let _: &MemLink = &l2;
}

/// P1's link, on which every send to P0 stalls (P0 stopped reading).
struct StalledToP0(MemLink);

impl Link for StalledToP0 {
    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), TransportError> {
        if to == PartyId::P0 {
            return Err(TransportError::SendStalled { peer: to });
        }
        self.0.send(to, frame)
    }

    fn recv(&mut self, timeout: Duration) -> Result<Recv, TransportError> {
        self.0.recv(timeout)
    }
}

#[test]
fn a_stalled_send_ends_the_run_naming_the_peer_and_aborts_the_other() {
    let [mut l0, l1, mut l2] = mem::links();
    let mut s1 = lone_session(PartyId::P1);
    let mut l1 = StalledToP0(l1);
    // P1's first frame, its setup seed, goes to P0. A stalled send is not a peer that has
    // left: the run ends at once instead of waiting for P2's seed until the timeout.
    let start = Instant::now();
    let r = drive(&mut s1, &mut l1, Duration::from_secs(20));
    assert!(
        matches!(r, Err(TransportError::SendStalled { peer: PartyId::P0 })),
        "{r:?}"
    );
    assert!(start.elapsed() < Duration::from_secs(5));
    drop(l1);
    // P2 is told with an abort frame; P0 gets nothing (a send to it would stall again).
    let mut s2 = lone_session(PartyId::P2);
    let r2 = drive(&mut s2, &mut l2, Duration::from_secs(20));
    assert!(
        matches!(&r2, Err(TransportError::Core(e)) if e.kind() == ErrorKind::Aborted { by: PartyId::P1 }),
        "{r2:?}"
    );
    assert_eq!(
        l0.recv(Duration::from_secs(1)).unwrap(),
        Recv::Closed { peer: PartyId::P1 }
    );
}
