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
/// Known-MSB truncation (docs/PROTOCOLS.md, Truncation; after SiRNN). With
/// x' = x + 2^62, a = x_0 + 2^62 (known to the roles R0, R2) and b = x_1 + x_2 (R1), the
/// wrap of a + b is w = α ∨ β = α + β − αβ with α = msb(a), β = msb(b), because x' < 2^63.
/// Only αβ needs the other side: R1 sends β − ρ_C + κ to R0 and β − ρ_B + κ' to R2, and
/// each of R0, R2 gets from the other (by α) either the mask (κ' or κ) or the negated pad
/// (−ρ_B or −ρ_C), so each learns αβ minus the pad it lacks and nothing else. Then
/// y_0 = ⌊a/2^d⌋ + 2^(64−d)·(αβ − α − ρ_B − ρ_C) + 1 − 2^(62−d) (R0, R2),
/// y_1 = ⌊b/2^d⌋ − 2^(64−d)·(β − ρ_B) − ρ (R1, sent to R0), y_2 = ρ + 2^(64−d)·ρ_C.
///
/// **Error bound**: for every x with −2^62 ≤ x < 2^62 (raw ring value) and any shares, the
/// output is ⌊x/2^d⌋ or ⌊x/2^d⌋ + 1. The large-error probability is 0 in that range (so
/// far below the 2^-40 per element asked for |x| ≤ 2^20 real, i.e. 2^38 raw). With random
/// shares the +1 happens with probability ((x mod 2^d) + 1)/2^d: stochastic rounding.
///
/// Roles rotate over three contiguous blocks of the input, so each party carries a third
/// of each role's traffic.
///
/// Rounds: 1. Bytes (per element, summed over the three parties): 64 + 4·d bits
/// = 136 bits at d = 18; for n divisible by 3 each party sends 2·⌈d·n/3/8⌉ + 8·n/3 +
/// ⌈d·n/3/8⌉ + ⌈d·n/3/8⌉ bytes (its R1, R0 and R2 blocks).
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
/// component masked by a PRF term it lacks); then [`trunc`]'s round runs on (a, b).
/// That is 2·64 bits per element instead of the 3·64 of a reshare.
///
/// **Error bound**: as [`trunc`]: ⌊z/2^d⌋ or ⌊z/2^d⌋ + 1 for −2^62 ≤ z < 2^62.
///
/// Rounds: 2. Bytes (per element, summed over the three parties): 128 + 64 + 4·d bits
/// (264 at d = 18); for n divisible by 3 each party sends 16·n/3 bytes more than [`trunc`].
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
    /// R0: a and α are known; it waits for R1 and R2.
    R0 {
        a: Vec<u64>,
        alpha: Vec<bool>,
        pad: Vec<u64>,
    },
    /// R1: already has its output (y_1, y_2).
    R1 { y1: Vec<u64>, y2: Vec<u64> },
    /// R2: waits for R1 and R0.
    R2 {
        a: Vec<u64>,
        alpha: Vec<bool>,
        pad: Vec<u64>,
        y2: Vec<u64>,
    },
}

fn msb(v: u64) -> bool {
    v >> 63 == 1
}

/// The pair-random words of one block, drawn in the same order at every party: from the
/// key of R1 and R2, ρ (a 64-bit output pad), ρ_C (the d-bit pad of y_2) and κ (the mask
/// of R1's string to R0); from the key of R0 and R1, ρ_B (the d-bit pad of y_1) and κ'
/// (the mask of R1's string to R2).
struct Pads {
    rho: Vec<u64>,
    rho_c: Vec<u64>,
    kappa: Vec<u64>,
    rho_b: Vec<u64>,
    kappa_b: Vec<u64>,
}

/// `v` cut into words of `n`: the i-th draw of a pair key, or none at a party without it.
fn draws(v: Option<Vec<u64>>, n: usize) -> Vec<Vec<u64>> {
    v.map(|v| v.chunks(n.max(1)).map(<[u64]>::to_vec).collect())
        .unwrap_or_default()
}

impl Pads {
    fn draw(ctx: &mut Ctx, r1: PartyId, r2: PartyId, n: usize) -> Result<Pads, Error> {
        let mut k12 = draws(ctx.pair_random(r2, 3 * n)?, n).into_iter();
        let mut k01 = draws(ctx.pair_random(r1, 2 * n)?, n).into_iter();
        Ok(Pads {
            rho: k12.next().unwrap_or_default(),
            rho_c: k12.next().unwrap_or_default(),
            kappa: k12.next().unwrap_or_default(),
            rho_b: k01.next().unwrap_or_default(),
            kappa_b: k01.next().unwrap_or_default(),
        })
    }

