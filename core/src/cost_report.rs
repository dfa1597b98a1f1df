//! The protocol cost table (feature `dev`): every public protocol of [`crate::proto`], run
//! in the [simulator](crate::sim) on inputs in its supported range, with its measured
//! critical-path rounds and payload bytes per party.
//!
//! `cargo run --release -p puma-core --example cost` prints it and docs/PROTOCOLS.md (Cost
//! summary) lists it; `core/tests/cost_report.rs` pins every row to the documented figures.
//! Costs are data-independent, so the figures are deterministic; the inputs are in range
//! only so that every protocol runs as it does in a model.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::future::Future;

use crate::engine::Ctx;
use crate::error::Error;
use crate::fixed::FixedPoint;
use crate::party::PartyId;
use crate::proto::{self, ExpApprox, GeluFit, GeluForm, MaxMethod};
use crate::ring::Width;
use crate::share::{BitShares, Shares};
use crate::sim::Sim;

/// Batch sizes of a report. Per-party bytes are exact thirds (and bit-packed messages
/// whole bytes) when both are multiples of 24.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Batch {
    /// Elements of the elementwise protocols.
    pub elements: usize,
    /// Rows of the row-wise protocols (max, softmax, LayerNorm, RMSNorm), except the
    /// fixed shapes of a KV-cached step, a causal prompt and the vocabulary's argmax.
    pub rows: usize,
}

impl Batch {
    /// The batch of the printed report: 3072 elements, 24 rows.
    pub const REPORT: Batch = Batch {
        elements: 3072,
        rows: 24,
    };
}

/// One protocol call's measured cost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostRow {
    /// The protocol family (the heading the row is printed under).
    pub family: &'static str,
    /// The call, with its parameters.
    pub name: String,
    /// The unit the per-unit figures count (element, output, row of d, ...).
    pub unit: String,
    /// How many units the call processed.
    pub units: usize,
    /// Critical-path rounds.
    pub rounds: u32,
    /// Payload bytes sent by each party over the whole call, by index.
    pub bytes: [u64; 3],
}

impl CostRow {
    /// Payload bytes per unit sent by each party.
    pub fn bytes_per_unit(&self) -> [f64; 3] {
        self.bytes.map(|b| b as f64 / self.units as f64)
    }

    /// Payload bits per unit summed over the three parties.
    pub fn bits_per_unit(&self) -> f64 {
        self.bytes.iter().sum::<u64>() as f64 * 8.0 / self.units as f64
    }
}

/// A protocol call of the report that failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CostError {
    /// The row's name.
    pub row: String,
    /// The first party's error.
    pub error: Error,
}

impl core::fmt::Display for CostError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "cost row `{}` failed: {}", self.row, self.error)
    }
}

/// Deterministic pseudo-random reals in [lo, hi), encoded at the default fixed point (the
/// values only need to be in range; they are public to the simulator).
fn reals(n: usize, lo: f64, hi: f64, seed: u64) -> Vec<u64> {
    let fx = FixedPoint::default();
    let mut s = seed;
    (0..n)
        .map(|_| {
            let u = (splitmix(&mut s) >> 11) as f64 / (1u64 << 53) as f64;
            // In range by construction: lo and hi are far inside the encodable range.
            fx.encode(lo + (hi - lo) * u).unwrap_or(0)
        })
        .collect()
}

/// Deterministic pseudo-random raw values 2^lo ≤ X < 2^hi, log-uniform.
fn raw_log(n: usize, lo: u32, hi: u32, seed: u64) -> Vec<u64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            let j = lo + (splitmix(&mut s) % u64::from(hi - lo).max(1)) as u32;
            (1u64 << j) | (splitmix(&mut s) & ((1u64 << j) - 1))
        })
        .collect()
}

/// Deterministic pseudo-random bits.
fn bits(n: usize, seed: u64) -> Vec<u64> {
    let mut s = seed;
    (0..n).map(|_| splitmix(&mut s) & 1).collect()
}

