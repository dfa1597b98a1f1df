//! Most significant bit and comparisons (docs/PROTOCOLS.md, MSB and comparison).

use alloc::vec::Vec;

use crate::engine::{Ctx, try_join};
use crate::error::Error;
use crate::party::PartyId;
use crate::ring::Width;
use crate::share::{BitShares, Shares};

use super::blocks::role_blocks;

/// Gathers the bits at even positions (0, 2, 4, …) into the low half of the word.
fn even_bits(x: u64) -> u64 {
    let mut x = x & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0f0f_0f0f_0f0f_0f0f;
    x = (x | (x >> 4)) & 0x00ff_00ff_00ff_00ff;
    x = (x | (x >> 8)) & 0x0000_ffff_0000_ffff;
    (x | (x >> 16)) & 0x0000_0000_ffff_ffff
}

/// Gathers the bits at odd positions.
fn odd_bits(x: u64) -> u64 {
    even_bits(x >> 1)
}

fn low_mask(bits: u32) -> u64 {
    Width::new(bits).map_or(0, Width::mask)
}

/// Rounds of [`msb`], [`lt`] and [`lt_public`] in a ring of `k` bits (2 ≤ k ≤ 64):
/// 1 + ⌈log2(k − 1)⌉, which is 7 at k = 64 and 6 at k = 32.
pub const fn msb_rounds(k: u32) -> u32 {
    msb_rounds_with(k, MsbForm::OneRound)
}

/// Rounds of [`msb_with`] in a ring of `k` bits (2 ≤ k ≤ 64) and the given form:
/// ⌈log2(k − 1)⌉ for the carry tree after a first layer of 1 or 2 rounds.
pub const fn msb_rounds_with(k: u32, form: MsbForm) -> u32 {
    // ⌈log2 m⌉ for m = k − 1 ≥ 1 is the bit length of m − 1.
    let tree = u32::BITS - k.saturating_sub(2).leading_zeros();
    match form {
        MsbForm::OneRound => 1 + tree,
        MsbForm::TwoRound => 2 + tree,
    }
}

/// How [`msb_with`] makes the generate bits y ∧ x_0 of its first layer
/// (docs/PROTOCOLS.md, MSB and comparison).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MsbForm {
    /// A three-party OT beside y's input: 1 round, 7k − 6 bits per element in the first
    /// layer, for comparisons on the critical path.
    OneRound,
    /// Each holder of x_0 multiplies it by the part of y it knows, and the two exchange
    /// their products masked: 2 rounds, 3k − 2 bits, for comparisons whose rounds hide
    /// beside another branch.
    TwoRound,
}

/// Sign bit of each element of `x` read in the ring Z_2^k with k = `width` (the
/// components are reduced mod 2^k first, a free ring homomorphism).
///
/// One-round first layer ([`MsbForm::OneRound`]; [`msb_with`] offers the cheaper
/// two-round one), then a carry tree (docs/PROTOCOLS.md, MSB and comparison):
/// `P1`'s role computes y = x_1 + x_2, so x = y + x_0 is a sum of two operands;
/// `[y]^B` is input by that role and the generate bits y ∧ x_0 come from a bitwise
/// three-party OT whose choice bits x_0 the other two roles know; a binary tree over the
/// k−1 low positions combines (generate, propagate) pairs, and msb = p_{k−1} ⊕ carry.
/// Roles rotate over three blocks of the input.
///
/// **Narrow rings**: the result is the sign of x only if |x| < 2^(k−1) in raw ring units
/// (for fixed point with f fractional bits: |x| < 2^(k−1−f) in real terms). A violated
/// bound silently gives a wrong bit: every caller documents its bound.
///
/// Rounds: 1 + ⌈log2(k−1)⌉ (k = 64: 7; k = 32: 6). Bits per element (summed over the
/// parties, with L = ⌈log2(k−1)⌉): 13k − 18 − 3L (k = 64: 796; k = 32: 383); roles rotate,
/// so each party sends about a third.
///
/// # Errors
/// `Misuse` unless 2 ≤ k ≤ 64; `Protocol` if a message is malformed.
pub async fn msb(ctx: &mut Ctx, x: &Shares, width: Width) -> Result<BitShares, Error> {
    msb_with(ctx, x, width, MsbForm::OneRound).await
}

