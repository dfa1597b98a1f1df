//! BERT / RoBERTa under three-party secure computation: the model owner shares the
//! weights, the client shares its token ids (one-hot, with the token types), the parties
//! run the encoder on shares, and only the client learns what it asked for (hidden states,
//! pooled output, classification logits and/or sentence embeddings).
//!
//! Public: the model's shape ([`BertConfig`], [`BertHeads`]) and the batch's shape
//! including its attention mask ([`BatchShape`]: the sequence lengths, as in PUMA where
//! the input length is public). Private: weights (owner), token ids and types (client),
//! every intermediate value.
//!
//! Every layer runs on [`puma_core::proto`]; all sequences, rows and heads of a layer share
//! the rounds: matrix products with one truncation, LayerNorm, GeLU ([`GeluApprox`]) and a
//! masked softmax (a padded key is never compared and gets weight exactly 0).

use puma_core::proto::{self, ExpApprox, GeluForm};
use puma_core::{Ctx, Error, FixedPoint, Meter, PartyId, Shares};

use super::config::BertConfig;
use super::plain::BertBatch;
use super::tanh::tanh;
use super::weights::{BertWeights, Linear};
use crate::checkpoint::LayerNormWeights;
use crate::config::Activation;
pub use crate::gpt2::secure::GeluApprox;

/// Settings of the secure evaluation.
#[derive(Clone, Copy, Debug)]
pub struct SecureSettings {
    /// The exponential inside softmax. Default: the second-order base with 8 squarings
    /// (max error 1e-5; all-MiniLM-L6-v2's exp inputs reach −55).
    pub softmax_exp: ExpApprox,
    /// The GeLU approximation. Default: [`GeluApprox::Precise`] (1.3e-4; MiniLM's GeLU
    /// inputs span −17..25).
    pub gelu: GeluApprox,
}

impl Default for SecureSettings {
    fn default() -> Self {
        SecureSettings {
            softmax_exp: ExpApprox::Minimax,
            gelu: GeluApprox::Precise,
        }
    }
}

/// The public shape of a model's heads: every party must pass the same value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BertHeads {
    /// Whether the model has a pooler (BERT's `pooler.dense`, RoBERTa's
    /// `classifier.dense`).
    pub pooler: bool,
    /// Number of classification labels (0: no classifier).
    pub labels: usize,
}

impl BertHeads {
    /// The heads of loaded weights.
    pub fn of(w: &BertWeights) -> BertHeads {
        BertHeads {
            pooler: w.pooler.is_some(),
            labels: w.num_labels(),
        }
    }
}

/// The public part of a batch: its shape and attention mask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchShape {
    /// Number of sequences.
    pub batch: usize,
    /// Padded length of every sequence.
    pub seq_len: usize,
    /// `batch × seq_len`, true for a real token.
    pub attention_mask: Vec<bool>,
}

impl BatchShape {
    /// The public shape of a client's batch.
    pub fn of(b: &BertBatch) -> BatchShape {
        BatchShape {
            batch: b.batch,
            seq_len: b.seq_len,
            attention_mask: b.attention_mask.clone(),
        }
    }

    /// Rows of the flattened batch.
    pub fn rows(&self) -> usize {
        self.batch * self.seq_len
    }

    fn mask_row(&self, b: usize) -> &[bool] {
        self.attention_mask
            .get(b * self.seq_len..(b + 1) * self.seq_len)
            .unwrap_or(&[])
    }

    /// The flattened indices (`b·seq_len + t`) of the real tokens, in batch order: the
    /// rows the secure encoder computes.
    pub fn real_rows(&self) -> Vec<usize> {
        (0..self.rows())
            .filter(|&i| self.attention_mask.get(i).copied().unwrap_or(false))
            .collect()
    }

    /// The number of real tokens of each sequence.
    pub fn lens(&self) -> Vec<usize> {
        (0..self.batch)
            .map(|b| self.mask_row(b).iter().filter(|&&m| m).count())
            .collect()
    }

