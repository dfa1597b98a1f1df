//! Max and argmax along the last axis (docs/PROTOCOLS.md, Max and argmax): all-pairs
//! comparisons for short rows, a tournament for long rows, and the hybrid of the two used
//! by default.
//!
//! Every variant is built from one kind of **level**: the current elements of every row are
//! split into groups of consecutive elements, and each group is reduced to its maximum by
//! all-pairs comparisons:
//! 1. one batched [`msb`] over the differences x_i − x_j of all pairs i < j of all groups of
//!    all rows (c_ij = [x_i < x_j]);
//! 2. winner bits w_i = ∧_{j>i} ¬c_ij ∧ ∧_{j<i} c_ji (strict on one side: exactly one winner,
//!    the **first** maximum on ties) by an AND tree, for every member but the last, whose
//!    bit is 1 ⊕ ⊕_{i<last} w_i (local: exactly one bit is set);
//! 3. one [`b2a`] of those bits; the group's maximum x_last + Σ_{i<last} w_i·(x_i − x_last)
//!    is one fused sum of products: the local cross terms are added before a single reshare.
//!
//! A tournament is a chain of levels with groups of two; all pairs is one level with the
//! whole row as a group. Levels batch all rows, so all rows share every round; rows that
//! need fewer tournament levels start later, so that the final all-pairs levels of all
//! rows coincide.

use alloc::vec;
use alloc::vec::Vec;
use core::ops::Range;

use crate::engine::{Ctx, try_join};
use crate::error::Error;
use crate::ring::Width;
use crate::share::{BitShares, Shares};

use super::b2a::b2a_in;
use super::gelu::shift_components;
use super::{and, b2a, msb, msb_masked, reshare_in, reshare_lift};

/// Rows up to this length use all-pairs comparisons under [`MaxMethod::default`] whatever
/// the comparison count; longer rows are halved by tournament levels unless the whole
/// call fits [`MaxMethod::DEFAULT_COMPARISON_BUDGET`].
pub const DEFAULT_ALL_PAIRS_MAX: usize = 32;

/// How [`max_rows_with`] and [`argmax_rows_with`] reduce a row.
///
/// With n the row length, R_LT the rounds of one comparison at the chosen width
/// (1 + ⌈log2(k'−1)⌉, see [`msb`]) and LT its bits (13k' − 18 − 3⌈log2(k'−1)⌉ in total):
///
/// | method | rounds | comparisons per row |
/// |---|---|---|
/// | `AllPairs` | R_LT + ⌈log2(n−1)⌉ + 2 | n(n−1)/2 |
/// | `Tournament` | ⌈log2 n⌉·(R_LT + 2) | n − 1 |
/// | `Hybrid { all_pairs_max: k }` | L·(R_LT + 2) + R_LT + ⌈log2(m−1)⌉ + 2 | (n − m) + m(m−1)/2 |
/// | `Budgeted { all_pairs_max: k, comparisons: B }` | `Hybrid`'s, threshold below | `Hybrid`'s |
///
/// where, for the hybrid, L is the number of halvings that bring n down to m ≤ k
/// (L = 0 and m = n when n ≤ k), and the rounds and comparisons of a call are those of its
/// longest row (rounds) and the sum over its rows (comparisons).
///
/// **`Budgeted`'s threshold**: with n_max the longest row of the call and L_k the levels
/// that `Hybrid { all_pairs_max: k }` needs for it, the first L in 0, 1, …, L_k − 1 whose
/// threshold k_L = ⌈n_max/2^L⌉ keeps the comparisons of the whole call (all rows, each
/// with the levels it needs to reach k_L) within B. If none does, the call is a bulk call
/// (many long rows: an encoder's attention, a long prompt): its threshold starts at k and
/// halves (k, k/2, …) while the call stays over B, down to
/// [`MaxMethod::BULK_ALL_PAIRS_MIN`] = 8 (or k if smaller). So a call pays fewer
/// tournament levels than the hybrid only for at most B comparisons (B·LT bits), and more
/// levels only when even the hybrid's comparisons exceed B; calls whose rows are all ≤ 8
/// behave exactly as the hybrid.
///
/// Why the floor is 8: halving the last all-pairs group from 2m to m adds one level
/// (R_LT + 1 rounds: the level's R_LT + 2 minus one AND round) and saves 1.5·m(m−1)
/// comparisons per row that reached 2m: 360 for m = 16, 84 for m = 8, only 18 for m = 4,
/// which pays for its rounds only in calls of thousands of rows. Bert-Base's attention
/// (1536 rows of 128 per layer, keys cut to 4 fractional bits): 4 levels then all pairs of
/// 8, 148 comparisons per row instead of the hybrid's 592 (2 levels, all pairs of 32),
/// for 8 more rounds per softmax (28 instead of 20).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxMethod {
    /// One level of all-pairs comparisons over the whole row: fewest rounds, n(n−1)/2
    /// comparisons.
    AllPairs,
    /// Neighbours compared level by level (groups of two): n − 1 comparisons, ⌈log2 n⌉
    /// levels.
    Tournament,
    /// Tournament levels until at most `all_pairs_max` elements remain, then one level of
    /// all pairs (`all_pairs_max` below 2 counts as 2, a pure tournament).
    Hybrid {
        /// The longest row reduced by all pairs directly.
        all_pairs_max: usize,
    },
    /// `Hybrid { all_pairs_max }`, except that fewer tournament levels (longer all-pairs
    /// rows) are used while the call's total comparison count stays within `comparisons`,
    /// and more (all-pairs rows down to 8) while even the hybrid's count exceeds it (the
    /// rule is in the type's documentation).
    Budgeted {
        /// The longest row reduced by all pairs in a call within the budget.
        all_pairs_max: usize,
        /// The comparisons per call that may be spent to save tournament levels.
        comparisons: usize,
    },
}