fn splitmix(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn width(bits: u32) -> Result<Width, Error> {
    Width::new(bits).ok_or(Error::bug("cost report ring width out of range"))
}

type Measure = Box<dyn FnOnce() -> Result<(u32, [u64; 3]), Error>>;

/// Runs `f` at the three simulated parties (each given its id) and returns its rounds and
/// bytes.
fn measure<F, Fut, T>(f: F) -> Measure
where
    F: Fn(Ctx, PartyId) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<T, Error>> + Send + 'static,
    T: Send + 'static,
{
    Box::new(move || {
        let out = Sim::new(1).run(move |me| {
            let f = f.clone();
            move |ctx| f(ctx, me)
        });
        if let Some(e) = out.results.iter().find_map(|r| r.as_ref().err()) {
            return Err(*e);
        }
        Ok((out.rounds(), out.payload_bytes()))
    })
}

struct Table {
    rows: Vec<CostRow>,
    family: &'static str,
}

impl Table {
    fn family(&mut self, family: &'static str) {
        self.family = family;
    }

    fn row(
        &mut self,
        name: impl Into<String>,
        unit: impl Into<String>,
        units: usize,
        m: Measure,
    ) -> Result<(), CostError> {
        let name = name.into();
        let (rounds, bytes) = m().map_err(|error| CostError {
            row: name.clone(),
            error,
        })?;
        self.rows.push(CostRow {
            family: self.family,
            name,
            unit: unit.into(),
            units,
            rounds,
            bytes,
        });
        Ok(())
    }
}

/// Shares of public values at party `me`: a valid sharing with no messages.
fn shares(me: PartyId, v: &[u64]) -> Shares {
    Shares::from_public(me, v)
}

/// Measures every public protocol of [`crate::proto`] on `batch` (see [`Batch`]).
///
/// # Errors
/// The first protocol call that failed, by row name.
pub fn cost_rows(batch: Batch) -> Result<Vec<CostRow>, CostError> {
    let n = batch.elements;
    let r = batch.rows;
    let mut t = Table {
        rows: Vec::new(),
        family: "",
    };
    let x = reals(n, -100.0, 100.0, 1);

    t.family("Input sharing and reveal");
    let v = x.clone();
    t.row(
        "share_input (owner P0)",
        "element",
        n,
        measure(move |mut c, me| {
            let v = v.clone();
            async move {
                let mine = (me == PartyId::P0).then_some(&v[..]);
                proto::share_input(&mut c, PartyId::P0, mine, v.len()).await
            }
        }),
    )?;
    let v = x.clone();
    t.row(
        "share_input_parts, 3 parts (owner P0)",
        "element",
        n,
        measure(move |mut c, me| {
            let v = v.clone();
            async move {
                let third = v.len() / 3;
                let sizes = [third, third, v.len() - 2 * third];
                let parts = (me == PartyId::P0).then(|| {
                    vec![
                        v[..third].to_vec(),
                        v[third..2 * third].to_vec(),
                        v[2 * third..].to_vec(),
                    ]
                });
                proto::share_input_parts(&mut c, PartyId::P0, parts, &sizes).await
            }
        }),
    )?;
    let v = x.clone();
    t.row(
        "share_input_streamed, 2 tensors in 3 chunks (owner P0)",
        "element",
        n,
        measure(move |mut c, me| {
            let v = v.clone();
            async move {
                let half = v.len() / 2;
                let sizes = [half, v.len() - half];
                let parts = (me == PartyId::P0)
                    .then(|| vec![Ok(v[..half].to_vec()), Ok(v[half..].to_vec())]);
                let chunk = v.len().div_ceil(3);
                proto::share_input_streamed(&mut c, PartyId::P0, parts, &sizes, chunk).await
            }
        }),
    )?;
    t.row(
        "share_one_hot, 4 rows over GPT-2's 50,257 columns (owner P0)",
        "row",
        4,
        measure(move |mut c, me| async move {
            let hot = [17u32, 50_256, 0, 31_337];
            let mine = (me == PartyId::P0).then_some(&hot[..]);
            proto::share_one_hot(&mut c, PartyId::P0, mine, 4, 1, 50_257).await
        }),
    )?;
    let v = x.clone();
    t.row(
        "reveal_all",
        "element",
        n,
        measure(move |mut c, me| {
            let v = v.clone();
            async move { proto::reveal_all(&mut c, &shares(me, &v)).await }
        }),
    )?;
    let v = x.clone();
    t.row(
        "reveal_to(P0)",
        "element",
        n,
        measure(move |mut c, me| {
            let v = v.clone();
            async move { proto::reveal_to(&mut c, &shares(me, &v), PartyId::P0).await }
        }),
    )?;

    t.family("Products and truncation");
    let v = x.clone();
    t.row(
        "mul",
        "element",
        n,
        measure(move |mut c, me| {
            let v = v.clone();
            async move {
                let s = shares(me, &v);
                proto::mul(&mut c, &s, &s).await
            }
        }),
    )?;
    let v = x.clone();
    t.row(
        "square",
        "element",
        n,
        measure(move |mut c, me| {
            let v = v.clone();
            async move { proto::square(&mut c, &shares(me, &v)).await }
        }),
    )?;
    let v = x.clone();
    t.row(
        "mul_fixed (product + fused truncation)",
        "element",
        n,
        measure(move |mut c, me| {
            let v = v.clone();
            async move {
                let s = shares(me, &v);
                proto::mul_fixed(&mut c, &s, &s).await
            }
        }),
    )?;
    let v = x.clone();
    t.row(
        "square_fixed",
        "element",
        n,
        measure(move |mut c, me| {
            let v = v.clone();
            async move { proto::square_fixed(&mut c, &shares(me, &v)).await }
        }),
    )?;
    for d in [1u32, 12, 18, 30] {
        let v = x.clone();
        t.row(
            format!("trunc, d = {d}"),
            "element",
            n,
            measure(move |mut c, me| {
                let v = v.clone();
                async move { proto::trunc(&mut c, &shares(me, &v), d).await }
            }),
        )?;
    }
    // A product finished from its summands in the MLP's narrow ring (puma-layers):
    // summed in Z_2^56, truncated by f into Z_2^56 or Z_2^64.
    for out in [56u32, 64] {
        let v = x.clone();
        t.row(
            format!("reshare_trunc_summands of mul_summands, Z_2^56 → Z_2^{out}"),
            "element",
            n,
            measure(move |mut c, me| {
                let v = v.clone();
                async move {
                    let s = shares(me, &v);
                    let f = c.fixed().frac_bits();
                    let ring = Width::new(56).ok_or(Error::bug("ring"))?;
                    let output = Width::new(out).ok_or(Error::bug("ring"))?;
                    let z = proto::mul_summands(&s, &s)?;
                    proto::reshare_trunc_summands(&mut c, z, ring, f, output).await
                }
            }),
        )?;
    }
    // The MLP's first projection cut into the GeLU's Z_2^46 (puma-layers): from Z_2^64 by f.
    let v = x.clone();
    t.row(
        "reshare_cut_summands of mul_summands, Z_2^64 → Z_2^46",
        "element",
        n,
        measure(move |mut c, me| {
            let v = v.clone();
            async move {
                let s = shares(me, &v);
                let f = c.fixed().frac_bits();
                let output = Width::new(46).ok_or(Error::bug("ring"))?;
                let z = proto::mul_summands(&s, &s)?;
                proto::reshare_cut_summands(&mut c, z, Width::W64, f, output).await
            }
        }),
    )?;
    let (m, k, o) = (24, 768, 64);
    let ab = reals(m * k + k * o, -1.0, 1.0, 2);
    for fixed in [false, true] {
        let v = ab.clone();
        t.row(
            format!(
                "{} {m}×{k} · {k}×{o}",
                if fixed { "matmul_fixed" } else { "matmul" }
            ),
            "output",
            m * o,
            measure(move |mut c, me| {
                let v = v.clone();
                async move {
                    let (a, b) = shares(me, &v).split_at(m * k)?;
                    if fixed {
                        proto::matmul_fixed(&mut c, &a, &b, m, k, o).await
                    } else {
                        proto::matmul(&mut c, &a, &b, m, k, o).await
                    }
                }
            }),
        )?;
    }
    let (h, m, k, o) = (12, 32, 64, 32);
    let ab = reals(h * (m * k + k * o), -1.0, 1.0, 3);
    for fixed in [false, true] {
        let v = ab.clone();
        t.row(
            format!(
                "{} {h} × ({m}×{k} · {k}×{o})",
                if fixed {
                    "matmul_batch_fixed"
                } else {
                    "matmul_batch"
                }
            ),
            "output",
            h * m * o,
            measure(move |mut c, me| {
                let v = v.clone();
                async move {
                    let (a, b) = shares(me, &v).split_at(h * m * k)?;
                    if fixed {
                        proto::matmul_batch_fixed(&mut c, &a, &b, h, (m, k, o)).await
                    } else {
                        proto::matmul_batch(&mut c, &a, &b, h, (m, k, o)).await
                    }
                }
            }),
        )?;
    }
    // Attention's scores in puma-layers: truncated into the ring the minimax softmax reads.
    let scores_ring = proto::softmax_input_bits(18, proto::ExpApprox::Minimax);
    t.row(
        format!(
            "matmul_batch_summands {h} × ({m}×{k} · {k}×{o}), reshare_trunc_summands into Z_2^{scores_ring}"
        ),
        "output",
        h * m * o,
        measure(move |mut c, me| {
            let v = ab.clone();
            async move {
                let (a, b) = shares(me, &v).split_at(h * m * k)?;
                let s = proto::matmul_batch_summands(&c, &a, &b, h, (m, k, o)).await?;
                let ring = width(scores_ring)?;
                proto::reshare_trunc_summands(&mut c, s, Width::W64, 18, ring).await
            }
        }),
    )?;

    t.family("Boolean and comparisons");
    for w in [64u32, 1] {
        let v = bits(n, 4);
        t.row(
            format!("and, w = {w}"),
            "element",
            n,
            measure(move |mut c, me| {
                let v = v.clone();
                async move {
                    let ww = width(w)?;
                    let b = BitShares::from_public(me, ww, &v);
                    proto::and(&mut c, &b, &b).await
                }
            }),
        )?;
    }
    let one = proto::MsbForm::OneRound;
    let two = proto::MsbForm::TwoRound;
    for (k, form) in [
        (64u32, one),
        (40, one),
        (32, one),
        (16, one),
        (64, two),
        (18, two),
    ] {
        // |X| < 2^(k−2) raw: inside Z_2^k's signed range.
        let v: Vec<u64> = raw_log(n, 0, k - 2, 5)
            .into_iter()
            .zip(bits(n, 6))
            .map(|(x, s)| if s == 1 { x.wrapping_neg() } else { x })
            .collect();
        let name = match form {
            proto::MsbForm::OneRound => format!("msb, k = {k}"),
            proto::MsbForm::TwoRound => format!("msb_with(MsbForm::TwoRound), k = {k}"),
        };
        t.row(
            name,
            "element",
            n,
            measure(move |mut c, me| {
                let v = v.clone();
                async move { proto::msb_with(&mut c, &shares(me, &v), width(k)?, form).await }
            }),
        )?;
    }
    let (a, b) = (reals(n, -4000.0, 4000.0, 7), reals(n, -4000.0, 4000.0, 8));
    {
        let (a, b) = (a.clone(), b.clone());
        t.row(
            "lt, k = 32",
            "element",
            n,
            measure(move |mut c, me| {
                let (a, b) = (a.clone(), b.clone());
                async move { proto::lt(&mut c, &shares(me, &a), &shares(me, &b), width(32)?).await }
            }),
        )?;
    }
    {
        let (a, b) = (a.clone(), b.clone());
        t.row(
            "lt_public, k = 32",
            "element",
            n,
            measure(move |mut c, me| {
                let (a, b) = (a.clone(), b.clone());
                async move { proto::lt_public(&mut c, &shares(me, &a), &b, width(32)?).await }
            }),
        )?;
    }
    for k in [64u32, 23] {
        // |X| < 2^(k−2) raw, as for msb.
        let v: Vec<u64> = raw_log(n, 0, k - 2, 10)
            .into_iter()
            .zip(bits(n, 11))
            .map(|(x, s)| if s == 1 { x.wrapping_neg() } else { x })
            .collect();
        t.row(
            format!("msb_masked, k = {k}"),
            "element",
            n,
            measure(move |mut c, me| {
                let v = v.clone();
                async move { proto::msb_masked(&mut c, &shares(me, &v), width(k)?).await }
            }),
        )?;
    }
    // The normalisations' comparisons: LayerNorm's (X < 2^62, thresholds 2^19..2^61) and
    // the softmax reciprocal's for rows of 32 (thresholds 2^18..2^23).
    for (k, lo) in [(63u32, 18u32), (25, 17)] {
        let hi = k - 2;
        let v = raw_log(n, lo, hi, 9);
        let powers: Vec<u64> = (lo + 1..=hi).map(|j| 1u64 << j).collect();
        t.row(
            format!("lt_thresholds, k = {k}, {} thresholds", powers.len()),
            "element",
            n,
            measure(move |mut c, me| {
                let (v, powers) = (v.clone(), powers.clone());
                async move { proto::lt_thresholds(&mut c, &shares(me, &v), &powers, width(k)?).await }
            }),
        )?;
    }
    for k in [64u32, 32, 16] {
        let (a, b) = (a.clone(), b.clone());
        t.row(
            format!("eq_public, k = {k}"),
            "element",
            n,
            measure(move |mut c, me| {
                let (a, b) = (a.clone(), b.clone());
                async move { proto::eq_public(&mut c, &shares(me, &a), &b, width(k)?).await }
            }),
        )?;
    }
    {
        let (a, b) = (a.clone(), b.clone());
        t.row(
            "eq, k = 32",
            "element",
            n,
            measure(move |mut c, me| {
                let (a, b) = (a.clone(), b.clone());
                async move { proto::eq(&mut c, &shares(me, &a), &shares(me, &b), width(32)?).await }
            }),
        )?;
    }
    let bv = bits(n, 9);
    {
        let bv = bv.clone();
        t.row(
            "b2a",
            "element",
            n,
            measure(move |mut c, me| {
                let bv = bv.clone();
                async move {
                    let b = BitShares::from_public(me, Width::BIT, &bv);
                    proto::b2a(&mut c, &b).await
                }
            }),
        )?;
    }
    for sel in [false, true] {
        let (bv, a, b) = (bv.clone(), a.clone(), b.clone());
        t.row(
            if sel {
                "select (b2a + mul)"
            } else {
                "mul_bit (b2a + mul)"
            },
            "element",
            n,
            measure(move |mut c, me| {
                let (bv, a, b) = (bv.clone(), a.clone(), b.clone());
                async move {
                    let bit = BitShares::from_public(me, Width::BIT, &bv);
                    let (a, b) = (shares(me, &a), shares(me, &b));
                    if sel {
                        proto::select(&mut c, &bit, &a, &b).await
                    } else {
                        proto::mul_bit(&mut c, &bit, &a).await
                    }
                }
            }),
        )?;
    }

    t.family("Max and argmax");
    let k32 = proto::SOFTMAX_RING_BITS;
    let scores = reals(r * 32, -4000.0, 4000.0, 10);
    for arg in [false, true] {
        let v = scores.clone();
        t.row(
            format!(
                "{}, rows of 32 (a prompt), k = 32",
                if arg { "argmax_rows" } else { "max_rows" }
            ),
            "row of 32",
            r,
            measure(move |mut c, me| {
                let v = v.clone();
                async move {
                    let s = shares(me, &v);
                    if arg {
                        proto::argmax_rows(&mut c, &s, v.len() / 32, 32, width(k32)?)
                            .await
                            .map(|(m, _)| m)
                    } else {
                        proto::max_rows(&mut c, &s, v.len() / 32, 32, width(k32)?).await
                    }
                }
            }),
        )?;
    }
    let kv = reals(12 * 33, -4000.0, 4000.0, 11);
    t.row(
        "max_rows, 12 rows of 33 (a KV-cached step), k = 32",
        "row of 33",
        12,
        measure(move |mut c, me| {
            let v = kv.clone();
            async move { proto::max_rows(&mut c, &shares(me, &v), 12, 33, width(k32)?).await }
        }),
    )?;
    const VOCAB: usize = 50257;
    let logits = reals(VOCAB, -100.0, 100.0, 12);
    for (label, method, arg) in [
        ("argmax_rows (default method)", MaxMethod::default(), true),
        (
            "argmax_rows_with Hybrid { 32 }",
            MaxMethod::Hybrid { all_pairs_max: 32 },
            true,
        ),
        ("max_rows_with Tournament", MaxMethod::Tournament, false),
    ] {
        let v = logits.clone();
        t.row(
            format!("{label}, 1 row of {VOCAB}, k = 41"),
            format!("row of {VOCAB}"),
            1,
            measure(move |mut c, me| {
                let v = v.clone();
                async move {
                    let s = shares(me, &v);
                    if arg {
                        proto::argmax_rows_with(&mut c, &s, 1, VOCAB, width(41)?, method)
                            .await
                            .map(|(m, _)| m)
                    } else {
                        proto::max_rows_with(&mut c, &s, 1, VOCAB, width(41)?, method).await
                    }
                }
            }),
        )?;
    }

    t.family("Reciprocal and reciprocal square root");
    // x ∈ [2^−10, 2^20]: raw 2^8 ≤ X < 2^39.
    let wide = raw_log(n, 8, 39, 13);
    {
        let v = wide.clone();
        t.row(
            "reciprocal, lo = 8, hi = 38",
            "element",
            n,
            measure(move |mut c, me| {
                let v = v.clone();
                async move { proto::reciprocal(&mut c, &shares(me, &v), 8, 38).await }
            }),
        )?;
    }
    for (lo, hi, extra) in [(8u32, 38u32, 20u32), (17, 22, 12)] {
        let v = raw_log(n, lo, hi + 1, 14);
        t.row(
            format!("reciprocal_extra, lo = {lo}, hi = {hi}, extra = {extra}"),
            "element",
            n,
            measure(move |mut c, me| {
                let v = v.clone();
                async move { proto::reciprocal_extra(&mut c, &shares(me, &v), lo, hi, extra).await }
            }),
        )?;
    }
    {
        let v = wide.clone();
        t.row(
            "rsqrt, lo = 8, hi = 38, extra = 0",
            "element",
            n,
            measure(move |mut c, me| {
                let v = v.clone();
                async move { proto::rsqrt(&mut c, &shares(me, &v), 8, 38, 0).await }
            }),
        )?;
    }
    for (lo, hi, extra, scale, label) in [
        (18u32, 61u32, 8u32, 768u64 << 8, "c = 768·2^8 (LayerNorm's)"),
        (13, 60, 8, 576 << 3, "c = 576·2^3 (RMSNorm's)"),
    ] {
        let v = raw_log(n, lo, hi + 1, 15);
        t.row(
            format!("rsqrt_scaled, lo = {lo}, hi = {hi}, extra = {extra}, {label}"),
            "element",
            n,
            measure(move |mut c, me| {
                let v = v.clone();
                async move {
                    proto::rsqrt_scaled(&mut c, &shares(me, &v), lo, hi, extra, scale).await
                }
            }),
        )?;
    }

    t.family("Exponential and softmax");
    let neg = reals(n, -20.0, 0.0, 16);
    for a in [
        ExpApprox::Puma { squarings: 5 },
        ExpApprox::Puma { squarings: 8 },
        ExpApprox::Taylor2 { squarings: 4 },
        ExpApprox::Taylor2 { squarings: 8 },
        ExpApprox::Minimax,
    ] {
        let v = neg.clone();
        t.row(
            format!("neg_exp_with, {}", exp_label(a)),
            "element",
            n,
            measure(move |mut c, me| {
                let v = v.clone();
                async move { proto::neg_exp_with(&mut c, &shares(me, &v), a).await }
            }),
        )?;
    }
    let att = reals(r * 32, -50.0, 50.0, 17);
    {
        let v = att.clone();
        t.row(
            "softmax_rows, rows of 32, Puma t = 5",
            "row of 32",
            r,
            measure(move |mut c, me| {
                let v = v.clone();
                async move { proto::softmax_rows(&mut c, &shares(me, &v), v.len() / 32, 32, 5).await }
            }),
        )?;
    }
    {
        let v = att.clone();
        t.row(
            "softmax_rows_with, rows of 32, Minimax",
            "row of 32",
            r,
            measure(move |mut c, me| {
                let v = v.clone();
                async move {
                    let rows = v.len() / 32;
                    let valid = vec![32; rows];
                    let s = shares(me, &v);
                    proto::softmax_rows_with(&mut c, &s, rows, 32, &valid, ExpApprox::Minimax).await
                }
            }),
        )?;
    }
    {
        let v = reals(32 * 32, -50.0, 50.0, 18);
        t.row(
            "softmax_rows_with, causal 32 rows over 32 keys, Minimax",
            "row (mean)",
            32,
            measure(move |mut c, me| {
                let v = v.clone();
                async move {
                    let valid: Vec<usize> = (1..=32).collect();
                    let s = shares(me, &v);
                    proto::softmax_rows_with(&mut c, &s, 32, 32, &valid, ExpApprox::Minimax).await
                }
            }),
        )?;
    }
    {
        let v = reals(12 * 33, -50.0, 50.0, 19);
        t.row(
            "softmax_rows_with, 12 rows of 33 (a KV-cached step), Minimax",
            "row of 33",
            12,
            measure(move |mut c, me| {
                let v = v.clone();
                async move {
                    let valid = vec![33; 12];
                    let s = shares(me, &v);
                    proto::softmax_rows_with(&mut c, &s, 12, 33, &valid, ExpApprox::Minimax).await
                }
            }),
        )?;
    }
    {
        // GPT-2's attention: 12 heads × 32 causal queries over 32 keys, heads of 64.
        let (h, q, dim) = (12usize, 32usize, 64usize);
        let v = reals(h * q * q, -50.0, 50.0, 21);
        let vals = reals(h * q * dim, -8.0, 8.0, 22);
        t.row(
            "softmax_matmul_batch, 12 × 32 causal rows over 32 keys, heads of 64, Minimax",
            "row (mean)",
            h * q,
            measure(move |mut c, me| {
                let (v, vals) = (v.clone(), vals.clone());
                async move {
                    let valid: Vec<usize> = (0..h).flat_map(|_| 1..=q).collect();
                    let (s, vs) = (shares(me, &v), shares(me, &vals));
                    let shape = (q, q, dim);
                    proto::softmax_matmul_batch(
                        &mut c,
                        &s,
                        &vs,
                        h,
                        shape,
                        &valid,
                        ExpApprox::Minimax,
                    )
                    .await
                }
            }),
        )?;
        // The same from the scores' products (X·I at 2f bits, read in Z_2^(f+33)), as the
        // models call it.
        let (v, vals) = (
            reals(h * q * q, -50.0, 50.0, 21),
            reals(h * q * dim, -8.0, 8.0, 22),
        );
        t.row(
            "softmax_matmul_batch_of_products, the same from the products in Z_2^51",
            "row (mean)",
            h * q,
            measure(move |mut c, me| {
                let (v, vals) = (v.clone(), vals.clone());
                async move {
                    let valid: Vec<usize> = (0..h).flat_map(|_| 1..=q).collect();
                    let (s, vs) = (shares(me, &v), shares(me, &vals));
                    let one = FixedPoint::default().one();
                    let eye: Vec<u64> = (0..h * q * q)
                        .map(|i| if i % q == (i / q) % q { one } else { 0 })
                        .collect();
                    let p = proto::matmul_batch_summands(&c, &s, &shares(me, &eye), h, (q, q, q))
                        .await?;
                    let f = FixedPoint::default().frac_bits();
                    let input = Width::new(proto::softmax_product_bits(f))
                        .ok_or(Error::bug("products ring"))?;
                    proto::softmax_matmul_batch_of_products(
                        &mut c,
                        &p,
                        input,
                        &vs,
                        h,
                        (q, q, dim),
                        &valid,
                        ExpApprox::Minimax,
                    )
                    .await
                }
            }),
        )?;
    }

    t.family("Normalisation");
    let d = 768;
    let ln = reals(r * d + 2 * d, -10.0, 10.0, 20);
    for affine in [true, false] {
        let v = ln.clone();
        t.row(
            format!(
                "{}, rows of {d}, ε = 1e-5",
                if affine {
                    "layernorm_rows"
                } else {
                    "layernorm_rows_unscaled"
                }
            ),
            format!("row of {d}"),
            r,
            measure(move |mut c, me| {
                let v = v.clone();
                async move {
                    let rows = v.len() / d - 2;
                    let (x, gb) = shares(me, &v).split_at(rows * d)?;
                    let (g, b) = gb.split_at(d)?;
                    if affine {
                        proto::layernorm_rows(&mut c, &x, rows, d, &g, &b, 1e-5).await
                    } else {
                        proto::layernorm_rows_unscaled(&mut c, &x, rows, d, 1e-5).await
                    }
                }
            }),
        )?;
    }
    let d = 576;
    let rms = reals(r * d + d, -100.0, 100.0, 21);
    for weighted in [true, false] {
        let v = rms.clone();
        t.row(
            format!(
                "{}, rows of {d}, ε = 1e-5, bound 2^15",
                if weighted {
                    "rms_norm_rows"
                } else {
                    "rms_norm_rows_unscaled"
                }
            ),
            format!("row of {d}"),
            r,
            measure(move |mut c, me| {
                let v = v.clone();
                async move {
                    let rows = v.len() / d - 1;
                    let (x, g) = shares(me, &v).split_at(rows * d)?;
                    if weighted {
                        proto::rms_norm_rows(&mut c, &x, rows, d, &g, 1e-5, 32768.0).await
                    } else {
                        proto::rms_norm_rows_unscaled(&mut c, &x, rows, d, 1e-5, 32768.0).await
                    }
                }
            }),
        )?;
    }

    t.family("Activations");
    let act = reals(n, -10.0, 10.0, 22);
    let acts = [
        "gelu (PUMA fit)",
        "gelu_with(GeluFit::PUMA)",
        "gelu_with(GeluFit::MINIMAX)",
        "gelu_precise(GeluForm::Erf)",
        "gelu_precise(GeluForm::Tanh)",
        "gelu_chebyshev(GeluForm::Erf)",
        "gelu_chebyshev(GeluForm::Tanh)",
        "silu (piecewise polynomial)",
        "silu_chebyshev",
        "gelu_chebyshev_into(GeluForm::Erf, Z_2^64 → Z_2^56)",
        "silu_chebyshev_into(Z_2^56)",
        "gelu_chebyshev_into(GeluForm::Erf, Z_2^46 → Z_2^56)",
        "tanh",
    ];
    for (i, name) in acts.into_iter().enumerate() {
        let v = act.clone();
        t.row(
            name,
            "element",
            n,
            measure(move |mut c, me| {
                let v = v.clone();
                async move {
                    let x = shares(me, &v);
                    let c = &mut c;
                    match i {
                        0 => proto::gelu(c, &x).await,
                        1 => proto::gelu_with(c, &x, &GeluFit::PUMA).await,
                        2 => proto::gelu_with(c, &x, &GeluFit::MINIMAX).await,
                        3 => proto::gelu_precise(c, &x, GeluForm::Erf).await,
                        4 => proto::gelu_precise(c, &x, GeluForm::Tanh).await,
                        5 => proto::gelu_chebyshev(c, &x, GeluForm::Erf).await,
                        6 => proto::gelu_chebyshev(c, &x, GeluForm::Tanh).await,
                        7 => proto::silu(c, &x).await,
                        8 => proto::silu_chebyshev(c, &x).await,
                        9..=11 => {
                            let ring = Width::new(56).ok_or(Error::bug("ring"))?;
                            let input = Width::new(proto::gelu_chebyshev_input_bits(18))
                                .ok_or(Error::bug("ring"))?;
                            match i {
                                9 => {
                                    let rings = (Width::W64, ring);
                                    proto::gelu_chebyshev_into(c, &x, GeluForm::Erf, rings).await
                                }
                                10 => proto::silu_chebyshev_into(c, &x, ring).await,
                                _ => {
                                    let rings = (input, ring);
                                    proto::gelu_chebyshev_into(c, &x, GeluForm::Erf, rings).await
                                }
                            }
                        }
                        _ => proto::tanh(c, &x).await,
                    }
                }
            }),
        )?;
    }

    t.family("Sampling");
    let sampled = reals(r * 16, -8.0, 8.0, 23);
    let vocab_logits = reals(VOCAB, -100.0, 100.0, 24);
    let all = proto::SamplingParams {
        temperature: 0.8,
        top_k: Some(8),
        top_p: Some(0.9),
        min_p: Some(0.2),
    };
    let gpt2 = proto::SamplingParams {
        temperature: 1.0,
        top_k: Some(50),
        top_p: Some(0.9),
        min_p: None,
    };
    for (name, params, rows, cols, v) in [
        (
            "sample_rows, T = 0.7, rows of 16",
            proto::SamplingParams::with_temperature(0.7),
            r,
            16,
            &sampled,
        ),
        (
            "sample_rows, T = 0.8, top-k 8, top-p 0.9, min-p 0.2, rows of 16",
            all,
            r,
            16,
            &sampled,
        ),
        (
            "sample_rows, T = 1, 1 row of 50257",
            proto::SamplingParams::with_temperature(1.0),
            1,
            VOCAB,
            &vocab_logits,
        ),
        (
            "sample_rows, top-k 50, top-p 0.9, 1 row of 50257",
            gpt2,
            1,
            VOCAB,
            &vocab_logits,
        ),
    ] {
        let v = v.clone();
        t.row(
            name,
            format!("row of {cols}"),
            rows,
            measure(move |mut c, me| {
                let v = v.clone();
                async move {
                    let x = shares(me, &v);
                    proto::sample_rows(&mut c, &x, rows, cols, &params)
                        .await
                        .map(|(_, id)| id)
                }
            }),
        )?;
    }
    Ok(t.rows)
}

fn exp_label(a: ExpApprox) -> String {
    match a {
        ExpApprox::Puma { squarings } => format!("Puma t = {squarings}"),
        ExpApprox::Taylor2 { squarings } => format!("Taylor2 t = {squarings}"),
        ExpApprox::Minimax => String::from("Minimax"),
    }
}
