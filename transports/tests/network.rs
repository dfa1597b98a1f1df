//! The same sessions over in-memory channels, TCP+TLS and QUIC on 127.0.0.1: identical
//! outputs and byte counts; refused certificates; bad frames end the session.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::thread;
use std::time::{Duration, Instant};

use puma_core::{Config, Ctx, Error, ErrorKind, FixedPoint, PartyId, proto};
use puma_transports::loopback::{self, LocalNet, Network};
use puma_transports::net::NetOptions;
use puma_transports::tls::Identity;
use puma_transports::{FrameError, Link, TransportError, drive, mem};

use crate::common;

const N: usize = 20_000;

/// A product of two secret vectors, revealed to all: 20 000 elements, so with 16 KiB
/// frames every record is split across many frames.
type BoxedRun =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u64>, Error>> + Send>>;

fn protocol(me: PartyId) -> impl FnOnce(Ctx) -> BoxedRun + Send + 'static {
    move |mut ctx: Ctx| {
        Box::pin(async move {
            let fx = FixedPoint::default();
            let xs: Vec<u64> = (0..N)
                .map(|i| fx.encode(i as f64 * 0.001 - 3.0).unwrap())
                .collect();
            let ys: Vec<u64> = (0..N)
                .map(|i| fx.encode(1.5 - i as f64 * 0.0002).unwrap())
                .collect();
            let x = proto::share_input(
                &mut ctx,
                PartyId::P0,
                (me == PartyId::P0).then_some(&xs[..]),
                N,
            )
            .await?;
            let y = proto::share_input(
                &mut ctx,
                PartyId::P1,
                (me == PartyId::P1).then_some(&ys[..]),
                N,
            )
            .await?;
            let z = proto::mul_fixed(&mut ctx, &x, &y).await?;
            proto::reveal_all(&mut ctx, &z).await
        })
    }
}

fn small_frames() -> Config {
    let mut cfg = Config::new(11);
    cfg.max_frame_len = 16 << 10;
    cfg
}

#[test]
fn identical_outputs_and_bytes_over_memory_tcp_and_quic() {
    let timeout = Duration::from_secs(20);
    let m = mem::run3_with_timeout(small_frames(), 5, timeout, protocol);
    let mem_stats = m.stats.clone();
    let mem_out = m.into_results().unwrap();
    // The product is right (against f64), so the transports agree on a real result.
    let fx = FixedPoint::default();
    for (i, &z) in mem_out[0].iter().enumerate().step_by(997) {
        let want = (i as f64 * 0.001 - 3.0) * (1.5 - i as f64 * 0.0002);
        assert!((fx.decode(z) - want).abs() < 1e-4, "element {i}");
    }
    assert!(
        mem_stats[0].frames_sent.iter().sum::<u64>() > 20,
        "records were chunked"
    );

    for network in [Network::Tcp, Network::Quic] {
        let (o, wire) = loopback::run3(network, small_frames(), 5, timeout, protocol);
        let stats = o.stats.clone();
        let out = o
            .into_results()
            .unwrap_or_else(|e| panic!("{network:?}: {e}"));
        assert_eq!(out, mem_out, "{network:?} outputs");
        common::assert_same_costs(&stats, &mem_stats, &format!("{network:?}"));
        for p in 0..3 {
            let a = &stats[p];
            // On the wire: every frame (data and the one setup frame) plus its 4-byte
            // length prefix, nothing else.
            let frames: u64 = a.frames_sent.iter().sum::<u64>() + 1;
            assert_eq!(
                wire[p].sent.iter().sum::<u64>(),
                a.bytes_total() + a.setup_bytes_sent + 4 * frames,
                "{network:?} P{p} wire bytes"
            );
        }
        // What one party wrote to a peer is what that peer read.
        for p in 0..3 {
            for q in 0..3 {
                assert_eq!(wire[p].sent[q], wire[q].received[p], "{network:?} {p}->{q}");
            }
        }
    }
}