impl Default for MaxMethod {
    /// `Budgeted { all_pairs_max: 32, comparisons: 2^16 }` ([`DEFAULT_ALL_PAIRS_MAX`],
    /// [`MaxMethod::DEFAULT_COMPARISON_BUDGET`]): all pairs for attention rows of up to 32
    /// keys, and for longer rows while the call compares at most 2^16 pairs (a KV-cached
    /// step: one query row per head); a vocabulary of 50257 logits pays 9 tournament levels, then
    /// all pairs of 99 (55009 comparisons; `Hybrid { 32 }`: 11 levels, 50532). Calls
    /// whose hybrid would compare more than 2^16 pairs (Bert-Base's 1536 rows of 128) pay
    /// tournament levels down to all pairs of at most 16 or 8.
    fn default() -> Self {
        MaxMethod::Budgeted {
            all_pairs_max: DEFAULT_ALL_PAIRS_MAX,
            comparisons: MaxMethod::DEFAULT_COMPARISON_BUDGET,
        }
    }
}

impl MaxMethod {
    /// The comparisons per call that [`MaxMethod::default`] spends to save tournament
    /// levels: 2^16, about what GPT-2's causal attention over a 32-token prompt already
    /// pays per layer (12 heads × Σ_{n ≤ 32} n(n−1)/2 = 65472). At most 65536·383 bits =
    /// **3.14 MB summed over the parties** (1.05 MB per party) in Z_2^32; it covers one
    /// all-pairs row per head over up to 105 keys for 12 heads (a KV-cached generation
    /// step: R_LT + ⌈log2(n−1)⌉ + 2 rounds, 13 for n ≤ 33 and 14 up to 65 in Z_2^32,
    /// instead of one or two tournament levels of R_LT + 2 = 8 rounds each first).
    pub const DEFAULT_COMPARISON_BUDGET: usize = 1 << 16;

    /// The smallest all-pairs threshold of `Budgeted` for a call over its budget (see the
    /// type's documentation for why 8).
    pub const BULK_ALL_PAIRS_MIN: usize = 8;

    /// The longest row that the final all-pairs level takes directly, for a call over
    /// rows of lengths `lens`.
    fn threshold(self, lens: &[usize]) -> usize {
        match self {
            MaxMethod::AllPairs => usize::MAX,
            MaxMethod::Tournament => 2,
            MaxMethod::Hybrid { all_pairs_max } => all_pairs_max.max(2),
            MaxMethod::Budgeted {
                all_pairs_max,
                comparisons,
            } => {
                let k = all_pairs_max.max(2);
                let n_max = lens.iter().copied().max().unwrap_or(1);
                let within =
                    |t: usize| total_comparisons(lens, t).is_some_and(|c| c <= comparisons);
                if let Some(t) = (0..tournament_levels(n_max, k))
                    .map(|l| n_max.div_ceil(1usize << l))
                    .find(|&t| within(t))
                {
                    return t;
                }
                // A bulk call (many long rows): over the budget even at k, so each further
                // halving of the threshold saves 1.5·m(m−1) comparisons per row that
                // reached 2m, for one more level.
                let floor = MaxMethod::BULK_ALL_PAIRS_MIN.min(k);
                let mut t = k;
                while t > floor && !within(t) {
                    t = (t / 2).max(floor);
                }
                t
            }
        }
    }
}

/// Comparisons of a call over rows of `lens` with all-pairs threshold `k` (tournament
/// levels until at most k remain, then all pairs); `None` on overflow.
fn total_comparisons(lens: &[usize], k: usize) -> Option<usize> {
    lens.iter().try_fold(0usize, |s, &n| {
        let mut m = n;
        while m > k {
            m = m.div_ceil(2);
        }
        let pairs = m.checked_mul(m.saturating_sub(1))? / 2;
        s.checked_add(n - m)?.checked_add(pairs)
    })
}

/// How the comparisons of a maximum are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Compare {
    /// The carry tree ([`msb`]) on the values themselves: exact, fewest bits.
    Exact,
    /// Three-round comparisons ([`msb_masked`]) of keys cut locally by `shift` bits (a
    /// sharing of ⌊x/2^shift⌋ − e, e ∈ {0, 1, 2}, valid in rings of at most 64 − `shift`
    /// bits). With one level (and always with the argmax) a group's winner is within
    /// 3·2^`shift` (raw) of its maximum and is selected exactly. Over several levels the
    /// keys are cut once and the levels select the keys themselves, in the comparisons'
    /// narrow ring (a B2A of 4k bits and a reshare of 3k per group instead of 256 and
    /// 192); the keys left for the last level are lifted to Z_2^64 while it compares them
    /// (2k + 64 + 4(64 − k) bits each, no round more): the output is the winner's key
    /// times 2^`shift`, at most the row's maximum and at least 3·2^`shift` below it,
    /// whatever the number of levels.
    Coarse {
        /// Bits cut from every component.
        shift: u32,
    },
}