    /// Where each sequence's real tokens start among [`BatchShape::real_rows`].
    pub fn starts(&self) -> Vec<usize> {
        self.lens()
            .iter()
            .scan(0, |acc, &n| {
                let s = *acc;
                *acc += n;
                Some(s)
            })
            .collect()
    }

    /// As a batch without ids (for the shape checks shared with the plaintext model).
    fn as_batch(&self) -> BertBatch {
        BertBatch {
            batch: self.batch,
            seq_len: self.seq_len,
            input_ids: Vec::new(),
            token_type_ids: Vec::new(),
            attention_mask: self.attention_mask.clone(),
        }
    }
}

/// What the client asks to learn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outputs {
    /// The encoder output of every position (`batch·seq_len × d`; padded positions are
    /// not computed and come back as zeros).
    pub hidden: bool,
    /// The pooled output (`batch × d`).
    pub pooled: bool,
    /// The classification logits (`batch × labels`).
    pub logits: bool,
    /// Mean-pooled, L2-normalised sentence embeddings (`batch × d`).
    pub embeddings: bool,
}

/// What the client learned (all `None` at the other parties), row-major.
#[derive(Clone, Debug, Default)]
pub struct Revealed {
    /// See [`Outputs::hidden`].
    pub hidden: Option<Vec<f64>>,
    /// See [`Outputs::pooled`].
    pub pooled: Option<Vec<f64>>,
    /// See [`Outputs::logits`].
    pub logits: Option<Vec<f64>>,
    /// See [`Outputs::embeddings`].
    pub embeddings: Option<Vec<f64>>,
    /// Communication per layer kind at this party: (kind, payload bytes sent, epochs).
    pub costs: Vec<(&'static str, u64, u32)>,
}

fn add_cost(costs: &mut Vec<(&'static str, u64, u32)>, kind: &'static str, a: Meter, b: Meter) {
    let bytes = b.payload_bytes_sent - a.payload_bytes_sent;
    let epochs = b.epoch - a.epoch;
    match costs.iter_mut().find(|(k, _, _)| *k == kind) {
        Some(e) => {
            e.1 += bytes;
            e.2 += epochs;
        }
        None => costs.push((kind, bytes, epochs)),
    }
}

struct SharedLinear {
    w: Shares,
    b: Shares,
}

struct SharedLayer {
    qkv: SharedLinear,
    attn_out: SharedLinear,
    attn_ln: (Shares, Shares),
    inter: SharedLinear,
    out: SharedLinear,
    out_ln: (Shares, Shares),
}

/// One party's shares of a BERT / RoBERTa model.
pub struct SharedBert {
    cfg: BertConfig,
    heads: BertHeads,
    /// `(vocab + types) × d`: word embeddings, then token-type embeddings, so that one
    /// one-hot product gives their sum.
    emb_table: Shares,
    position: Shares,
    emb_ln: (Shares, Shares),
    layers: Vec<SharedLayer>,
    pooler: Option<SharedLinear>,
    classifier: Option<SharedLinear>,
}

impl std::fmt::Debug for SharedBert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SharedBert {{ party: {}, layers: {} }}",
            self.emb_table.party(),
            self.layers.len()
        )
    }
}

/// Sizes of every tensor in sharing order.
fn tensor_sizes(cfg: &BertConfig, heads: BertHeads) -> Vec<usize> {
    let (d, inner) = (cfg.hidden_size, cfg.intermediate_size);
    let mut sizes = vec![
        (cfg.vocab_size + cfg.type_vocab_size) * d,
        cfg.max_position_embeddings * d,
        d,
        d,
    ];
    for _ in 0..cfg.num_hidden_layers {
        sizes.extend_from_slice(&[
            d * 3 * d,
            3 * d,
            d * d,
            d,
            d,
            d,
            d * inner,
            inner,
            inner * d,
            d,
            d,
            d,
        ]);
    }
    if heads.pooler {
        sizes.extend_from_slice(&[d * d, d]);
    }
    if heads.labels > 0 {
        sizes.extend_from_slice(&[d * heads.labels, heads.labels]);
    }
    sizes
}

