//! Shared by the leakage tests (core and layers): a three-party driver that records one
//! party's view, the two-sample chi-squared test and the view comparison. See
//! `core/tests/leakage.rs` for the method and the thresholds.
#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::Future;

use puma_core::{BitShares, Config, Ctx, Error, Input, Output, PartyId, Session, Shares};

/// Family-wise false-alarm rate of each check.
pub const ALPHA: f64 = 1e-3;

/// Runs the protocol at three parties with the given entropies (FIFO delivery) and returns
/// the concatenation of every frame `observer` receives, in arrival order.
pub fn view<F, Fut>(entropy: [[u8; 32]; 3], observer: PartyId, make: F) -> Vec<u8>
where
    F: Fn(PartyId) -> Box<dyn FnOnce(Ctx) -> Fut + Send>,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let sessions = PartyId::ALL
        .iter()
        .map(|&p| Session::new(Config::new(5), p, entropy[p.index()], make(p)).unwrap())
        .collect();
    drive(sessions, observer)
}

/// As [`view`], with each party's pairwise seed and private key given instead of its
/// entropy ([`Session::from_keys`]).
pub fn view_with_keys<F, Fut>(
    keys: [([u8; 32], [u8; 32]); 3],
    observer: PartyId,
    make: F,
) -> Vec<u8>
where
    F: Fn(PartyId) -> Box<dyn FnOnce(Ctx) -> Fut + Send>,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let sessions = PartyId::ALL
        .iter()
        .map(|&p| {
            let (seed, private) = keys[p.index()];
            Session::from_keys(Config::new(5), p, seed, private, make(p)).unwrap()
        })
        .collect();
    let mut seen = drive(sessions, observer);
    HELD.with(|h| seen.extend_from_slice(&h.borrow()[observer.index()]));
    seen
}

thread_local! {
    /// What each party has recorded with [`hold`] in the current run (the sessions run
    /// on the thread that drives them).
    static HELD: RefCell<[Vec<u8>; 3]> = RefCell::default();
}

/// Records what `me` can compute alone of the secret `s` shares, the sum of its two
/// components: [`view_with_keys`] appends the observer's records to its view, so that the
/// key-replay check also sees a message that leaks only together with the observer's
/// shares.
pub fn hold(me: PartyId, s: &Shares) {
    let (a, b) = s.components();
    let sums = a
        .iter()
        .zip(b)
        .flat_map(|(x, y)| x.wrapping_add(*y).to_le_bytes());
    HELD.with(|h| h.borrow_mut()[me.index()].extend(sums));
}

/// [`hold`] for bit shares: the XOR of the two components.
pub fn hold_bits(me: PartyId, s: &BitShares) {
    let (a, b) = s.components();
    let xors = a.iter().zip(b).flat_map(|(x, y)| (x ^ y).to_le_bytes());
    HELD.with(|h| h.borrow_mut()[me.index()].extend(xors));
}

/// Runs the three sessions to their end (FIFO delivery); returns what `observer` received.
fn drive(mut sessions: Vec<Session<()>>, observer: PartyId) -> Vec<u8> {
    HELD.with(|h| h.borrow_mut().iter_mut().for_each(Vec::clear));
    let mut done = [false; 3];
    let mut links: [[VecDeque<Vec<u8>>; 3]; 3] = Default::default();
    let mut seen = Vec::new();
    loop {
        for (i, s) in sessions.iter_mut().enumerate() {
            while !done[i] {
                match s.poll_output() {
                    Output::Transmit(t) => links[i][t.to.index()].push_back(t.frame.into_bytes()),
                    Output::Yielded => {}
                    Output::Pending { .. } => break,
                    Output::Done(r) => {
                        r.unwrap();
                        done[i] = true;
                    }
                }
            }
        }
        let mut moved = false;
        for (f, from) in links.iter_mut().enumerate() {
            for (t, link) in from.iter_mut().enumerate() {
                while let Some(b) = link.pop_front() {
                    moved = true;
                    if t == observer.index() {
                        seen.extend_from_slice(&b);
                    }
                    if !done[t] {
                        sessions[t]
                            .handle_input(Input::Frame {
                                from: PartyId::from_index(f),
                                bytes: &b,
                            })
                            .unwrap();
                    }
                }
            }
        }
        if !moved {
            assert!(done.iter().all(|d| *d), "run did not finish");
            return seen;
        }
    }
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9; |rel. err| < 1e-13).
pub fn ln_gamma(x: f64) -> f64 {
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + 7.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The regularised upper incomplete gamma Q(a, x) (series below a + 1, continued fraction
/// above; Numerical Recipes 6.2).
pub fn gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let lead = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        let (mut ap, mut sum) = (a, 1.0 / a);
        let mut del = sum;
        for _ in 0..10_000 {
            ap += 1.0;
            del *= x / ap;
            sum += del;
            if del.abs() < sum.abs() * 1e-15 {
                break;
            }
        }
        1.0 - sum * lead
    } else {
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..10_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let del = d * c;
            h *= del;
            if (del - 1.0).abs() < 1e-15 {
                break;
            }
        }
        lead * h
    }
}

