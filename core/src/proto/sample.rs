//! Sampling of the next token on shares: temperature, top-k, top-p and min-p as secret
//! thresholds, then one draw by the inverse CDF (docs/PROTOCOLS.md, Sampling).

use alloc::vec;
use alloc::vec::Vec;

use crate::engine::{Ctx, try_join};
use crate::error::Error;
use crate::ring::Width;
use crate::share::{BitShares, Shares};

use super::gelu::{encode_at, shift_components};
use super::maxpool::{fused_sums, gather_bits};
use super::{ExpApprox, SOFTMAX_RING_BITS, and, b2a, lt_public, max_rows, msb, mul, neg_exp_with};

/// Fractional bits of the grid on which [`sample_rows`] searches the top-k and top-p
/// thresholds (in units of the tempered logits): 2^−8. A threshold search keeps, besides
/// the tokens Hugging Face keeps, at most the tokens whose tempered logit lies less than
/// 2^−8 below the last kept one.
pub const SAMPLING_GRID_BITS: u32 = 8;

/// The thresholds are searched in (−2^4, 0] relative to the row maximum: below −14 the
/// exponential is exactly 0 ([`neg_exp_with`]), so a lower threshold keeps no more weight.
const SEARCH_SPAN_BITS: u32 = 4;

/// Fractional bits of the public factor 1/T (the product is truncated by as many).
const TEMPERATURE_BITS: u32 = 30;

/// Bits of the uniform draw U ∈ [0, 2^b) of the inverse CDF (fewer if the fixed-point
/// format and the vocabulary leave less room in the ring).
const UNIFORM_BITS: u32 = 24;

/// Fractional bits of the public top-p value P = round(p·2^a) (fewer if the ring is short).
const TOP_P_BITS: u32 = 20;

/// Ring width of the comparison of a row's masked mass with p times its total (cut to fit).
const MASS_RING_BITS: u32 = 33;

/// The public parameters of [`sample_rows`], with Hugging Face transformers' meaning.
///
/// `temperature` divides the logits; then `top_k` keeps the tokens whose logit is at
/// least the k-th largest (ties kept); then `top_p` keeps, of what top-k kept, the
/// smallest set of most likely tokens whose renormalised probability reaches p; then
/// `min_p` keeps the tokens whose probability is at least `min_p` times the largest.
/// `None` (and `top_p = 1`, `min_p = 0`) applies no filter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SamplingParams {
    /// T > 0, finite: the logits are divided by T.
    pub temperature: f64,
    /// k in 1..=vocab.
    pub top_k: Option<usize>,
    /// p in (0, 1].
    pub top_p: Option<f64>,
    /// min_p in [0, 1).
    pub min_p: Option<f64>,
}

impl SamplingParams {
    /// Sampling at `temperature` with no filter.
    pub const fn with_temperature(temperature: f64) -> SamplingParams {
        SamplingParams {
            temperature,
            top_k: None,
            top_p: None,
            min_p: None,
        }
    }

    /// Checks the parameters for a vocabulary of `vocab` tokens.
    ///
    /// # Errors
    /// `Misuse` naming the parameter: temperature not finite and positive, top_k outside
    /// 1..=vocab, top_p outside (0, 1], min_p outside [0, 1).
    pub fn validate(&self, vocab: usize) -> Result<(), Error> {
        let t = self.temperature;
        if !(t.is_finite() && t > 0.0) {
            return Err(Error::misuse(
                "sampling: temperature must be finite and > 0",
            ));
        }
        if let Some(k) = self.top_k {
            if k == 0 || k > vocab {
                return Err(Error::misuse("sampling: top_k must be in 1..=vocab"));
            }
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return Err(Error::misuse("sampling: top_p must be in (0, 1]"));
            }
        }
        if let Some(m) = self.min_p {
            if !(0.0..1.0).contains(&m) {
                return Err(Error::misuse("sampling: min_p must be in [0, 1)"));
            }
        }
        Ok(())
    }
}

/// Natural logarithm of a positive public value (no `std` in the core): x = m·2^e with
/// m ∈ [1, 2), ln m = 2·atanh((m − 1)/(m + 1)) by its series (|s| ≤ 1/3, 30 terms).
fn ln_public(x: f64) -> f64 {
    let bits = x.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let m = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
    let s = (m - 1.0) / (m + 1.0);
    let s2 = s * s;
    let (mut term, mut sum, mut k) = (s, 0.0, 1.0);
    for _ in 0..30 {
        sum += term / k;
        term *= s2;
        k += 2.0;
    }
    e as f64 * core::f64::consts::LN_2 + 2.0 * sum
}

