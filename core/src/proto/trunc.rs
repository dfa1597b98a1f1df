use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::party::PartyId;
use crate::ring::Width;
use crate::share::Shares;

use super::blocks::role_blocks;

/// 2^(k−2): shifts x ∈ [−2^62, 2^62) into [0, 2^63) so the wrap bit of a + b is known.
const OFFSET: u64 = 1 << 62;

/// Fixed-point truncation by `d` bits: y ≈ x / 2^d, with no large errors.
///
/// Known-MSB truncation with a three-party OT (docs/PROTOCOLS.md, Truncation; after SiRNN).
/// With
/// x' = x + 2^62, a = x_0 + 2^62 (known to the roles R0, R2) and b = x_1 + x_2 (R1), the
/// wrap of a + b is w = msb(a) ∨ msb(b) because x' < 2^63. R1 offers the two d-bit strings
/// u − (j ∨ msb(b)), j ∈ {0,1}, masked for R0 and R2; R0 and R2 each learn the one selected
/// by α = msb(a) with one helper string from the other; then
/// y_0 = ⌊a/2^d⌋ + 2^(64−d)·g_α + 1 − 2^(62−d), y_1 = ⌊b/2^d⌋ − 2^(64−d)·u − ρ, y_2 = ρ.
///
/// **Error bound**: for every x with −2^62 ≤ x < 2^62 (raw ring value) and any shares, the
/// output is ⌊x/2^d⌋ or ⌊x/2^d⌋ + 1. The large-error probability is 0 in that range (so
/// far below the 2^-40 per element asked for |x| ≤ 2^20 real, i.e. 2^38 raw). With random
/// shares the +1 happens with probability ((x mod 2^d) + 1)/2^d: stochastic rounding.
///
/// Roles rotate over three contiguous blocks of the input, so each party carries a third
/// of each role's traffic.
///
/// Rounds: 1. Bytes (per element, summed over the three parties): 64 + 6·d bits
/// = 172 bits at d = 18; for n divisible by 3 each party sends ⌈2d·n/3/8⌉ + 8·n/3 +
/// ⌈2d·n/3/8⌉ + 2·⌈d·n/3/8⌉ bytes (its R1, R0 and R2 blocks).
///
/// # Errors
/// `Misuse` unless 1 ≤ `d` ≤ 62; `Protocol` if a message is malformed.
pub async fn trunc(ctx: &mut Ctx, x: &Shares, d: u32) -> Result<Shares, Error> {
    let width = Width::new(d)
        .filter(|_| d <= 62)
        .ok_or(Error::misuse("truncation bits must be in 1..=62"))?;
    let mut ctx = ctx.fork();
    trunc_two_of_two(&mut ctx, x, width).await
}

/// Reshare and truncate in one: turns a 3-of-3 additive sharing `z` (party i holds z_i, the
/// local part of a product or a fused sum of products) into replicated shares of
/// ⌊z/2^d⌋ (+1), without first building the replicated shares of z.
///
/// The truncation only needs z as two halves, a = z_s known to R0 and R2, b = z_{s+1} +
/// z_{s+2} known to R1 (roles rotating over the blocks as in [`trunc`]). After masking with
/// a zero sharing, R0 sends z_s to R2 and R2 sends its z_{s+2} to R1 (each sees one
/// component masked by a PRF term it lacks); then [`trunc`]'s one-round OT runs on (a, b).
/// That is 2·64 bits per element instead of the 3·64 of a reshare.
///
/// **Error bound**: as [`trunc`]: ⌊z/2^d⌋ or ⌊z/2^d⌋ + 1 for −2^62 ≤ z < 2^62.
///
/// Rounds: 2. Bytes (per element, summed over the three parties): 128 + 64 + 6·d bits
/// (300 at d = 18); for n divisible by 3 each party sends 16·n/3 bytes more than [`trunc`].
///
/// # Errors
/// `Misuse` unless 1 ≤ `d` ≤ 62; `Protocol` if a message is malformed.
pub(crate) async fn reshare_trunc(ctx: &mut Ctx, mut z: Vec<u64>, d: u32) -> Result<Shares, Error> {
    let width = Width::new(d)
        .filter(|_| d <= 62)
        .ok_or(Error::misuse("truncation bits must be in 1..=62"))?;
    let mut ctx = ctx.fork();
    let alpha = ctx.zero_share(z.len());
    for (v, a) in z.iter_mut().zip(&alpha) {
        *v = v.wrapping_add(*a);
    }
    let me = ctx.me();
    let n = z.len();
    let blocks = role_blocks(n);
    let mut xctx = ctx.fork();
    // Round 1: R0 → R2 its z_s (a), R2 → R1 its z_{s+2} (the other half of b).
    for (s, range) in blocks.iter().enumerate() {
        let r0 = PartyId::from_index(s);
        let (r1, r2) = (r0.next(), r0.prev());
        let part = z
            .get(range.clone())
            .ok_or(Error::bug("block out of range"))?;
        if me == r0 {
            xctx.send(r2, part, Width::W64)?;
        } else if me == r2 {
            xctx.send(r1, part, Width::W64)?;
        }
    }
    // The two-of-two view [`send_block`] reads: R0 its a in `a`, R1 its two halves of b
    // in `a` and `b`, R2 the received a in `b`.
    let mut other = alloc::vec![0u64; n];
    for (s, range) in blocks.iter().enumerate() {
        let r0 = PartyId::from_index(s);
        let (r1, r2) = (r0.next(), r0.prev());
        let from = if me == r2 {
            Some(r0)
        } else if me == r1 {
            Some(r2)
        } else {
            None
        };
        if let Some(from) = from {
            let got = xctx.recv(from, range.len(), Width::W64).await?;
            other
                .get_mut(range.clone())
                .ok_or(Error::bug("block out of range"))?
                .copy_from_slice(&got);
        }
    }
    let view = Shares::from_parts(me, z, other);
    trunc_two_of_two(&mut ctx, &view, width).await
}

