//! Scaled dot-product attention on shares: one implementation for multi-head and
//! grouped-query heads (multi-head is the case of as many KV heads as heads), causal over a
//! secret-shared KV cache for decoders, and over padded batches of sequences for encoders.
//!
//! The 1/√head_dim scaling is folded into the query weights by the owner, so scores are
//! plain products. All heads and rows of a layer share the rounds: the scores are one fused
//! product+truncation into the ring the softmax reads them in (2 rounds, 189 bits per
//! output element over the parties with the minimax exponential, 264 otherwise); the softmax
//! runs over all rows at once with a public mask (masked positions are never compared and
//! get weight exactly 0) and normalises after the product with V, which runs beside its
//! reciprocal (`proto::softmax_matmul_batch`), so that product costs no round of its own.

use puma_core::proto::ExpApprox;
use puma_core::{Ctx, Error, Shares, Summands, Width, proto};

use super::cost::{LayerCosts, LayerKind};

/// The public head layout of an attention layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Heads {
    /// Query heads.
    pub q: usize,
    /// Key/value heads; divides `q` (each serves `q / kv` query heads).
    pub kv: usize,
    /// Width of one head.
    pub dim: usize,
}

impl Heads {
    /// Query heads per KV head.
    pub fn group(&self) -> usize {
        self.q / self.kv.max(1)
    }

    /// Width of all query heads.
    pub fn q_width(&self) -> usize {
        self.q * self.dim
    }

    /// Width of all key (or value) heads.
    pub fn kv_width(&self) -> usize {
        self.kv * self.dim
    }
}

/// One layer's secret-shared keys and values of all positions so far, per KV head
/// (`T × dim` each).
#[derive(Debug, Default)]
struct LayerKv {
    keys: Vec<Shares>,
    values: Vec<Shares>,
}

/// The secret-shared KV cache of a decoder: every layer's keys and values so far.
#[derive(Debug, Default)]
pub struct KvCache {
    layers: Vec<LayerKv>,
    len: usize,
}

impl KvCache {
    /// Positions cached so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Records that `rows` more positions were appended to every layer.
    pub(crate) fn advance(&mut self, rows: usize) {
        self.len += rows;
    }

    /// Keeps the first `len` positions of every layer (drops rejected drafts).
    ///
    /// # Errors
    /// `Misuse` if `len` is beyond the cached positions.
    pub(crate) fn truncate(&mut self, len: usize) -> Result<(), Error> {
        if len > self.len {
            return Err(Error::misuse("a KV cache cannot grow by truncation"));
        }
        if len == self.len {
            return Ok(());
        }
        for layer in &mut self.layers {
            for part in layer.keys.iter_mut().chain(layer.values.iter_mut()) {
                let dim = part.len() / self.len.max(1);
                *part = part.slice(0..len * dim)?;
            }
        }
        self.len = len;
        Ok(())
    }
}

/// The core of attention: `batches` independent problems, each `rows` queries against
/// `keys` keys of width `dim` (`q`: `batches × rows × dim`, `kt`: `batches × dim × keys`,
/// `v`: `batches × keys × dim`); query row r (over all batches) sees the first `valid[r]`
/// keys. Returns `batches × rows × dim`.
#[allow(clippy::too_many_arguments)]
async fn attend(
    ctx: &mut Ctx,
    (q, kt, v): (&Shares, &Shares, &Shares),
    batches: usize,
    (rows, dim, keys): (usize, usize, usize),
    valid: &[usize],
    exp: ExpApprox,
    costs: &mut LayerCosts,
) -> Result<Shares, Error> {
    let m0 = ctx.meter();
    let products = proto::matmul_batch_summands(ctx, q, kt, batches, (rows, dim, keys)).await?;
    let out =
        softmax_of_products(ctx, &products, v, batches, (rows, keys, dim), valid, exp).await?;
    costs.add(LayerKind::Softmax, m0, ctx.meter());
    Ok(out)
}