/// [`msb`] with its first layer in the given form: [`MsbForm::TwoRound`] takes one round
/// more and 4k − 4 bits fewer per element.
///
/// The two-round first layer: `[y]^B` is input as in [`msb`] (R1 sends R0 y_1 = y ⊕ y_2,
/// y_2 drawn with R2), so R0 knows x_0 and y_1 and R2 knows x_0 and y_2. The generate
/// bits G = x_0 ∧ y = (x_0 ∧ y_1) ⊕ (x_0 ∧ y_2) are then a sum of one part at R0 and one
/// at R2. Their replicated shares: g_1 drawn by R0 and R1, g_2 by R1 and R2, and
/// g_0 = G ⊕ g_1 ⊕ g_2, which R0 and R2 learn by sending each other their part masked by
/// their draw (R2's in round 1, R0's in round 2, after y_1 arrives). Each message is
/// masked by a draw its receiver lacks; R1 receives nothing.
///
/// Rounds: [`msb_rounds_with`], 2 + ⌈log2(k−1)⌉ for the two-round form. Bits per element:
/// 9k − 14 − 3L (k = 18: 133; k = 64: 544).
///
/// # Errors
/// As [`msb`].
pub async fn msb_with(
    ctx: &mut Ctx,
    x: &Shares,
    width: Width,
    form: MsbForm,
) -> Result<BitShares, Error> {
    lt_thresholds_carry(ctx, x, &[0], width, form).await
}

/// The bits `[x < c_j]` for every public threshold c_j (raw ring values) and every element
/// of `x`, compared in Z_2^k with k = `width`, threshold by threshold (the bits of c_0
/// for all elements first): the signs of x − c_j by [`msb_with`], whose first layer inputs
/// `[y]^B` once per element for all thresholds. The thresholds enter x_0, the component
/// that R0 and R2 both hold, so y = x_1 + x_2 is the same for every threshold, and only
/// the generate bits are made per threshold. Requires |x − c_j| < 2^(k−1) raw.
///
/// Rounds: [`msb_rounds_with`]. Bits per element for t thresholds: k (y's input) plus,
/// per threshold, 6(k − 1) in the one-round form or 2(k − 1) in the two-round form, and
/// the carry tree's 6k − 12 − 3L; k = 18, two thresholds, two rounds: 248 (266 as two
/// separate comparisons).
///
/// # Errors
/// `Misuse` unless 2 ≤ k ≤ 64 and there is a threshold; `Protocol` if a message is
/// malformed.
pub async fn lt_thresholds_carry(
    ctx: &mut Ctx,
    x: &Shares,
    thresholds: &[u64],
    width: Width,
    form: MsbForm,
) -> Result<BitShares, Error> {
    let k = width.bits();
    if k < 2 {
        return Err(Error::misuse("msb needs a ring of at least 2 bits"));
    }
    if thresholds.is_empty() {
        return Err(Error::misuse("a comparison needs at least one threshold"));
    }
    let mut ctx = ctx.fork();
    let me = ctx.me();
    let n = x.len();
    let t = thresholds.len();
    let blocks = role_blocks(n);
    let lens: Vec<usize> = blocks.iter().map(|r| r.len()).collect();
    let mut ctxs = [ctx.fork(), ctx.fork(), ctx.fork()];
    let mut parts = Vec::with_capacity(3);
    match form {
        MsbForm::OneRound => {
            let mut states = Vec::with_capacity(3);
            for ((s, range), c) in blocks.into_iter().enumerate().zip(ctxs.iter_mut()) {
                states.push(first_layer_send(c, x, range, s, thresholds, width)?);
            }
            for (c, st) in ctxs.iter_mut().zip(states) {
                parts.push(first_layer_finish(c, st, t, width).await?);
            }
        }
        MsbForm::TwoRound => {
            let mut states = Vec::with_capacity(3);
            for ((s, range), c) in blocks.into_iter().enumerate().zip(ctxs.iter_mut()) {
                states.push(exchange_send(c, x, range, s, thresholds, width)?);
            }
            // Every R0 answers before any party waits for the answers.
            let mut states2 = Vec::with_capacity(3);
            for (c, st) in ctxs.iter_mut().zip(states) {
                states2.push(exchange_answer(c, st, t, width).await?);
            }
            for (c, st) in ctxs.iter_mut().zip(states2) {
                parts.push(exchange_finish(c, st, t, width).await?);
            }
        }
    }
    // Each block holds its elements threshold by threshold; the result is threshold by
    // threshold over all elements, gathered in one copy (the generate bits cut to the
    // k − 1 positions the carry tree reads).
    let mut g_parts = Vec::with_capacity(3 * t);
    let mut p_parts = Vec::with_capacity(3 * t);
    for j in 0..t {
        for ((g, p), len) in parts.iter().zip(&lens) {
            g_parts.push((g, j * len..(j + 1) * len));
            p_parts.push((p, j * len..(j + 1) * len));
        }
    }
    let g = BitShares::concat_ranges(&g_parts, low_width(k - 1)?)?;
    let p = BitShares::concat_ranges(&p_parts, width)?;
    // Carry into position k−1 from positions 0..k−2.
    let carry = carry_tree(&mut ctx, g, &p, k - 1).await?;
    let top = p.map_linear(Width::BIT, |v| v >> (k - 1));
    let out = top.xor(&carry)?;
    debug_assert_eq!(out.party(), me);
    Ok(out)
}

