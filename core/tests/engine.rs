//! The engine's contract: pinned communication, round merging, chunking, determinism, and
//! typed errors for every kind of bad frame.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use puma_core::sim::{Delivery, Fate, Sim, reconstruct};
use puma_core::wire::{CHUNK_HEADER_LEN, FRAME_HEADER_LEN};
use puma_core::{
    Config, ErrorKind, Input, Output, PartyId, Session, Shares, Width, proto, try_join,
};

/// Runs `mul` on n-element random sharings.
fn mul_outcome(seed: u64, n: usize) -> puma_core::sim::Outcome<Shares> {
    Sim::new(seed).run(move |_| {
        move |mut ctx| async move {
            let x = ctx.random_shares(n);
            let y = ctx.random_shares(n);
            proto::mul(&mut ctx, &x, &y).await
        }
    })
}

#[test]
fn mul_sends_one_element_per_party_in_one_round() {
    for n in [1usize, 7, 1000] {
        let out = mul_outcome(1, n);
        assert_eq!(out.rounds(), 1);
        for (i, s) in out.stats.iter().enumerate() {
            let prev = PartyId::from_index(i).prev().index();
            assert_eq!(s.payload_bytes_sent[prev], 8 * n as u64);
            assert_eq!(s.payload_bytes_total(), 8 * n as u64);
            // Epoch 1 ends with one frame to each peer (the one to `next` carries no record);
            // epoch 2, where the product is ready, sends the FINISHED frames.
            assert_eq!(s.frames_sent.iter().sum::<u64>(), 4);
            assert_eq!(
                s.bytes_total(),
                (4 * FRAME_HEADER_LEN + CHUNK_HEADER_LEN + 8 * n) as u64
            );
            assert_eq!(s.setup_bytes_sent, 64);
        }
        out.into_results().unwrap();
    }
}

#[test]
fn matmul_communication_is_independent_of_the_inner_dimension() {
    let (m, n) = (3usize, 5usize);
    for k in [1usize, 16, 200] {
        let out = Sim::new(2).run(move |_| {
            move |mut ctx| async move {
                let x = ctx.random_shares(m * k);
                let y = ctx.random_shares(k * n);
                proto::matmul(&mut ctx, &x, &y, m, k, n).await
            }
        });
        assert_eq!(out.rounds(), 1);
        assert_eq!(out.payload_bytes(), [8 * (m * n) as u64; 3], "k = {k}");
        out.into_results().unwrap();
    }
}

#[test]
fn joined_muls_share_one_round_and_sequential_ones_take_two() {
    let joined = Sim::new(3).run(|_| {
        |mut ctx| async move {
            let x = ctx.random_shares(10);
            let y = ctx.random_shares(6);
            let (mut c1, mut c2) = (ctx.fork(), ctx.fork());
            let (a, b) = try_join(proto::mul(&mut c1, &x, &x), proto::square(&mut c2, &y)).await?;
            Ok((a, b))
        }
    });
    assert_eq!(joined.rounds(), 1);
    assert_eq!(joined.payload_bytes(), [8 * 16; 3]);
    for s in &joined.stats {
        assert_eq!(
            s.frames_sent.iter().sum::<u64>(),
            4,
            "one frame per peer and epoch"
        );
    }
    joined.into_results().unwrap();

    let sequential = Sim::new(3).run(|_| {
        |mut ctx| async move {
            let x = ctx.random_shares(10);
            let a = proto::mul(&mut ctx, &x, &x).await?;
            proto::mul(&mut ctx, &a, &x).await
        }
    });
    assert_eq!(sequential.rounds(), 2);
    sequential.into_results().unwrap();
}

