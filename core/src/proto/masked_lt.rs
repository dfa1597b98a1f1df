//! Comparison with public thresholds in three rounds, whatever the ring width: a masked
//! opening to two parties and the third party's zero test (docs/PROTOCOLS.md, Comparison
//! by a masked opening; after the private compare of SecureNN, Wagh, Gupta and Chandran
//! 2019, with the third party dealing the mask instead of a trusted dealer).
//!
//! In a ring of k bits the carry tree of [`super::msb`] takes 1 + ⌈log2(k − 1)⌉ rounds and
//! about 13k bits; this protocol takes 3 rounds and about 3k·⌈log2 k⌉ bits. It suits
//! comparisons made once per row (the segments of the reciprocal and the reciprocal square
//! root), where rounds matter and bits do not, and narrow rings
//! (the softmax's row maxima on keys cut to 4 fractional bits, in Z_2^19: 319 bits against
//! the carry tree's 383 in Z_2^32).

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::engine::ctx::PairStream;
use crate::error::Error;
use crate::party::PartyId;
use crate::ring::Width;
use crate::share::{BitShares, Shares};
use crate::wire;

use super::blocks::role_blocks;

/// Rounds of [`lt_thresholds`], for any ring width and any number of thresholds.
pub const LT_THRESHOLDS_ROUNDS: u32 = 3;

/// The field of the zero test: the smallest prime p > k, so that the tested values (at
/// most k) are zero mod p only when they are zero.
fn field_prime(k: u32) -> u64 {
    let is_prime = |p: u64| p >= 2 && (2..p).take_while(|d| d * d <= p).all(|d| p % d != 0);
    (u64::from(k) + 1..).find(|&p| is_prime(p)).unwrap_or(67)
}

/// Bits of one value mod p on the wire.
fn field_width(p: u64) -> Result<Width, Error> {
    Width::new(64 - (p - 1).leading_zeros()).ok_or(Error::bug("field width"))
}

/// Bits per element of [`lt_thresholds`], summed over the parties, for ring width `k` and
/// `m` thresholds: 2k + (k − 1)·W + m·(2k·W + 384), W the bits of the zero test's prime.
pub fn lt_thresholds_bits(k: u32, m: u64) -> u64 {
    let w = u64::from(64 - (field_prime(k) - 1).leading_zeros());
    let k = u64::from(k);
    2 * k + (k - 1) * w + m * (2 * k * w + 384)
}

/// `[x < t]` for every element of `x` and every public threshold `t` of `thresholds`,
/// compared in Z_2^k with k = `width`, as arithmetic shares of the bit: one vector per
/// threshold, in order. Requires |x − t| < 2^(k−1) raw for every element and threshold
/// (the sign of x − t read in Z_2^k, as [`super::msb`]).
///
/// Method (docs/PROTOCOLS.md, Comparison by a masked opening). Roles rotate over three
/// blocks of the input. R2 deals r = r_0 + r_1 (r_0 drawn with R0, r_1 with R1) and sends R1
/// its share mod p of each low bit of r (the other share, ρ_j, R0 draws with R2). R0 and R1
/// exchange their halves of x masked by r_0 and r_1, so both learn c = x + r mod 2^k, and
/// for threshold t, x − t = (c − t) − r: its sign is c_t ⊕ r_(k−1) ⊕ [c' < r'], c_t the top
/// bit of c − t and c', r' the k − 1 low bits. With a common random bit β, they form
/// shares of k values mod p of which one is zero exactly when [c' < r'] ⊕ β = 1 (SecureNN's
/// private compare, completed by an equality test for β = 1), multiply each by a common
/// random nonzero factor, rotate them by a common random offset, mask their shares by a
/// common random pad and send them to R2. R2 learns γ = [c' < r'] ⊕ β, which is uniform to
/// it; the bit is v ⊕ w with v = c_t ⊕ β (R0, R1) and w = r_(k−1) ⊕ γ (R2). Then
/// b = v + σ·w with σ = 1 − 2v: R2 offers R0 and R1 each M_± = ±w − A − C masked by two
/// keys of the other one's pair key with R2 (A drawn by R0 and R2, C by R1 and R2), and R0
/// and R1 send each other the key for their σ, so each learns M_σ and nothing of M_(−σ).
/// The shares are (A, v + M_σ, C).
///
/// Rounds: 3 ([`LT_THRESHOLDS_ROUNDS`]). Bits per element, summed over the parties, for m
/// thresholds and W = ⌈log2 p⌉ (p the smallest prime above k): 2k + (k − 1)·W (the masked
/// halves and R1's shares of r's bits) + m·(2k·W (the zero tests) + 128 (the keys) + 256
/// (the offers)) ([`lt_thresholds_bits`]); k = 63 (p = 67, W = 7): 560 + 1266·m; k = 25
/// (p = 29, W = 5): 170 + 634·m. Roles rotate, so each party sends about a third.
///
/// # Errors
/// `Misuse` unless 2 ≤ k ≤ 64; `Protocol` if a message is malformed.
pub async fn lt_thresholds(
    ctx: &mut Ctx,
    x: &Shares,
    thresholds: &[u64],
    width: Width,
) -> Result<Vec<Shares>, Error> {
    let me = ctx.me();
    Ok(compare(ctx, x, thresholds, width, false)
        .await?
        .into_iter()
        .map(|(a, b)| Shares::from_parts(me, a, b))
        .collect())
}