/// p-value of a two-sample chi-squared test of equal distributions over `bins` categories
/// (degrees of freedom: the occupied bins minus one).
pub fn two_sample_p(a: &[u64], b: &[u64]) -> f64 {
    let (na, nb) = (a.iter().sum::<u64>() as f64, b.iter().sum::<u64>() as f64);
    let mut stat = 0.0;
    let mut occupied = 0;
    for (&x, &y) in a.iter().zip(b) {
        let tot = (x + y) as f64;
        if tot == 0.0 {
            continue;
        }
        occupied += 1;
        let (ea, eb) = (tot * na / (na + nb), tot * nb / (na + nb));
        stat += (x as f64 - ea).powi(2) / ea + (y as f64 - eb).powi(2) / eb;
    }
    if occupied < 2 {
        return 1.0;
    }
    gamma_q(f64::from(occupied - 1) / 2.0, stat / 2.0)
}

/// The smallest per-position p-value (times the number of tests: Bonferroni) and the
/// pooled p-value of the views of series A and B.
pub fn compare(a: &[Vec<u8>], b: &[Vec<u8>]) -> (f64, f64) {
    let len = a[0].len();
    for v in a.iter().chain(b) {
        assert_eq!(v.len(), len, "view sizes depend on the secret or the run");
    }
    let mut worst: f64 = 1.0;
    let mut tests = 0usize;
    for pos in 0..len {
        for shift in [0u8, 4] {
            let hist = |vs: &[Vec<u8>]| {
                let mut h = [0u64; 16];
                for v in vs {
                    h[usize::from((v[pos] >> shift) & 15)] += 1;
                }
                h
            };
            let (ha, hb) = (hist(a), hist(b));
            let p = two_sample_p(&ha, &hb);
            if ha.iter().chain(&hb).filter(|&&c| c > 0).count() > 1 {
                tests += 1;
            }
            worst = worst.min(p);
        }
    }
    // Positions constant over every run (headers, fixed-width padding) would only dilute
    // the pooled test.
    let varying: Vec<usize> = (0..len)
        .filter(|&p| a.iter().chain(b).any(|v| v[p] != a[0][p]))
        .collect();
    let pooled = |vs: &[Vec<u8>]| {
        let mut h = [0u64; 256];
        for v in vs {
            for &p in &varying {
                h[usize::from(v[p])] += 1;
            }
        }
        h
    };
    (
        (worst * tests.max(1) as f64).min(1.0),
        two_sample_p(&pooled(a), &pooled(b)),
    )
}

/// `runs` views of `observer` per secret; the other parties' entropy comes from the run
/// index, the observer's is fixed. `make(secret)(party)` builds a party's protocol.
pub fn check<F, G, Fut>(observer: PartyId, runs: u64, make: F) -> (f64, f64)
where
    F: Fn(usize) -> G,
    G: Fn(PartyId) -> Box<dyn FnOnce(Ctx) -> Fut + Send>,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let series = |secret: usize| -> Vec<Vec<u8>> {
        (0..runs)
            .map(|r| {
                let mut e = [[0u8; 32]; 3];
                for p in PartyId::ALL {
                    e[p.index()] = if p == observer {
                        [0xA5; 32]
                    } else {
                        let mut k = [0u8; 32];
                        k[..8].copy_from_slice(&r.to_le_bytes());
                        k[8] = p.index() as u8;
                        k[9] = secret as u8 + 1;
                        k
                    };
                }
                view(e, observer, make(secret))
            })
            .collect()
    };
    compare(&series(0), &series(1))
}