fn opts(timeout: Duration) -> NetOptions {
    NetOptions {
        timeout,
        max_frame_len: small_frames().max_frame_len,
        ..NetOptions::default()
    }
}

fn refused_certificate(network: Network) {
    let mut net = LocalNet::new(network).unwrap();
    // P2 presents a certificate nobody pinned.
    net.set_identity(PartyId::P2, Identity::generate(PartyId::P2).unwrap());
    let parties = PartyId::ALL.map(|p| net.party(p));
    let t0 = Instant::now();
    let results = connect_all(parties);
    assert!(t0.elapsed() < Duration::from_secs(15));
    // The impostor learns that it was refused, naming the peer it dialled.
    match &results[2] {
        Err(TransportError::Tls { peer: Some(p), .. }) => {
            assert!(*p == PartyId::P0 || *p == PartyId::P1, "{p}")
        }
        other => panic!("{network:?}: P2 got {other:?}"),
    }
    // The honest parties never accept it: they give up on P2 at the deadline.
    for p in [0, 1] {
        match &results[p] {
            Err(TransportError::Connect { peer, reason }) => {
                assert_eq!(*peer, PartyId::P2, "{network:?}: {reason}")
            }
            other => panic!("{network:?}: P{p} got {other:?}"),
        }
    }
}