fn encode(fx: FixedPoint, xs: impl IntoIterator<Item = f64>) -> Result<Vec<u64>, Error> {
    xs.into_iter().map(|x| fx.encode(x)).collect()
}

fn encode_ln(fx: FixedPoint, ln: &LayerNormWeights, out: &mut Vec<Vec<u64>>) -> Result<(), Error> {
    out.push(encode(fx, ln.gamma.iter().copied())?);
    out.push(encode(fx, ln.beta.iter().copied())?);
    Ok(())
}

fn encode_linear(fx: FixedPoint, l: &Linear, out: &mut Vec<Vec<u64>>) -> Result<(), Error> {
    out.push(encode(fx, l.w.iter().copied())?);
    out.push(encode(fx, l.b.iter().copied())?);
    Ok(())
}

/// The owner's tensors in sharing order. Q, K and V are fused into one `d × 3d` product,
/// the query part pre-scaled by 1/√head_dim (the attention scaling for free).
fn encode_weights(
    cfg: &BertConfig,
    w: &BertWeights,
    fx: FixedPoint,
) -> Result<Vec<Vec<u64>>, Error> {
    let d = cfg.hidden_size;
    let scale = 1.0 / (cfg.head_dim() as f64).sqrt();
    let mut out = Vec::new();
    out.push(encode(
        fx,
        w.word.iter().chain(w.token_type.iter()).copied(),
    )?);
    out.push(encode(fx, w.position.iter().copied())?);
    encode_ln(fx, &w.emb_ln, &mut out)?;
    for l in &w.layers {
        let mut qkv = Vec::with_capacity(d * 3 * d);
        for i in 0..d {
            let (q, k, v) = (l.query.w.row(i), l.key.w.row(i), l.value.w.row(i));
            qkv.extend(q.iter().map(|x| x * scale));
            qkv.extend(k.iter().copied());
            qkv.extend(v.iter().copied());
        }
        out.push(encode(fx, qkv)?);
        out.push(encode(
            fx,
            l.query
                .b
                .iter()
                .map(|x| x * scale)
                .chain(l.key.b.iter().copied())
                .chain(l.value.b.iter().copied()),
        )?);
        encode_linear(fx, &l.attn_out, &mut out)?;
        encode_ln(fx, &l.attn_ln, &mut out)?;
        encode_linear(fx, &l.inter, &mut out)?;
        encode_linear(fx, &l.out, &mut out)?;
        encode_ln(fx, &l.out_ln, &mut out)?;
    }
    if let Some(p) = &w.pooler {
        encode_linear(fx, p, &mut out)?;
    }
    if let Some(c) = &w.classifier {
        encode_linear(fx, c, &mut out)?;
    }
    Ok(out)
}

