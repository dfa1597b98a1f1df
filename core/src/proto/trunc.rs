use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::party::PartyId;
use crate::ring::Width;
use crate::share::{Shares, Summands};

use super::blocks::role_blocks;

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
    let plan = Plan::truncation(Width::W64, d)?;
    let mut ctx = ctx.fork();
    trunc_two_of_two(&mut ctx, x, plan).await
}

/// [`trunc`] between chosen rings: replicated shares of ⌊x/2^d⌋ (+1) mod 2^`output` for x
/// read mod 2^`input` (its bits above are ignored), −2^(k−2) ≤ x < 2^(k−2) with
/// k = `input`, for a value of a chain that is only known, and only needed, in narrow rings
/// (docs/PROTOCOLS.md, Narrow truncation and lift).
///
/// **Error bound**: ⌊x/2^d⌋ or ⌊x/2^d⌋ + 1 mod 2^`output` in that range.
///
/// Rounds: 1. Bits per element, summed over the parties: m + 4·max(0, m − k + d) with
/// m = `output`.
///
/// # Errors
/// `Misuse` unless 1 ≤ `d` ≤ k − 2; `Protocol` if a message is malformed.
pub(crate) async fn trunc_in(
    ctx: &mut Ctx,
    x: &Shares,
    d: u32,
    (input, output): (Width, Width),
) -> Result<Shares, Error> {
    if d == 0 {
        return Err(Error::misuse("truncation bits must be positive"));
    }
    let plan = Plan::new(input, output, d)?;
    let mut ctx = ctx.fork();
    trunc_two_of_two(&mut ctx, x, plan).await
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
pub(crate) async fn reshare_trunc(ctx: &mut Ctx, z: Vec<u64>, d: u32) -> Result<Shares, Error> {
    reshare_trunc_rings(ctx, z, Plan::truncation(Width::W64, d)?).await
}

/// [`reshare_trunc`] between chosen rings: replicated shares of ⌊z/2^d⌋ (+1) mod
/// 2^`output` for a 3-of-3 sum z read mod 2^`input` (its bits above are ignored), for
/// −2^(k−2) ≤ z < 2^(k−2) with k = `input`. A caller that only reads the result mod
/// 2^`output` saves the wrap correction's bits above it (none are sent when
/// m − k + d ≤ 0); a product whose factors are only known mod 2^k (a factor cut locally
/// by [`super::gelu`]'s `shift_components`) is summed in Z_2^k (docs/PROTOCOLS.md,
/// Narrow truncation and lift).
///
/// **Error bound**: ⌊z/2^d⌋ or ⌊z/2^d⌋ + 1 mod 2^`output` in that range.
///
/// Rounds: 2. Bits per element, summed over the parties: 2k + m + 4·max(0, m − k + d)
/// with m = `output`.
///
/// # Errors
/// `Misuse` unless 1 ≤ `d` ≤ k − 2; `Protocol` if a message is malformed.
pub(crate) async fn reshare_trunc_narrow(
    ctx: &mut Ctx,
    z: Vec<u64>,
    input: Width,
    d: u32,
    output: Width,
) -> Result<Shares, Error> {
    if d == 0 {
        return Err(Error::misuse("truncation bits must be positive"));
    }
    reshare_trunc_rings(ctx, z, Plan::new(input, output, d)?).await
}

/// Reshare after a local cut: replicated shares of ⌊Z/2^d⌋ + 1 − e mod 2^`output`,
/// e ∈ {0, 1, 2}, for a 3-of-3 sum Z read mod 2^`input` (bits above are ignored). Every
/// party shifts its own part right by d (a sum of three parts loses at most two carries,
/// and the wrap of the sum vanishes mod 2^(k − d), k = `input`) and reshares it in
/// Z_2^`output`: one round and no strings, where [`reshare_trunc_narrow`] takes two. The
/// result is within (−2, 1] units of Z/2^d rather than [0, 1), so a caller keeps guard
/// bits below the grid it needs (docs/PROTOCOLS.md, Narrow truncation and lift).
///
/// **Error bound**: ⌊Z/2^d⌋ − 1, ⌊Z/2^d⌋ or ⌊Z/2^d⌋ + 1 mod 2^`output`, for any Z.
///
/// Rounds: 1. Bits per element, summed over the parties: 3m, m = `output`.
///
/// # Errors
/// `Misuse` unless 1 ≤ `d` and m + d ≤ k; `Protocol` if a message is malformed.
pub(crate) async fn reshare_cut(
    ctx: &mut Ctx,
    z: Vec<u64>,
    input: Width,
    d: u32,
    output: Width,
) -> Result<Shares, Error> {
    if d == 0 || output.bits() + d > input.bits() {
        return Err(Error::misuse(
            "a local cut must shift, and leave the output's bits of its ring",
        ));
    }
    let cut: Vec<u64> = z.into_iter().map(|v| input.reduce(v) >> d).collect();
    Ok(super::reshare_in(ctx, cut, output)
        .await?
        .add_public_scalar(1))
}

/// Finishes a product from its summands: replicated shares of ⌊X/2^d⌋ (+1) mod
/// 2^`output`, where X is the sum of the three parties' [`Summands`] read mod 2^`input`
/// (bits above are ignored, so factors known only mod 2^`input` may have made them) as a
/// signed value with −2^(k−2) ≤ X < 2^(k−2), k = `input`. The fused truncation behind
/// [`mul_fixed`](super::mul_fixed) with both rings chosen (docs/PROTOCOLS.md, Fused truncation; Narrow
/// truncation and lift).
///
/// **Error bound**: ⌊X/2^d⌋ or ⌊X/2^d⌋ + 1 mod 2^`output` in that range; outside it,
/// some other value, silently.
///
/// Rounds: 2. Bits per element, summed over the parties: 2k + m + 4·max(0, m − k + d)
/// with m = `output` (264 for k = m = 64 and d = 18).
///
/// # Errors
/// `Misuse` unless 1 ≤ `d` ≤ k − 2; `Protocol` if a message is malformed.
pub async fn reshare_trunc_summands(
    ctx: &mut Ctx,
    s: Summands,
    input: Width,
    d: u32,
    output: Width,
) -> Result<Shares, Error> {
    reshare_trunc_narrow(ctx, s.into_words(), input, d, output).await
}

/// Finishes a product from its summands by a local cut (every party shifts its part right):
/// replicated shares of ⌊X/2^d⌋ − 1, ⌊X/2^d⌋ or ⌊X/2^d⌋ + 1 mod 2^`output` for the sum X
/// of the parties' [`Summands`] read mod 2^`input`, in one round and 3m bits (m =
/// `output`), where [`reshare_trunc_summands`] takes two rounds and its halves. For a
/// consumer that reads the result mod 2^m ≤ 2^(k − d) only and tolerates its error
/// (within (−2, 1] units, −½ on average; docs/PROTOCOLS.md, Narrow truncation and lift).
///
/// # Errors
/// `Misuse` unless 1 ≤ `d` and m + d ≤ k; `Protocol` if a message is malformed.
pub async fn reshare_cut_summands(
    ctx: &mut Ctx,
    s: Summands,
    input: Width,
    d: u32,
    output: Width,
) -> Result<Shares, Error> {
    reshare_cut(ctx, s.into_words(), input, d, output).await
}

/// Reshare and lift: turns a 3-of-3 additive sharing `z` of a value X of the narrow ring
/// Z_2^k (k = `input`; the bits of z above k are ignored) into replicated shares of X over
/// Z_2^64, for −2^(k−2) ≤ X < 2^(k−2) read as a signed k-bit value. The truncation's
/// protocol with d = 0: the halves are sent in k bits and the wrap 2^k·w of their sum is
/// removed exactly, with strings of 64 − k bits (docs/PROTOCOLS.md, Narrow truncation
/// and lift).
///
/// **Error bound**: exact in that range; outside it the result is some other value.
///
/// Rounds: 2. Bits per element, summed over the parties: 2k + 64 + 4·(64 − k).
///
/// # Errors
/// `Misuse` unless 3 ≤ k ≤ 62; `Protocol` if a message is malformed.
pub(crate) async fn reshare_lift(
    ctx: &mut Ctx,
    z: Vec<u64>,
    input: Width,
) -> Result<Shares, Error> {
    reshare_lift_into(ctx, z, input, Width::W64).await
}

/// [`reshare_lift`] into Z_2^m, m = `output`, for a consumer that reads the value mod 2^m
/// only (a product in that ring): X as a signed value mod 2^m, exact for
/// −2^(k−2) ≤ X < 2^(k−2). The strings shrink to m − k bits.
///
/// Rounds: 2. Bits per element, summed over the parties: 2k + m + 4·(m − k).
///
/// # Errors
/// `Misuse` unless 3 ≤ k ≤ 62 and k < m; `Protocol` if a message is malformed.
pub(crate) async fn reshare_lift_into(
    ctx: &mut Ctx,
    z: Vec<u64>,
    input: Width,
    output: Width,
) -> Result<Shares, Error> {
    if !(3..=62).contains(&input.bits()) || output.bits() <= input.bits() {
        return Err(Error::misuse(
            "a lifted ring must have 3 to 62 bits, fewer than its target",
        ));
    }
    reshare_trunc_rings(ctx, z, Plan::new(input, output, 0)?).await
}

/// The rings and shift of one truncation: the input read mod 2^`input`, the output made
/// mod 2^`output`, a shift by `d` (0 for a lift).
#[derive(Clone, Copy, Debug)]
struct Plan {
    input: Width,
    output: Width,
    d: u32,
}

impl Plan {
    fn new(input: Width, output: Width, d: u32) -> Result<Plan, Error> {
        if input.bits() < 2 || d > input.bits() - 2 {
            return Err(Error::misuse("truncation shift too large for its ring"));
        }
        Ok(Plan { input, output, d })
    }

    /// A truncation proper: a 64-bit input shifted by 1 ≤ `d` ≤ 62 into `output`.
    fn truncation(output: Width, d: u32) -> Result<Plan, Error> {
        if !(1..=62).contains(&d) {
            return Err(Error::misuse("truncation bits must be in 1..=62"));
        }
        Plan::new(Width::W64, output, d)
    }

    /// The weight of the wrap bit in the truncated sum: 2^(k − d) for input width k.
    fn shift(self) -> u32 {
        self.input.bits() - self.d
    }

    /// The width of the αβ strings: the wrap's weight mod 2^`output` needs the bits of αβ
    /// below 2^(output − shift); none when the wrap vanishes mod 2^`output`.
    fn strings(self) -> Option<Width> {
        self.output
            .bits()
            .checked_sub(self.shift())
            .and_then(Width::new)
    }

    /// The offset 2^(k−2) that moves the input into [0, 2^(k−1)).
    fn offset(self) -> u64 {
        1u64 << (self.input.bits() - 2)
    }

    /// The constant of y_0: −⌊offset/2^d⌋, plus 1 for the expected carry of the low bits
    /// when d > 0 (none is lost when d = 0).
    fn corr(self) -> u64 {
        u64::from(self.d > 0).wrapping_sub(self.offset() >> self.d)
    }
}

/// `v·2^s` in Z_2^64 (0 once s reaches 64).
fn shl(v: u64, s: u32) -> u64 {
    v.checked_shl(s).unwrap_or(0)
}

async fn reshare_trunc_rings(ctx: &mut Ctx, mut z: Vec<u64>, plan: Plan) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let alpha = ctx.zero_share(z.len());
    for (v, a) in z.iter_mut().zip(&alpha) {
        *v = v.wrapping_add(*a);
    }
    let me = ctx.me();
    let n = z.len();
    let blocks = role_blocks(n);
    let mut xctx = ctx.fork();
    // Round 1: R0 → R2 its z_s (a), R2 → R1 its z_{s+2} (the other half of b), both read
    // mod 2^k only.
    for (s, range) in blocks.iter().enumerate() {
        let r0 = PartyId::from_index(s);
        let (r1, r2) = (r0.next(), r0.prev());
        let part = z
            .get(range.clone())
            .ok_or(Error::bug("block out of range"))?;
        if me == r0 {
            xctx.send(r2, part, plan.input)?;
        } else if me == r2 {
            xctx.send(r1, part, plan.input)?;
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
            let got = xctx.recv(from, range.len(), plan.input).await?;
            other
                .get_mut(range.clone())
                .ok_or(Error::bug("block out of range"))?
                .copy_from_slice(&got);
        }
    }
    let view = Shares::from_parts(me, z, other);
    trunc_two_of_two(&mut ctx, &view, plan).await
}