/// Number of bits of `v` (v < 2^bitlen).
fn bitlen(v: usize) -> u32 {
    usize::BITS - v.leading_zeros()
}

fn ring(bits: u32) -> Result<Width, Error> {
    Width::new(bits).ok_or(Error::misuse("sampling: ring width out of range"))
}

/// Everything [`sample_rows`] derives from the public parameters and shapes, checked
/// before any message is sent.
struct Plan {
    /// round(2^30/T), or `None` for T = 1.
    scale: Option<u64>,
    top_k: Option<u64>,
    /// P = round(p·2^a), at least 1; `None` for p = 1.
    top_p: Option<u64>,
    /// round(ln(min_p)·2^f), or `None` when it removes no weight (min_p = 0 or
    /// ln(min_p) ≤ −14).
    min_p: Option<u64>,
    /// Grid fractional bits g ≤ f, and the search's raw unit 2^(f−g).
    grid: u32,
    unit: u64,
    /// [d ≥ t]: |d − t| < 2^14 real, ring f + 15.
    kd: Width,
    /// [count < k]: |count − k| < 2^bitlen(v), ring bitlen(v) + 1.
    kc: Width,
    /// Top-p: a, and the cut s of 2^a·mass − P·S before its comparison in Z_2^33.
    p_bits: u32,
    p_cut: u32,
    /// Bits b of U and the ring of [c·2^b > U·Q].
    ubits: u32,
    ks: Width,
}

impl Plan {
    fn new(params: &SamplingParams, f: u32, vocab: usize) -> Result<Plan, Error> {
        params.validate(vocab)?;
        let t = params.temperature;
        let scale = if t == 1.0 {
            None
        } else {
            let c = encode_at(1.0 / t, TEMPERATURE_BITS)
                .map_err(|_| Error::misuse("sampling: temperature too small"))?;
            if c == 0 {
                return Err(Error::misuse("sampling: temperature too large"));
            }
            Some(c)
        };
        // Row sums of weights ≤ 1 + 2^−17 stay below 2^(f + B).
        let big_b = bitlen(vocab) + 1;
        let p_bits = TOP_P_BITS.min(62u32.saturating_sub(f + big_b));
        let ubits = UNIFORM_BITS.min(63u32.saturating_sub(f + big_b));
        if p_bits < 8 || ubits < 8 {
            return Err(Error::misuse(
                "sampling: vocabulary too large for this fixed-point format",
            ));
        }
        let top_p = match params.top_p {
            Some(p) if p < 1.0 => Some(encode_at(p, p_bits)?.max(1)),
            _ => None,
        };
        let min_p = match params.min_p {
            Some(m) if m > 0.0 => {
                let l = ln_public(m);
                // Weights of logits below −14 are exactly 0 already.
                (l > -14.0).then(|| encode_at(l, f)).transpose()?
            }
            _ => None,
        };
        let grid = SAMPLING_GRID_BITS.min(f);
        Ok(Plan {
            scale,
            top_k: params.top_k.map(|k| k as u64),
            top_p,
            min_p,
            grid,
            unit: 1u64 << (f - grid),
            kd: ring(f + 15)?,
            kc: ring(bitlen(vocab) + 1)?,
            p_bits,
            p_cut: (p_bits + f + big_b).saturating_sub(MASS_RING_BITS - 2),
            ubits,
            ks: ring(f + big_b + ubits + 1)?,
        })
    }
}