fn low_width(bits: u32) -> Result<Width, Error> {
    Width::new(bits).ok_or(Error::bug("empty bit width"))
}

/// The carry out of positions 0..m−1 given generate `g` (m bits) and propagate `p` (its
/// low m bits are used). ⌈log2 m⌉ rounds of ANDs.
async fn carry_tree(
    ctx: &mut Ctx,
    mut g: BitShares,
    p: &BitShares,
    mut m: u32,
) -> Result<BitShares, Error> {
    let mut p = p.map_linear(low_width(m)?, |v| v);
    while m > 1 {
        let pairs = m / 2;
        let odd = m % 2 == 1;
        let wp = low_width(pairs)?;
        let pmask = low_mask(pairs);
        let g_lo = g.map_linear(wp, |v| even_bits(v) & pmask);
        let g_hi = g.map_linear(wp, |v| odd_bits(v) & pmask);
        let p_lo = p.map_linear(wp, |v| even_bits(v) & pmask);
        let p_hi = p.map_linear(wp, |v| odd_bits(v) & pmask);
        let (mut c1, mut c2) = (ctx.fork(), ctx.fork());
        // The lowest pair needs no propagate bit: nothing carries into position 0.
        let (pg, pp) = if pairs >= 2 {
            let wq = low_width(pairs - 1)?;
            let p_hi_up = p_hi.map_linear(wq, |v| v >> 1);
            let p_lo_up = p_lo.map_linear(wq, |v| v >> 1);
            let (pg, pp) = try_join(
                super::and(&mut c1, &p_hi, &g_lo),
                super::and(&mut c2, &p_hi_up, &p_lo_up),
            )
            .await?;
            (pg, Some(pp))
        } else {
            (super::and(&mut c1, &p_hi, &g_lo).await?, None)
        };
        let m_next = pairs + u32::from(odd);
        let wn = low_width(m_next)?;
        let mut g_next = g_hi.xor(&pg)?.map_linear(wn, |v| v);
        let mut p_next = match pp {
            Some(pp) => pp.map_linear(wn, |v| v << 1),
            None => p_hi.map_linear(wn, |_| 0),
        };
        if odd {
            let top = m - 1;
            g_next = g_next.xor(&g.map_linear(wn, |v| ((v >> top) & 1) << pairs))?;
            p_next = p_next.xor(&p.map_linear(wn, |v| ((v >> top) & 1) << pairs))?;
        }
        g = g_next;
        p = p_next;
        m = m_next;
    }
    Ok(g.map_linear(Width::BIT, |v| v & 1))
}

/// One role block's parties and sizes, the same for both first layers.
struct Roles {
    me: PartyId,
    r0: PartyId,
    r1: PartyId,
    r2: PartyId,
    /// Elements in the block.
    n: usize,
    /// Thresholds.
    t: usize,
    /// Width of the generate bits: positions 0..k−2.
    wt: Width,
    km: u64,
    tm: u64,
}

impl Roles {
    /// The roles of block `s` (R0 = `P_s`) over `range`.
    fn of(
        ctx: &Ctx,
        range: &core::ops::Range<usize>,
        s: usize,
        thresholds: &[u64],
        width: Width,
    ) -> Result<Roles, Error> {
        let r0 = PartyId::from_index(s);
        let wt = low_width(width.bits() - 1)?;
        Ok(Roles {
            me: ctx.me(),
            r0,
            r1: r0.next(),
            r2: r0.prev(),
            n: range.len(),
            t: thresholds.len(),
            wt,
            km: width.mask(),
            tm: wt.mask(),
        })
    }
}