/// Sign bit of each element of `x` read in Z_2^k with k = `width`, as boolean shares: the
/// result of [`super::msb`] (with its range condition |x| < 2^(k−1) raw) in three rounds,
/// by [`lt_thresholds`]'s masked opening and zero test with threshold 0, R2 handing its
/// part of the bit to R1 as one bit (components (a, v), (v, w ⊕ a), (w ⊕ a, a), a drawn by
/// R0 and R2) instead of the arithmetic offers.
///
/// Rounds: 3. Bits per element, summed over the parties: 2k + (k − 1)·W + 2k·W + 1
/// ([`msb_masked_bits`]); k = 22 (p = 23, W = 5): 370, where [`super::msb`] takes 274 in
/// 6 rounds.
///
/// # Errors
/// `Misuse` unless 2 ≤ k ≤ 64; `Protocol` if a message is malformed.
pub async fn msb_masked(ctx: &mut Ctx, x: &Shares, width: Width) -> Result<BitShares, Error> {
    let me = ctx.me();
    let (a, b) = compare(ctx, x, &[0], width, true)
        .await?
        .pop()
        .ok_or(Error::bug("comparison without output"))?;
    Ok(BitShares::from_parts(me, Width::BIT, a, b))
}

/// Bits per element of [`msb_masked`], summed over the parties, in a ring of `k` bits:
/// 2k + (k − 1)·W + 2k·W + 1, W the bits of the zero test's prime.
pub fn msb_masked_bits(k: u32) -> u64 {
    let w = u64::from(64 - (field_prime(k) - 1).leading_zeros());
    let k = u64::from(k);
    2 * k + (k - 1) * w + 2 * k * w + 1
}