#[test]
fn truncation_costs_one_round_and_136_bits_per_element_fused_product_264() {
    let m = 8usize; // elements per role block
    let out = Sim::new(4).run(move |_| {
        move |mut ctx| async move {
            let x = ctx.random_shares(3 * m);
            proto::trunc(&mut ctx, &x, 18).await
        }
    });
    assert_eq!(out.rounds(), 1);
    let d = 18usize;
    // As R1: d bits to each other role and a word to R0; as R0 and as R2: d bits.
    let per_party = 4 * (d * m).div_ceil(8) + 8 * m;
    assert_eq!(out.payload_bytes(), [per_party as u64; 3]);
    // 136 bits per element, summed over the parties.
    assert_eq!(3 * per_party * 8, 136 * 3 * m);

    let fused = Sim::new(4).run(move |_| {
        move |mut ctx| async move {
            let x = ctx.random_shares(3 * m);
            proto::mul_fixed(&mut ctx, &x, &x).await
        }
    });
    assert_eq!(fused.rounds(), 2);
    // The truncation fused into the reshare: each party forwards its 3-of-3 part in two of
    // the three role blocks (8 bytes per element), 264 bits per element in total.
    assert_eq!(fused.payload_bytes(), [(per_party + 8 * 2 * m) as u64; 3]);
    assert_eq!(3 * (per_party + 16 * m) * 8, 264 * 3 * m);
    fused.into_results().unwrap();
}

#[test]
fn input_and_reveal_costs() {
    let out = Sim::new(5).run(|me| {
        move |mut ctx| async move {
            let v = [7u64; 9];
            let x = proto::share_input(
                &mut ctx,
                PartyId::P2,
                (me == PartyId::P2).then_some(&v[..]),
                9,
            )
            .await?;
            proto::reveal_to(&mut ctx, &x, PartyId::P0).await
        }
    });
    assert_eq!(out.rounds(), 2);
    // P2 sends its input (72 bytes) to P1; P1 (= P0.next) sends the missing component to P0.
    assert_eq!(out.payload_bytes(), [0, 72, 72]);
    assert_eq!(out.stats[2].payload_bytes_sent[1], 72);
    assert_eq!(out.stats[1].payload_bytes_sent[0], 72);
    let [a, b, c] = out.into_results().unwrap();
    assert_eq!(a, Some(vec![7; 9]));
    assert_eq!((b, c), (None, None));
}

#[test]
fn and_of_bit_shares_matches_plaintext_and_packs_bits() {
    let w = Width::new(5).unwrap();
    let out = Sim::new(6).run(move |_| {
        move |mut ctx| async move {
            let r = ctx.random_shares(16);
            let s = ctx.random_shares(16);
            // Random boolean sharings from the arithmetic randomness (components reused as XOR shares).
            let x = puma_core::BitShares::from_public(ctx.me(), w, &[0b10110; 16]);
            let x = x.xor(&to_bits(&r, w))?;
            let y = to_bits(&s, w);
            let z = proto::and(&mut ctx, &x, &y).await?;
            Ok((x, y, z))
        }
    });
    assert_eq!(out.rounds(), 1);
    assert_eq!(out.payload_bytes(), [10; 3]); // 16 values · 5 bits = 80 bits
    let [a, b, c] = out.into_results().unwrap();
    let x = puma_core::sim::reconstruct_bits(&[a.0, b.0, c.0]).unwrap();
    let y = puma_core::sim::reconstruct_bits(&[a.1, b.1, c.1]).unwrap();
    let z = puma_core::sim::reconstruct_bits(&[a.2, b.2, c.2]).unwrap();
    for k in 0..16 {
        assert_eq!(z[k], x[k] & y[k]);
        assert!(z[k] < 32);
    }
}

/// Reinterprets random arithmetic components as XOR components (a valid random boolean
/// sharing; test helper only).
fn to_bits(s: &Shares, w: Width) -> puma_core::BitShares {
    let (a, b) = s.components();
    puma_core::sim::bit_shares_from_components(s.party(), w, a.to_vec(), b.to_vec())
}