/// Tournament levels a row of `n` elements needs before at most `k` remain.
fn tournament_levels(mut n: usize, k: usize) -> usize {
    let mut levels = 0;
    while n > k {
        n = n.div_ceil(2);
        levels += 1;
    }
    levels
}

/// The maximum of each row of a `rows × cols` row-major matrix, compared in Z_2^k with
/// k = `width`, by the default [`MaxMethod`] (all pairs for `cols` ≤ 32, and above while
/// rows·cols(cols−1)/2 ≤ 2^16; tournament levels first otherwise).
///
/// See [`max_rows_with`] for the method, the range contract, rounds and bytes.
///
/// # Errors
/// As [`max_rows_with`].
pub async fn max_rows(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    cols: usize,
    width: Width,
) -> Result<Shares, Error> {
    max_rows_with(ctx, x, rows, cols, width, MaxMethod::default()).await
}

/// The maximum of each row of a `rows × cols` row-major matrix (docs/PROTOCOLS.md, Max and
/// argmax; all-pairs maximum and tournament as in PUMA's softmax, Dong et al. 2023, and
/// ABY3's comparison circuits). Output: `rows` values, exact (the output is one of the
/// inputs).
///
/// Method: see the module documentation; all rows share every round.
///
/// **Range** (contract): comparisons are signs of differences in Z_2^k, k = `width`, so
/// every |x_i − x_j| within a row must be below 2^(k−1) raw (fixed point with f = 18:
/// |x| < 2^(k−2−f) real suffices, e.g. k = 32: |x| < 4096; k = 41: |x| < 2^21). A violated
/// bound silently gives a wrong maximum.
///
/// **Rounds** for rows of n = `cols` (R_LT = 1 + ⌈log2(k−1)⌉, 6 for 18 ≤ k ≤ 33, 7 for
/// 34 ≤ k ≤ 65): all pairs R_LT + ⌈log2(n−1)⌉ + 2 (k = 32, n = 32: **13**), one tournament
/// level R_LT + 2, in general the table of [`MaxMethod`]; 0 for n = 1.
///
/// **Bits** per level and group of m elements, summed over the parties, with LT the bits
/// of one comparison (k = 32: 383; k = 64: 796): m(m−1)/2·LT (comparisons) +
/// 3(m−1)(m−2) (AND tree, one bit per gate and party) + 256(m−1) (B2A) + 192 (the fused
/// sum's reshare). All pairs, n = 32, k = 32: 189968 + 2790 + 7936 + 192 = **200886 bits
/// (25.1 KB) per row in total**, a third per party with role rotation over many rows.
/// A tournament level costs LT + 256 + 192 bits per pair (k = 64: 1244 bits).
///
/// # Errors
/// `Misuse` if `x.len() ≠ rows·cols` or `cols` is 0; `Protocol` if a message is malformed.
pub async fn max_rows_with(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    cols: usize,
    width: Width,
    method: MaxMethod,
) -> Result<Shares, Error> {
    let lens = uniform_rows(x, rows, cols)?;
    let (max, _) = max_segments(ctx, x, &lens, width, method, false, Compare::Exact).await?;
    Ok(max)
}

/// Maximum and one-hot argmax of each row of a `rows × cols` row-major matrix, by the
/// default [`MaxMethod`]. See [`argmax_rows_with`].
///
/// # Errors
/// As [`argmax_rows_with`].
pub async fn argmax_rows(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    cols: usize,
    width: Width,
) -> Result<(Shares, Shares), Error> {
    argmax_rows_with(ctx, x, rows, cols, width, MaxMethod::default()).await
}

/// Maximum and one-hot argmax of each row of a `rows × cols` row-major matrix: returns
/// (`rows` maxima, `rows × cols` arithmetic 0/1 values with a single 1 per row at the
/// **first** maximum). Exact. docs/PROTOCOLS.md, Max and argmax.
///
/// The one-hot comes from the same winner bits as the maximum: with a single level it is
/// the B2A'd winner vector itself (the last member's bit 1 − Σ others, local), so it costs
/// nothing extra. With several levels each column keeps a boolean path bit, ANDed with
/// its group's winner bit at every level (one AND round that runs alongside the level's
/// B2A and fused sum, n bits per level and row at most), and the path bits of the
/// columns of such rows are B2A'd at the end, alongside the last level's B2A and fused
/// sum. Rounds are therefore those of [`max_rows_with`].
///
/// **Bits**: those of [`max_rows_with`], plus for rows with tournament levels at most
/// 3n per level (path ANDs) and 256n (the final B2A) per row of n. The vocabulary
/// argmax (n = 50257, k' = 41 or 64), default method: 9 tournament levels then all pairs
/// of 99, 9·9 + 7 + 7 + 2 = **97 rounds**, at k' = 41 **8.29 MB in total** (2.76 MB per
/// party; measured in tests/max_recip.rs); `Hybrid { all_pairs_max: 32 }`: 11 levels then
/// all pairs of 25, 11·9 + 7 + 5 + 2 = 113 rounds (a pure tournament: 16·9 = 144) and
/// 8.02 MB, of which the comparisons take 3.39 MB (50532 at 537 bits), the per-level B2A
/// and fused sums 2.81 MB (50256 winner bits at 256, 50233 sums at 192), the final B2A of
/// the path bits 1.61 MB (50257 at 256) and the path ANDs 0.21 MB.
///
/// **Range**: as [`max_rows_with`].
///
/// # Errors
/// `Misuse` if `x.len() ≠ rows·cols` or `cols` is 0; `Protocol` if a message is malformed.
pub async fn argmax_rows_with(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    cols: usize,
    width: Width,
    method: MaxMethod,
) -> Result<(Shares, Shares), Error> {
    let lens = uniform_rows(x, rows, cols)?;
    let (max, onehot) = max_segments(ctx, x, &lens, width, method, true, Compare::Exact).await?;
    let onehot = onehot.ok_or(Error::bug("argmax lost its one-hot"))?;
    Ok((max, onehot))
}

