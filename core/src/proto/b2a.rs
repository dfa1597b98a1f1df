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
/// Three-party OT (docs/PROTOCOLS.md, B2A): the role R0 knows t = b_0 ⊕ b_1, the roles R1 and R2
/// know β = b_2, and b = t ⊕ β. R0 offers m_j = (t ⊕ j) − ρ with ρ = F_0 + F_1, masked for
/// R1 and R2; each of them unmasks m_β with a helper string from the other. Output
/// components (F_0, F_1, b − ρ). Exact. Only bit 0 of each input value is used. Roles
/// rotate over three blocks.
///
/// Rounds: 1. Bits per element: 384 in total (256 for R0's role, 64 for the others).
///
/// # Errors
/// `Misuse` unless the input has width 1; `Protocol` if a message is malformed.
pub async fn b2a(ctx: &mut Ctx, b: &BitShares) -> Result<Shares, Error> {
    if b.width() != Width::BIT {
        return Err(Error::misuse("b2a takes single bits"));
    }
    b2a_with(ctx, b, false).await
}

/// [`b2a`] in two rounds with a third fewer bits: R0 offers its two strings to R1 only,
/// R2 sends R1 the helper string, and in the second round R1 forwards the unmasked
/// b − ρ (R2's missing component) to R2. For callers whose bits are not on the critical
/// path (e.g. a comparison branch running beside a longer polynomial). Exact.
///
/// Rounds: 2. Bits per element: 256 in total (128 for R0's role, 64 for the others).
///
/// # Errors
/// As [`b2a`].
pub(crate) async fn b2a_two_rounds(ctx: &mut Ctx, b: &BitShares) -> Result<Shares, Error> {
    if b.width() != Width::BIT {
        return Err(Error::misuse("b2a takes single bits"));
    }
    b2a_with(ctx, b, true).await
}

async fn b2a_with(ctx: &mut Ctx, b: &BitShares, relay: bool) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let me = ctx.me();
    let n = b.len();
    let mut ctxs = [ctx.fork(), ctx.fork(), ctx.fork()];
    let mut states = Vec::with_capacity(3);
    for ((s, range), c) in role_blocks(n).into_iter().enumerate().zip(ctxs.iter_mut()) {
        states.push(send_block(c, b, range, s, relay)?);
    }
    // The blocks finish concurrently: with `relay` a party waiting as R2 for its relayed
    // component must not hold up its own relay as R1 of another block.
    let futs: Vec<_> = ctxs
        .iter_mut()
        .zip(states)
        .map(|(c, st)| finish_block(c, st, relay))
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
    /// Waits for the offered strings and R2's helper; keeps β and its known component F_1.
    R1 { beta: Vec<bool>, f1: Vec<u64> },
    /// Waits for the offered strings and R1's helper; keeps β and F_0.
    R2 { beta: Vec<bool>, f0: Vec<u64> },
}