    /// The output component of R1 and R2: y_2 = ρ + 2^(64−d)·ρ_C.
    fn y2(&self, d: u32) -> Vec<u64> {
        self.rho
            .iter()
            .zip(&self.rho_c)
            .map(|(r, c)| r.wrapping_add(c << (64 - d)))
            .collect()
    }
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
    let (xa, xb) = x.block(range.clone())?;
    let mask = width.mask();
    let d = width.bits();
    // Correlated draws, in the same order at every party.
    let p = Pads::draw(ctx, r1, r2, n)?;
    let lacks = |v: &[u64]| v.len() != n;
    let err = || Error::bug("truncation role lacks a key");
    if me == r1 {
        if lacks(&p.rho) || lacks(&p.rho_b) {
            return Err(err());
        }
        // β − ρ_C + κ to R0, β − ρ_B + κ' to R2, and y_1 to R0.
        let mut to_r0 = Vec::with_capacity(n);
        let mut to_r2 = Vec::with_capacity(n);
        let mut y1 = Vec::with_capacity(n);
        for k in 0..n {
            let at = |v: &[u64]| v.get(k).copied().unwrap_or(0);
            let b = at(xa).wrapping_add(at(xb));
            let beta = u64::from(msb(b));
            to_r0.push(beta.wrapping_sub(at(&p.rho_c)).wrapping_add(at(&p.kappa)) & mask);
            to_r2.push(beta.wrapping_sub(at(&p.rho_b)).wrapping_add(at(&p.kappa_b)) & mask);
            y1.push(
                (b >> d)
                    .wrapping_sub(beta << (64 - d))
                    .wrapping_add(at(&p.rho_b) << (64 - d))
                    .wrapping_sub(at(&p.rho)),
            );
        }
        ctx.send(r0, &to_r0, width)?;
        ctx.send(r0, &y1, Width::W64)?;
        ctx.send(r2, &to_r2, width)?;
        Ok(BlockState::R1 { y1, y2: p.y2(d) })
    } else if me == r0 {
        // R0 holds (c_0, c_1): a = c_0 + 2^62. It tells R2 κ' or −ρ_B, by α.
        if lacks(&p.rho_b) {
            return Err(err());
        }
        let a: Vec<u64> = xa.iter().map(|c| c.wrapping_add(OFFSET)).collect();
        let alpha: Vec<bool> = a.iter().map(|&a| msb(a)).collect();
        let helper = helper_strings(&alpha, &p.kappa_b, &p.rho_b, mask);
        ctx.send(r2, &helper, width)?;
        Ok(BlockState::R0 {
            a,
            alpha,
            pad: p.rho_b,
        })
    } else {
        // R2 holds (c_2, c_0): a = c_0 + 2^62. It tells R0 κ or −ρ_C, by α.
        if lacks(&p.rho) {
            return Err(err());
        }
        let a: Vec<u64> = xb.iter().map(|c| c.wrapping_add(OFFSET)).collect();
        let alpha: Vec<bool> = a.iter().map(|&a| msb(a)).collect();
        let helper = helper_strings(&alpha, &p.kappa, &p.rho_c, mask);
        ctx.send(r0, &helper, width)?;
        let y2 = p.y2(d);
        Ok(BlockState::R2 {
            a,
            alpha,
            pad: p.rho_c,
            y2,
        })
    }
}

/// The helper's string for each element: the mask κ when α = 1 (the receiver then
/// unmasks R1's β − pad), the negated pad when α = 0 (αβ = 0 needs no β).
fn helper_strings(alpha: &[bool], kappa: &[u64], pad: &[u64], mask: u64) -> Vec<u64> {
    alpha
        .iter()
        .zip(kappa.iter().zip(pad))
        .map(|(&al, (&k, &p))| if al { k } else { p.wrapping_neg() & mask })
        .collect()
}

/// y_0 = ⌊a/2^d⌋ − 2^(64−d)·(α − αβ + ρ_B + ρ_C) + 1 − 2^(62−d) for each element: from
/// R1's string m = β − pad' + κ and the helper's h (κ or −pad'), αβ − pad' is m − h when
/// α = 1 and h when α = 0; `own` is the pad this party knows.
fn output0(
    a: &[u64],
    alpha: &[bool],
    offered: &[u64],
    helper: &[u64],
    own: &[u64],
    width: Width,
) -> Vec<u64> {
    let d = width.bits();
    let mask = width.mask();
    let corr = 1u64.wrapping_sub(1u64 << (62 - d));
    a.iter()
        .zip(alpha)
        .zip(offered.iter().zip(helper).zip(own))
        .map(|((&a, &al), ((&m, &h), &own))| {
            let ab = if al { m.wrapping_sub(h) } else { h };
            let g = ab.wrapping_sub(own).wrapping_sub(u64::from(al)) & mask;
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
        BlockState::R0 { a, alpha, pad } => {
            let n = a.len();
            let (r1, r2) = (me.next(), me.prev());
            let offered = ctx.recv(r1, n, width).await?;
            let y1 = ctx.recv(r1, n, Width::W64).await?;
            let helper = ctx.recv(r2, n, width).await?;
            let y0 = output0(&a, &alpha, &offered, &helper, &pad, width);
            Ok((y0, y1))
        }
        BlockState::R2 { a, alpha, pad, y2 } => {
            let n = a.len();
            let (r0, r1) = (me.next(), me.prev());
            let offered = ctx.recv(r1, n, width).await?;
            let helper = ctx.recv(r0, n, width).await?;
            let y0 = output0(&a, &alpha, &offered, &helper, &pad, width);
            Ok((y2, y0))
        }
    }
}