fn uniform_rows(x: &Shares, rows: usize, cols: usize) -> Result<Vec<usize>, Error> {
    if cols == 0 {
        return Err(Error::misuse("max of rows with no columns"));
    }
    let total = rows
        .checked_mul(cols)
        .ok_or(Error::misuse("rows·cols overflows"))?;
    if x.len() != total {
        return Err(Error::misuse("input length is not rows·cols"));
    }
    Ok(vec![cols; rows])
}

/// Gathers boolean shares at `idx`.
pub(crate) fn gather_bits(b: &BitShares, idx: &[usize]) -> Result<BitShares, Error> {
    let mut a = Vec::with_capacity(idx.len());
    let mut c = Vec::with_capacity(idx.len());
    for &i in idx {
        a.push(*b.a().get(i).ok_or(Error::bug("bit index out of range"))?);
        c.push(*b.b().get(i).ok_or(Error::bug("bit index out of range"))?);
    }
    Ok(BitShares::from_parts(b.party(), b.width(), a, c))
}

/// The AND of each run of consecutive single bits: `terms` holds `counts[0]` bits of the
/// first output, then `counts[1]` of the second, …; an empty run gives a sharing of 1.
/// All runs are reduced together, halving every round.
///
/// Rounds: ⌈log2 max(counts)⌉ (0 if no run has two bits). Bits: one per AND gate and
/// party, Σ (count − 1) gates, packed per round.
pub(crate) async fn and_reduce(
    ctx: &mut Ctx,
    terms: BitShares,
    counts: &[usize],
) -> Result<BitShares, Error> {
    let total = counts
        .iter()
        .try_fold(0usize, |s, &c| s.checked_add(c))
        .ok_or(Error::bug("AND tree size overflows"))?;
    if total != terms.len() || terms.width() != Width::BIT {
        return Err(Error::bug("AND tree terms do not match their counts"));
    }
    let mut ctx = ctx.fork();
    let me = terms.party();
    let mut cur = terms;
    let mut counts = counts.to_vec();
    while counts.iter().any(|&c| c > 1) {
        let pairs: usize = counts.iter().map(|c| c / 2).sum();
        let mut left = Vec::with_capacity(pairs);
        let mut right = Vec::with_capacity(pairs);
        // The next vector, as indices into [AND results ‖ current terms].
        let mut layout = Vec::with_capacity(cur.len().div_ceil(2));
        let mut next_counts = Vec::with_capacity(counts.len());
        let mut base = 0usize;
        for &c in &counts {
            for k in 0..c / 2 {
                layout.push(left.len());
                left.push(base + 2 * k);
                right.push(base + 2 * k + 1);
            }
            if c % 2 == 1 {
                layout.push(pairs + base + c - 1);
            }
            next_counts.push(c / 2 + c % 2);
            base += c;
        }
        let l = gather_bits(&cur, &left)?;
        let r = gather_bits(&cur, &right)?;
        let z = and(&mut ctx, &l, &r).await?;
        cur = gather_bits(&BitShares::concat(&[&z, &cur])?, &layout)?;
        counts = next_counts;
    }
    // Every run now holds 0 or 1 bits; empty runs are a public 1.
    let empties = counts.iter().filter(|&&c| c == 0).count();
    if empties == 0 {
        return Ok(cur);
    }
    let ones = BitShares::from_public(me, Width::BIT, &vec![1; empties]);
    let mut layout = Vec::with_capacity(counts.len());
    let (mut pos, mut one) = (0usize, 0usize);
    for &c in &counts {
        if c == 1 {
            layout.push(pos);
            pos += 1;
        } else {
            layout.push(cur.len() + one);
            one += 1;
        }
    }
    gather_bits(&BitShares::concat(&[&cur, &ones])?, &layout)
}

/// Σ_{p: out_of[p] = o} x_p·y_p for every output o < `n_out`, as **one** fused sum: each
/// party adds the local cross terms x_i·y_i + x_i·y_{i+1} + x_{i+1}·y_i of all products of
/// an output before a single reshare (docs/PROTOCOLS.md, Fused sums of products). Exact.
///
/// Rounds: 1. Bytes: 8 per output per party, whatever the number of products.
///
/// # Errors
/// `Misuse` if lengths differ or an output index is out of range; `Protocol` if a message
/// is malformed.
pub(crate) async fn fused_sums(
    ctx: &mut Ctx,
    x: &Shares,
    y: &Shares,
    out_of: &[usize],
    n_out: usize,
) -> Result<Shares, Error> {
    fused_sums_in(ctx, x, y, out_of, n_out, Width::W64).await
}