impl SharedBert {
    /// Shares the model: `owner` passes its weights (`Some` only there); every party passes
    /// the same public config and heads. All tensors travel as one masked record.
    ///
    /// Rounds: 1. Bytes: 8 per parameter from the owner.
    ///
    /// # Errors
    /// `Misuse` if the owner's weights do not match the config and heads or do not fit the
    /// fixed-point format; `Protocol` on a malformed message.
    pub async fn share(
        ctx: &mut Ctx,
        owner: PartyId,
        cfg: &BertConfig,
        heads: BertHeads,
        weights: Option<&BertWeights>,
    ) -> Result<SharedBert, Error> {
        cfg.validate()
            .map_err(|_| Error::misuse("invalid BERT configuration"))?;
        if heads.labels > 0 && !heads.pooler {
            return Err(Error::misuse("a classifier needs a pooler"));
        }
        let sizes = tensor_sizes(cfg, heads);
        let fx = ctx.fixed();
        let encoded = match (ctx.me() == owner, weights) {
            (true, Some(w)) => {
                if BertHeads::of(w) != heads || w.layers.len() != cfg.num_hidden_layers {
                    return Err(Error::misuse("weights do not match the config"));
                }
                let parts = encode_weights(cfg, w, fx)?;
                if parts.iter().map(Vec::len).ne(sizes.iter().copied()) {
                    return Err(Error::misuse("weights do not match the config"));
                }
                Some(parts)
            }
            (true, None) => return Err(Error::misuse("the model owner must pass the weights")),
            (false, _) => None,
        };
        let mut rest = proto::share_input_parts(ctx, owner, encoded, &sizes)
            .await?
            .into_iter();
        let mut take = || {
            rest.next()
                .ok_or(Error::bug("fewer shared tensors than sizes"))
        };
        let emb_table = take()?;
        let position = take()?;
        let emb_ln = (take()?, take()?);
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for _ in 0..cfg.num_hidden_layers {
            layers.push(SharedLayer {
                qkv: SharedLinear {
                    w: take()?,
                    b: take()?,
                },
                attn_out: SharedLinear {
                    w: take()?,
                    b: take()?,
                },
                attn_ln: (take()?, take()?),
                inter: SharedLinear {
                    w: take()?,
                    b: take()?,
                },
                out: SharedLinear {
                    w: take()?,
                    b: take()?,
                },
                out_ln: (take()?, take()?),
            });
        }
        let pooler = if heads.pooler {
            Some(SharedLinear {
                w: take()?,
                b: take()?,
            })
        } else {
            None
        };
        let classifier = if heads.labels > 0 {
            Some(SharedLinear {
                w: take()?,
                b: take()?,
            })
        } else {
            None
        };
        Ok(SharedBert {
            cfg: cfg.clone(),
            heads,
            emb_table,
            position,
            emb_ln,
            layers,
            pooler,
            classifier,
        })
    }

    /// The public configuration.
    pub fn config(&self) -> &BertConfig {
        &self.cfg
    }

    /// The public head shape.
    pub fn heads(&self) -> BertHeads {
        self.heads
    }
}

/// Adds a shared bias of length `n` to every row of a `rows × n` matrix.
fn add_bias(x: &Shares, bias: &Shares, rows: usize) -> Result<Shares, Error> {
    let n = bias.len();
    let idx: Vec<usize> = (0..rows * n).map(|i| i % n.max(1)).collect();
    x.add(&bias.gather(&idx)?)
}

/// `x · w + b` for a `rows × k` input, one truncation.
async fn linear(ctx: &mut Ctx, x: &Shares, l: &SharedLinear, rows: usize) -> Result<Shares, Error> {
    let n = l.b.len();
    let k = l.w.len() / n.max(1);
    let y = proto::matmul_fixed(ctx, x, &l.w, rows, k, n).await?;
    add_bias(&y, &l.b, rows)
}

/// The smallest LayerNorm epsilon the core's LayerNorm accepts without overflowing its
/// rsqrt table: 1/√ε (times √2 for the table's power-of-two grid) must stay below 2^11
/// at f + 14 table bits.
const EPS_FLOOR: f64 = 6e-7;

/// LayerNorm with the model's epsilon raised to [`EPS_FLOOR`] where it is below (BERT uses
/// 1e-12, which the fixed-point LayerNorm cannot represent; the relative change of
/// 1/√(σ² + ε) is below ε_floor/(2σ²), 5e-4 on the smallest variance of bert-tiny-random
/// and 1e-4 on all-MiniLM-L6-v2's).
async fn layernorm(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    d: usize,
    ln: &(Shares, Shares),
    eps: f64,
) -> Result<Shares, Error> {
    proto::layernorm_rows(ctx, x, rows, d, &ln.0, &ln.1, eps.max(EPS_FLOOR)).await
}