/// Samples one token per row of a `rows × vocab` row-major matrix of logits (fixed point,
/// the session's format) after the public [`SamplingParams`]; returns shares of
/// (`rows × vocab` one-hot rows, as 0/1 integers like [`super::argmax_rows`]'s one-hot,
/// `rows` sampled ids as integers). Nothing is revealed: the caller reveals the ids to
/// whom it chooses. The draw's randomness is correlated randomness that no single party
/// knows. docs/PROTOCOLS.md, Sampling.
///
/// Steps, all rows batched (they share every round):
/// 1. z = x·round(2^30/T) truncated by 30 (none for T = 1); m = the row maximum
///    ([`max_rows`] in Z_2^32), d = z − m ≤ 0; beside the maximum, U ∈ [0, 2^b) per row
///    from b random bits of the correlated randomness (one B2A).
/// 2. Concurrently: the weights e = e^d by [`neg_exp_with`] (Minimax; exactly 0 for
///    d < −14), so the distribution is e/Σe and the softmax's reciprocal is never needed;
///    min-p, [d ≥ ln(min_p)] by one comparison in Z_2^32 (p_i ≥ min_p·p_max ⟺ that);
///    top-k, a threshold search (below).
/// 3. Top-p: weights w = e·[top-k mask] (B2A and a product; w = e without top-k), and a
///    threshold search on them. Its mask starts from top-k's, so it stays inside it.
/// 4. The mask (top-k/top-p mask ∧ min-p bits, one AND) gives q = e·mask (B2A and a
///    product).
/// 5. Inverse CDF: prefix sums c_i of q and the row total Q (local), U·Q (one product),
///    s_i = [c_i·2^b > U·Q] for i < vocab − 1 by one comparison in Z_2^(f+B+b+1),
///    s_last = 1; the one-hot h_i = s_i ⊕ s_(i−1) (local; s is monotone since q ≥ 0),
///    one B2A; id = Σ i·h_i (local).
///
/// **Threshold search** (top-k, top-p): the threshold t runs on the grid 2^−g
/// ([`SAMPLING_GRID_BITS`], g = 8) in (−16, 0], starting at −16 + 2^−g; for j = g + 3
/// down to 0, with the candidate t + 2^(j−g): the bits [d_i ≥ candidate] (one comparison
/// of every element in Z_2^(f+15), exact), one B2A, then the predicate: top-k,
/// count ≥ k (local sum, one comparison in Z_2^(bitlen(vocab)+1)); top-p, masked mass
/// M = Σ w_i·[d_i ≥ candidate] (one fused sum of products) against p·S, S = Σ w:
/// [2^a·M − P·S ≥ 0] with P = max(1, round(p·2^a)), a = 20, cut locally by s bits into
/// Z_2^33. Both branches on the secret predicate bit β run together: t += β·2^(j−g)
/// (a B2A of β; not on the last step) and the boolean mask ← mask ⊕ β∧(bits ⊕ mask)
/// (one AND). The final mask is [d ≥ t] for the largest grid t satisfying the predicate
/// (or the starting mask if none does); t and β are never revealed. Since d_max = 0
/// exactly and t ≤ 0, the row's maximum is always kept, so Q > 0 and the forced
/// s_last = 1 changes no probability.
///
/// **Semantics** against Hugging Face (temperature, top-k, top-p, min-p, in that order,
/// as its warpers run): min-p after top-k/top-p is a threshold relative to the row
/// maximum, which top-k and top-p always keep, so it is computed beside them on d and
/// ANDed. Differences: (i) weights are e^d at f fractional bits (absolute error ≤ 5e-6
/// per token, [`neg_exp_with`]) and exactly 0 for d < −14 (relative probability
/// < 8.4e-7 each in plaintext); (ii) top-k and top-p may keep extra tokens whose d lies
/// within 2^−8 below the last kept one; top-p may keep more when its masked mass exceeds
/// p·S by less than 3·2^(B−31) (B = bitlen(vocab) + 1; 1.8e-4 at vocab 50257, the cut),
/// and p is rounded to 2^−20; a filter never keeps fewer tokens than the exact one on
/// the same weights; (iii) each probability q_i/Q is drawn to within 2^−b (b = 24).
/// Ties are kept together, like top-k's `>=` in transformers.
///
/// **Rounds**, with R_LT(k) = 1 + ⌈log2(k − 1)⌉, N = g + 4 = 12 search steps, R_max the
/// rounds of [`max_rows`] in Z_2^32, kd = f + 15, kc = bitlen(vocab) + 1,
/// ks = f + B + b + 1, and brackets for indicators (1 if the condition holds): the sum of
/// [T ≠ 1], R_max, max(11, [top-k]·N·(R_LT(kd) + R_LT(kc) + 2)),
/// [top-p]·(2·[top-k] + N·(R_LT(kd) + R_LT(33) + 3)), [min-p ∧ (top-k ∨ top-p)],
/// 2·[any filter] and R_LT(ks) + 2.
/// GPT-2's vocabulary (50257, f = 18: R_max = 87, kd = 33, kc = 17, ks = 60), T = 1:
/// **107** (108 for T ≠ 1); top-k = 50 and top-p = 0.9: **436**.
///
/// **Bits** per row of v = vocab, summed over the parties, with LT(k) =
/// 13k − 18 − 3⌈log2(k − 1)⌉: the sum of [T ≠ 1]·184·v (temperature), the maximum's
/// ([`max_rows`]), 2186·v (negExp), 256·b + 192 (U and U·Q), (v − 1)·LT(ks) + 256·v (the
/// draw), [min-p]·(383·v + 3·v·[top-k ∨ top-p]), [any filter]·448·v (the final weights),
/// [top-k]·(N·v·(LT(kd) + 259) + N·LT(kc) + (N − 1)·256) and
/// [top-p]·(448·v·[top-k] + N·v·(LT(kd) + 259) + N·(192 + LT(33)) + (N − 1)·256).
/// Pinned in tests/sampling.rs (rows of 16: 105,045 bits per row at T = 1, 393,321 with
/// every filter). GPT-2's vocabulary (measured, cost report): **4054 bits per element**
/// at T = 1 (25.5 MB per token in total), **20,670** with top-k = 50 and top-p = 0.9
/// (129.9 MB).
///
/// **Range** (contract): |x/T| < 4096 for every logit (the maximum's and negExp's
/// comparisons in Z_2^32) and |x·2^30/T| < 2^62 raw; outside, results are silently wrong.
///
/// # Errors
/// `Misuse` for invalid parameters ([`SamplingParams::validate`]), `logits.len() ≠
/// rows·vocab`, vocab = 0, a temperature whose reciprocal does not fit 2^30 fractional
/// bits, or a vocabulary too large for the fixed-point format (f + bitlen(vocab) > 46);
/// `Protocol` if a message is malformed.
pub async fn sample_rows(
    ctx: &mut Ctx,
    logits: &Shares,
    rows: usize,
    vocab: usize,
    params: &SamplingParams,
) -> Result<(Shares, Shares), Error> {
    if vocab == 0 {
        return Err(Error::misuse("sampling: empty vocabulary"));
    }
    let total = rows
        .checked_mul(vocab)
        .ok_or(Error::misuse("sampling: rows·vocab overflows"))?;
    if logits.len() != total {
        return Err(Error::misuse("sampling: logits length is not rows·vocab"));
    }
    let mut ctx = ctx.fork();
    let me = ctx.me();
    let f = ctx.fixed().frac_bits();
    let plan = Plan::new(params, f, vocab)?;
    if rows == 0 {
        return Ok((Shares::zeros(me, 0), Shares::zeros(me, 0)));
    }
    if vocab == 1 {
        return Ok((
            Shares::from_public(me, &vec![1; rows]),
            Shares::zeros(me, rows),
        ));
    }
    let row_of: Vec<usize> = (0..total).map(|i| i / vocab).collect();

    // 1. Temperature, row maximum (and U beside it).
    let z = match plan.scale {
        Some(c) => super::trunc(&mut ctx, &logits.scale(c), TEMPERATURE_BITS).await?,
        None => logits.clone(),
    };
    let w32 = ring(SOFTMAX_RING_BITS)?;
    let (mut cm, mut cu) = (ctx.fork(), ctx.fork());
    let (m, u) = try_join(
        max_rows(&mut cm, &z, rows, vocab, w32),
        uniform(&mut cu, rows, plan.ubits),
    )
    .await?;
    let d = z.sub(&m.gather(&row_of)?)?;

    // 2. Weights, min-p and top-k concurrently.
    let (mut ce, mut cp, mut ck) = (ctx.fork(), ctx.fork(), ctx.fork());
    let minp = async {
        match plan.min_p {
            Some(l) => {
                let below = lt_public(&mut cp, &d, &vec![l; total], w32).await?;
                Ok(Some(below.xor_public(&vec![1; total])?))
            }
            None => Ok(None),
        }
    };
    let topk = async {
        match plan.top_k {
            Some(k) => {
                let pred = Predicate::Count { k };
                threshold_search(&mut ck, &d, vocab, &plan, &pred, None)
                    .await
                    .map(Some)
            }
            None => Ok(None),
        }
    };
    let (e, (keep_minp, mask_k)) = try_join(
        neg_exp_with(&mut ce, &d, ExpApprox::Minimax),
        try_join(minp, topk),
    )
    .await?;

    // 3. Top-p on the weights top-k kept.
    let mask_kp = match plan.top_p {
        Some(p) => {
            let w = match &mask_k {
                Some(mk) => {
                    let mka = b2a(&mut ctx, mk).await?;
                    mul(&mut ctx, &e, &mka).await?
                }
                None => e.clone(),
            };
            let sums = w.sum_chunks(vocab)?;
            let pred = Predicate::Mass { p, w: &w, sums };
            Some(threshold_search(&mut ctx, &d, vocab, &plan, &pred, mask_k).await?)
        }
        None => mask_k,
    };

    // 4. The final weights.
    let mask = match (mask_kp, keep_minp) {
        (Some(a), Some(b)) => Some(and(&mut ctx, &a, &b).await?),
        (a, b) => a.or(b),
    };
    let q = match mask {
        Some(mb) => {
            let ma = b2a(&mut ctx, &mb).await?;
            mul(&mut ctx, &e, &ma).await?
        }
        None => e,
    };

    // 5. Inverse CDF.
    draw(&mut ctx, &q, &u, vocab, &plan).await
}