/// [`fused_sums`] in the ring Z_2^k of `ring` (mod 2^k; k bits per output per party).
///
/// # Errors
/// As [`fused_sums`].
async fn fused_sums_in(
    ctx: &mut Ctx,
    x: &Shares,
    y: &Shares,
    out_of: &[usize],
    n_out: usize,
    ring: Width,
) -> Result<Shares, Error> {
    if x.len() != y.len() || x.len() != out_of.len() {
        return Err(Error::misuse("fused sum of vectors of different lengths"));
    }
    let mut z = vec![0u64; n_out];
    for (((xa, xb), (ya, yb)), &o) in x
        .a()
        .iter()
        .zip(x.b())
        .zip(y.a().iter().zip(y.b()))
        .zip(out_of)
    {
        let t = xa
            .wrapping_mul(*ya)
            .wrapping_add(xa.wrapping_mul(*yb))
            .wrapping_add(xb.wrapping_mul(*ya));
        let slot = z
            .get_mut(o)
            .ok_or(Error::misuse("fused sum output out of range"))?;
        *slot = slot.wrapping_add(t);
    }
    let mut ctx = ctx.fork();
    reshare_in(&mut ctx, z, ring).await
}

/// Pair index of (i, j), i < j, among the m(m−1)/2 pairs of a group in lexicographic order.
fn pair_index(i: usize, j: usize, m: usize) -> usize {
    i * m - i * (i + 1) / 2 + (j - i - 1)
}

/// Phase 1 of a level: the boolean winner bit of every element within its group (1 for
/// singleton groups). Rounds: R_LT + ⌈log2(m_max − 1)⌉, none without a group of two.
async fn winners(
    ctx: &mut Ctx,
    cur: &Shares,
    groups: &[Range<usize>],
    width: Width,
    compare: Compare,
) -> Result<BitShares, Error> {
    let mut ctx = ctx.fork();
    let me = cur.party();
    let mut lhs = Vec::new();
    let mut rhs = Vec::new();
    let mut pair_base = Vec::with_capacity(groups.len());
    for g in groups {
        pair_base.push(lhs.len());
        for i in g.clone() {
            for j in i + 1..g.end {
                lhs.push(i);
                rhs.push(j);
            }
        }
    }
    let c = if lhs.is_empty() {
        BitShares::from_public(me, Width::BIT, &[])
    } else {
        match compare {
            Compare::Exact => {
                let d = cur.gather(&lhs)?.sub(&cur.gather(&rhs)?)?;
                msb(&mut ctx, &d, width).await?
            }
            Compare::Coarse { shift } => {
                let keys = shift_components(cur, shift);
                let d = keys.gather(&lhs)?.sub(&keys.gather(&rhs)?)?;
                msb_masked(&mut ctx, &d, width).await?
            }
        }
    };
    // Terms of every member but the last of each group: ¬c_ij (j > i) and c_ji (j < i).
    let mut term_idx = Vec::new();
    let mut term_neg = Vec::new();
    let mut counts = Vec::new();
    for (g, &base) in groups.iter().zip(&pair_base) {
        let m = g.len();
        if m < 2 {
            continue;
        }
        for i in 0..m - 1 {
            for j in 0..m {
                if j < i {
                    term_idx.push(base + pair_index(j, i, m));
                    term_neg.push(0);
                } else if j > i {
                    term_idx.push(base + pair_index(i, j, m));
                    term_neg.push(1);
                }
            }
            counts.push(m - 1);
        }
    }
    let terms = gather_bits(&c, &term_idx)?.xor_public(&term_neg)?;
    let partial = and_reduce(&mut ctx, terms, &counts).await?;
    // Assemble all elements: members from `partial`, the last as 1 ⊕ XOR of the others,
    // singletons as 1.
    let n = cur.len();
    let mut a = vec![0u64; n];
    let mut b = vec![0u64; n];
    let mut ones = vec![0u64; n];
    let mut k = 0usize;
    for g in groups {
        let m = g.len();
        let (mut xa, mut xb) = (0u64, 0u64);
        for e in g.start..g.end.saturating_sub(1) {
            let (pa, pb) = (
                *partial.a().get(k).ok_or(Error::bug("winner bits"))?,
                *partial.b().get(k).ok_or(Error::bug("winner bits"))?,
            );
            k += 1;
            if let (Some(sa), Some(sb)) = (a.get_mut(e), b.get_mut(e)) {
                *sa = pa;
                *sb = pb;
            }
            xa ^= pa;
            xb ^= pb;
        }
        let last = g.end.checked_sub(1).ok_or(Error::bug("empty group"))?;
        if m >= 2 {
            if let (Some(sa), Some(sb)) = (a.get_mut(last), b.get_mut(last)) {
                *sa = xa;
                *sb = xb;
            }
        }
        if let Some(o) = ones.get_mut(last) {
            *o = 1;
        }
    }
    BitShares::from_parts(me, Width::BIT, a, b).xor_public(&ones)
}