/// The encoder on the client's batch: returns this party's shares of the last hidden
/// state of the **real** tokens only, `n × d` with n = the number of mask-true positions,
/// in batch order (padded positions are never computed: no row-wise work is spent on them,
/// and as keys they are masked out anyway). Adds the per-kind costs to `costs`.
///
/// Attention runs per sequence and head on blocks of `seq_len`: the real tokens first, zero
/// rows after them, so that every query of sequence b sees the prefix of its `len_b` real
/// keys; only the real query rows go through the softmax.
///
/// # Errors
/// `Misuse` for a batch that does not fit the model or the public shape (no input value
/// is named); `Protocol` on a malformed message.
pub async fn encode_batch(
    ctx: &mut Ctx,
    model: &SharedBert,
    client: PartyId,
    input: Option<&BertBatch>,
    shape: &BatchShape,
    settings: &SecureSettings,
    costs: &mut Vec<(&'static str, u64, u32)>,
) -> Result<Shares, Error> {
    let cfg = &model.cfg;
    shape
        .as_batch()
        .check_shape(cfg)
        .map_err(|_| Error::misuse("batch shape does not fit the model"))?;
    let (d, h, hd) = (cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim());
    let (nb, l) = (shape.batch, shape.seq_len);
    let real = shape.real_rows();
    let lens = shape.lens();
    let starts = shape.starts();
    let n = real.len();
    let width = cfg.vocab_size + cfg.type_vocab_size;
    let f = ctx.fixed().frac_bits();
    let me = ctx.me();
    let m0 = ctx.meter();
    // The client's one-hot rows: the word id and (offset by vocab) the token type.
    let values = match (me == client, input) {
        (true, Some(b)) => {
            if b.check(cfg).is_err() || BatchShape::of(b) != *shape {
                return Err(Error::misuse(
                    "the client's batch does not fit the model or the public shape",
                ));
            }
            let mut hot = vec![0u64; n * width];
            for (r, &src) in real.iter().enumerate() {
                let (id, t) = (b.input_ids[src] as usize, b.token_type_ids[src] as usize);
                hot[r * width + id] = 1;
                hot[r * width + cfg.vocab_size + t] = 1;
            }
            Some(hot)
        }
        (true, None) => return Err(Error::misuse("the client must pass its batch")),
        (false, _) => None,
    };
    let onehot = proto::share_input(ctx, client, values.as_deref(), n * width).await?;
    drop(values);
    let m1 = ctx.meter();
    add_cost(costs, "input", m0, m1);
    // Integral one-hot: no truncation.
    let emb = proto::matmul(ctx, &onehot, &model.emb_table, n, width, d).await?;
    drop(onehot);
    let pos_ids = shape.as_batch().position_ids(cfg);
    let pos_idx: Vec<usize> = real
        .iter()
        .flat_map(|&r| {
            let p = pos_ids.get(r).copied().unwrap_or(0);
            (0..d).map(move |j| p * d + j)
        })
        .collect();
    let x = emb.add(&model.position.gather(&pos_idx)?)?;
    let m2 = ctx.meter();
    add_cost(costs, "embedding", m1, m2);
    let eps = cfg.layer_norm_eps;
    let mut x = layernorm(ctx, &x, n, d, &model.emb_ln, eps).await?;
    add_cost(costs, "layernorm", m2, ctx.meter());

    // Index plans (public, the same every layer). `zero` is a trailing zero slot.
    let zero = n * 3 * d;
    let head_idx = |part: usize, transpose: bool| -> Vec<usize> {
        let mut idx = Vec::with_capacity(nb * h * l * hd);
        let at = |b: usize, t: usize, hh: usize, j: usize| {
            if t < lens[b] {
                (starts[b] + t) * 3 * d + part * d + hh * hd + j
            } else {
                zero
            }
        };
        for b in 0..nb {
            for hh in 0..h {
                if transpose {
                    for j in 0..hd {
                        idx.extend((0..l).map(|t| at(b, t, hh, j)));
                    }
                } else {
                    for t in 0..l {
                        idx.extend((0..hd).map(|j| at(b, t, hh, j)));
                    }
                }
            }
        }
        idx
    };
    let (q_idx, kt_idx, v_idx) = (head_idx(0, false), head_idx(1, true), head_idx(2, false));
    // Real query rows (b, head, i < len_b) of the score blocks, and their valid keys.
    let mut sel = Vec::with_capacity(h * n * l);
    let mut valid = Vec::with_capacity(h * n);
    for (b, &len) in lens.iter().enumerate() {
        for hh in 0..h {
            for i in 0..len {
                let row = ((b * h + hh) * l + i) * l;
                sel.extend(row..row + l);
                valid.push(len);
            }
        }
    }
    // Back to full blocks: zero rows for the padded queries.
    let zero_p = h * n * l;
    let mut back = Vec::with_capacity(nb * h * l * l);
    for (&len, &start) in lens.iter().zip(&starts) {
        for hh in 0..h {
            for i in 0..l {
                if i < len {
                    let r = h * start + hh * len + i;
                    back.extend(r * l..(r + 1) * l);
                } else {
                    back.extend(std::iter::repeat_n(zero_p, l));
                }
            }
        }
    }
    let merge: Vec<usize> = (0..nb)
        .flat_map(|b| {
            (0..lens[b]).flat_map(move |t| {
                (0..h).flat_map(move |hh| (0..hd).map(move |j| ((b * h + hh) * l + t) * hd + j))
            })
        })
        .collect();
    let zero1 = Shares::zeros(me, 1);

    for layer in &model.layers {
        let a0 = ctx.meter();
        let qkv = linear(ctx, &x, &layer.qkv, n).await?;
        let a1 = ctx.meter();
        add_cost(costs, "linear", a0, a1);
        let qkv = Shares::concat(&[&qkv, &zero1])?;
        let (q, kt, v) = (
            qkv.gather(&q_idx)?,
            qkv.gather(&kt_idx)?,
            qkv.gather(&v_idx)?,
        );
        drop(qkv);
        let scores = proto::matmul_batch(ctx, &q, &kt, nb * h, (l, hd, l)).await?;
        let scores = proto::trunc(ctx, &scores.gather(&sel)?, f).await?;
        let a2 = ctx.meter();
        add_cost(costs, "attention matmul", a1, a2);
        let probs =
            proto::softmax_rows_with(ctx, &scores, h * n, l, &valid, settings.softmax_exp).await?;
        let probs = Shares::concat(&[&probs, &zero1])?.gather(&back)?;
        let a3 = ctx.meter();
        add_cost(costs, "softmax", a2, a3);
        let ctxv = proto::matmul_batch(ctx, &probs, &v, nb * h, (l, l, hd)).await?;
        let ctxv = proto::trunc(ctx, &ctxv.gather(&merge)?, f).await?;
        let a4 = ctx.meter();
        add_cost(costs, "attention matmul", a3, a4);
        let attn = linear(ctx, &ctxv, &layer.attn_out, n).await?;
        let a5 = ctx.meter();
        add_cost(costs, "linear", a4, a5);
        x = layernorm(ctx, &x.add(&attn)?, n, d, &layer.attn_ln, eps).await?;
        let a6 = ctx.meter();
        add_cost(costs, "layernorm", a5, a6);
        let hidden = linear(ctx, &x, &layer.inter, n).await?;
        let a7 = ctx.meter();
        add_cost(costs, "linear", a6, a7);
        let act = match settings.gelu {
            GeluApprox::Piecewise(fit) => proto::gelu_with(ctx, &hidden, &fit).await?,
            GeluApprox::Precise => {
                let form = match cfg.activation {
                    Activation::GeluErf => GeluForm::Erf,
                    Activation::GeluTanh => GeluForm::Tanh,
                };
                proto::gelu_precise(ctx, &hidden, form).await?
            }
        };
        let a8 = ctx.meter();
        add_cost(costs, "gelu", a7, a8);
        let o = linear(ctx, &act, &layer.out, n).await?;
        let a9 = ctx.meter();
        add_cost(costs, "linear", a8, a9);
        x = layernorm(ctx, &x.add(&o)?, n, d, &layer.out_ln, eps).await?;
        add_cost(costs, "layernorm", a9, ctx.meter());
    }
    Ok(x)
}

/// Extra fractional bits of 1/‖mean‖ in [`sentence_embeddings`].
const NORM_EXTRA: u32 = 8;

/// sentence-transformers' embedding on shares: the mean of `hidden` (the real tokens'
/// rows, as [`encode_batch`] returns them) over each sequence (a local sum and one public
/// scaling with its truncation), then division by the L2 norm: one sum of squares,
/// [`proto::rsqrt`] for squared norms in [2^−8, 2^16] (the rows of a LayerNorm output have
/// norms far inside), one product. Returns `batch × d` at f fractional bits.
///
/// # Errors
/// `Misuse` for shapes that do not match; `Protocol` on a malformed message.
pub async fn sentence_embeddings(
    ctx: &mut Ctx,
    hidden: &Shares,
    shape: &BatchShape,
    d: usize,
) -> Result<Shares, Error> {
    let (lens, starts) = (shape.lens(), shape.starts());
    if d == 0 || hidden.len() != lens.iter().sum::<usize>() * d {
        return Err(Error::misuse("hidden states do not match the batch shape"));
    }
    let fx = ctx.fixed();
    let f = fx.frac_bits();
    let mut sums = Vec::with_capacity(shape.batch);
    let mut inv = Vec::with_capacity(shape.batch * d);
    for (&len, &start) in lens.iter().zip(&starts) {
        // Column-major over the sequence's rows, so that each column's values are adjacent.
        let idx: Vec<usize> = (0..d)
            .flat_map(|j| (start..start + len).map(move |t| t * d + j))
            .collect();
        sums.push(hidden.gather(&idx)?.sum_chunks(len.max(1))?);
        let c = fx.encode(1.0 / len.max(1) as f64)?;
        inv.extend(std::iter::repeat_n(c, d));
    }
    let sums = Shares::concat(&sums.iter().collect::<Vec<_>>())?;
    let mean = proto::trunc(ctx, &sums.mul_public(&inv)?, f).await?;
    let sq = proto::square(ctx, &mean).await?;
    let sq = proto::trunc(ctx, &sq, f).await?;
    let norm2 = sq.sum_chunks(d)?;
    let lo = f.checked_sub(8).ok_or(Error::misuse(
        "sentence embeddings need at least 8 fractional bits",
    ))?;
    let r = proto::rsqrt(ctx, &norm2, lo, f + 16, NORM_EXTRA).await?;
    let bcast: Vec<usize> = (0..shape.batch * d).map(|i| i / d).collect();
    let e = proto::mul(ctx, &mean, &r.gather(&bcast)?).await?;
    proto::trunc(ctx, &e, f + NORM_EXTRA).await
}

/// The pooled output `tanh(pooler(h[first token]))` (`batch × d`) and, with a classifier,
/// the logits (`batch × labels`), from the real tokens' rows of [`encode_batch`]. The
/// first token is each sequence's first real one (position 0 for right padding, as in
/// `transformers`).
///
/// # Errors
/// `Misuse` if the model has no pooler; `Protocol` on a malformed message.
pub async fn pool_and_classify(
    ctx: &mut Ctx,
    model: &SharedBert,
    hidden: &Shares,
    shape: &BatchShape,
) -> Result<(Shares, Option<Shares>), Error> {
    let d = model.cfg.hidden_size;
    let pooler = model
        .pooler
        .as_ref()
        .ok_or(Error::misuse("the model has no pooler"))?;
    let first: Vec<usize> = shape
        .starts()
        .into_iter()
        .flat_map(|s| (0..d).map(move |j| s * d + j))
        .collect();
    let x = hidden.gather(&first)?;
    let p = linear(ctx, &x, pooler, shape.batch).await?;
    let pooled = tanh(ctx, &p).await?;
    let logits = match &model.classifier {
        Some(c) => Some(linear(ctx, &pooled, c, shape.batch).await?),
        None => None,
    };
    Ok((pooled, logits))
}

/// The whole secure evaluation: encoder, then what `outputs` asks for, revealed to the
/// client only in one round. Every party passes the same `shape`, `outputs` and
/// `settings`; the client passes its batch.
///
/// # Errors
/// `Misuse` for inputs that do not fit, or for pooled output / logits from a model without
/// pooler / classifier; `Protocol` on a malformed message.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    ctx: &mut Ctx,
    model: &SharedBert,
    client: PartyId,
    input: Option<&BertBatch>,
    shape: &BatchShape,
    outputs: Outputs,
    settings: &SecureSettings,
) -> Result<Revealed, Error> {
    if outputs.logits && model.heads.labels == 0 {
        return Err(Error::misuse("the model has no classification head"));
    }
    let mut costs = Vec::new();
    let hidden = encode_batch(ctx, model, client, input, shape, settings, &mut costs).await?;
    let d = model.cfg.hidden_size;
    let mut parts: Vec<Shares> = Vec::new();
    let mut lens = Vec::new();
    if outputs.hidden {
        lens.push(hidden.len());
        parts.push(hidden.clone());
    }
    let m0 = ctx.meter();
    if outputs.pooled || outputs.logits {
        let (pooled, logits) = pool_and_classify(ctx, model, &hidden, shape).await?;
        if outputs.pooled {
            lens.push(pooled.len());
            parts.push(pooled);
        }
        if outputs.logits {
            let logits = logits.ok_or(Error::bug("classifier missing"))?;
            lens.push(logits.len());
            parts.push(logits);
        }
    }
    let m1 = ctx.meter();
    add_cost(&mut costs, "pooler and classifier", m0, m1);
    if outputs.embeddings {
        let e = sentence_embeddings(ctx, &hidden, shape, d).await?;
        lens.push(e.len());
        parts.push(e);
    }
    let m2 = ctx.meter();
    add_cost(&mut costs, "mean pooling", m1, m2);
    let all = Shares::concat(&parts.iter().collect::<Vec<_>>())?;
    let opened = proto::reveal_to(ctx, &all, client).await?;
    add_cost(&mut costs, "output", m2, ctx.meter());
    let mut out = Revealed {
        costs,
        ..Revealed::default()
    };
    if let Some(raw) = opened {
        let vals = ctx.fixed().decode_slice(&raw);
        let mut it = lens.into_iter();
        let mut off = 0;
        let mut next = |want: bool| -> Option<Vec<f64>> {
            if !want {
                return None;
            }
            let n = it.next().unwrap_or(0);
            let v = vals.get(off..off + n).map(<[f64]>::to_vec);
            off += n;
            v
        };
        out.hidden = next(outputs.hidden).map(|real| {
            // Back to batch × seq_len rows, zeros at the padded positions.
            let mut full = vec![0.0; shape.rows() * d];
            for (k, &r) in shape.real_rows().iter().enumerate() {
                if let (Some(dst), Some(src)) = (
                    full.get_mut(r * d..(r + 1) * d),
                    real.get(k * d..(k + 1) * d),
                ) {
                    dst.copy_from_slice(src);
                }
            }
            full
        });
        out.pooled = next(outputs.pooled);
        out.logits = next(outputs.logits);
        out.embeddings = next(outputs.embeddings);
    }
    Ok(out)
}
