//! Leakage: what a party receives does not depend on the other parties' secrets.
//!
//! For each protocol and each observing party O: O's entropy (hence all its seeds and its
//! own shares' randomness) is fixed; the other two parties draw fresh entropy per run and
//! hold secret A in one series of runs and secret B in the other. O's view is every byte
//! of every frame it receives (setup seeds included), in order. Checked:
//! 1. the view's length is the same in every run (sizes and frame structure are public);
//! 2. at every byte position, a two-sample chi-squared test over the 16 values of each
//!    nibble finds no difference between the A and B runs, with a family-wise false alarm
//!    rate of 1e-3 (Bonferroni over all positions and both nibbles);
//! 3. the pooled histogram of all view bytes (256 bins) does not differ either (p > 1e-3),
//!    which catches small biases spread over many positions.
//!
//! The seeds are fixed, so each test is deterministic; the thresholds say that a run of
//! this test on leak-free protocols fails with probability at most 1e-3 per check over the
//! choice of seeds. A positive control shows the same check rejects a protocol that
//! does leak (the secret sent to O masked with a non-uniform mask).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::VecDeque;
use std::future::Future;

use puma_core::{
    Config, Ctx, Error, FixedPoint, Input, Output, PartyId, Session, Shares, Width, proto,
};

/// Family-wise false-alarm rate of each check.
const ALPHA: f64 = 1e-3;

/// Runs the protocol at three parties with the given entropies (FIFO delivery) and returns
/// the concatenation of every frame `observer` receives, in arrival order.
fn view<F, Fut>(entropy: [[u8; 32]; 3], observer: PartyId, make: F) -> Vec<u8>
where
    F: Fn(PartyId) -> Box<dyn FnOnce(Ctx) -> Fut + Send>,
    Fut: Future<Output = Result<(), Error>> + Send + 'static,
{
    let mut sessions: Vec<Session<()>> = PartyId::ALL
        .iter()
        .map(|&p| {
            let start = make(p);
            Session::new(Config::new(5), p, entropy[p.index()], start).unwrap()
        })
        .collect();
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
fn ln_gamma(x: f64) -> f64 {
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
fn gamma_q(a: f64, x: f64) -> f64 {
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
fn two_sample_p(a: &[u64], b: &[u64]) -> f64 {
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
fn compare(a: &[Vec<u8>], b: &[Vec<u8>]) -> (f64, f64) {
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
fn check<F, G, Fut>(observer: PartyId, runs: u64, make: F) -> (f64, f64)
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

fn assert_no_leak(what: &str, observer: PartyId, (per_pos, pooled): (f64, f64)) {
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

type Proto = std::pin::Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// Two secret vectors per series, owned by the two parties other than `observer`.
const SECRETS: [[f64; 4]; 2] = [[0.0, 0.0, 0.0, 0.0], [3.25, -100.5, 7.0, -0.001]];
const SECRETS_Y: [[f64; 4]; 2] = [[0.0, 0.0, 0.0, 0.0], [-2.5, 0.75, 1000.0, 5.5]];

/// Shares the secrets of `series` (x by O.next(), y by O.prev()), then runs `body`.
fn with_inputs<B, BF>(
    observer: PartyId,
    series: usize,
    body: B,
) -> impl Fn(PartyId) -> Box<dyn FnOnce(Ctx) -> Proto + Send>
where
    B: Fn(Ctx, Shares, Shares) -> BF + Clone + Send + 'static,
    BF: Future<Output = Result<(), Error>> + Send + 'static,
{
    move |me| {
        let body = body.clone();
        Box::new(move |mut ctx: Ctx| -> Proto {
            Box::pin(async move {
                let fx = FixedPoint::default();
                let enc = |v: &[f64; 4]| -> Vec<u64> {
                    v.iter().map(|x| fx.encode(*x).unwrap()).collect()
                };
                let (xs, ys) = (enc(&SECRETS[series]), enc(&SECRETS_Y[series]));
                let (ox, oy) = (observer.next(), observer.prev());
                let x = proto::share_input(&mut ctx, ox, (me == ox).then_some(&xs[..]), 4).await?;
                let y = proto::share_input(&mut ctx, oy, (me == oy).then_some(&ys[..]), 4).await?;
                body(ctx, x, y).await
            })
        })
    }
}

const RUNS: u64 = 300;

#[test]
fn mul_views_do_not_depend_on_the_secrets() {
    for o in PartyId::ALL {
        let r = check(o, RUNS, |s| {
            with_inputs(o, s, |mut ctx, x, y| async move {
                proto::mul(&mut ctx, &x, &y).await.map(drop)
            })
        });
        assert_no_leak("mul", o, r);
    }
}

#[test]
fn truncation_views_do_not_depend_on_the_secrets() {
    for o in PartyId::ALL {
        let r = check(o, RUNS, |s| {
            with_inputs(o, s, |mut ctx, x, y| async move {
                let z = proto::mul_fixed(&mut ctx, &x, &y).await?;
                proto::trunc(&mut ctx, &z, 5).await.map(drop)
            })
        });
        assert_no_leak("trunc", o, r);
    }
}

#[test]
fn comparison_views_do_not_depend_on_the_secrets() {
    for o in PartyId::ALL {
        let r = check(o, RUNS, |s| {
            with_inputs(o, s, |mut ctx, x, y| async move {
                proto::lt(&mut ctx, &x, &y, Width::W64).await.map(drop)
            })
        });
        assert_no_leak("lt", o, r);
    }
}

#[test]
fn softmax_views_do_not_depend_on_the_secrets() {
    for o in PartyId::ALL {
        let r = check(o, 200, |s| {
            with_inputs(o, s, |mut ctx, x, y| async move {
                // Two rows of four logits: x and y side by side.
                let both = Shares::concat(&[&x, &y])?;
                proto::softmax_rows(&mut ctx, &both, 2, 4, 8)
                    .await
                    .map(drop)
            })
        });
        assert_no_leak("softmax", o, r);
    }
}

/// The positive control: the same check flags a protocol that sends O its peer's secret
/// under a mask with only 8 random bits (a realistic bug: a narrowed mask).
#[test]
fn the_check_detects_a_weak_mask() {
    let o = PartyId::P2;
    let r = check(o, RUNS, |s| {
        with_inputs(o, s, move |mut ctx, _x, _y| async move {
            let me = ctx.me();
            if me == o.next() {
                let fx = FixedPoint::default();
                let r = ctx.private_random(4);
                let v: Vec<u64> = SECRETS[s]
                    .iter()
                    .zip(&r)
                    .map(|(x, m)| fx.encode(*x).unwrap().wrapping_add(m & 0xff))
                    .collect();
                ctx.send(o, &v, Width::W64)?;
            }
            if me == o {
                ctx.recv(o.next(), 4, Width::W64).await?;
            }
            Ok(())
        })
    });
    assert!(
        r.0 < 1e-6,
        "weak mask not detected per position: p = {:.2e}",
        r.0
    );
    assert!(r.1 < 1e-6, "weak mask not detected pooled: p = {:.2e}", r.1);
}

#[test]
fn chi_squared_p_values_match_tables() {
    // Upper 5% and 0.1% points of chi-squared with 15 and 255 degrees of freedom.
    assert!((gamma_q(7.5, 24.996 / 2.0) - 0.05).abs() < 1e-4);
    assert!((gamma_q(7.5, 37.697 / 2.0) - 0.001).abs() < 2e-5);
    assert!((gamma_q(127.5, 293.248 / 2.0) - 0.05).abs() < 1e-3);
    assert!((gamma_q(127.5, 330.520 / 2.0) - 0.001).abs() < 1e-4);
}