/// Phase 2 of a level: the arithmetic winner bits (B2A of all members but the last) and
/// each group's maximum x_last + Σ w_i·(x_i − x_last) as one fused sum, in `ring` (Z_2^64,
/// or the narrow ring of cut keys). Returns the maxima (one per group) and, if `want_w`, the
/// arithmetic winner bit of every element (over Z_2^64 only).
/// Rounds: 2 (none without a group of two). Bits over Z_2^k: 4k per B2A'd member, 3k per
/// group (256 and 192 over Z_2^64).
async fn select_max(
    ctx: &mut Ctx,
    cur: &Shares,
    groups: &[Range<usize>],
    wb: &BitShares,
    want_w: bool,
    ring: Width,
) -> Result<(Shares, Option<Shares>), Error> {
    if want_w && ring != Width::W64 {
        return Err(Error::bug("winner bits are only kept over Z_2^64"));
    }
    let mut ctx = ctx.fork();
    let me = cur.party();
    let mut members = Vec::new();
    let mut lasts_of_members = Vec::new();
    let mut out_of = Vec::new();
    let mut multi_lasts = Vec::new();
    for g in groups {
        if g.len() < 2 {
            continue;
        }
        let last = g.end - 1;
        for e in g.start..last {
            members.push(e);
            lasts_of_members.push(last);
            out_of.push(multi_lasts.len());
        }
        multi_lasts.push(last);
    }
    if members.is_empty() {
        let w = want_w.then(|| Shares::from_public(me, &vec![1; cur.len()]));
        return Ok((cur.clone(), w));
    }
    let w = b2a_in(&mut ctx, &gather_bits(wb, &members)?, ring, false).await?;
    let diffs = cur.gather(&members)?.sub(&cur.gather(&lasts_of_members)?)?;
    let sums = fused_sums_in(&mut ctx, &w, &diffs, &out_of, multi_lasts.len(), ring).await?;
    let maxima = sums.add(&cur.gather(&multi_lasts)?)?;
    // One output per group: the fused maximum, or the singleton itself.
    let mut layout = Vec::with_capacity(groups.len());
    let mut k = 0usize;
    for g in groups {
        if g.len() >= 2 {
            layout.push(k);
            k += 1;
        } else {
            layout.push(maxima.len() + g.start);
        }
    }
    let next = Shares::concat(&[&maxima, cur])?.gather(&layout)?;
    let w_full = if want_w {
        // Members: w; last: 1 − Σ w of its group; singletons: 1.
        let n = cur.len();
        let mut a = vec![0u64; n];
        let mut b = vec![0u64; n];
        let mut ones = vec![0u64; n];
        for (((&e, &last), wa), wb) in members.iter().zip(&lasts_of_members).zip(w.a()).zip(w.b()) {
            if let (Some(sa), Some(sb)) = (a.get_mut(e), b.get_mut(e)) {
                *sa = *wa;
                *sb = *wb;
            }
            if let (Some(sa), Some(sb)) = (a.get_mut(last), b.get_mut(last)) {
                *sa = sa.wrapping_sub(*wa);
                *sb = sb.wrapping_sub(*wb);
            }
        }
        for g in groups {
            if let Some(o) = g.end.checked_sub(1).and_then(|l| ones.get_mut(l)) {
                *o = 1;
            }
        }
        Some(Shares::from_parts(me, a, b).add_public(&ones)?)
    } else {
        None
    };
    Ok((next, w_full))
}

/// Path bits of the columns after one level: a column whose element was in a group of two
/// or more gets P ∧ w (or just w if its path was still the public 1). Rounds: 1 if any
/// column needs an AND, else 0.
async fn update_paths(
    ctx: &mut Ctx,
    p: &BitShares,
    p_one: &mut [bool],
    col_elem: &[usize],
    in_multi: &[bool],
    wb: &BitShares,
) -> Result<BitShares, Error> {
    let mut ctx = ctx.fork();
    let mut and_cols = Vec::new();
    let mut and_elems = Vec::new();
    // Layout into [AND results ‖ wb ‖ p].
    let mut layout = Vec::with_capacity(p.len());
    let mut pending = Vec::with_capacity(p.len());
    for (c, &e) in col_elem.iter().enumerate() {
        let multi = *in_multi.get(e).ok_or(Error::bug("element out of range"))?;
        let one = p_one.get_mut(c).ok_or(Error::bug("column out of range"))?;
        if !multi {
            pending.push((2, c));
        } else if *one {
            *one = false;
            pending.push((1, e));
        } else {
            pending.push((0, and_cols.len()));
            and_cols.push(c);
            and_elems.push(e);
        }
    }
    let z = if and_cols.is_empty() {
        BitShares::from_public(p.party(), Width::BIT, &[])
    } else {
        let lhs = gather_bits(p, &and_cols)?;
        let rhs = gather_bits(wb, &and_elems)?;
        and(&mut ctx, &lhs, &rhs).await?
    };
    for (kind, i) in pending {
        layout.push(match kind {
            0 => i,
            1 => z.len() + i,
            _ => z.len() + wb.len() + i,
        });
    }
    gather_bits(&BitShares::concat(&[&z, wb, p])?, &layout)
}

/// Maximum (and optionally the one-hot argmax) of consecutive segments of `x` with the
/// given lengths (ragged rows, e.g. causal attention), all segments sharing every round.
/// Costs as in [`max_rows_with`] and [`argmax_rows_with`] for the longest segment.
///
/// # Errors
/// `Misuse` if a length is 0 or the lengths do not add up to `x.len()`; `Protocol` if a
/// message is malformed.
pub(crate) async fn max_segments(
    ctx: &mut Ctx,
    x: &Shares,
    lens: &[usize],
    width: Width,
    method: MaxMethod,
    want_onehot: bool,
    compare: Compare,
) -> Result<(Shares, Option<Shares>), Error> {
    max_levels(ctx, x, lens, width, method, want_onehot, compare, false).await
}

