//! The no_std run loop, exercised on std over in-memory pipes with 4 KiB buffers: the
//! same results, bytes and rounds as the simulator, and every failure a typed error
//! naming the peer.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::thread;
use std::time::{Duration, Instant};

use embedded_io::{Read, Write};
use puma_core::sim::Sim;
use puma_core::{Config, ErrorKind, FixedPoint, PartyId, Session, Width, proto};
use puma_embedded::pipe::End;
use puma_embedded::{Clock, Error, Event, Link as _, StreamLink, run};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// Each direction of a pipe holds at most this many bytes, so large frames need
/// back-pressure.
const CAP: usize = 4096;

fn pipe() -> (End, End) {
    puma_embedded::pipe::pipe(CAP)
}

/// The host clock of these tests: std's, with a yield as the idle hook.
struct TestClock(Instant);

impl Clock for TestClock {
    fn now_ms(&mut self) -> u64 {
        self.0.elapsed().as_millis() as u64
    }

    fn idle(&mut self) {
        thread::yield_now();
    }
}

fn clock() -> TestClock {
    TestClock(Instant::now())
}

type Link = StreamLink<End, TestClock>;

/// Three links joined by pipes in a ring.
fn links(max: usize) -> [Link; 3] {
    let mut p = PartyId::ALL.into_iter();
    puma_embedded::pipe::ring(CAP).map(|(next, prev)| {
        let me = p.next().unwrap();
        StreamLink::new(me, next, prev, clock()).with_max_frame_len(max)
    })
}

const N: usize = 2_000;

fn cfg() -> Config {
    let mut c = Config::new(11);
    c.max_frame_len = 16 << 10;
    c
}

type BoxedRun =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Vec<u64>, puma_core::Error>> + Send>>;

fn xs() -> Vec<f64> {
    (0..N).map(|i| i as f64 * 0.01 - 10.0).collect()
}

/// P0 shares `xs`, the parties square it and reveal the squares to all.
fn protocol(me: PartyId) -> impl FnOnce(puma_core::Ctx) -> BoxedRun + Send + 'static {
    move |mut ctx| {
        Box::pin(async move {
            let fx = FixedPoint::default();
            let xs: Vec<u64> = xs().iter().map(|&x| fx.encode(x).unwrap()).collect();
            let x = proto::share_input(
                &mut ctx,
                PartyId::P0,
                (me == PartyId::P0).then_some(&xs[..]),
                N,
            )
            .await?;
            let y = proto::mul_fixed(&mut ctx, &x, &x).await?;
            proto::reveal_all(&mut ctx, &y).await
        })
    }
}

/// The entropy `Sim::new(seed)` gives each party.
fn sim_entropy(seed: u64) -> [[u8; 32]; 3] {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = [[0u8; 32]; 3];
    for e in &mut out {
        rng.fill_bytes(e);
    }
    out
}

/// What one party's run gave.
struct Ran {
    result: Result<Vec<u64>, Error>,
    stats: puma_core::Stats,
    /// How long `run` took.
    took: Duration,
}

