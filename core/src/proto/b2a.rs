//! From the boolean world back to the ring: B2A of bits, bit injection, select
//! (docs/PROTOCOLS.md, B2A; Bit injection and select).

use alloc::vec::Vec;

use crate::engine::{Ctx, try_join_all};
use crate::error::Error;
use crate::party::PartyId;
use crate::ring::Width;
use crate::share::{BitShares, Shares};

use super::blocks::role_blocks;
use super::mul;

/// Arithmetic shares of single bits: b = b_0 ⊕ b_1 ⊕ b_2 ↦ `[b]` over Z_2^64.
///
/// (docs/PROTOCOLS.md, B2A.) The role R0 knows t = b_0 ⊕ b_1, the roles R1 and R2 know
/// β = b_2, and b = β + σ·t with σ = 1 − 2β. R0's output components F_0, F_1 come from
/// its pair keys; the third, b − F_0 − F_1, is built by R1 and R2: R0 sends R2 t − r (r
/// from R0 and R1's key), R1 sends R2 β + σ·r − F_1, and R1 learns σ·(t − r) − F_0 from
/// two messages: t − r + κ from R0 and σ·κ + F_0 from R2 (κ from R0 and R2's key).
/// Exact. Only bit 0 of each input value is used. Roles rotate over three blocks.
///
/// Rounds: 1. Bits per element: 256 in total (128 for R0's role, 64 for the others).
///
/// # Errors
/// `Misuse` unless the input has width 1; `Protocol` if a message is malformed.
pub async fn b2a(ctx: &mut Ctx, b: &BitShares) -> Result<Shares, Error> {
    if b.width() != Width::BIT {
        return Err(Error::misuse("b2a takes single bits"));
    }
    b2a_with(ctx, b, false, Width::W64).await
}

/// [`b2a`] into the ring Z_2^k of `ring` (Z_2^64 or narrower): every message shrinks to
/// k bits, for a caller that multiplies the bits in that ring (docs/PROTOCOLS.md, Narrow
/// rings). With `relay`, in two rounds with 25 % fewer bits: instead of R0's masked
/// t − r, R2 (which has everything after the first round) sends R1 σ·(t − r) − F_0 in the
/// second, for callers whose bits are not on the critical path (a comparison branch
/// beside a longer polynomial). Exact mod 2^k.
///
/// Rounds: 1 (2 with `relay`). Bits per element: 4k in total (3k with `relay`).
///
/// # Errors
/// As [`b2a`].
pub(crate) async fn b2a_in(
    ctx: &mut Ctx,
    b: &BitShares,
    ring: Width,
    relay: bool,
) -> Result<Shares, Error> {
    if b.width() != Width::BIT {
        return Err(Error::misuse("b2a takes single bits"));
    }
    b2a_with(ctx, b, relay, ring).await
}

async fn b2a_with(ctx: &mut Ctx, b: &BitShares, relay: bool, ring: Width) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let me = ctx.me();
    let n = b.len();
    let mut ctxs = [ctx.fork(), ctx.fork(), ctx.fork()];
    let mut states = Vec::with_capacity(3);
    for ((s, range), c) in role_blocks(n).into_iter().enumerate().zip(ctxs.iter_mut()) {
        states.push(send_block(c, b, range, s, relay, ring)?);
    }
    // The blocks finish concurrently: with `relay` a party waiting as R1 for its relayed
    // value must not hold up its own relay as R2 of another block.
    let futs: Vec<_> = ctxs
        .iter_mut()
        .zip(states)
        .map(|(c, st)| finish_block(c, st, relay, ring))
        .collect();
    let done = try_join_all(futs).await?;
    let mut a = Vec::with_capacity(n);
    let mut bb = Vec::with_capacity(n);
    for (x, y) in done {
        a.extend_from_slice(&x);
        bb.extend_from_slice(&y);
    }
    Ok(Shares::from_parts(me, a, bb))
}

enum Block {
    /// The sender is done: its components are (F_0, F_1).
    R0 { f0: Vec<u64>, f1: Vec<u64> },
    /// Waits for σ·(t − r) − F_0 (relayed, or from R0's and R2's messages); keeps β, F_1 and its part
    /// β + σ·r − F_1 of the third component.
    R1 {
        beta: Vec<bool>,
        f1: Vec<u64>,
        part: Vec<u64>,
    },
    /// Waits for t − r and R1's part; keeps β and F_0.
    R2 { beta: Vec<bool>, f0: Vec<u64> },
}

/// The third component, β + σ·t − F_0 − F_1: R1's part plus g = σ·(t − r) − F_0, mod
/// 2^k (so that its two holders keep the same word).
fn sum_parts(part: &[u64], g: &[u64], ring: Width) -> Vec<u64> {
    part.iter()
        .zip(g)
        .map(|(p, g)| ring.reduce(p.wrapping_add(*g)))
        .collect()
}

/// σ·v for σ = 1 − 2β: v, or −v when β is set.
fn signed(beta: bool, v: u64) -> u64 {
    if beta { v.wrapping_neg() } else { v }
}