/// The maxima of consecutive segments of lengths `lens` compared on keys cut before the
/// values are ready: `keys` are shares of ⌊x_i/2^`shift`⌋ − e_i, e_i ∈ {0, 1, 2}, in
/// Z_2^k (k = `width`; made from a product's summands by a local cut and one reshare, a
/// round before the product's own truncation, docs/PROTOCOLS.md, Softmax), and `x` is the
/// future of the values x_i (at f bits) that the keys were cut from, up to 1 unit of x.
/// Returns the values and their maxima: with one level (rows within the method's
/// all-pairs threshold), the exact value of the winner, which is at most the row's
/// maximum and within 3·2^`shift` + 1 (raw) of it; with several levels, the winner's key
/// times 2^`shift`, at most 1 unit above the row's maximum and within 3·2^`shift` + 1
/// below it.
///
/// Rounds and bits: those of [`max_rows_with`] with cut keys ([`Compare::Coarse`]), the
/// comparisons starting as soon as the keys are shared.
///
/// # Errors
/// As [`max_segments`], and `Misuse` if the keys do not match the lengths.
pub(crate) async fn max_segments_of_keys<F>(
    ctx: &mut Ctx,
    x: F,
    keys: &Shares,
    lens: &[usize],
    (width, shift): (Width, u32),
    method: MaxMethod,
) -> Result<(Shares, Shares), Error>
where
    F: core::future::Future<Output = Result<Shares, Error>>,
{
    let mut ctx = ctx.fork();
    let k = method.threshold(lens);
    if lens.iter().all(|&n| tournament_levels(n, k) == 0) {
        // One all-pairs level: the winners from the keys, then the exact values selected.
        let mut groups = Vec::with_capacity(lens.len());
        let mut offset = 0usize;
        for &n in lens {
            let end = offset
                .checked_add(n)
                .ok_or(Error::misuse("segment lengths overflow"))?;
            groups.push(offset..end);
            offset = end;
        }
        if offset != keys.len() || lens.contains(&0) {
            return Err(Error::misuse(
                "segment lengths must be positive and add up to the keys' length",
            ));
        }
        let mut cw = ctx.fork();
        let level = Compare::Coarse { shift: 0 };
        let (x, wb) = try_join(x, winners(&mut cw, keys, &groups, width, level)).await?;
        if x.len() != keys.len() {
            return Err(Error::misuse("values and keys differ in length"));
        }
        let (max, _) = select_max(&mut ctx, &x, &groups, &wb, false, Width::W64).await?;
        return Ok((x, max));
    }
    let mut cm = ctx.fork();
    let compare = Compare::Coarse { shift };
    let levels = max_levels(&mut cm, keys, lens, width, method, false, compare, true);
    let (x, (max, _)) = try_join(x, levels).await?;
    if x.len() != keys.len() {
        return Err(Error::misuse("values and keys differ in length"));
    }
    Ok((x, max))
}