/// Runs the party of each link on its own thread, with `entropy` by party index and the
/// protocol `make` gives, until its session ends.
fn run_each<G>(
    links: impl IntoIterator<Item = Link>,
    entropy: [[u8; 32]; 3],
    make: impl Fn(PartyId) -> G + Sync,
    timeout_ms: u64,
) -> Vec<Ran>
where
    G: FnOnce(puma_core::Ctx) -> BoxedRun + Send + 'static,
{
    thread::scope(|s| {
        let hs: Vec<_> = links
            .into_iter()
            .map(|mut link| {
                let make = &make;
                s.spawn(move || {
                    let p = link.me();
                    let mut session = Session::new(cfg(), p, entropy[p.index()], make(p)).unwrap();
                    let start = Instant::now();
                    let result = run(&mut session, &mut link, timeout_ms);
                    Ran {
                        result,
                        stats: session.stats(),
                        took: start.elapsed(),
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The entropy of the hand-made sessions: all bytes the party's index.
const BY_INDEX: [[u8; 32]; 3] = [[0; 32], [1; 32], [2; 32]];

#[test]
fn three_parties_over_small_pipes_match_the_simulator() {
    let sim = Sim::new(5).with_config(cfg()).run(protocol);
    let sim_stats = sim.stats.clone();
    let want = sim.into_results().unwrap();
    let got = run_each(links(cfg().max_frame_len), sim_entropy(5), protocol, 20_000);
    let fx = FixedPoint::default();
    for (i, x) in xs().iter().enumerate() {
        assert!((fx.decode(want[0][i]) - x * x).abs() < 1e-3, "x[{i}]");
    }
    for (
        p,
        Ran {
            result, stats: st, ..
        },
    ) in got.iter().enumerate()
    {
        assert_eq!(result.as_ref().unwrap(), &want[p], "P{p} result");
        assert_eq!(st.bytes_sent, sim_stats[p].bytes_sent, "P{p}");
        assert_eq!(st.frames_sent, sim_stats[p].frames_sent, "P{p}");
        assert_eq!(st.rounds, sim_stats[p].rounds, "P{p}");
    }
    // Records of 16 000 bytes went through 4 KiB pipes in 16 KiB frames.
    assert!(sim_stats[0].frames_sent.iter().sum::<u64>() >= 2);
}

#[test]
fn frames_are_a_little_endian_length_then_the_bytes() {
    let (a, mut b) = pipe();
    let (c, _d) = pipe();
    let mut link = StreamLink::new(PartyId::P0, a, c, clock());
    link.send(PartyId::P1, &[9, 8, 7]).unwrap();
    link.send(PartyId::P1, &[]).unwrap();
    let mut buf = [0u8; 16];
    let n = b.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], &[3, 0, 0, 0, 9, 8, 7, 0, 0, 0, 0]);
    // And back: whole frames, the empty one included.
    b.write(&[2, 0, 0, 0, 5, 6, 0, 0, 0, 0]).unwrap();
    assert_eq!(
        link.recv(1000).unwrap(),
        Event::Frame {
            from: PartyId::P1,
            bytes: vec![5, 6]
        }
    );
    assert_eq!(
        link.recv(1000).unwrap(),
        Event::Frame {
            from: PartyId::P1,
            bytes: vec![]
        }
    );
    assert_eq!(link.recv(10).unwrap(), Event::TimedOut);
}

#[test]
fn an_oversized_length_is_refused_before_allocating() {
    let (a, mut raw) = pipe();
    let (c, _d) = pipe();
    let mut link = StreamLink::new(PartyId::P1, c, a, clock()).with_max_frame_len(1024);
    // 4 GiB - 1 announced: refused from the prefix alone.
    raw.write(&u32::MAX.to_le_bytes()).unwrap();
    let e = link.recv(1000).unwrap_err();
    assert_eq!(
        e,
        Error::Oversized {
            peer: PartyId::P0,
            len: u32::MAX as u64,
            max: 1024
        }
    );
    assert_eq!(e.peer(), Some(PartyId::P0));
}

#[test]
fn a_stream_ending_mid_frame_is_reported_as_truncated() {
    let (a, mut raw) = pipe();
    let (c, _d) = pipe();
    let mut link = StreamLink::new(PartyId::P1, c, a, clock());
    raw.write(&[1, 0, 0, 0, 42, 10, 0, 0, 0, 1, 2]).unwrap();
    drop(raw);
    assert_eq!(
        link.recv(1000).unwrap(),
        Event::Frame {
            from: PartyId::P0,
            bytes: vec![42]
        }
    );
    assert_eq!(
        link.recv(1000).unwrap(),
        Event::Closed {
            peer: PartyId::P0,
            truncated: true
        }
    );
    assert_eq!(link.recv(10).unwrap(), Event::TimedOut);
}

/// Pipes in which P0 has completed the setup round (its seed to P2) and does nothing
/// more: the links of P1 and P2, and P0's raw ends to P1 and to P2.
fn after_p0_setup() -> ([Link; 2], End, End) {
    let [(to_p1, mut to_p2), (n1, p1), (n2, p2)] = puma_embedded::pipe::ring(CAP);
    let mut p0 = Session::new(cfg(), PartyId::P0, [0; 32], protocol(PartyId::P0)).unwrap();
    match p0.poll_output() {
        puma_core::Output::Transmit(t) if t.to == PartyId::P2 => {
            let bytes = t.frame.into_bytes();
            to_p2.write(&(bytes.len() as u32).to_le_bytes()).unwrap();
            to_p2.write(&bytes).unwrap();
        }
        other => panic!("{other:?}"),
    }
    let links = [
        StreamLink::new(PartyId::P1, n1, p1, clock()),
        StreamLink::new(PartyId::P2, n2, p2, clock()),
    ];
    (links, to_p1, to_p2)
}

/// P1 and P2 run the protocol; P0 sends P1 half a frame and goes away, and never
/// answers P2.
#[test]
fn a_needed_peer_that_dies_mid_frame_fails_the_run_naming_it() {
    let (links, mut raw, _to_p2) = after_p0_setup();
    raw.write(&[100, 0, 0, 0, 1, 2, 3]).unwrap();
    drop(raw);
    let errs: Vec<Error> = run_each(links, BY_INDEX, protocol, 5_000)
        .into_iter()
        .map(|r| r.result.unwrap_err())
        .collect();
    assert_eq!(errs[0], Error::Truncated { peer: PartyId::P0 });
    // P1 gave up first and told P2.
    assert!(
        matches!(errs[1], Error::Core(c) if c.kind() == ErrorKind::Aborted { by: PartyId::P1 }),
        "{:?}",
        errs[1]
    );
}

#[test]
fn a_silent_peer_times_out_naming_the_peer_waited_for() {
    let (a12, _raw21) = pipe();
    let (a10, _raw01) = pipe();
    let mut link = StreamLink::new(PartyId::P1, a12, a10, clock());
    let mut session = Session::new(cfg(), PartyId::P1, [1; 32], protocol(PartyId::P1)).unwrap();
    let start = Instant::now();
    let e = run(&mut session, &mut link, 200).unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5));
    // The setup round waits for the seed of P1's successor.
    assert!(
        matches!(e, Error::Core(c) if c.kind() == ErrorKind::Timeout { waiting_for: PartyId::P2 }),
        "{e:?}"
    );
    assert_eq!(e.peer(), Some(PartyId::P2));
}

#[test]
fn a_peer_that_aborts_fails_the_others_naming_it() {
    let make = |p: PartyId| {
        move |ctx: puma_core::Ctx| -> BoxedRun {
            if p == PartyId::P0 {
                Box::pin(async move {
                    drop(ctx);
                    Err(puma_core::Error::misuse("P0 gives up"))
                })
            } else {
                protocol(p)(ctx)
            }
        }
    };
    let errs: Vec<Error> = run_each(links(cfg().max_frame_len), sim_entropy(6), make, 5_000)
        .into_iter()
        .map(|r| r.result.unwrap_err())
        .collect();
    assert!(
        matches!(errs[0], Error::Core(c) if c.kind() == ErrorKind::Misuse),
        "{:?}",
        errs[0]
    );
    // Each survivor is told by an abort frame. The first to hear it hears it from P0 and
    // passes it on, so the other may hear it first from that survivor.
    let by: Vec<PartyId> = errs[1..]
        .iter()
        .map(|e| match e {
            Error::Core(c) => match c.kind() {
                ErrorKind::Aborted { by } => {
                    assert_eq!(e.peer(), Some(by));
                    by
                }
                _ => panic!("{e:?}"),
            },
            _ => panic!("{e:?}"),
        })
        .collect();
    assert!(by.contains(&PartyId::P0), "{by:?}");
    assert!(by[0] != PartyId::P1 && by[1] != PartyId::P2, "{by:?}");
}

/// P1 and P2 each send P0 `N` words (four times a pipe's capacity), then wait for its
/// answer.
fn to_p0(me: PartyId) -> impl FnOnce(puma_core::Ctx) -> BoxedRun + Send + 'static {
    move |mut ctx| {
        Box::pin(async move {
            ctx.send(PartyId::P0, &vec![me.index() as u64; N], Width::W64)?;
            ctx.recv(PartyId::P0, N, Width::W64).await
        })
    }
}

/// P0 completes the setup round and then stops, as under SIGSTOP: its streams stay open
/// and it reads nothing more. P1 and P2 both send it more than the pipes hold, so both
/// are stuck in a send to P0. Each gives up when its send has made no progress for the
/// timeout, naming P0: within one timeout, not two (the stalled send used to be taken for
/// a peer that had left, and a second wait for P0 followed).
#[test]
fn a_stalled_peer_fails_the_others_within_one_timeout() {
    const TIMEOUT_MS: u64 = 1_000;
    let (links, _to_p1, _to_p2) = after_p0_setup();
    let links = links.map(|l| l.with_send_timeout_ms(TIMEOUT_MS));
    let timeout = Duration::from_millis(TIMEOUT_MS);
    for Ran { result, took, .. } in run_each(links, BY_INDEX, to_p0, TIMEOUT_MS) {
        assert_eq!(
            result.unwrap_err(),
            Error::SendStalled { peer: PartyId::P0 }
        );
        assert!(took >= timeout, "{took:?}");
        // A generous bound: the old loop took two timeouts.
        assert!(took < timeout * 3 / 2, "{took:?}");
    }
}

/// A link on which nothing ever arrives, with a clock that moves only while `recv` waits;
/// it records the peer of each frame sent.
#[derive(Default)]
struct Silent {
    sent: Vec<PartyId>,
    now_ms: u64,
}

impl puma_embedded::Link for Silent {
    type Error = Error;

    fn send(&mut self, to: PartyId, _frame: Vec<u8>) -> Result<(), Error> {
        self.sent.push(to);
        Ok(())
    }

    fn recv(&mut self, timeout_ms: u64) -> Result<Event, Error> {
        self.now_ms += timeout_ms;
        Ok(Event::TimedOut)
    }

    fn now_ms(&mut self) -> u64 {
        self.now_ms
    }
}

/// After a timeout the abort frame to the peer waited for goes last: if that peer has
/// stopped reading, a send to it may block, and the other peer is told first.
#[test]
fn the_peer_timed_out_on_gets_its_abort_frame_last() {
    let mut link = Silent::default();
    let mut session = Session::new(cfg(), PartyId::P1, [1; 32], protocol(PartyId::P1)).unwrap();
    let e = run(&mut session, &mut link, 500).unwrap_err();
    assert!(
        matches!(e, Error::Core(c) if c.kind() == ErrorKind::Timeout { waiting_for: PartyId::P2 }),
        "{e:?}"
    );
    assert_eq!(link.now_ms(), 500);
    // The setup seed to P0, then the aborts: P0's first although the session lists its
    // successor P2 first.
    assert_eq!(link.sent, [PartyId::P0, PartyId::P0, PartyId::P2]);
}