fn send_block(
    ctx: &mut Ctx,
    b: &BitShares,
    range: core::ops::Range<usize>,
    s: usize,
    relay: bool,
    ring: Width,
) -> Result<Block, Error> {
    let me = ctx.me();
    let r0 = PartyId::from_index(s);
    let (r1, r2) = (r0.next(), r0.prev());
    let n = range.len();
    let (ba, bb) = b.block(range.clone())?;
    // K_{R0} (R0 and R2): output F_0, and the mask κ without `relay`.
    let f0 = ctx.pair_random(r0, if relay { n } else { 2 * n })?;
    // K_{R1} (R0 and R1): output F_1, and the mask r.
    let f1 = ctx.pair_random(r1, 2 * n)?;
    let err = || Error::bug("b2a role lacks a key");
    let at = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
    if me == r0 {
        let (f0, f1) = (f0.ok_or_else(err)?, f1.ok_or_else(err)?);
        let (out0, kappa) = f0.split_at(n);
        let (out1, r) = f1.split_at(n);
        // R0 holds (b_0, b_1): t = b_0 ⊕ b_1; d = t − r.
        let d: Vec<u64> = (0..n)
            .map(|k| ((at(ba, k) ^ at(bb, k)) & 1).wrapping_sub(at(r, k)))
            .collect();
        if !relay {
            // For R1: t − r masked with κ; R2 sends R1 σ·κ + F_0, so R1 finds σ·(t − r) − F_0
            // without learning t − r.
            let masked: Vec<u64> = (0..n)
                .map(|k| at(&d, k).wrapping_add(at(kappa, k)))
                .collect();
            ctx.send(r1, &masked, ring)?;
        }
        ctx.send(r2, &d, ring)?;
        Ok(Block::R0 {
            f0: out0.to_vec(),
            f1: out1.to_vec(),
        })
    } else if me == r1 {
        // R1 holds (b_1, b_2): β = b_2.
        let f1 = f1.ok_or_else(err)?;
        let (out1, r) = f1.split_at(n);
        let beta: Vec<bool> = bb.iter().map(|v| v & 1 == 1).collect();
        let part: Vec<u64> = beta
            .iter()
            .enumerate()
            .map(|(k, &be)| {
                u64::from(be)
                    .wrapping_add(signed(be, at(r, k)))
                    .wrapping_sub(at(out1, k))
            })
            .collect();
        ctx.send(r2, &part, ring)?;
        Ok(Block::R1 {
            beta,
            f1: out1.to_vec(),
            part,
        })
    } else {
        // R2 holds (b_2, b_0): β = b_2.
        let f0 = f0.ok_or_else(err)?;
        let beta: Vec<bool> = ba.iter().map(|v| v & 1 == 1).collect();
        if !relay {
            let kappa = f0.get(n..).ok_or_else(err)?;
            let help: Vec<u64> = beta
                .iter()
                .enumerate()
                .map(|(k, &be)| signed(be, at(kappa, k)).wrapping_add(at(&f0, k)))
                .collect();
            ctx.send(r1, &help, ring)?;
        }
        Ok(Block::R2 {
            beta,
            f0: f0.get(..n).ok_or_else(err)?.to_vec(),
        })
    }
}

async fn finish_block(
    ctx: &mut Ctx,
    st: Block,
    relay: bool,
    ring: Width,
) -> Result<(Vec<u64>, Vec<u64>), Error> {
    let me = ctx.me();
    match st {
        Block::R0 { f0, f1 } => Ok((f0, f1)),
        Block::R1 { beta, f1, part } => {
            let n = beta.len();
            let (r2, r0) = (me.next(), me.prev());
            // g = σ·(t − r) − F_0.
            let g: Vec<u64> = if relay {
                ctx.recv(r2, n, ring).await?
            } else {
                let masked = ctx.recv(r0, n, ring).await?;
                let help = ctx.recv(r2, n, ring).await?;
                beta.iter()
                    .zip(masked.iter().zip(&help))
                    .map(|(&be, (m, h))| signed(be, *m).wrapping_sub(*h))
                    .collect()
            };
            let third = sum_parts(&part, &g, ring);
            Ok((f1, third))
        }
        Block::R2 { beta, f0 } => {
            let n = beta.len();
            let (r0, r1) = (me.next(), me.prev());
            let d = ctx.recv(r0, n, ring).await?;
            let part = ctx.recv(r1, n, ring).await?;
            let g: Vec<u64> = beta
                .iter()
                .zip(&d)
                .zip(&f0)
                .map(|((&be, d), f)| signed(be, *d).wrapping_sub(*f))
                .collect();
            if relay {
                ctx.send(r1, &g, ring)?;
            }
            let third = sum_parts(&part, &g, ring);
            Ok((third, f0))
        }
    }
}

/// Bit injection `b · x` for shared bits b and shared ring values x: [`b2a`] then [`mul`].
/// No truncation: b is an integer 0 or 1.
///
/// Rounds: 2. Bits per element: 256 + 192 in total.
///
/// # Errors
/// As [`b2a`] and [`mul`].
pub async fn mul_bit(ctx: &mut Ctx, b: &BitShares, x: &Shares) -> Result<Shares, Error> {
    let a = b2a(ctx, b).await?;
    mul(ctx, &a, x).await
}

/// `b ? x : y` elementwise: y + b·(x − y).
///
/// Rounds: 2. Bits per element: those of [`mul_bit`].
///
/// # Errors
/// As [`mul_bit`], and `Misuse` for mismatched lengths.
pub async fn select(ctx: &mut Ctx, b: &BitShares, x: &Shares, y: &Shares) -> Result<Shares, Error> {
    let d = mul_bit(ctx, b, &x.sub(y)?).await?;
    d.add(y)
}