/// R1's y = x_1 + x_2 mod 2^k and its input component y_1 = y ⊕ y_2 for R0.
fn input_y(xa: &[u64], xb: &[u64], y2: &[u64], km: u64) -> (Vec<u64>, Vec<u64>) {
    let y: Vec<u64> = xa
        .iter()
        .zip(xb)
        .map(|(a, b)| a.wrapping_add(*b) & km)
        .collect();
    let y1 = y.iter().zip(y2).map(|(y, f)| (y ^ f) & km).collect();
    (y, y1)
}

/// x_0 − c_j mod 2^k for every threshold c_j, threshold by threshold.
fn shifted_x0(x0: &[u64], thresholds: &[u64], km: u64) -> Vec<u64> {
    thresholds
        .iter()
        .flat_map(|c| x0.iter().map(move |v| v.wrapping_sub(*c) & km))
        .collect()
}

/// `v`'s words masked to `mask` (the low k bits of y, or the low k − 1 that the carry
/// tree's generate bits keep).
fn low_bits(v: &[u64], mask: u64) -> Vec<u64> {
    v.iter().map(|w| w & mask).collect()
}

/// `v` repeated `t` times (y's components, the same for every threshold).
fn repeated(v: &[u64], t: usize) -> Vec<u64> {
    let mut out = Vec::with_capacity(v.len() * t);
    for _ in 0..t {
        out.extend_from_slice(v);
    }
    out
}

/// State of one role block between the two halves of the first layer.
enum FirstLayer {
    /// R0 knows x_0 − c_j and its draws g_1 with R1; it waits for R1's input and OT
    /// strings and R2's helper.
    R0 { x0s: Vec<u64>, g1: Vec<u64> },
    /// R1 already holds its components of [y]^B and [G]^B.
    R1 {
        y1: Vec<u64>,
        y2: Vec<u64>,
        g1: Vec<u64>,
        g2: Vec<u64>,
    },
    /// R2 knows x_0 − c_j and its PRF components; it waits for R1's OT strings and R0's
    /// helper.
    R2 {
        x0s: Vec<u64>,
        y2: Vec<u64>,
        g2: Vec<u64>,
    },
}

fn first_layer_send(
    ctx: &mut Ctx,
    x: &Shares,
    range: core::ops::Range<usize>,
    s: usize,
    thresholds: &[u64],
    width: Width,
) -> Result<FirstLayer, Error> {
    let Roles {
        me,
        r0,
        r1,
        r2,
        n,
        t,
        wt,
        km,
        tm,
    } = Roles::of(ctx, &range, s, thresholds, width)?;
    let (xa, xb) = x.block(range)?;
    // Correlated draws, in the same order at every party. Per threshold: the OT masks
    // w_0, w_1 (R1 and R2) and v_0, v_1 (R0 and R1), and [G]^B's components 1 and 2.
    let f2 = ctx.pair_random(r2, n + 3 * t * n)?; // K_{R2}: R1 and R2 — [y]^B comp 2, w, g_2
    let f1 = ctx.pair_random(r1, 3 * t * n)?; // K_{R1}: R0 and R1 — v, g_1
    let err = || Error::bug("comparison role lacks a key");
    if me == r1 {
        let f2 = f2.ok_or_else(err)?;
        let f1 = f1.ok_or_else(err)?;
        let (y2, rest) = f2.split_at(n);
        let (w, g2) = rest.split_at(2 * t * n);
        let (v, g1) = f1.split_at(2 * t * n);
        let (y, y1) = input_y(xa, xb, y2, km);
        let mut to_r0 = Vec::with_capacity(2 * t * n);
        let mut to_r2 = Vec::with_capacity(2 * t * n);
        for j in 0..t {
            // The OT's pad is the XOR of the two drawn components of [G]^B, so that
            // neither needs a message: R0 lacks g_2 and R2 lacks g_1, so it is uniform
            // to each.
            let pads = j * n..(j + 1) * n;
            let rho: Vec<u64> = g1[pads.clone()]
                .iter()
                .zip(&g2[pads])
                .map(|(a, b)| a ^ b)
                .collect();
            // m_0 = ρ (choice 0: x_0 bit is 0), m_1 = y ⊕ ρ, bitwise.
            for c in 0..2u64 {
                let at = (2 * j + c as usize) * n..(2 * j + c as usize + 1) * n;
                for (((y, r), wv), vv) in y.iter().zip(&rho).zip(&w[at.clone()]).zip(&v[at]) {
                    let m = ((y & c.wrapping_neg()) ^ r) & tm;
                    to_r0.push((m ^ wv) & tm);
                    to_r2.push((m ^ vv) & tm);
                }
            }
        }
        ctx.send(r0, &y1, width)?;
        ctx.send(r0, &to_r0, wt)?;
        ctx.send(r2, &to_r2, wt)?;
        Ok(FirstLayer::R1 {
            y1,
            y2: low_bits(y2, km),
            g1: low_bits(g1, tm),
            g2: low_bits(g2, tm),
        })
    } else if me == r0 {
        // R0 holds (c_0, c_1): x_0 = c_0.
        let f1 = f1.ok_or_else(err)?;
        let (v, g1) = f1.split_at(2 * t * n);
        let x0s = shifted_x0(xa, thresholds, km);
        let helper = helpers(&x0s, v, n, tm);
        ctx.send(r2, &helper, wt)?;
        Ok(FirstLayer::R0 {
            x0s,
            g1: low_bits(g1, tm),
        })
    } else {
        // R2 holds (c_2, c_0): x_0 = c_0.
        let f2 = f2.ok_or_else(err)?;
        let (y2, rest) = f2.split_at(n);
        let (w, g2) = rest.split_at(2 * t * n);
        let x0s = shifted_x0(xb, thresholds, km);
        let helper = helpers(&x0s, w, n, tm);
        ctx.send(r0, &helper, wt)?;
        Ok(FirstLayer::R2 {
            x0s,
            y2: low_bits(y2, km),
            g2: low_bits(g2, tm),
        })
    }
}

