//! The embedded-io link over an in-memory pipe with small buffers: the same frames and
//! results as the threaded in-memory transport; an oversized frame is refused.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::thread;
use std::time::Duration;

use puma_core::{Config, FixedPoint, PartyId, Session, Stats};
use puma_embedded::pipe::End;
use puma_transports::embedded::StreamLink;
use puma_transports::{FrameError, Link, TransportError, drive, mem};

use crate::common;

/// Each direction of a pipe holds at most this many bytes, so large frames need
/// back-pressure.
const CAP: usize = 4096;

/// Three links joined by pipes in a ring.
fn links(max: usize) -> [StreamLink<End>; 3] {
    let mut p = PartyId::ALL.into_iter();
    puma_embedded::pipe::ring(CAP)
        .map(|(next, prev)| StreamLink::new(p.next().unwrap(), next, prev).with_max_frame_len(max))
}

const N: usize = 5_000;

fn cfg() -> Config {
    let mut c = Config::new(9);
    c.max_frame_len = 16 << 10;
    c
}

type BoxedRun =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u64>, puma_core::Error>> + Send>>;

fn protocol(me: PartyId) -> impl FnOnce(puma_core::Ctx) -> BoxedRun + Send + 'static {
    let xs = (0..N).map(|i| i as f64 * 0.01 - 20.0).collect();
    move |ctx| Box::pin(common::squares(ctx, me, xs))
}

/// One party's result and counters.
type PartyRun = (Vec<u64>, Stats);

/// The in-memory run of `protocol` with seed 4, and the same run over the pipes, where the
/// parties in `no_std` run the loop of `puma-embedded` on the link inside and the others
/// the std driver.
fn in_memory_and_over_pipes(no_std: &[PartyId]) -> (mem::Outcome<Vec<u64>>, Vec<PartyRun>) {
    let m = mem::run3(cfg(), 4, protocol);
    let entropy = mem::entropy_from_seed(4);
    let got: Vec<_> = thread::scope(|s| {
        let hs: Vec<_> = links(cfg().max_frame_len)
            .into_iter()
            .zip(PartyId::ALL)
            .map(|(link, p)| {
                let e = entropy[p.index()];
                s.spawn(move || {
                    let mut session = Session::new(cfg(), p, e, protocol(p)).unwrap();
                    let r = if no_std.contains(&p) {
                        puma_embedded::run(&mut session, &mut link.into_inner(), 20_000).unwrap()
                    } else {
                        let mut link = link;
                        drive(&mut session, &mut link, Duration::from_secs(20)).unwrap()
                    };
                    (r, session.stats())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (m, got)
}

#[test]
fn the_same_run_as_in_memory_over_small_pipes() {
    let (m, got) = in_memory_and_over_pipes(&[]);
    let mem_stats = m.stats.clone();
    let want = m.into_results().unwrap();
    let fx = FixedPoint::default();
    assert!((fx.decode(want[0][7]) - (0.07f64 - 20.0).powi(2)).abs() < 1e-3);
    for (p, (r, st)) in got.iter().enumerate() {
        assert_eq!(r, &want[p], "P{p} result");
        assert_eq!(st.bytes_sent, mem_stats[p].bytes_sent, "P{p}");
        assert_eq!(st.frames_sent, mem_stats[p].frames_sent, "P{p}");
        assert_eq!(st.rounds, mem_stats[p].rounds, "P{p}");
    }
    // Records of 40 000 bytes went through 4 KiB pipes in 16 KiB frames.
    assert!(mem_stats[0].frames_sent.iter().sum::<u64>() >= 6);
}

/// P0 runs `puma_embedded::run` on the `no_std` link, P1 and P2 the std driver, all over
/// the same byte pipes: the wire formats agree and the run is the in-memory one.
#[test]
fn a_no_std_party_and_two_std_parties_share_the_pipes() {
    let (m, got) = in_memory_and_over_pipes(&[PartyId::P0]);
    let mem_stats = m.stats.clone();
    let want = m.into_results().unwrap();
    for (p, (r, st)) in got.iter().enumerate() {
        assert_eq!(r, &want[p], "P{p} result");
        assert_eq!(st.bytes_sent, mem_stats[p].bytes_sent, "P{p}");
        assert_eq!(st.rounds, mem_stats[p].rounds, "P{p}");
    }
}

#[test]
fn the_std_link_uses_the_tcp_framing() {
    assert_eq!(puma_embedded::LEN_PREFIX, puma_transports::net::LEN_PREFIX);
}

#[test]
fn an_oversized_length_prefix_is_refused() {
    let [mut l0, mut l1, _l2] = links(1024);
    l0.send(PartyId::P1, vec![7u8; 2000]).unwrap_or(());
    match l1.recv(Duration::from_secs(5)) {
        Err(TransportError::BadFrame {
            peer: PartyId::P0,
            reason:
                FrameError::Oversized {
                    len: 2000,
                    max: 1024,
                },
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_closed_stream_is_reported_after_its_frames() {
    let [mut l0, mut l1, l2] = links(1024);
    l0.send(PartyId::P1, vec![1, 2, 3]).unwrap();
    drop(l0);
    drop(l2);
    assert_eq!(
        l1.recv(Duration::from_secs(1)).unwrap(),
        puma_transports::Recv::Frame {
            from: PartyId::P0,
            bytes: vec![1, 2, 3]
        }
    );
    let a = l1.recv(Duration::from_secs(1)).unwrap();
    let b = l1.recv(Duration::from_secs(1)).unwrap();
    let mut closed = [a, b].map(|r| match r {
        puma_transports::Recv::Closed { peer } => peer.index(),
        other => panic!("{other:?}"),
    });
    closed.sort();
    assert_eq!(closed, [0, 2]);
}