/// softmax(S_b)·V_b for `batches` problems from the summands of the scores S = Q·Kᵀ at 2f
/// fractional bits, read in Z_2^(33+f) ([`qk_ring_bits`]: queries and keys need only be
/// known there); the softmax truncates the valid scores into the ring it reads them in
/// (`proto::softmax_input_bits`: Z_2^49 at f = 18 with the minimax exponential) and cuts
/// its maxima's keys from the products first (docs/PROTOCOLS.md, Matrix product; Softmax).
async fn softmax_of_products(
    ctx: &mut Ctx,
    products: &Summands,
    v: &Shares,
    batches: usize,
    dims: (usize, usize, usize),
    valid: &[usize],
    exp: ExpApprox,
) -> Result<Shares, Error> {
    let f = ctx.fixed().frac_bits();
    let input = Width::new(qk_ring_bits(f)).ok_or(Error::bug("scores input ring"))?;
    proto::softmax_matmul_batch_of_products(ctx, products, input, v, batches, dims, valid, exp)
        .await
}

/// The ring queries and keys are needed in, in bits: the scores' products at 2f
/// fractional bits are read mod 2^(33 + f) (`proto::softmax_product_bits`), which holds
/// every score within the softmax's range (|s| < 2^(SOFTMAX_RING_BITS − 2 − f) = 4096 at
/// f = 18) and the maxima's keys cut from them.
pub(crate) fn qk_ring_bits(f: u32) -> u32 {
    proto::softmax_product_bits(f)
}

/// Queries and keys (`qk`, the summands of a product at f + `qk_shift` fractional bits)
/// and values (`v`, at 2f) finished in the same two rounds: the values truncated by f
/// into Z_2^64, the queries and keys by `qk_shift` into the narrower ring the scores read
/// them in ([`qk_ring_bits`]). Returns (queries and keys, values), each in its summands'
/// order.
///
/// # Errors
/// `Protocol` on a malformed message.
pub(crate) async fn finish_qkv(
    ctx: &mut Ctx,
    qk: Summands,
    qk_shift: u32,
    v: Summands,
) -> Result<(Shares, Shares), Error> {
    let f = ctx.fixed().frac_bits();
    let qk_ring = Width::new(qk_ring_bits(f)).ok_or(Error::bug("query ring"))?;
    let (mut cv, mut cqk) = (ctx.fork(), ctx.fork());
    let (v, qk) = puma_core::try_join(
        proto::reshare_trunc_summands(&mut cv, v, Width::W64, f, Width::W64),
        proto::reshare_trunc_summands(&mut cqk, qk, Width::W64, qk_shift, qk_ring),
    )
    .await?;
    Ok((qk, v))
}

/// Where each of back-to-back runs of lengths `lens` starts.
pub(crate) fn starts(lens: &[usize]) -> Vec<usize> {
    lens.iter()
        .scan(0, |acc, &l| {
            let s = *acc;
            *acc += l;
            Some(s)
        })
        .collect()
}

/// Gather indices of `heads` heads of width `dim` starting at column `offset` of the rows
/// `rows` (indices of rows of width `width`), laid out `heads × rows.len() × dim`.
pub(crate) fn split_heads(
    rows: &[usize],
    width: usize,
    offset: usize,
    heads: usize,
    dim: usize,
) -> Vec<usize> {
    let mut idx = Vec::with_capacity(heads * rows.len() * dim);
    for h in 0..heads {
        for &i in rows {
            idx.extend((0..dim).map(|j| i * width + offset + h * dim + j));
        }
    }
    idx
}

/// Gather indices that turn `heads × rows × dim` back into `rows × (heads·dim)`.
fn merge_heads(rows: usize, heads: usize, dim: usize) -> Vec<usize> {
    (0..rows)
        .flat_map(|i| (0..heads).flat_map(move |h| (0..dim).map(move |j| (h * rows + i) * dim + j)))
        .collect()
}

/// The transpose of a row-major `rows × cols` matrix, as gather indices.
pub(crate) fn transpose(rows: usize, cols: usize) -> Vec<usize> {
    (0..cols)
        .flat_map(|j| (0..rows).map(move |i| i * cols + j))
        .collect()
}