/// The protocol behind [`lt_thresholds`] and [`msb_masked`]: each party's two components
/// of every threshold's output bits (arithmetic, or boolean if `boolean`).
async fn compare(
    ctx: &mut Ctx,
    x: &Shares,
    thresholds: &[u64],
    width: Width,
    boolean: bool,
) -> Result<Vec<(Vec<u64>, Vec<u64>)>, Error> {
    let k = width.bits();
    if k < 2 {
        return Err(Error::misuse(
            "a comparison needs a ring of at least 2 bits",
        ));
    }
    let mut ctx = ctx.fork();
    let n = x.len();
    let m = thresholds.len();
    let setup = Setup::new(k, thresholds, boolean)?;
    let blocks = role_blocks(n);
    let mut ctxs = [ctx.fork(), ctx.fork(), ctx.fork()];
    // Round 1 for every block, then each later stage for every block: a stage's receives
    // only wait for messages of earlier stages.
    let mut states = Vec::with_capacity(3);
    for ((s, range), c) in blocks.iter().cloned().enumerate().zip(ctxs.iter_mut()) {
        states.push(first_round(c, &setup, x, range, s)?);
    }
    let mut second = Vec::with_capacity(3);
    for (c, st) in ctxs.iter_mut().zip(states) {
        second.push(second_round(c, &setup, st).await?);
    }
    let mut third = Vec::with_capacity(3);
    for (c, st) in ctxs.iter_mut().zip(second) {
        third.push(third_round(c, &setup, st).await?);
    }
    // Per threshold, the blocks' outputs one after another.
    let mut out: Vec<(Vec<u64>, Vec<u64>)> =
        vec![(Vec::with_capacity(n), Vec::with_capacity(n)); m];
    for (c, st) in ctxs.iter_mut().zip(third) {
        let (oa, ob) = finish(c, &setup, st).await?;
        let nb = oa.len().checked_div(m).unwrap_or(0);
        for (q, (ta, tb)) in out.iter_mut().enumerate() {
            let span = q * nb..(q + 1) * nb;
            let (Some(pa), Some(pb)) = (oa.get(span.clone()), ob.get(span)) else {
                return Err(Error::bug("comparison output out of range"));
            };
            ta.extend_from_slice(pa);
            tb.extend_from_slice(pb);
        }
    }
    Ok(out)
}

/// The public parameters of one call.
struct Setup {
    k: u32,
    /// Boolean output (one bit from R2 to R1) instead of arithmetic (the offers).
    boolean: bool,
    /// Mask of the ring Z_2^k.
    ring: u64,
    thresholds: Vec<u64>,
    p: u64,
    field: Width,
}

impl Setup {
    fn new(k: u32, thresholds: &[u64], boolean: bool) -> Result<Setup, Error> {
        let ring = Width::new(k).ok_or(Error::misuse("comparison ring wider than 64 bits"))?;
        let p = field_prime(k);
        Ok(Setup {
            k,
            boolean,
            ring: ring.mask(),
            thresholds: thresholds.to_vec(),
            p,
            field: field_width(p)?,
        })
    }

    fn m(&self) -> usize {
        self.thresholds.len()
    }

    /// Low bits of c' and r' compared (positions 0..k−1).
    fn low(&self) -> usize {
        (self.k - 1) as usize
    }
}

/// The pair-random words of one block, drawn in the same order at every party (absent at
/// the party outside the pair). Per element i and threshold q, at index i·m + q.
struct Draws {
    /// Key of R0 and R2: r_0 (n), ρ (n·(k−1), mod p), A (n·m; for a boolean output, the
    /// bit a in its low bit), R1's keys (2·n·m, none for a boolean output).
    r0: Vec<u64>,
    rho: Vec<u64>,
    out_a: Vec<u64>,
    keys_r1: Vec<u64>,
    /// Key of R1 and R2: r_1 (n), C (n·m), R0's keys (2·n·m); only r_1 for a boolean
    /// output.
    r1: Vec<u64>,
    out_c: Vec<u64>,
    keys_r0: Vec<u64>,
    /// Key of R0 and R1, per (element, threshold): β and the rotation (2 words), the
    /// factors and the pads (k words each). Taken element by element in the second round:
    /// as one vector it would be (2k + 2)·n·m words, far more than the rest of the block.
    /// (Boxed: a stream's state is larger than the rest of the struct.)
    common: Option<Box<PairStream>>,
}