pub fn assert_no_leak(what: &str, observer: PartyId, (per_pos, pooled): (f64, f64)) {
    eprintln!("{what} at {observer}: Bonferroni p = {per_pos:.3}, pooled p = {pooled:.3}");
    assert!(
        per_pos > ALPHA,
        "{what}: {observer}'s view depends on the secret at some position (p = {per_pos:.2e})"
    );
    assert!(
        pooled > ALPHA,
        "{what}: {observer}'s view bytes depend on the secret (pooled p = {pooled:.2e})"
    );
}

/// Runs of the key-replay check per secret (one bit each of a `u64` pattern).
pub const REPLAY_RUNS: u64 = 64;

/// The key-replay check (method in `core/tests/leakage.rs`): [`REPLAY_RUNS`] views of
/// `observer` per secret, where everything the observer knows is the same in every run
/// (its pairwise seed and private key, and the seed its successor sends it) and
/// everything else varies with the run (its successor's private key, its predecessor's
/// seed and private key). Bits of the view that change in the same secret-0 runs have an
/// XOR the observer knows (a constant bit's group is the all-equal pattern, against a
/// constant 0). Returns the positions of bits whose XOR with their group's first bit is
/// the other value in every secret-1 run: relations the observer computes from its
/// knowledge that tell the secrets apart. (A relation that merely held in the secret-0
/// runs, as a rare carry does, would not flip in all 64 secret-1 runs.)
pub fn replay<F, G, Fut>(observer: PartyId, make: F) -> Vec<usize>
where
    F: Fn(usize) -> G,
    G: Fn(PartyId) -> Box<dyn FnOnce(Ctx) -> Fut + Send>,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let keys = |run: u64| {
        let fresh = |tag: u8| {
            let mut k = [tag; 32];
            k[..8].copy_from_slice(&run.to_le_bytes());
            k
        };
        let mut keys = [([0u8; 32], [0u8; 32]); 3];
        keys[observer.index()] = ([0xA5; 32], [0x5A; 32]);
        keys[observer.next().index()] = ([0xC3; 32], fresh(1));
        keys[observer.prev().index()] = (fresh(2), fresh(3));
        keys
    };
    let views = |secret: usize| -> Vec<Vec<u8>> {
        (0..REPLAY_RUNS)
            .map(|run| view_with_keys(keys(run), observer, make(secret)))
            .collect()
    };
    let (first, second) = (views(0), views(1));
    let len = first[0].len();
    for v in first.iter().chain(&second) {
        assert_eq!(v.len(), len, "view sizes depend on the secret or the run");
    }
    // A bit's pattern over a series: bit r says whether run r differs from secret-0 run 0.
    let pattern = |series: &[Vec<u8>], pos: usize, i: usize| -> u64 {
        let bit = |v: &Vec<u8>| (v[pos] >> i) & 1;
        (0..).zip(series).fold(0u64, |acc, (r, v)| {
            acc | (u64::from(bit(v) ^ bit(&first[0])) << r)
        })
    };
    // Each group of equal secret-0 patterns keeps its first bit's secret-1 pattern; the
    // constant bits' group starts with "never changed".
    let mut groups: HashMap<u64, u64> = HashMap::from([(0, 0)]);
    let mut leaks = Vec::new();
    for pos in 0..len {
        for i in 0..8 {
            let under_second = pattern(&second, pos, i);
            let first_member = *groups
                .entry(pattern(&first, pos, i))
                .or_insert(under_second);
            if under_second ^ first_member == u64::MAX {
                leaks.push(8 * pos + i);
            }
        }
    }
    leaks
}

pub fn assert_masked(what: &str, observer: PartyId, leaks: &[usize]) {
    assert!(
        leaks.is_empty(),
        "{what}: {observer} computes {} bits of its view from its own keys and they depend \
         on the secret (the first at bit {})",
        leaks.len(),
        leaks[0]
    );
}
