//! A GPT-2 base-width block (d = 768, 12 heads of 64, MLP 3072, 32 rows) built from core
//! protocols, and a one-thread host that drives its three sessions round-robin, moving to
//! the next session whenever one yields. Shared by `tests/yielding.rs` and
//! `examples/yield_latency.rs`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::future::Future;
use std::time::{Duration, Instant};

use puma_core::engine::{Config, Ctx, Input, Output, Session};
use puma_core::proto::{self, ExpApprox, GeluForm};
use puma_core::{Error, FixedPoint, PartyId, Shares};

/// Model width.
pub const D: usize = 768;
/// Attention heads.
pub const HEADS: usize = 12;
/// Width of a head.
pub const HD: usize = D / HEADS;
/// Width of the MLP.
pub const INNER: usize = 4 * D;
/// Rows (tokens) through the block.
pub const ROWS: usize = 32;

/// The block's public weights and input, in the session's fixed-point encoding.
pub struct Weights {
    x: Vec<u64>,
    w_qkv: Vec<u64>,
    w_proj: Vec<u64>,
    w_fc: Vec<u64>,
    w_out: Vec<u64>,
}

/// Uniform values in `[-scale, scale)` from a SplitMix64 stream at `state`, encoded.
fn uniform(n: usize, scale: f64, state: &mut u64) -> Vec<u64> {
    let fx = FixedPoint::default();
    (0..n)
        .map(|_| {
            *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = *state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            let u = (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0;
            fx.encode(scale * u).unwrap()
        })
        .collect()
}

impl Weights {
    /// Small random weights (GPT-2's scale, 0.02·√3 uniform) and inputs in [-1, 1).
    pub fn random(seed: u64) -> Weights {
        let mut st = seed;
        let s = 0.02 * 3f64.sqrt();
        Weights {
            x: uniform(ROWS * D, 1.0, &mut st),
            w_qkv: uniform(D * 3 * D, s, &mut st),
            w_proj: uniform(D * D, s, &mut st),
            w_fc: uniform(D * INNER, s, &mut st),
            w_out: uniform(INNER * D, s, &mut st),
        }
    }
}

/// One party's sharing of [`Weights`] (of public values: the block needs no input round).
pub struct SharedWeights {
    x: Shares,
    w_qkv: Shares,
    w_proj: Shares,
    w_fc: Shares,
    w_out: Shares,
}

impl SharedWeights {
    /// Party `me`'s shares of `w`.
    pub fn new(me: PartyId, w: &Weights) -> SharedWeights {
        let public = |v: &[u64]| Shares::from_public(me, v);
        SharedWeights {
            x: public(&w.x),
            w_qkv: public(&w.w_qkv),
            w_proj: public(&w.w_proj),
            w_fc: public(&w.w_fc),
            w_out: public(&w.w_out),
        }
    }
}

/// One pre-norm GPT-2 block, revealed to every party: LayerNorm, the QKV product, causal
/// attention over 12 heads, the projection, LayerNorm, the MLP with GELU, and both
/// residuals.
pub async fn block(ctx: &mut Ctx, w: &SharedWeights) -> Result<Vec<u64>, Error> {
    let x = &w.x;
    let a = proto::layernorm_rows_unscaled(ctx, x, ROWS, D, 1e-5).await?;
    let qkv = proto::matmul_fixed(ctx, &a, &w.w_qkv, ROWS, D, 3 * D).await?;
    // Heads: q and v as HEADS × ROWS × HD, k transposed as HEADS × HD × ROWS.
    let head_major = |part: usize| -> Vec<usize> {
        (0..HEADS)
            .flat_map(|h| {
                (0..ROWS).flat_map(move |i| (0..HD).map(move |j| i * 3 * D + part * D + h * HD + j))
            })
            .collect()
    };
    let transposed: Vec<usize> = (0..HEADS)
        .flat_map(|h| (0..HD).flat_map(move |j| (0..ROWS).map(move |i| i * 3 * D + D + h * HD + j)))
        .collect();
    let q = qkv.gather(&head_major(0))?;
    let kt = qkv.gather(&transposed)?;
    let v = qkv.gather(&head_major(2))?;
    let scores = proto::matmul_batch_fixed(ctx, &q, &kt, HEADS, (ROWS, HD, ROWS)).await?;
    let valid: Vec<usize> = (0..HEADS).flat_map(|_| 1..=ROWS).collect();
    let probs =
        proto::softmax_rows_with(ctx, &scores, HEADS * ROWS, ROWS, &valid, ExpApprox::Minimax)
            .await?;
    let heads = proto::matmul_batch_fixed(ctx, &probs, &v, HEADS, (ROWS, ROWS, HD)).await?;
    let merge: Vec<usize> = (0..ROWS)
        .flat_map(|i| (0..HEADS).flat_map(move |h| (0..HD).map(move |j| (h * ROWS + i) * HD + j)))
        .collect();
    let merged = heads.gather(&merge)?;
    let attn = proto::matmul_fixed(ctx, &merged, &w.w_proj, ROWS, D, D).await?;
    let x = x.add(&attn)?;
    let a2 = proto::layernorm_rows_unscaled(ctx, &x, ROWS, D, 1e-5).await?;
    let hidden = proto::matmul_fixed(ctx, &a2, &w.w_fc, ROWS, D, INNER).await?;
    let act = proto::gelu_precise(ctx, &hidden, GeluForm::Tanh).await?;
    let mlp = proto::matmul_fixed(ctx, &act, &w.w_out, ROWS, INNER, D).await?;
    let y = x.add(&mlp)?;
    proto::reveal_all(ctx, &y).await
}

/// What one run under a work budget did.
pub struct Run<T> {
    /// Each party's output.
    pub outputs: [T; 3],
    /// Every frame sent, as (from, to, bytes), in the order each link carried them.
    pub frames: [[Vec<Vec<u8>>; 3]; 3],
    /// Each party's rounds.
    pub rounds: [u32; 3],
    /// `Output::Yielded` returns, over the three sessions.
    pub yields: u64,
    /// `poll_output` calls, over the three sessions.
    pub polls: u64,
    /// The longest single `poll_output` call in wall time: the longest stretch the host
    /// was away (on a busy machine this includes time the thread was descheduled).
    pub longest_poll: Duration,
    /// The longest single `poll_output` call in this thread's CPU time, where the OS reports
    /// it (Linux): the work a poll did, whatever else runs on the machine.
    pub longest_poll_cpu: Option<Duration>,
    /// The slowest polls by CPU time, as (rounds the party had completed, party, CPU time):
    /// where the work that no budget splits sits.
    pub slowest: Vec<(u64, usize, Duration)>,
    /// Wall time of the whole run.
    pub total: Duration,
}

/// Runs [`block`] on `w` with `work_budget` (see [`drive`]).
pub fn run(w: &Weights, work_budget: u64) -> Result<Run<Vec<u64>>, Error> {
    drive(work_budget, |p| {
        let w = SharedWeights::new(p, w);
        move |mut ctx| async move { block(&mut ctx, &w).await }
    })
}

/// Runs `protocol(p)` at each party `p` with `work_budget`, driving the three sessions in
/// this thread: each session runs until it waits, finishes or yields, then the host
/// delivers the frames it sent and moves to the next one.
pub fn drive<T, P, F, Fut>(work_budget: u64, mut protocol: P) -> Result<Run<T>, Error>
where
    T: Send + 'static,
    P: FnMut(PartyId) -> F,
    F: FnOnce(Ctx) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, Error>> + Send + 'static,
{
    let mut cfg = Config::new(0x0079_6965_6c64);
    cfg.work_budget = work_budget;
    let mut sessions: Vec<Option<Session<T>>> = PartyId::ALL
        .into_iter()
        .map(|p| {
            let entropy = [p.index() as u8 + 1; 32];
            Session::new(cfg.clone(), p, entropy, protocol(p)).map(Some)
        })
        .collect::<Result<_, _>>()?;
    let mut outputs: [Option<T>; 3] = Default::default();
    let mut rounds = [0u32; 3];
    let mut frames: [[Vec<Vec<u8>>; 3]; 3] = Default::default();
    let (mut yields, mut polls, mut longest_poll) = (0u64, 0u64, Duration::ZERO);
    let mut longest_poll_cpu: Option<Duration> = None;
    let mut slowest: Vec<(u64, usize, Duration)> = Vec::new();
    let start = Instant::now();
    while sessions.iter().any(Option::is_some) {
        let mut progressed = false;
        for i in 0..3 {
            let mut sent = VecDeque::new();
            if let Some(s) = sessions[i].as_mut() {
                loop {
                    let c0 = thread_cpu_time();
                    let t0 = Instant::now();
                    let out = s.poll_output();
                    longest_poll = longest_poll.max(t0.elapsed());
                    if let (Some(c0), Some(c1)) = (c0, thread_cpu_time()) {
                        let c = c1.saturating_sub(c0);
                        longest_poll_cpu = Some(longest_poll_cpu.unwrap_or_default().max(c));
                        slowest.push((u64::from(s.stats().rounds), i, c));
                        slowest.sort_by_key(|e| std::cmp::Reverse(e.2));
                        slowest.truncate(8);
                    }
                    polls += 1;
                    match out {
                        Output::Transmit(t) => {
                            progressed = true;
                            sent.push_back((t.to.index(), t.frame.into_bytes()));
                        }
                        Output::Yielded => {
                            progressed = true;
                            yields += 1;
                            break;
                        }
                        Output::Pending { .. } => break,
                        Output::Done(r) => {
                            progressed = true;
                            rounds[i] = s.stats().rounds;
                            outputs[i] = Some(r?);
                            sessions[i] = None;
                            break;
                        }
                    }
                }
            }
            for (to, bytes) in sent {
                if let Some(peer) = sessions[to].as_mut() {
                    peer.handle_input(Input::Frame {
                        from: PartyId::from_index(i),
                        bytes: &bytes,
                    })?;
                }
                frames[i][to].push(bytes);
            }
        }
        if !progressed {
            return Err(Error::bug("every session waits and no frame is in flight"));
        }
    }
    let [a, b, c] = outputs;
    let missing = || Error::bug("a session ended without an output");
    Ok(Run {
        outputs: [
            a.ok_or_else(missing)?,
            b.ok_or_else(missing)?,
            c.ok_or_else(missing)?,
        ],
        frames,
        rounds,
        yields,
        polls,
        longest_poll,
        longest_poll_cpu,
        slowest,
        total: start.elapsed(),
    })
}

/// This thread's CPU time so far, from `/proc/thread-self/schedstat` (Linux), if readable.
fn thread_cpu_time() -> Option<Duration> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}
