//! Many sessions at once over one TCP+TLS connection per pair of parties (`mux`): each
//! session computes what it computes alone, in the same frames, whatever order the
//! parties open them in; a session one party never opens, or a lost peer, ends only the
//! sessions concerned, naming the cause.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::thread;
use std::time::{Duration, Instant};

use puma_core::{Config, PartyId, Session, Stats};
use puma_transports::loopback::{LocalNet, Network};
use puma_transports::mem::{self, entropy_from_seed};
use puma_transports::mux::{Mux, MuxOptions};
use puma_transports::{TransportError, drive};

use crate::common;

fn muxes() -> [Mux; 3] {
    let mut net = LocalNet::new(Network::Tcp).unwrap();
    let parties = PartyId::ALL.map(|p| net.party(p));
    let out: Vec<Mux> = thread::scope(|s| {
        let hs: Vec<_> = parties
            .into_iter()
            .map(|pn| s.spawn(move || pn.connect_mux(MuxOptions::default()).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    out.try_into().unwrap()
}

fn inputs(id: u64) -> Vec<f64> {
    (0..3000)
        .map(|i| (i as f64 - 1500.0) * 0.01 + id as f64)
        .collect()
}

/// What one party's run of a session gave.
type Ran = (Result<Vec<u64>, TransportError>, Stats);

/// Runs session `id` (the `squares` protocol on `inputs(id)`) at party `me` over `mux`.
fn run_session(mux: &Mux, me: PartyId, id: u64, timeout: Duration) -> Ran {
    let entropy = entropy_from_seed(id)[me.index()];
    let xs = inputs(id);
    let mut session = Session::new(Config::new(id), me, entropy, move |ctx| {
        common::squares(ctx, me, xs)
    })
    .unwrap();
    let mut link = mux.open(id).unwrap();
    let r = drive(&mut session, &mut link, timeout);
    (r, session.stats())
}

#[test]
fn sessions_run_at_once_and_each_equals_its_run_alone() {
    let muxes = muxes();
    let ids: Vec<u64> = (100..106).collect();
    let timeout = Duration::from_secs(20);
    // P0 and P1 open the sessions in order; P2 opens them in reverse order, late, so
    // the others' first frames wait for it.
    let results: Vec<Vec<(u64, Ran)>> = thread::scope(|s| {
        let hs: Vec<_> = muxes
            .iter()
            .map(|mux| {
                let ids = ids.clone();
                s.spawn(move || {
                    let me = mux.me();
                    let order: Vec<u64> = if me == PartyId::P2 {
                        thread::sleep(Duration::from_millis(300));
                        ids.iter().rev().copied().collect()
                    } else {
                        ids
                    };
                    thread::scope(|s2| {
                        let hs: Vec<_> = order
                            .iter()
                            .map(|&id| {
                                let h = s2.spawn(move || (id, run_session(mux, me, id, timeout)));
                                thread::sleep(Duration::from_millis(20));
                                h
                            })
                            .collect();
                        let mut out: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
                        out.sort_by_key(|(id, _)| *id);
                        out
                    })
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (k, &id) in ids.iter().enumerate() {
        let alone = mem::run3(Config::new(id), id, |me| {
            let xs = inputs(id);
            move |ctx| common::squares(ctx, me, xs)
        });
        let want_stats = alone.stats.clone();
        let want = alone.into_results().unwrap();
        let mut stats: Vec<Stats> = Vec::new();
        for p in 0..3 {
            let (got_id, (r, st)) = &results[p][k];
            assert_eq!(*got_id, id);
            let got = r
                .as_ref()
                .unwrap_or_else(|e| panic!("session {id} at P{p}: {e}"));
            assert_eq!(got, &want[p], "session {id} at P{p}");
            stats.push(st.clone());
        }
        common::assert_same_costs(
            &stats.try_into().unwrap(),
            &want_stats,
            &format!("session {id}"),
        );
    }
    for mux in &muxes {
        assert_eq!(mux.sessions(), 0, "every session ended");
        assert!(mux.gone().is_empty());
    }
}

#[test]
fn a_session_one_party_never_opens_ends_alone_and_a_lost_peer_is_named_at_once() {
    let [m0, m1, m2] = muxes();
    let short = Duration::from_millis(1500);
    let (orphan, fine) = thread::scope(|s| {
        // Session 7 is opened at P0 and P1 only; session 8 everywhere.
        let o0 = s.spawn(|| run_session(&m0, PartyId::P0, 7, short));
        let o1 = s.spawn(|| run_session(&m1, PartyId::P1, 7, short));
        let f: Vec<_> = [(&m0, PartyId::P0), (&m1, PartyId::P1), (&m2, PartyId::P2)]
            .into_iter()
            .map(|(m, p)| s.spawn(move || run_session(m, p, 8, Duration::from_secs(20))))
            .collect();
        (
            [o0.join().unwrap(), o1.join().unwrap()],
            f.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>(),
        )
    });
    // Setup waits in a ring (P0 for P1's seed, P1 for P2's): whoever times out first
    // aborts the other, so the errors name a timeout or that abort.
    for (r, _) in &orphan {
        let e = r.as_ref().unwrap_err().to_string();
        assert!(e.contains("timed out") || e.contains("aborted"), "{e}");
    }
    for (r, _) in &fine {
        assert!(r.is_ok(), "{r:?}");
    }
    // P2's frames of session 7 (its setup) were never sent; P0's and P1's to P2 wait
    // there as early frames until they expire. Now P2 goes away: a session opened
    // afterwards fails at once, naming it.
    drop(m2);
    thread::sleep(Duration::from_millis(200));
    assert_eq!(m0.gone(), [PartyId::P2]);
    let t0 = Instant::now();
    let (r0, r1) = thread::scope(|s| {
        let a = s.spawn(|| run_session(&m0, PartyId::P0, 9, Duration::from_secs(20)).0);
        let b = s.spawn(|| run_session(&m1, PartyId::P1, 9, Duration::from_secs(20)).0);
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "fails fast: {:?}",
        t0.elapsed()
    );
    // P1 needs P2's seed and names it; P0 learns of it from P1's abort.
    let (e0, e1) = (r0.unwrap_err().to_string(), r1.unwrap_err().to_string());
    assert!(e1.contains("P2"), "{e1}");
    assert!(e0.contains("P1") || e0.contains("P2"), "{e0}");
    // A session id is used once.
    assert!(m0.open(8).is_err());
}