/// [`max_segments`], or with `precut` (coarse keys over several levels only) on `x`
/// already holding the cut keys.
#[allow(clippy::too_many_arguments)]
async fn max_levels(
    ctx: &mut Ctx,
    x: &Shares,
    lens: &[usize],
    width: Width,
    method: MaxMethod,
    want_onehot: bool,
    compare: Compare,
    precut: bool,
) -> Result<(Shares, Option<Shares>), Error> {
    let total = lens
        .iter()
        .try_fold(0usize, |s, &c| s.checked_add(c))
        .ok_or(Error::misuse("segment lengths overflow"))?;
    if total != x.len() || lens.contains(&0) {
        return Err(Error::misuse(
            "segment lengths must be positive and add up to the input length",
        ));
    }
    let mut ctx = ctx.fork();
    let me = x.party();
    let k = method.threshold(lens);
    let levels: Vec<usize> = lens.iter().map(|&n| tournament_levels(n, k)).collect();
    let l_max = levels.iter().copied().max().unwrap_or(0);

    // Coarse keys over several levels (and no argmax): the tournament levels select the
    // cut keys themselves in their narrow ring; the keys left for the last level are
    // lifted to Z_2^64 while that level compares them, and it selects over Z_2^64.
    let narrow = match compare {
        Compare::Coarse { shift } if !want_onehot && l_max >= 1 => Some(shift),
        _ => None,
    };
    if precut && narrow.is_none() {
        return Err(Error::bug(
            "precut keys need coarse keys over several levels",
        ));
    }
    let (mut cur, level_compare) = match narrow {
        Some(_) if precut => (x.clone(), Compare::Coarse { shift: 0 }),
        Some(shift) => (shift_components(x, shift), Compare::Coarse { shift: 0 }),
        None => (x.clone(), compare),
    };
    let mut lifted = false;
    let mut cur_lens = lens.to_vec();
    // Argmax bookkeeping: the element each column lives in, and its path bit.
    let mut col_elem: Vec<usize> = (0..total).collect();
    let mut p = BitShares::from_public(me, Width::BIT, &vec![1; total]);
    let mut p_one = vec![true; total];
    let mut onehot = None;
    // Columns of rows with tournament levels: their one-hot comes from path bits.
    let mut tracked = Vec::new();
    {
        let mut c = 0usize;
        for (&n, &lr) in lens.iter().zip(&levels) {
            if lr > 0 {
                tracked.extend(c..c + n);
            }
            c += n;
        }
    }

    for level in 0..=l_max {
        let last_level = level == l_max;
        let mut groups = Vec::new();
        let mut offset = 0usize;
        for (&c, &lr) in cur_lens.iter().zip(&levels) {
            if last_level {
                groups.push(offset..offset + c);
            } else if level + lr >= l_max {
                for t in 0..c / 2 {
                    groups.push(offset + 2 * t..offset + 2 * t + 2);
                }
                if c % 2 == 1 {
                    groups.push(offset + c - 1..offset + c);
                }
            } else {
                for e in offset..offset + c {
                    groups.push(e..e + 1);
                }
            }
            offset += c;
        }
        // Number of groups per row, for the next level.
        let mut next_lens = Vec::with_capacity(cur_lens.len());
        {
            let mut gi = 0usize;
            let mut offset = 0usize;
            for &c in &cur_lens {
                let start = gi;
                while groups.get(gi).is_some_and(|g| g.start < offset + c) {
                    gi += 1;
                }
                next_lens.push(gi - start);
                offset += c;
            }
        }
        let mut in_multi = vec![false; cur.len()];
        let mut group_of = vec![0usize; cur.len()];
        for (gi, g) in groups.iter().enumerate() {
            for e in g.clone() {
                if let (Some(m), Some(o)) = (in_multi.get_mut(e), group_of.get_mut(e)) {
                    *m = g.len() >= 2;
                    *o = gi;
                }
            }
        }
        if !in_multi.contains(&true) {
            if last_level && want_onehot {
                onehot = Some(assemble_onehot(me, &levels, lens, None, None, &col_elem)?);
            }
            continue;
        }

        let (wb, ring) = if narrow.is_some() && last_level {
            let (mut cw, mut cl) = (ctx.fork(), ctx.fork());
            let (wb, keys) = try_join(
                winners(&mut cw, &cur, &groups, width, level_compare),
                reshare_lift(&mut cl, cur.a().to_vec(), width),
            )
            .await?;
            cur = keys;
            lifted = true;
            (wb, Width::W64)
        } else {
            let wb = winners(&mut ctx, &cur, &groups, width, level_compare).await?;
            (wb, if narrow.is_some() { width } else { Width::W64 })
        };
        let (mut c_sel, mut c_path) = (ctx.fork(), ctx.fork());
        let sel = select_max(
            &mut c_sel,
            &cur,
            &groups,
            &wb,
            last_level && want_onehot,
            ring,
        );
        // Path bits run beside the B2A and fused sum; after the last level the tracked
        // columns' path bits are B2A'd in the round of the fused sum.
        let path = async {
            if !want_onehot {
                return Ok((None, None));
            }
            let np = update_paths(&mut c_path, &p, &mut p_one, &col_elem, &in_multi, &wb).await?;
            let t = if last_level && !tracked.is_empty() {
                Some(b2a(&mut c_path, &gather_bits(&np, &tracked)?).await?)
            } else {
                None
            };
            Ok((Some(np), t))
        };
        let ((next, w_full), (np, t)) = try_join(sel, path).await?;
        if let Some(np) = np {
            p = np;
        }
        if last_level && want_onehot {
            onehot = Some(assemble_onehot(
                me,
                &levels,
                lens,
                t.as_ref(),
                w_full.as_ref(),
                &col_elem,
            )?);
        }
        for e in col_elem.iter_mut() {
            *e = *group_of
                .get(*e)
                .ok_or(Error::bug("column lost its element"))?;
        }
        cur = next;
        cur_lens = next_lens;
    }
    if cur.len() != lens.len() {
        return Err(Error::bug("max did not reduce every row to one element"));
    }
    if let Some(shift) = narrow {
        if !lifted {
            let mut c = ctx.fork();
            cur = reshare_lift(&mut c, cur.a().to_vec(), width).await?;
        }
        // The winner's key ⌊x_j/2^shift⌋ − e_j, back at x's scale.
        cur = cur.scale(1u64 << shift);
    }
    Ok((cur, onehot))
}

/// The arithmetic one-hot of all columns (local): rows with tournament levels take their
/// B2A'd path bits `tracked` (in column order); other rows take the last level's
/// arithmetic winner bits `w_full`, indexed by element (`None` when no level compared
/// anything, i.e. every row has one column: the one-hot is 1).
fn assemble_onehot(
    me: crate::party::PartyId,
    levels: &[usize],
    lens: &[usize],
    tracked: Option<&Shares>,
    w_full: Option<&Shares>,
    col_elem: &[usize],
) -> Result<Shares, Error> {
    let empty = Shares::zeros(me, 0);
    let t = tracked.unwrap_or(&empty);
    let mut direct = Vec::new();
    let mut layout = Vec::with_capacity(col_elem.len());
    let (mut c, mut k) = (0usize, 0usize);
    for (&n, &lr) in lens.iter().zip(levels) {
        for _ in 0..n {
            if lr > 0 {
                layout.push((0, k));
                k += 1;
            } else {
                let e = *col_elem.get(c).ok_or(Error::bug("column out of range"))?;
                layout.push((1, direct.len()));
                direct.push(e);
            }
            c += 1;
        }
    }
    if k != t.len() {
        return Err(Error::bug("tracked columns and their bits differ"));
    }
    let d = match w_full {
        Some(w) => w.gather(&direct)?,
        None => Shares::from_public(me, &vec![1; direct.len()]),
    };
    let idx: Vec<usize> = layout
        .into_iter()
        .map(|(kind, i)| if kind == 0 { i } else { t.len() + i })
        .collect();
    Shares::concat(&[t, &d])?.gather(&idx)
}