#[test]
fn large_records_are_chunked_across_bounded_frames() {
    let mut cfg = Config::new(11);
    cfg.max_frame_len = 256;
    let n = 1000usize;
    let out = Sim::new(11).with_config(cfg).run(move |_| {
        move |mut ctx| async move {
            let x = ctx.random_shares(n);
            let z = proto::mul(&mut ctx, &x, &x).await?;
            Ok((x, z))
        }
    });
    assert_eq!(out.rounds(), 1);
    let body = 256 - FRAME_HEADER_LEN - CHUNK_HEADER_LEN;
    for s in &out.stats {
        assert_eq!(s.payload_bytes_total(), 8 * n as u64);
        // The record to `prev` spans many frames; each peer also gets the END frame of
        // epoch 2 and the one to `next` an END frame of epoch 1.
        assert_eq!(
            s.frames_sent.iter().sum::<u64>(),
            (8 * n).div_ceil(body) as u64 + 3
        );
    }
    let [a, b, c] = out.into_results().unwrap();
    let x = reconstruct(&[a.0, b.0, c.0]).unwrap();
    let z = reconstruct(&[a.1, b.1, c.1]).unwrap();
    for k in 0..n {
        assert_eq!(z[k], x[k].wrapping_mul(x[k]));
    }
}

#[test]
fn random_delivery_order_changes_nothing() {
    let run = |d: Delivery| {
        Sim::new(21).with_delivery(d).run(|_| {
            |mut ctx| async move {
                let x = ctx.random_shares(30);
                let (mut c1, mut c2) = (ctx.fork(), ctx.fork());
                let (a, b) = try_join(
                    proto::mul_fixed(&mut c1, &x, &x),
                    proto::trunc(&mut c2, &x, 5),
                )
                .await?;
                let c = proto::mul(&mut ctx, &a, &b).await?;
                proto::reveal_all(&mut ctx, &c).await
            }
        })
    };
    let fifo = run(Delivery::Fifo);
    for seed in 0..10 {
        let r = run(Delivery::Random(seed));
        assert_eq!(r.results, fifo.results);
        // Everything a party sends is a function of what it received, whatever the order.
        // (How many of the peers' final frames arrive before a party is done is timing.)
        for (a, b) in r.stats.iter().zip(&fifo.stats) {
            assert_eq!(a.rounds, b.rounds);
            assert_eq!(a.frames_sent, b.frames_sent);
            assert_eq!(a.bytes_sent, b.bytes_sent);
            assert_eq!(a.payload_bytes_sent, b.payload_bytes_sent);
        }
    }
    assert_eq!(fifo.rounds(), 4); // max(2, 1) + mul + reveal
}

#[test]
fn yielding_lets_the_host_run() {
    let out = Sim::new(8).run(|_| {
        |mut ctx| async move {
            ctx.yield_now().await;
            let x = ctx.random_shares(3);
            ctx.yield_now().await;
            proto::mul(&mut ctx, &x, &x).await
        }
    });
    assert_eq!(out.rounds(), 1);
    out.into_results().unwrap();
}

// ---- bad frames -------------------------------------------------------------------------

/// Runs a two-round protocol with `hook` applied to frames on the link P1 → P0.
fn run_with_fault(
    cfg: Config,
    mut hook: impl FnMut(u64, &mut Vec<u8>) -> Fate + 'static,
) -> puma_core::sim::Outcome<Vec<u64>> {
    Sim::new(cfg.session_id)
        .with_config(cfg)
        .with_fault(move |f| {
            if f.from == PartyId::P1 && f.to == PartyId::P0 {
                hook(f.index, f.bytes)
            } else {
                Fate::Deliver
            }
        })
        .run(|_| {
            |mut ctx| async move {
                let x = ctx.random_shares(20);
                let y = proto::mul(&mut ctx, &x, &x).await?;
                let z = proto::mul(&mut ctx, &y, &x).await?;
                proto::reveal_all(&mut ctx, &z).await
            }
        })
}

/// P0 must fail with a protocol error naming P1; nobody may present a result.
fn assert_p0_rejects(out: &puma_core::sim::Outcome<Vec<u64>>, why: &str) {
    let e = out.results[0].as_ref().expect_err(why);
    assert_eq!(
        e.kind(),
        ErrorKind::Protocol { from: PartyId::P1 },
        "{why}: {e}"
    );
    for (i, r) in out.results.iter().enumerate() {
        assert!(r.is_err(), "{why}: party {i} presented a result");
    }
}