impl Draws {
    fn draw(ctx: &mut Ctx, setup: &Setup, roles: Roles, n: usize) -> Result<Draws, Error> {
        let m = setup.m();
        let low = setup.low();
        let nm = n * m;
        let split = |v: Option<Vec<u64>>, sizes: &[usize]| -> Vec<Vec<u64>> {
            let mut out = Vec::with_capacity(sizes.len());
            let v = v.unwrap_or_default();
            let mut at = 0;
            for &s in sizes {
                out.push(v.get(at..at + s).map(<[u64]>::to_vec).unwrap_or_default());
                at += s;
            }
            out
        };
        // A boolean output needs one random bit a (drawn by R0 and R2) per comparison.
        let (out, keys) = if setup.boolean { (0, 0) } else { (nm, 2 * nm) };
        let s02 = [n, n * low, nm, keys];
        let w02 = ctx.pair_random(roles.r0, s02.iter().sum())?;
        let s12 = [n, out, keys];
        let w12 = ctx.pair_random(roles.r2, s12.iter().sum())?;
        let w01 = ctx.pair_random_stream(roles.r1);
        let mut d02 = split(w02, &s02).into_iter();
        let mut d12 = split(w12, &s12).into_iter();
        let p = setup.p;
        Ok(Draws {
            r0: d02.next().unwrap_or_default(),
            rho: d02
                .next()
                .unwrap_or_default()
                .into_iter()
                .map(|w| w % p)
                .collect(),
            out_a: d02.next().unwrap_or_default(),
            keys_r1: d02.next().unwrap_or_default(),
            r1: d12.next().unwrap_or_default(),
            out_c: d12.next().unwrap_or_default(),
            keys_r0: d12.next().unwrap_or_default(),
            common: w01.map(Box::new),
        })
    }
}

/// The roles of one block.
#[derive(Clone, Copy)]
struct Roles {
    r0: PartyId,
    r1: PartyId,
    r2: PartyId,
}

impl Roles {
    fn of_block(s: usize) -> Roles {
        let r0 = PartyId::from_index(s);
        Roles {
            r0,
            r1: r0.next(),
            r2: r0.prev(),
        }
    }
}

/// What a party keeps after the first round of one block.
enum First {
    /// R0 or R1: its masked half of x (sent to the other).
    Pair {
        roles: Roles,
        half: Vec<u64>,
        draws: Draws,
    },
    /// R2: r's top bits, waiting for the zero tests.
    Dealer(Dealer),
}

/// What R2 keeps until the zero tests arrive.
struct Dealer {
    roles: Roles,
    /// Elements of the block.
    n: usize,
    /// The top bit of r for each element.
    r_top: Vec<bool>,
    draws: Draws,
}

fn lacks(v: &[u64], n: usize) -> bool {
    v.len() != n
}

fn first_round(
    ctx: &mut Ctx,
    setup: &Setup,
    x: &Shares,
    range: core::ops::Range<usize>,
    s: usize,
) -> Result<First, Error> {
    let me = ctx.me();
    let roles = Roles::of_block(s);
    let n = range.len();
    let (xa, xb) = x.block(range.clone())?;
    let draws = Draws::draw(ctx, setup, roles, n)?;
    let ring = setup.ring;
    let width = Width::new(setup.k).ok_or(Error::bug("ring width"))?;
    let err = || Error::bug("comparison role lacks a key");
    if me == roles.r0 {
        // R0 holds (c_0, c_1): its half is c_0 + c_1, masked by r_0.
        if lacks(&draws.r0, n) {
            return Err(err());
        }
        let half: Vec<u64> = xa
            .iter()
            .zip(xb)
            .zip(&draws.r0)
            .map(|((a, b), r)| a.wrapping_add(*b).wrapping_add(*r) & ring)
            .collect();
        ctx.send(roles.r1, &half, width)?;
        Ok(First::Pair { roles, half, draws })
    } else if me == roles.r1 {
        // R1 holds (c_1, c_2): its half is c_2, masked by r_1.
        if lacks(&draws.r1, n) {
            return Err(err());
        }
        let half: Vec<u64> = xb
            .iter()
            .zip(&draws.r1)
            .map(|(c, r)| c.wrapping_add(*r) & ring)
            .collect();
        ctx.send(roles.r0, &half, width)?;
        Ok(First::Pair { roles, half, draws })
    } else {
        // R2 knows r = r_0 + r_1 and sends R1 its shares r_j − ρ_j mod p of the low bits.
        let low = setup.low();
        if lacks(&draws.r0, n) || lacks(&draws.r1, n) || lacks(&draws.rho, n * low) {
            return Err(err());
        }
        let p = setup.p;
        let mut to_r1 = Vec::with_capacity(n * low);
        let mut r_top = Vec::with_capacity(n);
        for (i, (a, b)) in draws.r0.iter().zip(&draws.r1).enumerate() {
            let r = a.wrapping_add(*b) & ring;
            r_top.push((r >> (setup.k - 1)) & 1 == 1);
            let rho = draws.rho.get(i * low..(i + 1) * low).unwrap_or_default();
            for (j, rj) in rho.iter().enumerate() {
                to_r1.push(((r >> j) & 1) + p - rj);
            }
        }
        for v in &mut to_r1 {
            *v %= p;
        }
        ctx.send(roles.r1, &to_r1, setup.field)?;
        Ok(First::Dealer(Dealer {
            roles,
            n,
            r_top,
            draws,
        }))
    }
}