/// The truncation round on a two-of-two view: per role block, R0 reads a from the first
/// component, R2 from the second, R1 reads b as the sum of both.
async fn trunc_two_of_two(ctx: &mut Ctx, x: &Shares, width: Width) -> Result<Shares, Error> {
    let n = x.len();
    let mut ctxs = [ctx.fork(), ctx.fork(), ctx.fork()];
    let mut states = Vec::with_capacity(3);
    // Stage 1: every message depends only on local data, so all go out in one round.
    for ((s, range), c) in role_blocks(n).into_iter().enumerate().zip(ctxs.iter_mut()) {
        states.push(send_block(c, x, range, s, width)?);
    }
    // Stage 2: receive and finish.
    let me = ctx.me();
    let mut a = Vec::with_capacity(n);
    let mut b = Vec::with_capacity(n);
    for (c, st) in ctxs.iter_mut().zip(states) {
        let (ya, yb) = finish_block(c, st, width).await?;
        a.extend_from_slice(&ya);
        b.extend_from_slice(&yb);
    }
    Ok(Shares::from_parts(me, a, b))
}

/// What a party keeps between the two stages of one block.
enum BlockState {
    /// R0: a, α and its own helper string are known; it waits for R1 and R2.
    R0 { a: Vec<u64>, alpha: Vec<bool> },
    /// R1: already has its output (y_1, y_2).
    R1 { y1: Vec<u64>, y2: Vec<u64> },
    /// R2: waits for R1 and R0.
    R2 {
        a: Vec<u64>,
        alpha: Vec<bool>,
        rho: Vec<u64>,
    },
}

fn msb(v: u64) -> bool {
    v >> 63 == 1
}