#[test]
fn wrong_session_is_rejected() {
    let out = run_with_fault(Config::new(30), |i, b| {
        if i == 1 {
            b[8] ^= 1;
        }
        Fate::Deliver
    });
    assert_p0_rejects(&out, "wrong session");
    assert_eq!(
        out.results[0].as_ref().unwrap_err().detail(),
        "frame of another session"
    );
}

#[test]
fn wrong_sender_is_rejected() {
    let out = run_with_fault(Config::new(31), |i, b| {
        if i == 1 {
            b[4] = 2;
        }
        Fate::Deliver
    });
    assert_p0_rejects(&out, "wrong sender");
}

#[test]
fn duplicate_frame_is_rejected() {
    let out = run_with_fault(Config::new(32), |i, _| {
        if i == 1 {
            Fate::Duplicate
        } else {
            Fate::Deliver
        }
    });
    assert_p0_rejects(&out, "duplicate");
    assert_eq!(
        out.results[0].as_ref().unwrap_err().detail(),
        "out-of-order or duplicate frame"
    );
}

#[test]
fn skipped_sequence_number_is_rejected() {
    let out = run_with_fault(Config::new(33), |i, _| {
        if i == 1 { Fate::Drop } else { Fate::Deliver }
    });
    assert_p0_rejects(
        &out,
        "dropped frame, then the next one arrives out of order",
    );
}

#[test]
fn truncated_frame_is_rejected() {
    let out = run_with_fault(Config::new(34), |i, b| {
        if i == 1 {
            b.truncate(b.len() - 3);
        }
        Fate::Deliver
    });
    assert_p0_rejects(&out, "truncated");
}

#[test]
fn trailing_bytes_are_rejected() {
    let out = run_with_fault(Config::new(35), |i, b| {
        if i == 2 {
            b.push(0);
        }
        Fate::Deliver
    });
    assert_p0_rejects(&out, "trailing");
}

#[test]
fn oversized_frame_is_rejected() {
    let mut cfg = Config::new(36);
    cfg.max_frame_len = 1024;
    let out = run_with_fault(cfg, |i, b| {
        if i == 1 {
            b.resize(2000, 0);
        }
        Fate::Deliver
    });
    assert_p0_rejects(&out, "oversized");
    assert_eq!(
        out.results[0].as_ref().unwrap_err().detail(),
        "oversized frame"
    );
}

#[test]
fn garbage_frame_is_rejected() {
    let out = run_with_fault(Config::new(37), |i, b| {
        if i == 1 {
            for (k, x) in b.iter_mut().enumerate() {
                *x = (k as u8).wrapping_mul(37) ^ 0xa5;
            }
        }
        Fate::Deliver
    });
    assert_p0_rejects(&out, "garbage");
}

#[test]
fn wrong_record_length_for_the_round_is_rejected() {
    // P1 believes the vectors have 21 elements, P0 and P2 believe 20.
    let out = Sim::new(38).run(|me| {
        move |mut ctx| async move {
            let n = if me == PartyId::P1 { 21 } else { 20 };
            let x = ctx.random_shares(n);
            proto::mul(&mut ctx, &x, &x).await
        }
    });
    let e = out.results[0].as_ref().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol { from: PartyId::P1 });
    assert_eq!(
        e.detail(),
        "record length does not match the expected message"
    );
}

#[test]
fn dropped_frame_ends_in_timeout_not_a_hang() {
    let out = run_with_fault(Config::new(39), |i, _| {
        if i >= 2 { Fate::Drop } else { Fate::Deliver }
    });
    let e = out.results[0].as_ref().unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::Timeout {
            waiting_for: PartyId::P1
        }
    );
    assert!(out.results.iter().all(|r| r.is_err()));
}