/// The truncation round on a two-of-two view: per role block, R0 reads a from the first
/// component, R2 from the second, R1 reads b as the sum of both.
async fn trunc_two_of_two(ctx: &mut Ctx, x: &Shares, plan: Plan) -> Result<Shares, Error> {
    let n = x.len();
    let mut ctxs = [ctx.fork(), ctx.fork(), ctx.fork()];
    let mut states = Vec::with_capacity(3);
    // Stage 1: every message depends only on local data, so all go out in one round.
    for ((s, range), c) in role_blocks(n).into_iter().enumerate().zip(ctxs.iter_mut()) {
        states.push(send_block(c, x, range, s, plan)?);
    }
    // Stage 2: receive and finish.
    let me = ctx.me();
    let mut a = Vec::with_capacity(n);
    let mut b = Vec::with_capacity(n);
    for (c, st) in ctxs.iter_mut().zip(states) {
        let (ya, yb) = finish_block(c, st, plan).await?;
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

/// The top bit of a k-bit value.
fn msb(v: u64, width: Width) -> bool {
    (v >> (width.bits() - 1)) & 1 == 1
}

/// The pair-random words of one block, drawn in the same order at every party: from the
/// key of R1 and R2, ρ (the output pad), ρ_C (the string-width pad of y_2) and κ (the mask
/// of R1's string to R0); from the key of R0 and R1, ρ_B (the string-width pad of y_1) and
/// κ' (the mask of R1's string to R2).
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

    /// The output component of R1 and R2: y_2 = ρ + 2^(k−d)·ρ_C.
    fn y2(&self, plan: Plan) -> Vec<u64> {
        let mask = plan.output.mask();
        self.rho
            .iter()
            .zip(&self.rho_c)
            .map(|(r, c)| r.wrapping_add(shl(*c, plan.shift())) & mask)
            .collect()
    }
}

fn send_block(
    ctx: &mut Ctx,
    x: &Shares,
    range: core::ops::Range<usize>,
    s: usize,
    plan: Plan,
) -> Result<BlockState, Error> {
    let me = ctx.me();
    let r0 = PartyId::from_index(s);
    let (r1, r2) = (r0.next(), r0.prev());
    let n = range.len();
    let (xa, xb) = x.block(range.clone())?;
    let (k, d, shift) = (plan.input, plan.d, plan.shift());
    let out = plan.output.mask();
    // Correlated draws, in the same order at every party.
    let p = Pads::draw(ctx, r1, r2, n)?;
    let lacks = |v: &[u64]| v.len() != n;
    let err = || Error::bug("truncation role lacks a key");
    if me == r1 {
        if lacks(&p.rho) || lacks(&p.rho_b) {
            return Err(err());
        }
        // β − ρ_C + κ to R0, β − ρ_B + κ' to R2 (when the wrap matters mod the output
        // ring), and y_1 to R0.
        let mut to_r0 = Vec::with_capacity(n);
        let mut to_r2 = Vec::with_capacity(n);
        let mut y1 = Vec::with_capacity(n);
        for i in 0..n {
            let at = |v: &[u64]| v.get(i).copied().unwrap_or(0);
            let b = at(xa).wrapping_add(at(xb)) & k.mask();
            let beta = u64::from(msb(b, k));
            if plan.strings().is_some() {
                to_r0.push(beta.wrapping_sub(at(&p.rho_c)).wrapping_add(at(&p.kappa)));
                to_r2.push(beta.wrapping_sub(at(&p.rho_b)).wrapping_add(at(&p.kappa_b)));
            }
            y1.push(
                (b >> d)
                    .wrapping_sub(shl(beta, shift))
                    .wrapping_add(shl(at(&p.rho_b), shift))
                    .wrapping_sub(at(&p.rho))
                    & out,
            );
        }
        if let Some(sw) = plan.strings() {
            ctx.send(r0, &to_r0, sw)?;
        }
        ctx.send(r0, &y1, plan.output)?;
        if let Some(sw) = plan.strings() {
            ctx.send(r2, &to_r2, sw)?;
        }
        Ok(BlockState::R1 { y1, y2: p.y2(plan) })
    } else if me == r0 {
        // R0 holds (c_0, c_1): a = c_0 + 2^(k−2). It tells R2 κ' or −ρ_B, by α.
        if lacks(&p.rho_b) {
            return Err(err());
        }
        let (a, alpha) = half_a(xa, plan);
        if let Some(sw) = plan.strings() {
            ctx.send(r2, &helper_strings(&alpha, &p.kappa_b, &p.rho_b), sw)?;
        }
        Ok(BlockState::R0 {
            a,
            alpha,
            pad: p.rho_b,
        })
    } else {
        // R2 holds (c_2, c_0): a = c_0 + 2^(k−2). It tells R0 κ or −ρ_C, by α.
        if lacks(&p.rho) {
            return Err(err());
        }
        let (a, alpha) = half_a(xb, plan);
        if let Some(sw) = plan.strings() {
            ctx.send(r0, &helper_strings(&alpha, &p.kappa, &p.rho_c), sw)?;
        }
        let y2 = p.y2(plan);
        Ok(BlockState::R2 {
            a,
            alpha,
            pad: p.rho_c,
            y2,
        })
    }
}

/// R0's and R2's half a = c_0 + 2^(k−2) mod 2^k of each element, and its top bit α.
fn half_a(c0: &[u64], plan: Plan) -> (Vec<u64>, Vec<bool>) {
    let k = plan.input;
    let a: Vec<u64> = c0
        .iter()
        .map(|c| c.wrapping_add(plan.offset()) & k.mask())
        .collect();
    let alpha = a.iter().map(|&a| msb(a, k)).collect();
    (a, alpha)
}

/// The helper's string for each element: the mask κ when α = 1 (the receiver then
/// unmasks R1's β − pad), the negated pad when α = 0 (αβ = 0 needs no β).
fn helper_strings(alpha: &[bool], kappa: &[u64], pad: &[u64]) -> Vec<u64> {
    alpha
        .iter()
        .zip(kappa.iter().zip(pad))
        .map(|(&al, (&k, &p))| if al { k } else { p.wrapping_neg() })
        .collect()
}

/// y_0 = ⌊a/2^d⌋ − 2^(k−d)·(α − αβ + ρ_B + ρ_C) − ⌊2^(k−2)/2^d⌋ (+ 1 when d > 0) for each
/// element: from R1's string m = β − pad' + κ and the helper's h (κ or −pad'), αβ − pad'
/// is m − h when α = 1 and h when α = 0; `own` is the pad this party knows. Without
/// strings the wrap vanishes mod the output ring.
fn output0(
    a: &[u64],
    alpha: &[bool],
    strings: Option<(&[u64], &[u64])>,
    own: &[u64],
    plan: Plan,
) -> Vec<u64> {
    let (d, shift, corr, out) = (plan.d, plan.shift(), plan.corr(), plan.output.mask());
    a.iter()
        .zip(alpha)
        .enumerate()
        .map(|(i, (&a, &al))| {
            let wrap = match strings {
                Some((offered, helper)) => {
                    let at = |v: &[u64]| v.get(i).copied().unwrap_or(0);
                    let (m, h) = (at(offered), at(helper));
                    let ab = if al { m.wrapping_sub(h) } else { h };
                    shl(ab.wrapping_sub(at(own)).wrapping_sub(u64::from(al)), shift)
                }
                None => 0,
            };
            (a >> d).wrapping_add(wrap).wrapping_add(corr) & out
        })
        .collect()
}

async fn finish_block(
    ctx: &mut Ctx,
    st: BlockState,
    plan: Plan,
) -> Result<(Vec<u64>, Vec<u64>), Error> {
    let me = ctx.me();
    match st {
        BlockState::R1 { y1, y2 } => Ok((y1, y2)),
        BlockState::R0 { a, alpha, pad } => {
            let n = a.len();
            let (r1, r2) = (me.next(), me.prev());
            let offered = match plan.strings() {
                Some(sw) => ctx.recv(r1, n, sw).await?,
                None => Vec::new(),
            };
            let y1 = ctx.recv(r1, n, plan.output).await?;
            let helper = match plan.strings() {
                Some(sw) => ctx.recv(r2, n, sw).await?,
                None => Vec::new(),
            };
            let strings = plan.strings().map(|_| (&offered[..], &helper[..]));
            let y0 = output0(&a, &alpha, strings, &pad, plan);
            Ok((y0, y1))
        }
        BlockState::R2 { a, alpha, pad, y2 } => {
            let n = a.len();
            let (r0, r1) = (me.next(), me.prev());
            let (offered, helper) = match plan.strings() {
                Some(sw) => (ctx.recv(r1, n, sw).await?, ctx.recv(r0, n, sw).await?),
                None => (Vec::new(), Vec::new()),
            };
            let strings = plan.strings().map(|_| (&offered[..], &helper[..]));
            let y0 = output0(&a, &alpha, strings, &pad, plan);
            Ok((y2, y0))
        }
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use super::*;
    use crate::sim::{Sim, reconstruct};

    /// A 3-of-3 sharing of each value: party i's part, with random words (upper bits
    /// included) in the first two parts, as the local part of a product would have.
    fn parts(values: &[u64], me: PartyId) -> Vec<u64> {
        values
            .iter()
            .enumerate()
            .map(|(k, &v)| {
                let r0 = (k as u64 + 1)
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    .rotate_left(17);
                let r1 = (k as u64 + 7)
                    .wrapping_mul(0xbf58_476d_1ce4_e5b9)
                    .rotate_left(29);
                match me.index() {
                    0 => r0,
                    1 => r1,
                    _ => v.wrapping_sub(r0).wrapping_sub(r1),
                }
            })
            .collect()
    }

    /// Runs `f` on the parts of `values` at every party; the opened result and the
    /// per-party bytes.
    fn run<F, Fut>(values: Vec<u64>, f: F) -> (Vec<u64>, [u64; 3], u32)
    where
        F: Fn(Ctx, Vec<u64>) -> Fut + Clone + Send + 'static,
        Fut: core::future::Future<Output = Result<Shares, Error>> + Send + 'static,
    {
        let out = Sim::new(3).run(move |me| {
            let (f, z) = (f.clone(), parts(&values, me));
            move |ctx| f(ctx, z)
        });
        let bytes = out.payload_bytes();
        let rounds = out.rounds();
        let [a, b, c] = out.into_results().unwrap();
        (reconstruct(&[a, b, c]).unwrap(), bytes, rounds)
    }

    /// Signed values at the ends of [−2^(k−2), 2^(k−2)) and in between (7 + n of them).
    fn edges(k: u32, n: usize) -> Vec<u64> {
        let top = 1i64 << (k - 2);
        let mut v: Vec<i64> = alloc::vec![-top, -top + 1, -1, 0, 1, top - 2, top - 1];
        v.extend((0..n as i64).map(|i| i.wrapping_mul(0x2545_f491_4f6c_dd1d) % top));
        v.into_iter().map(|x| x as u64).collect()
    }

    #[test]
    fn narrow_truncation_is_floor_or_floor_plus_one_in_its_ring() {
        // d = 38 into 33 bits (7-bit strings) and d = 42 into 21 bits (no strings).
        for (d, k, string_bits) in [(38u32, 33u32, 7u64), (42, 21, 0)] {
            let xs = edges(64, 233);
            let out = Width::new(k).unwrap();
            let (y, bytes, rounds) = run(xs.clone(), move |mut ctx, z| async move {
                reshare_trunc_narrow(&mut ctx, z, Width::W64, d, out).await
            });
            assert_eq!(rounds, 2);
            let n = xs.len() as u64;
            assert_eq!(
                bytes.iter().sum::<u64>() * 8,
                n * (128 + u64::from(k) + 4 * string_bits)
            );
            for (&x, &y) in xs.iter().zip(&y) {
                let floor = ((x as i64) >> d) as u64;
                let got = out.reduce(y);
                assert!(
                    got == out.reduce(floor) || got == out.reduce(floor.wrapping_add(1)),
                    "d = {d}, k = {k}: {x:#x} ↦ {got:#x}"
                );
            }
        }
    }

    #[test]
    fn truncation_from_a_narrow_ring_ignores_the_bits_above_it() {
        // SiLU's final sum: Z_2^42 shifted by 20 into 20 bits (no strings); GeLU's: Z_2^43
        // by 20 into 33 bits (10-bit strings); negExp's chain: Z_2^53 by 25 within it
        // (25-bit strings), and its join: Z_2^31 by 6 into Z_2^64 (39-bit strings).
        for (k, d, m, string_bits) in [
            (42u32, 20u32, 20u32, 0u64),
            (43, 20, 33, 10),
            (53, 25, 53, 25),
            (31, 6, 64, 39),
        ] {
            let input = Width::new(k).unwrap();
            let out = Width::new(m).unwrap();
            let xs = edges(k, 233);
            // Garbage above bit k in the sum itself: the protocol must read it mod 2^k.
            let noisy: Vec<u64> = xs
                .iter()
                .enumerate()
                .map(|(i, &x)| x.wrapping_add((i as u64 + 3).wrapping_mul(0x9e37) << k))
                .collect();
            let (y, bytes, rounds) = run(noisy, move |mut ctx, z| async move {
                reshare_trunc_narrow(&mut ctx, z, input, d, out).await
            });
            assert_eq!(rounds, 2);
            let n = xs.len() as u64;
            let bits = 2 * u64::from(k) + u64::from(m) + 4 * string_bits;
            assert_eq!(bytes.iter().sum::<u64>() * 8, n * bits, "k = {k}");
            for (&x, &y) in xs.iter().zip(&y) {
                // x is a signed k-bit value: sign-extend before the floor.
                let signed = ((x << (64 - k)) as i64) >> (64 - k);
                let floor = (signed >> d) as u64;
                let got = out.reduce(y);
                assert!(
                    got == out.reduce(floor) || got == out.reduce(floor.wrapping_add(1)),
                    "k = {k}, d = {d}: {x:#x} ↦ {got:#x}"
                );
            }
        }
    }

    #[test]
    fn low_bits_all_ones_always_round_up() {
        // negExp's join gives its zeroed entries −1 on the guard grid so that its
        // truncating lift (Z_2^31 by 6 into Z_2^64) makes them exactly 0: the halves' low
        // bits sum to 2^d − 1 and cannot carry, whatever the parts.
        let (k, d) = (31u32, 6u32);
        let input = Width::new(k).unwrap();
        for low in [(1u64 << d) - 1, 0] {
            // Values ≡ low mod 2^d: −1 and 2^d·j − 1 (low all ones), and multiples of 2^d.
            let xs: Vec<u64> = (0..600i64).map(|j| ((j - 300) << d) as u64 | low).collect();
            let (y, _, _) = run(xs.clone(), move |mut ctx, z| async move {
                reshare_trunc_narrow(&mut ctx, z, input, d, Width::W64).await
            });
            let ups = xs
                .iter()
                .zip(&y)
                .filter(|&(&x, &y)| y == (((x as i64) >> d) + 1) as u64)
                .count();
            if low == 0 {
                // With the low bits all zero the +1 is the exception (about 1 in 2^d).
                assert!(ups < 60, "{ups} of 600 rounded up");
            } else {
                assert_eq!(ups, xs.len(), "low bits all ones must always round up");
            }
        }
    }

    #[test]
    fn a_local_cut_is_within_one_unit_of_the_floor_and_costs_one_round() {
        // negExp's last square: Z_2^53 cut by 19 into Z_2^31 (P² at 50 bits to 28 + 3),
        // and Z_2^64 by 32 into Z_2^31 (the squaring chains' 60 bits to 28); parts with
        // garbage above the input ring.
        for (k, d, m) in [(53u32, 19u32, 31u32), (64, 32, 31)] {
            let (input, out) = (Width::new(k).unwrap(), Width::new(m).unwrap());
            // 344 values: every party's message a whole number of bytes.
            let xs = edges(k, 337);
            let noisy: Vec<u64> = xs
                .iter()
                .enumerate()
                .map(|(i, &x)| {
                    let garbage = (i as u64 + 11).wrapping_mul(0x7f4a_7c15);
                    x.wrapping_add(garbage.checked_shl(k).unwrap_or(0))
                })
                .collect();
            let (y, bytes, rounds) = run(noisy, move |mut ctx, z| async move {
                reshare_cut(&mut ctx, z, input, d, out).await
            });
            assert_eq!(rounds, 1);
            assert_eq!(
                bytes.iter().sum::<u64>() * 8,
                xs.len() as u64 * 3 * u64::from(m)
            );
            let mut seen = [false; 3];
            for (&x, &y) in xs.iter().zip(&y) {
                let signed = if k == 64 {
                    x as i64
                } else {
                    ((x << (64 - k)) as i64) >> (64 - k)
                };
                let floor = (signed >> d) as u64;
                let off = out.reduce(y.wrapping_sub(floor).wrapping_add(1));
                assert!(off <= 2, "k = {k}, d = {d}: {x:#x} ↦ {y:#x}");
                if let Some(s) = seen.get_mut(off as usize) {
                    *s = true;
                }
            }
            // All three outcomes occur: the bound is tight, not loose.
            assert_eq!(seen, [true; 3], "k = {k}");
        }
        // A cut that leaves fewer bits than the output asks is refused.
        let refused = Sim::new(3).run(|me| {
            let z = parts(&[1, 2, 3], me);
            move |mut ctx| async move {
                reshare_cut(
                    &mut ctx,
                    z,
                    Width::new(40).unwrap(),
                    10,
                    Width::new(31).unwrap(),
                )
                .await
            }
        });
        assert!(refused.into_results().is_err());
    }

    #[test]
    fn truncation_of_replicated_shares_in_a_narrow_ring_ignores_the_bits_above_it() {
        // negExp's B1 and B2: Z_2^53 by 25 within it.
        let (k, d) = (53u32, 25u32);
        let ring = Width::new(k).unwrap();
        let xs = edges(k, 233);
        let noisy: Vec<u64> = xs
            .iter()
            .enumerate()
            .map(|(i, &x)| x.wrapping_add((i as u64 + 5).wrapping_mul(0x7f4a_7c15) << k))
            .collect();
        let (y, bytes, rounds) = run(noisy, move |mut ctx, z| async move {
            let x = super::super::reshare(&mut ctx, z).await?;
            trunc_in(&mut ctx, &x, d, (ring, ring)).await
        });
        // One round to build the replicated shares (3·64 bits), one to truncate.
        assert_eq!(rounds, 2);
        let n = xs.len() as u64;
        let bits = 192 + u64::from(k) + 4 * u64::from(d);
        assert_eq!(bytes.iter().sum::<u64>() * 8, n * bits);
        for (&x, &y) in xs.iter().zip(&y) {
            let signed = ((x << (64 - k)) as i64) >> (64 - k);
            let floor = (signed >> d) as u64;
            let got = ring.reduce(y);
            assert!(
                got == ring.reduce(floor) || got == ring.reduce(floor.wrapping_add(1)),
                "{x:#x} ↦ {got:#x}"
            );
        }
    }

    #[test]
    fn lift_is_exact_at_the_ends_of_its_range() {
        for k in [3u32, 21, 33, 62] {
            let xs = edges(k, 233);
            let ring = Width::new(k).unwrap();
            let (y, bytes, rounds) = run(xs.clone(), move |mut ctx, z| async move {
                reshare_lift(&mut ctx, z, ring).await
            });
            assert_eq!(rounds, 2);
            let n = xs.len() as u64;
            let bits = 2 * u64::from(k) + 64 + 4 * (64 - u64::from(k));
            assert_eq!(bytes.iter().sum::<u64>() * 8, n * bits, "k = {k}");
            assert_eq!(y, xs, "k = {k}");
        }
    }

    #[test]
    fn plans_outside_their_rings_are_refused() {
        assert!(Plan::new(Width::new(20).unwrap(), Width::W64, 19).is_err());
        assert!(Plan::new(Width::BIT, Width::W64, 0).is_err());
        let p = Plan::new(Width::W64, Width::new(33).unwrap(), 38).unwrap();
        assert_eq!(p.strings(), Width::new(7));
        let p = Plan::new(Width::W64, Width::new(21).unwrap(), 42).unwrap();
        assert_eq!(p.strings(), None);
    }
}