/// What a party keeps after the second round of one block.
enum Second {
    /// R0 or R1: v for each (element, threshold), waiting for the offers.
    Pair {
        roles: Roles,
        v: Vec<bool>,
        draws: Draws,
    },
    /// R2, unchanged.
    Dealer(Dealer),
}

/// The common randomness of R0 and R1 for one (element, threshold): β, the rotation, the
/// nonzero factors and the pads.
struct Common<'a> {
    beta: bool,
    rot: usize,
    factors: &'a [u64],
    pads: &'a [u64],
}

/// Words of the common draws taken at once in the second round (256 KiB).
const COMMON_RUN_WORDS: usize = 1 << 15;

fn common_at(words: &[u64], idx: usize, k: usize) -> Result<Common<'_>, Error> {
    let per = 2 + 2 * k;
    let w = words
        .get(idx * per..(idx + 1) * per)
        .ok_or(Error::bug("comparison draws out of range"))?;
    let (head, rest) = w.split_at(2);
    let (factors, pads) = rest.split_at(k);
    let (b, r) = match head {
        [b, r] => (*b, *r),
        _ => return Err(Error::bug("comparison draws out of range")),
    };
    Ok(Common {
        beta: b & 1 == 1,
        rot: (r % k as u64) as usize,
        factors,
        pads,
    })
}

async fn second_round(ctx: &mut Ctx, setup: &Setup, st: First) -> Result<Second, Error> {
    let me = ctx.me();
    match st {
        First::Dealer(dealer) => Ok(Second::Dealer(dealer)),
        First::Pair {
            roles,
            half,
            mut draws,
        } => {
            let n = half.len();
            let (k, m, low, p) = (setup.k as usize, setup.m(), setup.low(), setup.p);
            let width = Width::new(setup.k).ok_or(Error::bug("ring width"))?;
            let is_r0 = me == roles.r0;
            let other = if is_r0 { roles.r1 } else { roles.r0 };
            let got = ctx.recv(other, n, width).await?;
            // R0's shares of r's low bits are its draws ρ; R1's come from R2.
            let r_bits = if is_r0 {
                draws.rho.clone()
            } else {
                let v = ctx.recv(roles.r2, n * low, setup.field).await?;
                if v.iter().any(|&e| e >= p) {
                    return Err(Error::protocol(
                        roles.r2,
                        "a share of a bit of the comparison mask is not below p",
                    ));
                }
                v
            };
            let mut common = draws
                .common
                .take()
                .ok_or(Error::bug("comparison role lacks a key"))?;
            // The common words of a run of elements at a time, in one reused buffer.
            let per_element = m * (2 + 2 * k);
            let run = (COMMON_RUN_WORDS / per_element.max(1)).max(1);
            let mut com_words = Vec::new();
            // The key for σ this party tells the other: drawn with R2 by this party.
            let keys = if is_r0 {
                &draws.keys_r1
            } else {
                &draws.keys_r0
            };
            if !setup.boolean && lacks(keys, 2 * n * m) {
                return Err(Error::bug("comparison role lacks a key"));
            }
            // Packed as they are made: the record is W/64 of their words (7/64 at k = 63).
            let mut tests = wire::Packer::new(setup.field, n * m * k);
            let mut told = Vec::with_capacity(n * m);
            let mut vs = Vec::with_capacity(n * m);
            let mut u = vec![0u64; k];
            let mut masked = vec![0u64; k];
            for i in 0..n {
                if i % run == 0 {
                    let words = per_element * run.min(n - i);
                    ctx.spend_draw(words).await;
                    com_words.resize(words, 0);
                    common.fill(&mut com_words);
                }
                let c = half
                    .get(i)
                    .zip(got.get(i))
                    .map(|(a, b)| a.wrapping_add(*b) & setup.ring)
                    .ok_or(Error::bug("comparison block out of range"))?;
                let sr = r_bits
                    .get(i * low..(i + 1) * low)
                    .ok_or(Error::bug("comparison block out of range"))?;
                for (q, t) in setup.thresholds.iter().enumerate() {
                    let idx = i * m + q;
                    let com = common_at(&com_words, (i % run) * m + q, k)?;
                    let ct = c.wrapping_sub(*t) & setup.ring;
                    let v = ((ct >> (setup.k - 1)) & 1 == 1) ^ com.beta;
                    vs.push(v);
                    share_of_tests(&mut u, ct, sr, com.beta, is_r0, p);
                    // Mask: factor·u ± pad, then rotate.
                    for (((s, z), uj), t) in
                        com.factors.iter().zip(com.pads).zip(&u).zip(&mut masked)
                    {
                        let s = 1 + s % (p - 1);
                        let z = z % p;
                        let z = if is_r0 { z } else { (p - z) % p };
                        *t = (s * uj + z) % p;
                    }
                    masked.rotate_right(com.rot);
                    for &t in &masked {
                        tests.push(t);
                    }
                    // σ = +1 when v = 0: key index 0; σ = −1: index 1.
                    let key = keys.get(2 * idx + usize::from(v)).copied().unwrap_or(0);
                    told.push(key);
                }
            }
            ctx.send_packed(roles.r2, tests)?;
            if !setup.boolean {
                ctx.send(other, &told, Width::W64)?;
            }
            Ok(Second::Pair {
                roles,
                v: vs,
                draws,
            })
        }
    }
}