/// U = Σ_j 2^j·u_j ∈ [0, 2^bits) per row from `bits` random bits each: the low bits of a
/// random replicated sharing are a boolean sharing of uniform bits no party knows.
/// Rounds: 1 (B2A). Bits: 256 per random bit.
async fn uniform(ctx: &mut Ctx, rows: usize, bits: u32) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let n = rows
        .checked_mul(bits as usize)
        .ok_or(Error::misuse("sampling: too many rows"))?;
    let r = ctx.random_shares(n);
    let rb = BitShares::from_parts(r.party(), Width::BIT, r.a().to_vec(), r.b().to_vec());
    let ua = b2a(&mut ctx, &rb).await?;
    let pow: Vec<u64> = (0..n).map(|i| 1u64 << (i % bits as usize)).collect();
    ua.mul_public(&pow)?.sum_chunks(bits as usize)
}

/// The predicate of a threshold search at a candidate threshold, from the arithmetic
/// bits [d_i ≥ candidate].
enum Predicate<'a> {
    /// count ≥ k.
    Count { k: u64 },
    /// 2^a·Σ w_i·bit_i ≥ P·S (`sums` = S per row).
    Mass { p: u64, w: &'a Shares, sums: Shares },
}

/// The boolean mask [d ≥ t] for the largest grid threshold t in (−16, 0] whose bits
/// satisfy `pred` (or `start`, all ones if `None`, when no candidate does), by a binary
/// search on a secret t (see [`sample_rows`]). Rounds: N·(R_LT(kd) + 1 + R_pred + 1).
async fn threshold_search(
    ctx: &mut Ctx,
    d: &Shares,
    vocab: usize,
    plan: &Plan,
    pred: &Predicate<'_>,
    start: Option<BitShares>,
) -> Result<BitShares, Error> {
    let mut ctx = ctx.fork();
    let me = d.party();
    let n = d.len();
    let rows = n / vocab;
    let row_of: Vec<usize> = (0..n).map(|i| i / vocab).collect();
    let ones_n = vec![1u64; n];
    let ones_r = vec![1u64; rows];
    let f = ctx.fixed().frac_bits();
    let lowest = plan.unit.wrapping_sub(16u64 << f);
    let mut t = Shares::from_public(me, &vec![lowest; rows]);
    let mut mask = start.unwrap_or_else(|| BitShares::from_public(me, Width::BIT, &ones_n));
    for j in (0..SEARCH_SPAN_BITS + plan.grid).rev() {
        let inc = plan.unit << j;
        let cand = t.add_public_scalar(inc).gather(&row_of)?;
        let bits = msb(&mut ctx, &d.sub(&cand)?, plan.kd)
            .await?
            .xor_public(&ones_n)?;
        let ba = b2a(&mut ctx, &bits).await?;
        let fails = match pred {
            Predicate::Count { k } => {
                let count = ba.sum_chunks(vocab)?.add_public_scalar(k.wrapping_neg());
                msb(&mut ctx, &count, plan.kc).await?
            }
            Predicate::Mass { p, w, sums } => {
                let mass = fused_sums(&mut ctx, &ba, w, &row_of, rows).await?;
                let diff = mass.scale(1u64 << plan.p_bits).sub(&sums.scale(*p))?;
                let cut = shift_components(&diff, plan.p_cut);
                msb(&mut ctx, &cut, ring(MASS_RING_BITS)?).await?
            }
        };
        let beta = fails.xor_public(&ones_r)?;
        let sel = bits.xor(&mask)?;
        let beta_n = gather_bits(&beta, &row_of)?;
        let (mut c1, mut c2) = (ctx.fork(), ctx.fork());
        let last = j == 0;
        let (moved, beta_a) = try_join(and(&mut c1, &beta_n, &sel), async {
            if last {
                Ok(None)
            } else {
                b2a(&mut c2, &beta).await.map(Some)
            }
        })
        .await?;
        mask = mask.xor(&moved)?;
        if let Some(ba) = beta_a {
            t = t.add(&ba.scale(inc))?;
        }
    }
    Ok(mask)
}