/// A chooser's helper strings for the other chooser: per threshold and bit position, the
/// mask (of the pair drawn with R1) of the offer its choice bit selects.
fn helpers(x0s: &[u64], masks: &[u64], n: usize, tm: u64) -> Vec<u64> {
    x0s.chunks(n.max(1))
        .zip(masks.chunks(2 * n.max(1)))
        .flat_map(|(x0, m)| {
            let (m0, m1) = m.split_at(x0.len().min(m.len()));
            x0.iter()
                .zip(m0)
                .zip(m1)
                .map(move |((c, a), b)| select_bits(*c, *a, *b) & tm)
        })
        .collect()
}

/// Bitwise choice: bit i of the result is bit i of `one` where `c` has a 1, else of `zero`.
fn select_bits(c: u64, zero: u64, one: u64) -> u64 {
    (c & one) | (!c & zero)
}

/// The OT output both choosers compute, per threshold: the string offered for each choice
/// bit of `x0s` (offered = [m_0 ⊕ mask_0 | m_1 ⊕ mask_1] per threshold), unmasked with
/// the other chooser's helper.
fn unmask_ot(x0s: &[u64], offered: &[u64], helper: &[u64], n: usize, mask: u64) -> Vec<u64> {
    x0s.chunks(n.max(1))
        .zip(offered.chunks(2 * n.max(1)))
        .zip(helper.chunks(n.max(1)))
        .flat_map(|((x0, o), h)| {
            let (o0, o1) = o.split_at(x0.len().min(o.len()));
            x0.iter()
                .zip(o0)
                .zip(o1)
                .zip(h)
                .map(move |(((c, a), b), h)| (select_bits(*c, *a, *b) ^ h) & mask)
        })
        .collect()
}