/// Causal attention of `rows` new positions over the cached ones and themselves, for
/// `layer` of `cache`, with queries for the last `queries` of them only: `q` is
/// `heads.q × queries × dim`, `k_new` and `v_new` are `heads.kv × rows × dim` (positional
/// encoding already applied). Appends the new keys and values to the cache (the caller
/// advances its length once all layers ran). Query heads of one KV head are stacked as
/// `group·queries` rows of one product. Returns `queries × (heads.q·dim)`.
///
/// # Errors
/// `Misuse` for mismatched lengths or more queries than rows; `Protocol` on a malformed
/// message.
#[allow(clippy::too_many_arguments)]
pub async fn causal(
    ctx: &mut Ctx,
    heads: Heads,
    (q, k_new, v_new): (&Shares, &Shares, &Shares),
    (rows, queries): (usize, usize),
    cache: &mut KvCache,
    layer: usize,
    exp: ExpApprox,
    costs: &mut LayerCosts,
) -> Result<Shares, Error> {
    let (hd, kvh, g) = (heads.dim, heads.kv, heads.group());
    let past = cache.len;
    let total = past + rows;
    let skipped = rows
        .checked_sub(queries)
        .ok_or(Error::misuse("more queries than new positions"))?;
    while cache.layers.len() <= layer {
        cache.layers.push(LayerKv::default());
    }
    let lkv = cache
        .layers
        .get_mut(layer)
        .ok_or(Error::bug("KV cache has the wrong number of layers"))?;
    if lkv.keys.is_empty() {
        lkv.keys = (0..kvh).map(|_| Shares::zeros(ctx.me(), 0)).collect();
        lkv.values = (0..kvh).map(|_| Shares::zeros(ctx.me(), 0)).collect();
    }
    let kt_idx = transpose(total, hd);
    let mut kt_parts = Vec::with_capacity(kvh);
    for (kv, (kc, vc)) in lkv.keys.iter_mut().zip(lkv.values.iter_mut()).enumerate() {
        let span = kv * rows * hd..(kv + 1) * rows * hd;
        *kc = Shares::concat(&[kc, &k_new.slice(span.clone())?])?;
        *vc = Shares::concat(&[vc, &v_new.slice(span)?])?;
        kt_parts.push(kc.gather(&kt_idx)?);
    }
    let kt = Shares::concat(&kt_parts.iter().collect::<Vec<_>>())?;
    let vcat = Shares::concat(&lkv.values.iter().collect::<Vec<_>>())?;
    // Query i of every head (position past + skipped + i) sees keys 0..=past + skipped + i.
    let valid: Vec<usize> = (0..heads.q)
        .flat_map(|_| (0..queries).map(move |i| past + skipped + i + 1))
        .collect();
    let out = attend(
        ctx,
        (q, &kt, &vcat),
        kvh,
        (g * queries, hd, total),
        &valid,
        exp,
        costs,
    )
    .await?;
    out.gather(&merge_heads(queries, heads.q, hd))
}