/// The inverse-CDF draw from weights `q` ≥ 0 with the uniform `u` (step 5 of
/// [`sample_rows`]): (one-hot, ids). Rounds: 1 + R_LT(ks) + 1.
async fn draw(
    ctx: &mut Ctx,
    q: &Shares,
    u: &Shares,
    vocab: usize,
    plan: &Plan,
) -> Result<(Shares, Shares), Error> {
    let me = q.party();
    let n = q.len();
    let rows = n / vocab;
    let prefix = |v: &[u64]| -> Vec<u64> {
        let mut out = Vec::with_capacity(v.len());
        for row in v.chunks(vocab) {
            let mut acc = 0u64;
            for x in row {
                acc = acc.wrapping_add(*x);
                out.push(acc);
            }
        }
        out
    };
    let c = Shares::from_parts(me, prefix(q.a()), prefix(q.b()));
    let last: Vec<usize> = (0..rows).map(|r| r * vocab + vocab - 1).collect();
    let uq = mul(ctx, u, &c.gather(&last)?).await?;
    // [c_i·2^b > U·Q] for every i but each row's last, which is 1.
    let (mut firsts, mut row_of_first) = (Vec::new(), Vec::new());
    for i in 0..n {
        if i % vocab != vocab - 1 {
            firsts.push(i);
            row_of_first.push(i / vocab);
        }
    }
    let diff = uq
        .gather(&row_of_first)?
        .sub(&c.gather(&firsts)?.scale(1u64 << plan.ubits))?;
    let s_first = msb(ctx, &diff, plan.ks).await?;
    // s over all columns (the last from a public 1), then h_i = s_i ⊕ s_(i−1), s_(−1) = 0.
    let one = s_first.len();
    let zero = one + 1;
    let pad = BitShares::from_public(me, Width::BIT, &[1, 0]);
    let ext = BitShares::concat(&[&s_first, &pad])?;
    let (mut s_idx, mut prev_idx) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut k = 0usize;
    for i in 0..n {
        let col = i % vocab;
        if col == vocab - 1 {
            s_idx.push(one);
        } else {
            s_idx.push(k);
            k += 1;
        }
        prev_idx.push(if col == 0 {
            zero
        } else {
            *s_idx.get(i - 1).ok_or(Error::bug("sampling layout"))?
        });
    }
    let h = gather_bits(&ext, &s_idx)?.xor(&gather_bits(&ext, &prev_idx)?)?;
    let onehot = b2a(ctx, &h).await?;
    let cols: Vec<u64> = (0..n).map(|i| (i % vocab) as u64).collect();
    let ids = onehot.mul_public(&cols)?.sum_chunks(vocab)?;
    Ok((onehot, ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_matches_known_values() {
        for (x, l) in [
            (0.5, -core::f64::consts::LN_2),
            (0.1, -core::f64::consts::LN_10),
            (1e-6, -13.815_510_557_964_274),
            (0.999, -0.001_000_500_333_583_5),
        ] {
            assert!((ln_public(x) - l).abs() < 1e-14, "ln({x})");
        }
    }
}