/// Finishes one block: returns this party's shares of (generate bits G, propagate bits P),
/// threshold by threshold.
async fn first_layer_finish(
    ctx: &mut Ctx,
    st: FirstLayer,
    t: usize,
    width: Width,
) -> Result<(BitShares, BitShares), Error> {
    let me = ctx.me();
    let k = width.bits();
    let wt = low_width(k - 1)?;
    let tm = wt.mask();
    match st {
        FirstLayer::R1 { y1, y2, g1, g2 } => {
            // [x_0]^B has x_0 in component 0 only, which R1 does not hold: P = [y]^B.
            let g = BitShares::from_parts(me, width, g1, g2);
            let p = BitShares::from_parts(me, width, repeated(&y1, t), repeated(&y2, t));
            Ok((g, p))
        }
        FirstLayer::R0 { x0s, g1 } => {
            let n = x0s.len() / t.max(1);
            let (r1, r2) = (me.next(), me.prev());
            let y1 = ctx.recv(r1, n, width).await?;
            let offered = ctx.recv(r1, 2 * t * n, wt).await?;
            let helper = ctx.recv(r2, t * n, wt).await?;
            let g0 = unmask_ot(&x0s, &offered, &helper, n, tm);
            let g = BitShares::from_parts(me, width, g0, g1);
            // P = [y]^B ⊕ [x_0]^B: R0 holds (0 ⊕ x_0, y ⊕ F).
            let p = BitShares::from_parts(me, width, x0s, repeated(&y1, t));
            Ok((g, p))
        }
        FirstLayer::R2 { x0s, y2, g2 } => {
            let n = x0s.len() / t.max(1);
            let (r0, r1) = (me.next(), me.prev());
            let offered = ctx.recv(r1, 2 * t * n, wt).await?;
            let helper = ctx.recv(r0, t * n, wt).await?;
            let g0 = unmask_ot(&x0s, &offered, &helper, n, tm);
            let g = BitShares::from_parts(me, width, g2, g0);
            // R2 holds (component 2, component 0) = (F, x_0).
            let p = BitShares::from_parts(me, width, repeated(&y2, t), x0s);
            Ok((g, p))
        }
    }
}

/// State of one role block in the two-round first layer ([`MsbForm::TwoRound`]).
enum Exchange {
    /// R0 knows x_0 − c_j and its draws g_1 with R1; it waits for y_1, then answers R2.
    R0 { x0s: Vec<u64>, g1: Vec<u64> },
    /// R0 after its answer: its parts masked, x_0 − c_j, y_1 and g_1.
    R0Sent {
        x0s: Vec<u64>,
        y1: Vec<u64>,
        g1: Vec<u64>,
        masked: Vec<u64>,
    },
    /// R1 holds its components of [y]^B and [G]^B and receives nothing.
    R1 {
        y1: Vec<u64>,
        y2: Vec<u64>,
        g1: Vec<u64>,
        g2: Vec<u64>,
    },
    /// R2 has sent its parts masked; it waits for R0's.
    R2 {
        x0s: Vec<u64>,
        y2: Vec<u64>,
        g2: Vec<u64>,
        masked: Vec<u64>,
    },
}

/// `(x_0 − c_j) ∧ y_i ⊕ g_i` for every threshold, threshold by threshold: a chooser's part
/// of the generate bits, masked by its draw with R1.
fn masked_parts(x0s: &[u64], y: &[u64], g: &[u64], tm: u64) -> Vec<u64> {
    x0s.chunks(y.len().max(1))
        .flat_map(|x0| x0.iter().zip(y))
        .zip(g)
        .map(|((c, y), g)| ((c & y) ^ g) & tm)
        .collect()
}

/// Round 1 of the two-round first layer: R1 inputs [y]^B, R2 sends R0 its parts
/// (x_0 − c_j) ∧ y_2 masked by g_2.
fn exchange_send(
    ctx: &mut Ctx,
    x: &Shares,
    range: core::ops::Range<usize>,
    s: usize,
    thresholds: &[u64],
    width: Width,
) -> Result<Exchange, Error> {
    let Roles {
        me,
        r0,
        r1,
        r2,
        n,
        t,
        wt,
        km,
        tm,
    } = Roles::of(ctx, &range, s, thresholds, width)?;
    let (xa, xb) = x.block(range)?;
    let f2 = ctx.pair_random(r2, n + t * n)?; // K_{R2}: R1 and R2 — [y]^B comp 2, [G]^B comp 2
    let f1 = ctx.pair_random(r1, t * n)?; // K_{R1}: R0 and R1 — [G]^B comp 1
    let err = || Error::bug("comparison role lacks a key");
    if me == r1 {
        let f2 = f2.ok_or_else(err)?;
        let g1 = f1.ok_or_else(err)?;
        let (y2, g2) = f2.split_at(n);
        let (_, y1) = input_y(xa, xb, y2, km);
        ctx.send(r0, &y1, width)?;
        Ok(Exchange::R1 {
            y1,
            y2: low_bits(y2, km),
            g1: low_bits(&g1, tm),
            g2: low_bits(g2, tm),
        })
    } else if me == r0 {
        // R0 holds (c_0, c_1): x_0 = c_0.
        let g1 = f1.ok_or_else(err)?;
        Ok(Exchange::R0 {
            x0s: shifted_x0(xa, thresholds, km),
            g1: low_bits(&g1, tm),
        })
    } else {
        // R2 holds (c_2, c_0): x_0 = c_0.
        let f2 = f2.ok_or_else(err)?;
        let (y2, g2) = f2.split_at(n);
        let x0s = shifted_x0(xb, thresholds, km);
        let masked = masked_parts(&x0s, y2, g2, tm);
        ctx.send(r0, &masked, wt)?;
        Ok(Exchange::R2 {
            x0s,
            y2: low_bits(y2, km),
            g2: low_bits(g2, tm),
            masked,
        })
    }
}