/// This party's shares mod p of the k tested values for the masked c − t (`ct`): with
/// w_j = c_j ⊕ r_j and S_i = Σ_(j>i) w_j over the low positions, β = 0 tests
/// u_i = c_i − r_i + 1 + S_i (zero iff r' > c' with i the top differing position) and a
/// dummy 1; β = 1 tests u_i = r_i − c_i + 1 + S_i (zero iff c' > r') and S_(−1) (zero iff
/// c' = r'). R0 carries the public terms.
fn share_of_tests(u: &mut [u64], ct: u64, sr: &[u64], beta: bool, is_r0: bool, p: u64) {
    let low = sr.len();
    let pubc = |v: u64| if is_r0 { v % p } else { 0 };
    // Suffix sum of w from the top position down.
    let mut suffix = 0u64;
    for j in (0..low).rev() {
        let cj = (ct >> j) & 1;
        let rj = sr.get(j).copied().unwrap_or(0);
        let test = if beta {
            // r_j − c_j + 1 + S_j
            (rj + pubc(1 + p - cj) + suffix) % p
        } else {
            // c_j − r_j + 1 + S_j
            (pubc(cj + 1) + p - rj + suffix) % p
        };
        if let Some(slot) = u.get_mut(j) {
            *slot = test;
        }
        // w_j = c_j + (1 − 2c_j)·r_j
        let wj = if cj == 1 { (pubc(1) + p - rj) % p } else { rj };
        suffix = (suffix + wj) % p;
    }
    if let Some(last) = u.get_mut(low) {
        *last = if beta { suffix } else { pubc(1) };
    }
}

/// R2's reading of the zero tests from R0 and R1 (`nm` groups of `k` values mod p, each
/// packed in `field` bits): per group, whether any of the k sums is zero. The records are
/// read as they are summed, never held as words.
///
/// # Errors
/// `Protocol` naming the sender of a malformed record or of a value not below p.
fn zero_tests(
    (bytes0, r0): (&[u8], PartyId),
    (bytes1, r1): (&[u8], PartyId),
    (nm, k): (usize, usize),
    (field, p): (Width, u64),
) -> Result<Vec<bool>, Error> {
    let n = nm
        .checked_mul(k)
        .ok_or(Error::bug("comparison tests overflow"))?;
    let mut from0 = wire::Unpacker::new(bytes0, n, field, r0)?;
    let mut from1 = wire::Unpacker::new(bytes1, n, field, r1)?;
    let mut zero = Vec::with_capacity(nm);
    for _ in 0..nm {
        let mut any = false;
        for _ in 0..k {
            let (a, b) = (from0.next_value()?, from1.next_value()?);
            if a >= p {
                return Err(Error::protocol(r0, "a tested value is not below p"));
            }
            if b >= p {
                return Err(Error::protocol(r1, "a tested value is not below p"));
            }
            // Both below p: their sum is 0 mod p only as 0 or p.
            any |= (a + b == 0) | (a + b == p);
        }
        zero.push(any);
    }
    from0.finish()?;
    from1.finish()?;
    Ok(zero)
}

