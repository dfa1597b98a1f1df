//! Equality tests, the one-hot of secret ids and the secure embedding
//! (docs/PROTOCOLS.md, Equality; One-hot and embedding).

use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::party::PartyId;
use crate::ring::Width;
use crate::share::{BitShares, Shares};

use super::blocks::role_blocks;
use super::{and, b2a, matmul};

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
        let za = z
            .a()
            .get(range.clone())
            .ok_or(Error::bug("block out of range"))?;
        let zb = z
            .b()
            .get(range.clone())
            .ok_or(Error::bug("block out of range"))?;
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
        let za = z
            .a()
            .get(range.clone())
            .ok_or(Error::bug("block out of range"))?;
        let zb = z.b().get(range).ok_or(Error::bug("block out of range"))?;
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

/// The one-hot of each secret id against the public iota 0..`vocab`: bit (t, j) is
/// [id_t = j], row-major (token-major), as boolean shares.
///
/// docs/PROTOCOLS.md, One-hot and embedding: ids are compared mod 2^k (k = `width`, so
/// `vocab` ≤ 2^k and ids must be below 2^k); P0 inputs u_t = id_0 + id_1 once per token,
/// each v_{t,j} = j − id_2 lies in component 2 for free, and an AND tree over the k XNOR
/// bits gives each entry.
///
/// Rounds: 1 + ⌈log2 k⌉ (k = 16: 5). Bits per token: k from P0 plus (k − 1)·vocab per
/// party.
///
/// # Errors
/// `Misuse` if `vocab` is 0 or exceeds 2^k; `Protocol` if a message is malformed.
pub async fn one_hot(
    ctx: &mut Ctx,
    ids: &Shares,
    vocab: usize,
    width: Width,
) -> Result<BitShares, Error> {
    if vocab == 0 || (width.bits() < 64 && vocab as u64 > (1u64 << width.bits())) {
        return Err(Error::misuse("vocabulary size must be in 1..=2^width"));
    }
    let mut ctx = ctx.fork();
    let me = ctx.me();
    let n = ids.len();
    let km = width.mask();
    let u = (me == PartyId::P0).then(|| {
        ids.a()
            .iter()
            .zip(ids.b())
            .map(|(a, b)| a.wrapping_add(*b) & km)
            .collect()
    });
    let f = input_bits_send(&mut ctx, 0, u, n, width)?;
    // Per-token components of [u]^B, role 0 = P0.
    let (ua, ub): (Vec<u64>, Vec<u64>) = match me {
        PartyId::P0 => {
            let f = f.ok_or(Error::bug("P0 lacks its mask"))?;
            let c1 = ids
                .a()
                .iter()
                .zip(ids.b())
                .zip(&f)
                .map(|((a, b), f)| a.wrapping_add(*b) ^ f)
                .collect();
            (f, c1)
        }
        PartyId::P1 => (ctx.recv(PartyId::P0, n, width).await?, alloc::vec![0; n]),
        PartyId::P2 => (alloc::vec![0; n], f.ok_or(Error::bug("P2 lacks the mask"))?),
    };
    let total = n
        .checked_mul(vocab)
        .ok_or(Error::misuse("one-hot size overflows"))?;
    let mut e_a = Vec::with_capacity(total);
    let mut e_b = Vec::with_capacity(total);
    for t in 0..n {
        let ua_t = ua.get(t).copied().unwrap_or(0);
        let ub_t = ub.get(t).copied().unwrap_or(0);
        // id_2 is P1's second and P2's first component.
        let id2 = match me {
            PartyId::P0 => 0,
            PartyId::P1 => ids.b().get(t).copied().unwrap_or(0),
            PartyId::P2 => ids.a().get(t).copied().unwrap_or(0),
        };
        for j in 0..vocab as u64 {
            let v = j.wrapping_sub(id2);
            // e = ¬(u ⊕ v): v sits in component 2, the negation in component 0.
            let (a, b) = match me {
                PartyId::P0 => (!ua_t, ub_t),
                PartyId::P1 => (ua_t, v),
                PartyId::P2 => (v, !ub_t),
            };
            e_a.push(a);
            e_b.push(b);
        }
    }
    let e = BitShares::from_parts(me, width, e_a, e_b);
    and_all_bits(&mut ctx, &e).await
}

/// Secure embedding: the rows of a shared `vocab × d` table selected by secret ids, as an
/// `n × d` matrix: [`one_hot`], [`b2a`] of its bits, and one matmul with the table (no
/// truncation: the one-hot is integral).
///
/// Rounds: 1 + ⌈log2 k⌉ + 1 + 1 (k = 16: 7). Bits per token and party: about
/// (k − 1 + 128)·vocab + 64·d.
///
/// # Errors
/// As [`one_hot`], and `Misuse` if the table is not `vocab × d`.
pub async fn embed(
    ctx: &mut Ctx,
    ids: &Shares,
    table: &Shares,
    vocab: usize,
    d: usize,
    width: Width,
) -> Result<Shares, Error> {
    if vocab.checked_mul(d) != Some(table.len()) {
        return Err(Error::misuse("embedding table is not vocab × d"));
    }
    let mut ctx = ctx.fork();
    let bits = one_hot(&mut ctx, ids, vocab, width).await?;
    let hot = b2a(&mut ctx, &bits).await?;
    matmul(&mut ctx, &hot, table, ids.len(), vocab, d).await
}
