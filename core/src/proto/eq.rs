//! Equality tests (docs/PROTOCOLS.md, Equality).

use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::party::PartyId;
use crate::ring::Width;
use crate::share::{BitShares, Shares};

use super::and;
use super::blocks::role_blocks;

/// AND of all `m` low bits of each value: a tree that halves the word every round.
///
/// Rounds: ⌈log2 m⌉. Bits per value and party: m − 1.
pub(crate) async fn and_all_bits(ctx: &mut Ctx, x: &BitShares) -> Result<BitShares, Error> {
    let mut ctx = ctx.fork();
    let mut e = x.clone();
    let mut m = x.width().bits();
    while m > 1 {
        let half = m / 2;
        let wh = Width::new(half).ok_or(Error::bug("empty AND-tree level"))?;
        let lo = e.map_linear(wh, |v| v);
        let hi = e.map_linear(wh, |v| v >> half);
        let prod = and(&mut ctx, &lo, &hi).await?;
        if m % 2 == 1 {
            // The top bit has no partner this level; it moves up unchanged.
            let wn = Width::new(half + 1).ok_or(Error::bug("empty AND-tree level"))?;
            let top = e.map_linear(wn, |v| ((v >> (m - 1)) & 1) << half);
            e = prod.map_linear(wn, |v| v).xor(&top)?;
            m = half + 1;
        } else {
            e = prod;
            m = half;
        }
    }
    Ok(e)
}

/// `[u]^B` for values `u` known to the role R0 of block `s` (R0 = `P_s`): component 0 is
/// `F_0` (R0 and R2 know it), component 1 = u ⊕ F_0 is sent by R0 to R1.
/// Also returns whether this party is R1 (the receiver), for the caller's bookkeeping.
fn input_bits_send(
    ctx: &mut Ctx,
    s: usize,
    u: Option<Vec<u64>>,
    n: usize,
    width: Width,
) -> Result<Option<Vec<u64>>, Error> {
    let me = ctx.me();
    let r0 = PartyId::from_index(s);
    let mask = ctx.pair_random(r0, n)?;
    if me == r0 {
        let u = u.ok_or(Error::bug("the input role has no values"))?;
        let f = mask.ok_or(Error::bug("input role lacks its key"))?;
        let c1: Vec<u64> = u.iter().zip(&f).map(|(u, f)| u ^ f).collect();
        ctx.send(r0.next(), &c1, width)?;
        Ok(Some(f))
    } else {
        Ok(mask)
    }
}

/// Equality with zero of z = x − y per element, compared mod 2^k (k = `width`), as shares of
/// one bit: u = z_0 + z_1 (known to R0) equals v = −z_2 (known to R1, R2) iff z = 0.
/// R0 inputs `[u]^B`, `[v]^B` lies in component 2 for free, and an AND tree over the k
/// XNOR bits gives the result. No adder. Roles rotate over three blocks. Exact for every
/// value of x − y (a narrow ring compares x − y mod 2^k: it is exact when |x − y| < 2^k).
///
/// Rounds: 1 + ⌈log2 k⌉ (k = 64: 7; k = 16: 5). Bits per element, summed over the
/// parties: 4k − 3 (R0: 2k − 1, R1, R2: k − 1).
///
/// # Errors
/// `Misuse` for different lengths; `Protocol` if a message is malformed.
pub async fn eq(ctx: &mut Ctx, x: &Shares, y: &Shares, width: Width) -> Result<BitShares, Error> {
    eq_zero(ctx, &x.sub(y)?, width).await
}

/// `[x = c]` for public constants `c`, one per element (see [`eq`]).
///
/// Rounds and bits: those of [`eq`].
///
/// # Errors
/// `Misuse` for a wrong length of `c`; `Protocol` if a message is malformed.
pub async fn eq_public(
    ctx: &mut Ctx,
    x: &Shares,
    c: &[u64],
    width: Width,
) -> Result<BitShares, Error> {
    let neg: Vec<u64> = c.iter().map(|v| v.wrapping_neg()).collect();
    eq_zero(ctx, &x.add_public(&neg)?, width).await
}

async fn eq_zero(ctx: &mut Ctx, z: &Shares, width: Width) -> Result<BitShares, Error> {
    let mut ctx = ctx.fork();
    let me = ctx.me();
    let n = z.len();
    let km = width.mask();
    let blocks = role_blocks(n);
    let mut ctxs = [ctx.fork(), ctx.fork(), ctx.fork()];
    let mut own = Vec::with_capacity(3);
    for ((s, range), c) in blocks.iter().cloned().enumerate().zip(ctxs.iter_mut()) {
        let r0 = PartyId::from_index(s);
        let (za, zb) = z.block(range.clone())?;
        // R0 holds (z_0, z_1): u = z_0 + z_1.
        let u = (me == r0).then(|| {
            za.iter()
                .zip(zb)
                .map(|(a, b)| a.wrapping_add(*b) & km)
                .collect()
        });
        own.push(input_bits_send(c, s, u, range.len(), width)?);
    }
    let mut e_a = Vec::with_capacity(n);
    let mut e_b = Vec::with_capacity(n);
    for (((s, range), c), f) in blocks.into_iter().enumerate().zip(ctxs.iter_mut()).zip(own) {
        let r0 = PartyId::from_index(s);
        let len = range.len();
        let (za, zb) = z.block(range.clone())?;
        // [u]^B = (F, u ⊕ F, 0) and [v]^B = (0, 0, −z_2), role-relative; e = ¬(u ⊕ v).
        // Negation of a sharing: flip component 0 only.
        let (a, b): (Vec<u64>, Vec<u64>) = if me == r0 {
            let f = f.ok_or(Error::bug("input role lacks its mask"))?;
            let c1: Vec<u64> = za
                .iter()
                .zip(zb)
                .zip(&f)
                .map(|((a, b), f)| a.wrapping_add(*b) ^ f)
                .collect();
            (f.iter().map(|v| !v).collect(), c1)
        } else if me == r0.next() {
            // R1 holds (c_1, c_2) = (u ⊕ F, −z_2); z_2 is its second component.
            let c1 = c.recv(r0, len, width).await?;
            (c1, zb.iter().map(|v| v.wrapping_neg()).collect())
        } else {
            // R2 holds (c_2, c_0) = (−z_2, ¬F); z_2 is its first component.
            let f = f.ok_or(Error::bug("R2 lacks the input mask"))?;
            (
                za.iter().map(|v| v.wrapping_neg()).collect(),
                f.iter().map(|v| !v).collect(),
            )
        };
        e_a.extend_from_slice(&a);
        e_b.extend_from_slice(&b);
    }
    let e = BitShares::from_parts(me, width, e_a, e_b);
    and_all_bits(&mut ctx, &e).await
}