fn send_block(
    ctx: &mut Ctx,
    b: &BitShares,
    range: core::ops::Range<usize>,
    s: usize,
    relay: bool,
) -> Result<Block, Error> {
    let me = ctx.me();
    let r0 = PartyId::from_index(s);
    let (r1, r2) = (r0.next(), r0.prev());
    let n = range.len();
    let ba = b
        .a()
        .get(range.clone())
        .ok_or(Error::bug("block out of range"))?;
    let bb = b.b().get(range).ok_or(Error::bug("block out of range"))?;
    let f0 = ctx.pair_random(r0, 3 * n)?; // K_{R0}: R0 and R2 — w_0, w_1, output F_0
    let f1 = ctx.pair_random(r1, 3 * n)?; // K_{R1}: R0 and R1 — v_0, v_1, output F_1
    let err = || Error::bug("b2a role lacks a key");
    if me == r0 {
        let f0 = f0.ok_or_else(err)?;
        let f1 = f1.ok_or_else(err)?;
        let (w, out0) = f0.split_at(2 * n);
        let (v, out1) = f1.split_at(2 * n);
        let mut to_r1 = Vec::with_capacity(2 * n);
        let mut to_r2 = Vec::with_capacity(2 * n);
        for j in 0..2u64 {
            for k in 0..n {
                // R0 holds (b_0, b_1): t = b_0 ⊕ b_1.
                let t = (ba.get(k).copied().unwrap_or(0) ^ bb.get(k).copied().unwrap_or(0)) & 1;
                let rho = out0
                    .get(k)
                    .copied()
                    .unwrap_or(0)
                    .wrapping_add(out1.get(k).copied().unwrap_or(0));
                let m = (t ^ j).wrapping_sub(rho);
                let idx = j as usize * n + k;
                to_r1.push(m.wrapping_add(w.get(idx).copied().unwrap_or(0)));
                to_r2.push(m.wrapping_add(v.get(idx).copied().unwrap_or(0)));
            }
        }
        ctx.send(r1, &to_r1, Width::W64)?;
        if !relay {
            ctx.send(r2, &to_r2, Width::W64)?;
        }
        Ok(Block::R0 {
            f0: out0.to_vec(),
            f1: out1.to_vec(),
        })
    } else if me == r1 {
        // R1 holds (b_1, b_2): β = b_2.
        let f1 = f1.ok_or_else(err)?;
        let beta: Vec<bool> = bb.iter().map(|v| v & 1 == 1).collect();
        let helper: Vec<u64> = beta
            .iter()
            .enumerate()
            .map(|(k, &be)| f1.get(usize::from(be) * n + k).copied().unwrap_or(0))
            .collect();
        if !relay {
            ctx.send(r2, &helper, Width::W64)?;
        }
        Ok(Block::R1 {
            beta,
            f1: f1.get(2 * n..).ok_or_else(err)?.to_vec(),
        })
    } else {
        // R2 holds (b_2, b_0): β = b_2.
        let f0 = f0.ok_or_else(err)?;
        let beta: Vec<bool> = ba.iter().map(|v| v & 1 == 1).collect();
        let helper: Vec<u64> = beta
            .iter()
            .enumerate()
            .map(|(k, &be)| f0.get(usize::from(be) * n + k).copied().unwrap_or(0))
            .collect();
        ctx.send(r1, &helper, Width::W64)?;
        Ok(Block::R2 {
            beta,
            f0: f0.get(2 * n..).ok_or_else(err)?.to_vec(),
        })
    }
}

fn unmask(beta: &[bool], offered: &[u64], helper: &[u64]) -> Vec<u64> {
    let n = beta.len();
    beta.iter()
        .zip(helper)
        .enumerate()
        .map(|(k, (&be, h))| {
            offered
                .get(usize::from(be) * n + k)
                .copied()
                .unwrap_or(0)
                .wrapping_sub(*h)
        })
        .collect()
}

async fn finish_block(
    ctx: &mut Ctx,
    st: Block,
    relay: bool,
) -> Result<(Vec<u64>, Vec<u64>), Error> {
    let me = ctx.me();
    match st {
        Block::R0 { f0, f1 } => Ok((f0, f1)),
        Block::R1 { beta, f1 } => {
            let n = beta.len();
            let (r2, r0) = (me.next(), me.prev());
            let offered = ctx.recv(r0, 2 * n, Width::W64).await?;
            let helper = ctx.recv(r2, n, Width::W64).await?;
            let m = unmask(&beta, &offered, &helper);
            if relay {
                ctx.send(r2, &m, Width::W64)?;
            }
            Ok((f1, m))
        }
        Block::R2 { beta, f0 } => {
            let n = beta.len();
            let (r0, r1) = (me.next(), me.prev());
            if relay {
                let m = ctx.recv(r1, n, Width::W64).await?;
                return Ok((m, f0));
            }
            let offered = ctx.recv(r0, 2 * n, Width::W64).await?;
            let helper = ctx.recv(r1, n, Width::W64).await?;
            Ok((unmask(&beta, &offered, &helper), f0))
        }
    }
}

/// Bit injection `b · x` for shared bits b and shared ring values x: [`b2a`] then [`mul`].
/// No truncation: b is an integer 0 or 1.
///
/// Rounds: 2. Bits per element: 384 + 192 in total.
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