/// What a party keeps after the third round of one block.
enum Third {
    /// R0 or R1: waits for R2's offers and the other's key.
    Pair {
        roles: Roles,
        v: Vec<bool>,
        draws: Draws,
    },
    /// R2: its output components (C, A).
    Dealer { c: Vec<u64>, a: Vec<u64> },
}

async fn third_round(ctx: &mut Ctx, setup: &Setup, st: Second) -> Result<Third, Error> {
    match st {
        Second::Pair { roles, v, draws } => Ok(Third::Pair { roles, v, draws }),
        Second::Dealer(Dealer {
            roles,
            n,
            r_top,
            draws,
        }) => {
            let (k, m, p) = (setup.k as usize, setup.m(), setup.p);
            let nm = n * m;
            let from0 = ctx.recv_packed(roles.r0, nm * k, setup.field).await?;
            let from1 = ctx.recv_packed(roles.r1, nm * k, setup.field).await?;
            let zero = zero_tests(
                (&from0, roles.r0),
                (&from1, roles.r1),
                (nm, k),
                (setup.field, p),
            )?;
            let zero_at = |idx: usize| -> Result<bool, Error> {
                zero.get(idx)
                    .copied()
                    .ok_or(Error::bug("comparison tests out of range"))
            };
            let top = |idx: usize| r_top.get(idx / m.max(1)).copied().unwrap_or(false);
            if setup.boolean {
                // Components (w ⊕ a, a) at R2, (a, v) at R0, (v, w ⊕ a) at R1.
                if lacks(&draws.out_a, nm) {
                    return Err(Error::bug("comparison role lacks a key"));
                }
                let a: Vec<u64> = draws.out_a.iter().map(|w| w & 1).collect();
                let mut c = Vec::with_capacity(nm);
                for (idx, ai) in a.iter().enumerate() {
                    c.push(u64::from(top(idx) ^ zero_at(idx)?) ^ ai);
                }
                ctx.send(roles.r1, &c, Width::BIT)?;
                return Ok(Third::Dealer {
                    c: threshold_major(&c, n, m),
                    a: threshold_major(&a, n, m),
                });
            }
            if lacks(&draws.out_a, nm)
                || lacks(&draws.out_c, nm)
                || lacks(&draws.keys_r0, 2 * nm)
                || lacks(&draws.keys_r1, 2 * nm)
            {
                return Err(Error::bug("comparison role lacks a key"));
            }
            let mut to_r0 = Vec::with_capacity(2 * nm);
            let mut to_r1 = Vec::with_capacity(2 * nm);
            for idx in 0..nm {
                let w = u64::from(top(idx) ^ zero_at(idx)?);
                let base = draws
                    .out_a
                    .get(idx)
                    .zip(draws.out_c.get(idx))
                    .map(|(a, c)| a.wrapping_add(*c))
                    .unwrap_or(0);
                let plus = w.wrapping_sub(base);
                let minus = w.wrapping_neg().wrapping_sub(base);
                let key = |keys: &[u64], j: usize| keys.get(2 * idx + j).copied().unwrap_or(0);
                to_r0.push(plus.wrapping_add(key(&draws.keys_r0, 0)));
                to_r0.push(minus.wrapping_add(key(&draws.keys_r0, 1)));
                to_r1.push(plus.wrapping_add(key(&draws.keys_r1, 0)));
                to_r1.push(minus.wrapping_add(key(&draws.keys_r1, 1)));
            }
            ctx.send(roles.r0, &to_r0, Width::W64)?;
            ctx.send(roles.r1, &to_r1, Width::W64)?;
            Ok(Third::Dealer {
                c: threshold_major(&draws.out_c, n, m),
                a: threshold_major(&draws.out_a, n, m),
            })
        }
    }
}