#[test]
fn a_failed_session_refuses_to_continue() {
    let mut s: Session<u64> = Session::new(Config::new(40), PartyId::P0, [1; 32], |_ctx| async {
        Ok(5)
    })
    .unwrap();
    // The setup frame to P2 comes first.
    match s.poll_output() {
        Output::Transmit(t) => assert_eq!(t.to, PartyId::P2),
        o => panic!("expected the setup frame, got {o:?}"),
    }
    assert!(matches!(
        s.poll_output(),
        Output::Pending {
            waiting_for: Some(PartyId::P1)
        }
    ));
    let err = s
        .handle_input(Input::Frame {
            from: PartyId::P1,
            bytes: &[0u8; 10],
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol { from: PartyId::P1 });
    // Abort frames to both peers, then Done(Err), then nothing more.
    let mut aborts = 0;
    loop {
        match s.poll_output() {
            Output::Transmit(t) => {
                assert_eq!(t.frame.as_bytes()[3], 2, "abort frame kind");
                aborts += 1;
            }
            Output::Done(r) => {
                assert_eq!(r.unwrap_err(), err);
                break;
            }
            o => panic!("unexpected {o:?}"),
        }
    }
    assert_eq!(aborts, 2);
    let again = s
        .handle_input(Input::Frame {
            from: PartyId::P1,
            bytes: &[0u8; 40],
        })
        .unwrap_err();
    assert_eq!(again.kind(), ErrorKind::Misuse);
    assert!(matches!(s.poll_output(), Output::Done(Err(e)) if e.kind() == ErrorKind::Misuse));
}

#[test]
fn frames_from_oneself_are_misuse() {
    let mut s: Session<u64> = Session::new(Config::new(41), PartyId::P1, [2; 32], |_ctx| async {
        Ok(5)
    })
    .unwrap();
    let e = s
        .handle_input(Input::Frame {
            from: PartyId::P1,
            bytes: &[],
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Misuse);
}

#[test]
fn an_abort_after_unsent_frames_still_reads_as_an_abort() {
    let run = |_ctx| async { Ok(5u64) };
    let mut p0: Session<u64> = Session::new(Config::new(42), PartyId::P0, [1; 32], run).unwrap();
    let mut p2: Session<u64> = Session::new(Config::new(42), PartyId::P2, [3; 32], run).unwrap();
    // P0 fails before its setup frame to P2 went out: that frame is dropped and the abort
    // takes its sequence number, so P2 sees an abort by P0, not a gap in P0's frames.
    let err = p0
        .handle_input(Input::Frame {
            from: PartyId::P1,
            bytes: &[0u8; 10],
        })
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol { from: PartyId::P1 });
    let mut to_p2 = Vec::new();
    loop {
        match p0.poll_output() {
            Output::Transmit(t) if t.to == PartyId::P2 => to_p2.push(t.frame),
            Output::Transmit(_) => {}
            Output::Done(r) => {
                assert!(r.is_err());
                break;
            }
            o => panic!("unexpected {o:?}"),
        }
    }
    assert_eq!(to_p2.len(), 1, "only the abort frame reaches P2");
    let e = p2
        .handle_input(Input::Frame {
            from: PartyId::P0,
            bytes: to_p2[0].as_bytes(),
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Aborted { by: PartyId::P0 });
}

/// A long-running session that runs the operations its host starts one after the other
/// (waiting for the host in between: `Ctx::wait_for_host`), with hosts that start each
/// operation at random moments and frames delivered in random order: every result is
/// right, there is one setup round, the rounds do not depend on the timing, and an idle
/// party reports `Pending` for no peer.
#[test]
fn idle_sessions_wait_for_their_hosts_without_ending_empty_epochs() {
    use rand_chacha::ChaCha8Rng;
    use rand_chacha::rand_core::{RngCore, SeedableRng};
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    const OPS: usize = 45;
    let fx = Config::new(0).fixed;
    let value = |k: usize| (k as f64) * 0.25 - 3.0;
    type Queue = Arc<Mutex<VecDeque<Option<usize>>>>;
    type Results = Arc<Mutex<Vec<Option<Vec<u64>>>>>;

    for seed in 0..4u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let queues: [Queue; 3] = Default::default();
        let results: [Results; 3] = Default::default();
        let mut sessions: Vec<Session<()>> = PartyId::ALL
            .into_iter()
            .map(|p| {
                let (q, r) = (queues[p.index()].clone(), results[p.index()].clone());
                Session::new(
                    Config::new(77),
                    p,
                    [p as u8 + 9; 32],
                    move |ctx| async move {
                        let mut ctx = ctx;
                        loop {
                            let job = ctx.wait_for_host(|| q.lock().unwrap().pop_front()).await;
                            let Some(k) = job else { return Ok(()) };
                            let mut c = ctx.fork();
                            let (owner, to) =
                                (PartyId::from_index(k % 3), PartyId::from_index((k / 3) % 3));
                            let mine =
                                (c.me() == owner).then(|| vec![fx.encode(value(k)).unwrap()]);
                            let x = match k % 3 {
                                // A public constant: only one party sends (the reveal).
                                2 => Shares::from_public(c.me(), &[fx.encode(value(k)).unwrap()]),
                                _ => proto::share_input(&mut c, owner, mine.as_deref(), 1).await?,
                            };
                            let y = match k % 3 {
                                1 => proto::mul_fixed(&mut c, &x, &x).await?,
                                _ => x,
                            };
                            let v = proto::reveal_to(&mut c, &y, to).await?;
                            r.lock().unwrap().push(v);
                        }
                    },
                )
                .unwrap()
            })
            .collect();
        let mut links: [[VecDeque<Vec<u8>>; 3]; 3] = Default::default();
        let mut started = [0usize; 3];
        let mut done = [false; 3];
        let mut idle_polls = 0;
        for step in 0.. {
            assert!(step < 200_000, "seed {seed}: no progress");
            if done.iter().all(|d| *d) {
                break;
            }
            let i = (rng.next_u64() % 3) as usize;
            match rng.next_u64() % 3 {
                // The host starts its next operation once the last one finished, or closes.
                0 if !done[i] && results[i].lock().unwrap().len() == started[i] => {
                    let job = (started[i] < OPS).then_some(started[i]);
                    if started[i] <= OPS {
                        queues[i].lock().unwrap().push_back(job);
                        started[i] += 1;
                    }
                }
                1 if !done[i] => loop {
                    match sessions[i].poll_output() {
                        Output::Transmit(t) => {
                            links[i][t.to.index()].push_back(t.frame.into_bytes())
                        }
                        Output::Yielded => {}
                        Output::Pending { waiting_for } => {
                            idle_polls += usize::from(waiting_for.is_none());
                            break;
                        }
                        Output::Done(r) => {
                            r.unwrap();
                            done[i] = true;
                            break;
                        }
                    }
                },
                _ => {
                    let to = ((i as u64 + 1 + rng.next_u64() % 2) % 3) as usize;
                    if let Some(bytes) = links[i][to].pop_front() {
                        if !done[to] {
                            let from = PartyId::from_index(i);
                            sessions[to]
                                .handle_input(Input::Frame {
                                    from,
                                    bytes: &bytes,
                                })
                                .unwrap();
                        }
                    }
                }
            }
        }
        assert!(idle_polls > 0);
        for (i, s) in sessions.iter().enumerate() {
            assert_eq!(s.stats().setup_bytes_sent, 64, "one setup round");
            // Every step starts in the same epoch at every party, whatever the timing, so
            // the rounds are the same for every seed and party.
            assert_eq!(s.stats().rounds, 90, "seed {seed} P{i}");
            let r = results[i].lock().unwrap();
            assert_eq!(r.len(), OPS);
            for (k, v) in r.iter().enumerate() {
                if (k / 3) % 3 != i {
                    assert!(v.is_none(), "P{i} learned the result of op {k}");
                    continue;
                }
                let got = fx.decode(v.as_ref().unwrap()[0]);
                let want = if k % 3 == 1 {
                    value(k) * value(k)
                } else {
                    value(k)
                };
                assert!(
                    (got - want).abs() < 1e-4,
                    "seed {seed} op {k}: {got} != {want}"
                );
            }
        }
    }
}