/// Bidirectional attention over a batch of sequences of public lengths `lens`, from the
/// summands of its `[q | k | v]` projection: `Σ lens` rows (real tokens only, in batch
/// order) of `3·q_width` (queries, keys, values side by side; multi-head). The queries,
/// keys and values are gathered once into each group's per-head layout and finished there
/// (truncated as the decoders' are, counted as [`LayerKind::Linear`]). Sequences of equal length share one
/// batched product; all groups share the rounds. No padded position is ever computed.
/// Returns `Σ lens × q_width`, or with `first_only` (an encoder's last layer when only
/// its first tokens are read) the first token's row of each sequence, `lens.len() ×
/// q_width`: the other queries are never finished nor attended.
///
/// # Errors
/// `Misuse` for mismatched lengths; `Protocol` on a malformed message.
pub async fn bidirectional(
    ctx: &mut Ctx,
    heads: Heads,
    qkv: Summands,
    (lens, first_only): (&[usize], bool),
    exp: ExpApprox,
    costs: &mut LayerCosts,
) -> Result<Shares, Error> {
    let (h, hd) = (heads.q, heads.dim);
    let d = heads.q_width();
    let n: usize = lens.iter().sum();
    let rows_len = n.checked_mul(d).and_then(|nd| nd.checked_mul(3));
    if heads.kv != h || rows_len != Some(qkv.len()) || (first_only && lens.contains(&0)) {
        return Err(Error::misuse("attention input does not match the batch"));
    }
    // Queries per sequence of length l.
    let queries = |l: usize| if first_only { 1 } else { l };
    let starts = starts(lens);
    let mut groups: Vec<usize> = lens.iter().copied().filter(|&l| l > 0).collect();
    groups.sort_unstable();
    groups.dedup();
    // Per group: the sequences of that length and where their q (seq × h × l × hd), kᵀ
    // and v sit in the projection's rows; all groups' queries, then all their keys, make
    // one vector, their values another.
    let (mut qi, mut ki, mut vi) = (Vec::new(), Vec::new(), Vec::new());
    let mut shapes = Vec::with_capacity(groups.len());
    for &l in &groups {
        let seqs: Vec<usize> = (0..lens.len()).filter(|&b| lens[b] == l).collect();
        let at = |b: usize, t: usize, part: usize, hh: usize, j: usize| {
            (starts[b] + t) * 3 * d + part * d + hh * hd + j
        };
        for &b in &seqs {
            for hh in 0..h {
                for t in 0..queries(l) {
                    qi.extend((0..hd).map(|j| at(b, t, 0, hh, j)));
                }
                for t in 0..l {
                    vi.extend((0..hd).map(|j| at(b, t, 2, hh, j)));
                }
                for j in 0..hd {
                    ki.extend((0..l).map(|t| at(b, t, 1, hh, j)));
                }
            }
        }
        shapes.push((seqs, l));
    }
    let m0 = ctx.meter();
    let total_q = qi.len();
    qi.extend_from_slice(&ki);
    drop(ki);
    let (qks, vs) = (qkv.gather(&qi)?, qkv.gather(&vi)?);
    drop((qkv, qi, vi));
    let f = ctx.fixed().frac_bits();
    let (qk, v_all) = finish_qkv(ctx, qks, f, vs).await?;
    let (q_all, k_all) = qk.split_at(total_q)?;
    let mut inputs = Vec::with_capacity(shapes.len());
    let (mut at, mut q_at) = (0, 0);
    for (seqs, l) in shapes {
        let span = at..at + seqs.len() * h * l * hd;
        let q_span = q_at..q_at + seqs.len() * h * queries(l) * hd;
        (at, q_at) = (span.end, q_span.end);
        inputs.push((
            seqs,
            l,
            q_all.slice(q_span)?,
            k_all.slice(span.clone())?,
            v_all.slice(span)?,
        ));
    }
    drop((q_all, k_all, v_all));
    costs.add(LayerKind::Linear, m0, ctx.meter());
    let mut forks: Vec<Ctx> = inputs.iter().map(|_| ctx.fork()).collect();
    // The scores' products are local; the softmaxes of all groups share their rounds.
    let m0 = ctx.meter();
    let mut products = Vec::with_capacity(inputs.len());
    for (c, (seqs, l, q, kt, _)) in forks.iter_mut().zip(&inputs) {
        let shape = (queries(*l), hd, *l);
        products.push(proto::matmul_batch_summands(c, q, kt, seqs.len() * h, shape).await?);
    }
    let valid: Vec<Vec<usize>> = inputs
        .iter()
        .map(|(seqs, l, ..)| vec![*l; seqs.len() * h * queries(*l)])
        .collect();
    let outs = puma_core::try_join_all(
        forks
            .iter_mut()
            .zip(&inputs)
            .zip(products.iter().zip(&valid))
            .map(|((c, (seqs, l, _, _, v)), (s, val))| {
                let dims = (queries(*l), *l, hd);
                softmax_of_products(c, s, v, seqs.len() * h, dims, val, exp)
            })
            .collect(),
    )
    .await?;
    costs.add(LayerKind::Softmax, m0, ctx.meter());
    // Back to rows in batch order: sequence b is the k-th of its group, `h × rows × hd`
    // with rows its queries.
    let mut place = vec![(0usize, 0usize); lens.len()];
    let mut offset = 0;
    for ((seqs, l, ..), o) in inputs.iter().zip(&outs) {
        let rows = queries(*l);
        for (k, &b) in seqs.iter().enumerate() {
            if let Some(p) = place.get_mut(b) {
                *p = (offset + k * h * rows * hd, rows);
            }
        }
        offset += o.len();
    }
    let all = Shares::concat(&outs.iter().collect::<Vec<_>>())?;
    let mut idx = Vec::with_capacity(n * d);
    for &(base, l) in &place {
        for t in 0..l {
            for hh in 0..h {
                idx.extend((0..hd).map(|j| base + (hh * l + t) * hd + j));
            }
        }
    }
    all.gather(&idx)
}