/// Connects the three parties at once, each on its own thread with a 3 s timeout.
fn connect_all(parties: [loopback::PartyNet; 3]) -> Vec<Result<(), TransportError>> {
    thread::scope(|s| {
        let hs: Vec<_> = parties
            .into_iter()
            .map(|pn| s.spawn(move || pn.connect(opts(Duration::from_secs(3))).map(|_| ())))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn a_wrong_client_certificate_is_refused_over_tcp() {
    refused_certificate(Network::Tcp);
}

#[test]
fn a_wrong_client_certificate_is_refused_over_quic() {
    refused_certificate(Network::Quic);
}

#[test]
fn a_wrong_server_certificate_is_refused() {
    for network in [Network::Tcp, Network::Quic] {
        let mut net = LocalNet::new(network).unwrap();
        // P0 (which only accepts) presents an unpinned certificate: its dialers refuse it.
        net.set_identity(PartyId::P0, Identity::generate(PartyId::P0).unwrap());
        let parties = PartyId::ALL.map(|p| net.party(p));
        let results = connect_all(parties);
        for p in [1, 2] {
            match &results[p] {
                Err(TransportError::Tls {
                    peer: Some(PartyId::P0),
                    reason,
                }) => {
                    assert!(!reason.is_empty())
                }
                other => panic!("{network:?}: P{p} got {other:?}"),
            }
        }
        assert!(results[0].is_err(), "{network:?}: P0 must not complete");
    }
}

/// P0 is an impostor process that holds the right key but sends `bytes` as its first
/// frame to P1; P1 and P2 run the real protocol.
fn inject(network: Network, bytes: Vec<u8>, rogue_max: usize) -> [Result<(), TransportError>; 2] {
    let mut net = LocalNet::new(network).unwrap();
    let parties = PartyId::ALL.map(|p| net.party(p));
    let timeout = Duration::from_secs(5);
    let [p0, p1, p2] = parties;
    thread::scope(|s| {
        let rogue = s.spawn(move || {
            let mut link = p0
                .connect(NetOptions {
                    max_frame_len: rogue_max,
                    ..opts(timeout)
                })
                .unwrap();
            link.send(PartyId::P1, bytes).unwrap();
            // Stay connected until the others have given up.
            thread::sleep(Duration::from_millis(500));
            link.finish(Duration::from_secs(1));
        });
        let honest = spawn_honest(s, [(p1, PartyId::P1), (p2, PartyId::P2)], timeout);
        rogue.join().unwrap();
        honest.map(|h| {
            let (r, took) = h.join().unwrap();
            assert!(took < timeout + Duration::from_secs(2), "took {took:?}");
            r
        })
    })
}

/// Runs the protocol for each party of `parties` on its own scoped thread, connecting
/// with `timeout` and driving with it; each thread returns its outcome and how long
/// `drive` took.
fn spawn_honest<'s>(
    s: &'s thread::Scope<'s, '_>,
    parties: [(loopback::PartyNet, PartyId); 2],
    timeout: Duration,
) -> [thread::ScopedJoinHandle<'s, (Result<(), TransportError>, Duration)>; 2] {
    let entropy = mem::entropy_from_seed(3);
    parties.map(|(pn, p)| {
        let e = entropy[p.index()];
        s.spawn(move || {
            let mut session = puma_core::Session::new(small_frames(), p, e, protocol(p)).unwrap();
            let mut link = pn.connect(opts(timeout)).unwrap();
            let t0 = Instant::now();
            let r = drive(&mut session, &mut link, timeout).map(|_| ());
            (r, t0.elapsed())
        })
    })
}

#[test]
fn a_garbage_frame_ends_the_session_with_a_decode_error() {
    for network in [Network::Tcp, Network::Quic] {
        let [r1, r2] = inject(
            network,
            b"definitely not a puma frame, just bytes".to_vec(),
            16 << 10,
        );
        let e1 = r1.unwrap_err();
        assert_eq!(
            e1.core_kind(),
            Some(ErrorKind::Protocol { from: PartyId::P0 }),
            "{network:?}: {e1}"
        );
        assert!(e1.to_string().contains("magic"), "{e1}");
        // P2 does not hang: P1's abort reaches it.
        let e2 = r2.unwrap_err();
        assert_eq!(
            e2.core_kind(),
            Some(ErrorKind::Aborted { by: PartyId::P1 }),
            "{network:?}: {e2}"
        );
    }
}

#[test]
fn an_oversized_frame_is_refused_before_it_is_read() {
    let [r1, r2] = inject(Network::Tcp, vec![0u8; 100_000], 1 << 20);
    match r1.unwrap_err() {
        TransportError::BadFrame {
            peer: PartyId::P0,
            reason: FrameError::Oversized { len, max },
        } => {
            assert_eq!(len, 100_000);
            assert_eq!(max, 16 << 10);
        }
        other => panic!("{other}"),
    }
    assert_eq!(
        r2.unwrap_err().core_kind(),
        Some(ErrorKind::Aborted { by: PartyId::P1 })
    );
}

#[test]
fn a_vanished_peer_is_named_by_both_survivors() {
    let mut net = LocalNet::new(Network::Tcp).unwrap();
    let parties = PartyId::ALL.map(|p| net.party(p));
    let timeout = Duration::from_secs(5);
    let [p0, p1, p2] = parties;
    thread::scope(|s| {
        // P2 connects and then goes away without a word (a crash).
        let gone = s.spawn(move || drop(p2.connect(opts(timeout)).unwrap()));
        let honest = spawn_honest(s, [(p0, PartyId::P0), (p1, PartyId::P1)], timeout);
        gone.join().unwrap();
        let errs: Vec<TransportError> = honest
            .into_iter()
            .map(|h| {
                let (r, took) = h.join().unwrap();
                assert!(took < timeout, "took {took:?}");
                r.unwrap_err()
            })
            .collect();
        // Each survivor saw P2 go, or was told by the other survivor's abort; at least
        // one names P2 itself.
        for e in &errs {
            assert!(
                matches!(e, TransportError::Disconnected { peer: PartyId::P2 })
                    || matches!(e.core_kind(), Some(ErrorKind::Aborted { .. })),
                "{e}"
            );
        }
        assert!(
            errs.iter().any(|e| e.peer() == Some(PartyId::P2)),
            "{errs:?}"
        );
    });
}