/// Round 2 of the two-round first layer: R0 receives y_1 and sends R2 its parts
/// (x_0 − c_j) ∧ y_1 masked by g_1.
async fn exchange_answer(
    ctx: &mut Ctx,
    st: Exchange,
    t: usize,
    width: Width,
) -> Result<Exchange, Error> {
    let Exchange::R0 { x0s, g1 } = st else {
        return Ok(st);
    };
    let me = ctx.me();
    let wt = low_width(width.bits() - 1)?;
    let y1 = ctx.recv(me.next(), x0s.len() / t.max(1), width).await?;
    let masked = masked_parts(&x0s, &y1, &g1, wt.mask());
    ctx.send(me.prev(), &masked, wt)?;
    Ok(Exchange::R0Sent {
        x0s,
        y1,
        g1,
        masked,
    })
}

/// Finishes one block of the two-round first layer: g_0 is the XOR of the two masked
/// parts. Returns this party's shares of (generate bits G, propagate bits P), threshold by
/// threshold.
async fn exchange_finish(
    ctx: &mut Ctx,
    st: Exchange,
    t: usize,
    width: Width,
) -> Result<(BitShares, BitShares), Error> {
    let me = ctx.me();
    let wt = low_width(width.bits() - 1)?;
    let xor = |a: &[u64], b: &[u64]| -> Vec<u64> { a.iter().zip(b).map(|(u, v)| u ^ v).collect() };
    match st {
        Exchange::R1 { y1, y2, g1, g2 } => Ok((
            BitShares::from_parts(me, width, g1, g2),
            BitShares::from_parts(me, width, repeated(&y1, t), repeated(&y2, t)),
        )),
        Exchange::R0Sent {
            x0s,
            y1,
            g1,
            masked,
        } => {
            let other = ctx.recv(me.prev(), x0s.len(), wt).await?;
            let g0 = xor(&masked, &other);
            Ok((
                BitShares::from_parts(me, width, g0, g1),
                BitShares::from_parts(me, width, x0s, repeated(&y1, t)),
            ))
        }
        Exchange::R2 {
            x0s,
            y2,
            g2,
            masked,
        } => {
            let other = ctx.recv(me.next(), x0s.len(), wt).await?;
            let g0 = xor(&masked, &other);
            Ok((
                BitShares::from_parts(me, width, g2, g0),
                BitShares::from_parts(me, width, repeated(&y2, t), x0s),
            ))
        }
        Exchange::R0 { .. } => Err(Error::bug("R0 finished before it answered")),
    }
}

/// `[x < y]` for shared x, y, compared in Z_2^k with k = `width`: the sign of x − y.
/// Requires |x − y| < 2^(k−1) raw (see [`msb`]).
///
/// Rounds and bits: those of [`msb`].
///
/// # Errors
/// As [`msb`], and `Misuse` for different lengths.
pub async fn lt(ctx: &mut Ctx, x: &Shares, y: &Shares, width: Width) -> Result<BitShares, Error> {
    msb(ctx, &x.sub(y)?, width).await
}

/// `[x < c]` for public constants `c`, one per element. Requires |x − c| < 2^(k−1) raw.
///
/// Rounds and bits: those of [`msb`].
///
/// # Errors
/// As [`msb`], and `Misuse` for a wrong length of `c`.
pub async fn lt_public(
    ctx: &mut Ctx,
    x: &Shares,
    c: &[u64],
    width: Width,
) -> Result<BitShares, Error> {
    let neg: Vec<u64> = c.iter().map(|v| v.wrapping_neg()).collect();
    msb(ctx, &x.add_public(&neg)?, width).await
}