fn send_block(
    ctx: &mut Ctx,
    x: &Shares,
    range: core::ops::Range<usize>,
    s: usize,
    width: Width,
) -> Result<BlockState, Error> {
    let me = ctx.me();
    let r0 = PartyId::from_index(s);
    let (r1, r2) = (r0.next(), r0.prev());
    let n = range.len();
    let xa = x
        .a()
        .get(range.clone())
        .ok_or(Error::bug("block out of range"))?;
    let xb = x.b().get(range).ok_or(Error::bug("block out of range"))?;
    let mask = width.mask();
    // Correlated draws, in the same order at every party.
    let w_rho = ctx.pair_random(r2, 3 * n)?; // K_{R2}: known to R1 and R2
    let v = ctx.pair_random(r1, 2 * n)?; // K_{R1}: known to R0 and R1
    let err = || Error::bug("truncation role lacks a key");
    if me == r1 {
        let w_rho = w_rho.ok_or_else(err)?;
        let v = v.ok_or_else(err)?;
        let u = ctx.private_random(n);
        let d = width.bits();
        let (w, rho) = w_rho.split_at(2 * n);
        let mut to_r0 = alloc::vec![0u64; 2 * n];
        let mut to_r2 = alloc::vec![0u64; 2 * n];
        let mut y1 = Vec::with_capacity(n);
        for k in 0..n {
            let b = xa
                .get(k)
                .copied()
                .unwrap_or(0)
                .wrapping_add(xb.get(k).copied().unwrap_or(0));
            let beta = u64::from(msb(b));
            let uk = u.get(k).copied().unwrap_or(0) & mask;
            for j in 0..2u64 {
                let g = uk.wrapping_sub(j | beta) & mask;
                let idx = j as usize * n + k;
                if let (Some(o0), Some(o2), Some(wj), Some(vj)) = (
                    to_r0.get_mut(idx),
                    to_r2.get_mut(idx),
                    w.get(idx),
                    v.get(idx),
                ) {
                    *o0 = g.wrapping_add(*wj) & mask;
                    *o2 = g.wrapping_add(*vj) & mask;
                }
            }
            let rho_k = rho.get(k).copied().unwrap_or(0);
            y1.push((b >> d).wrapping_sub(uk << (64 - d)).wrapping_sub(rho_k));
        }
        ctx.send(r0, &to_r0, width)?;
        ctx.send(r0, &y1, Width::W64)?;
        ctx.send(r2, &to_r2, width)?;
        Ok(BlockState::R1 {
            y1,
            y2: rho.to_vec(),
        })
    } else if me == r0 {
        // R0 holds (c_0, c_1): a = c_0 + 2^62.
        let v = v.ok_or_else(err)?;
        let a: Vec<u64> = xa.iter().map(|c| c.wrapping_add(OFFSET)).collect();
        let alpha: Vec<bool> = a.iter().map(|&a| msb(a)).collect();
        let helper: Vec<u64> = alpha
            .iter()
            .enumerate()
            .map(|(k, &al)| v.get(usize::from(al) * n + k).copied().unwrap_or(0))
            .collect();
        ctx.send(r2, &helper, width)?;
        Ok(BlockState::R0 { a, alpha })
    } else {
        // R2 holds (c_2, c_0): a = c_0 + 2^62.
        let w_rho = w_rho.ok_or_else(err)?;
        let a: Vec<u64> = xb.iter().map(|c| c.wrapping_add(OFFSET)).collect();
        let alpha: Vec<bool> = a.iter().map(|&a| msb(a)).collect();
        let helper: Vec<u64> = alpha
            .iter()
            .enumerate()
            .map(|(k, &al)| w_rho.get(usize::from(al) * n + k).copied().unwrap_or(0))
            .collect();
        ctx.send(r0, &helper, width)?;
        let rho = w_rho.get(2 * n..).ok_or_else(err)?.to_vec();
        Ok(BlockState::R2 { a, alpha, rho })
    }
}

/// y_0 = ⌊a/2^d⌋ + 2^(64−d)·g + 1 − 2^(62−d) for each element, with g = chosen − helper.
fn output0(a: &[u64], alpha: &[bool], offered: &[u64], helper: &[u64], width: Width) -> Vec<u64> {
    let d = width.bits();
    let n = a.len();
    let mask = width.mask();
    let corr = 1u64.wrapping_sub(1u64 << (62 - d));
    a.iter()
        .zip(alpha)
        .zip(helper)
        .enumerate()
        .map(|(k, ((&a, &al), &h))| {
            let chosen = offered.get(usize::from(al) * n + k).copied().unwrap_or(0);
            let g = chosen.wrapping_sub(h) & mask;
            (a >> d).wrapping_add(g << (64 - d)).wrapping_add(corr)
        })
        .collect()
}

async fn finish_block(
    ctx: &mut Ctx,
    st: BlockState,
    width: Width,
) -> Result<(Vec<u64>, Vec<u64>), Error> {
    let me = ctx.me();
    match st {
        BlockState::R1 { y1, y2 } => Ok((y1, y2)),
        BlockState::R0 { a, alpha } => {
            let n = a.len();
            let (r1, r2) = (me.next(), me.prev());
            let offered = ctx.recv(r1, 2 * n, width).await?;
            let y1 = ctx.recv(r1, n, Width::W64).await?;
            let helper = ctx.recv(r2, n, width).await?;
            let y0 = output0(&a, &alpha, &offered, &helper, width);
            Ok((y0, y1))
        }
        BlockState::R2 { a, alpha, rho } => {
            let n = a.len();
            let (r0, r1) = (me.next(), me.prev());
            let offered = ctx.recv(r1, 2 * n, width).await?;
            let helper = ctx.recv(r0, n, width).await?;
            let y0 = output0(&a, &alpha, &offered, &helper, width);
            Ok((rho, y0))
        }
    }
}