/// This party's output components for one block, laid out threshold by threshold.
async fn finish(ctx: &mut Ctx, setup: &Setup, st: Third) -> Result<(Vec<u64>, Vec<u64>), Error> {
    let me = ctx.me();
    match st {
        Third::Dealer { c, a } => Ok((c, a)),
        Third::Pair { roles, v, draws } => {
            let nm = v.len();
            let is_r0 = me == roles.r0;
            let n = draws.r0.len().max(draws.r1.len());
            let m = nm.checked_div(n).unwrap_or(0);
            if setup.boolean {
                let v: Vec<u64> = v.iter().map(|&b| u64::from(b)).collect();
                let v = threshold_major(&v, n, m);
                return Ok(if is_r0 {
                    let a: Vec<u64> = draws.out_a.iter().map(|w| w & 1).collect();
                    (threshold_major(&a, n, m), v)
                } else {
                    let c = ctx.recv(roles.r2, nm, Width::BIT).await?;
                    (v, threshold_major(&c, n, m))
                });
            }
            let other = if is_r0 { roles.r1 } else { roles.r0 };
            let key = ctx.recv(other, nm, Width::W64).await?;
            let offers = ctx.recv(roles.r2, 2 * nm, Width::W64).await?;
            let mut middle = Vec::with_capacity(nm);
            for (idx, &vi) in v.iter().enumerate() {
                let got = offers
                    .get(2 * idx + usize::from(vi))
                    .zip(key.get(idx))
                    .map(|(o, k)| o.wrapping_sub(*k))
                    .ok_or(Error::bug("comparison offers out of range"))?;
                middle.push(u64::from(vi).wrapping_add(got));
            }
            let middle = threshold_major(&middle, n, m);
            // R0 holds (A, B), R1 (B, C).
            Ok(if is_r0 {
                (threshold_major(&draws.out_a, n, m), middle)
            } else {
                (middle, threshold_major(&draws.out_c, n, m))
            })
        }
    }
}

/// Values indexed by element·m + threshold, reordered threshold by threshold.
fn threshold_major(v: &[u64], n: usize, m: usize) -> Vec<u64> {
    (0..m)
        .flat_map(|q| (0..n).map(move |i| i * m + q))
        .map(|idx| v.get(idx).copied().unwrap_or(0))
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::error::ErrorKind;

    fn packed(values: &[u64], width: Width) -> Vec<u8> {
        let mut out = Vec::new();
        wire::pack(values, width, &mut out);
        out
    }

    #[test]
    fn zero_tests_find_the_zero_sums_and_name_a_sender_of_values_off_the_field() {
        let (p, field) = (29, Width::new(5).unwrap());
        let (r0, r1) = (PartyId::P1, PartyId::P2);
        // Two groups of three values: the second's middle pair sums to p.
        let from0 = packed(&[1, 2, 3, 4, 5, 6], field);
        let from1 = packed(&[1, 2, 3, 4, 24, 6], field);
        let zero = zero_tests((&from0, r0), (&from1, r1), (2, 3), (field, p)).unwrap();
        assert_eq!(zero, [false, true]);
        // A value of 29 or more is off the field; its sender is named.
        for (bad, who) in [(0, r0), (1, r1)] {
            let mut vs = [vec![1u64; 6], vec![1u64; 6]];
            vs[bad][4] = 30;
            let (b0, b1) = (packed(&vs[0], field), packed(&vs[1], field));
            let err = zero_tests((&b0, r0), (&b1, r1), (2, 3), (field, p)).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Protocol { from: who });
        }
        // A record of the wrong length (3 bytes for 4 values, not 4 for 6).
        let short = packed(&[1; 4], field);
        let err = zero_tests((&from0, r0), (&short, r1), (2, 3), (field, p)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Protocol { from: r1 });
    }
}
