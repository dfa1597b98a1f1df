//! LLaMA-style decoders under three-party secure computation: the model owner shares the
//! weights, the client shares its prompt (one-hot rows), the parties evaluate on shares and
//! only the client learns the output (logits, or only the ids).
//!
//! Every layer runs on [`puma_core::proto`]: matrix products with one truncation, RMSNorm
//! ([`rms_norm_rows`]), rotary embeddings as a public-coefficient linear map on the shares
//! (local, then one truncation), PUMA's SiLU for the SwiGLU MLP, causal softmax over
//! grouped-query attention, and a secret-shared KV cache so that each generated token costs
//! one row of work. All rows and heads of a layer share their rounds.

use puma_core::proto::ExpApprox;
use puma_core::{Ctx, Error, FixedPoint, Meter, PartyId, Shares, Width, proto};

use super::config::LlamaConfig;
use super::rope;
use super::weights::LlamaWeights;
use crate::gpt2::secure::{LayerCosts, Observer, OutputMode, Progress, argmax_lowest};

/// Which SiLU the SwiGLU MLP evaluates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SiluApprox {
    /// [`proto::silu`]: PUMA-shaped piecewise polynomial (8 rounds), max error 0.0148 and
    /// 0.014 already at x = 0 — too coarse for small activations (the tiny random model's
    /// logits move by 2e-2).
    Piecewise,
    /// [`silu_precise`]: x·σ(x) with σ(x) the first entry of softmax([x, 0]) (exponential,
    /// reciprocal, about 4 times the rounds), error about 1e-4·max(1, |x|).
    Precise,
}

/// Settings of the secure evaluation.
#[derive(Clone, Copy, Debug)]
pub struct LlamaSettings {
    /// The SiLU approximation of the MLP.
    pub silu: SiluApprox,
    /// The exponential inside softmax.
    pub softmax_exp: ExpApprox,
    /// Ring width of the comparisons of the secure argmax over the logits.
    pub logit_compare_width: Width,
    /// A public bound on |x| for every RMSNorm input (the residual stream); it sets how far
    /// [`rms_norm_rows`] scales its input down before squaring. Trained LLaMA models carry
    /// "massive activations" (SmolLM2-135M: 2.5e4), so the default is 2^15.
    pub residual_bound: f64,
}

impl Default for LlamaSettings {
    fn default() -> Self {
        LlamaSettings {
            silu: SiluApprox::Precise,
            softmax_exp: ExpApprox::Minimax,
            logit_compare_width: Width::W64,
            residual_bound: 32768.0,
        }
    }
}

/// Extra fractional bits of r = 1/√(mean(x²) + ε) (f + 8 in total).
const R_EXTRA_BITS: u32 = 8;

/// Extra fractional bits of xγ (f + 4 in total), so that the final product sits at
/// 2f + 12 bits as in LayerNorm.
const XG_EXTRA_BITS: u32 = 4;

/// Most fractional bits of a square beyond f in [`rms_norm_rows`].
const MAX_SQUARE_EXTRA_BITS: u32 = 8;

/// The raw fixed-point encoding of `x` at `bits` fractional bits (round to nearest).
fn encode_bits(x: f64, bits: u32) -> Result<u64, Error> {
    let v = (x * (1u64 << bits) as f64).round();
    if !v.is_finite() || v.abs() >= 9.2e18 {
        return Err(Error::misuse("constant does not fit the ring"));
    }
    Ok(v as i64 as u64)
}

/// How [`rms_norm_rows`] scales its input for a residual bound `bound` at width `d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmsScaling {
    /// x is scaled by 2^−k before it multiplies x: x·trunc(x, k) stays below 2^61 raw.
    pub k: u32,
    /// Fractional bits g ∈ [f, f + 8] of each square x² (held at raw x²·2^g), chosen so
    /// that a row's sum d·bound²·2^g stays below 2^61.
    pub g: u32,
}

impl RmsScaling {
    /// The scaling for rows of width `d` whose entries stay below `bound` in magnitude, at
    /// `f` fractional bits.
    ///
    /// # Errors
    /// `Misuse` if no scaling fits (bound·√d too large to keep f bits of the squares).
    pub fn new(d: usize, bound: f64, f: u32) -> Result<RmsScaling, Error> {
        if !(bound.is_finite() && bound >= 1.0) || d == 0 {
            return Err(Error::misuse(
                "rmsnorm needs a residual bound >= 1 and d > 0",
            ));
        }
        let lb = bound.log2();
        let k = (2.0 * lb + 2.0 * f as f64 - 61.0).ceil().max(0.0) as u32;
        let g = (61.0 - (d as f64).log2() - 2.0 * lb).floor();
        if g < f as f64 {
            return Err(Error::misuse(
                "rmsnorm: residual bound too large for this width at f fractional bits",
            ));
        }
        // At most the 2f − k bits the product carries, and f + 8 (LayerNorm's square
        // precision; more would only inflate rsqrt's scale c = d·2^(g−f)).
        let g = (g as u32).min(2 * f - k).min(f + MAX_SQUARE_EXTRA_BITS);
        Ok(RmsScaling { k, g })
    }
}

/// RMSNorm of each of `rows` rows of length `d`: y = γ ⊙ x / √(mean(x²) + ε).
///
/// **Range.** At f fractional bits a product x·x carries 2f bits: a residual entry of
/// 2.5e4 (SmolLM2's massive activations) gives 2.5e4²·2^36 ≈ 2^65 and wraps Z_2^64. The
/// norm is scale invariant, RMSNorm(x) = RMSNorm(x/s) with ε replaced by ε/s², so the
/// squares are taken of a scaled-down copy: with the public bound B on |x|,
/// [`RmsScaling`] picks k (x·trunc(x, k) ≤ B²·2^(2f−k) < 2^61) and g, the fractional bits
/// of each square after one truncation by 2f − k − g, such that a whole row's sum
/// d·B²·2^g < 2^61 fits the rsqrt's range. The sum is that of x² (no rescaling error),
/// only the second factor of each square is rounded at 2^−(f−k); the rounding is
/// stochastic, so it averages over the row. The mean and ε enter rsqrt through its public
/// scale c = d·2^(g−f): √(c/X) with X = (Σx² + dε)·2^(g−f) is 1/√(mean(x²) + ε), at
/// f + 8 fractional bits.
///
/// **Range** (contract): |x| ≤ bound for every entry; |γ|·√d < 2^14 (the final product
/// xγ·r sits at 2f + 12 bits below 2^62).
///
/// Schedule (all rows share every round): branch A: trunc(x, k) (1), x·trunc(x, k) (1),
/// truncation to g bits (1), row sums plus dε (local), rsqrt (R_LT + 7); branch B:
/// xγ (1), trunc to f + 4 bits (1); then y = trunc(xγ·r, f + 12) (2).
///
/// # Errors
/// `Misuse` for mismatched lengths or a bound/width with no scaling; `Protocol` on a
/// malformed message.
pub async fn rms_norm_rows(
    ctx: &mut Ctx,
    x: &Shares,
    rows: usize,
    d: usize,
    gamma: &Shares,
    eps: f64,
    bound: f64,
) -> Result<Shares, Error> {
    let total = rows
        .checked_mul(d)
        .ok_or(Error::misuse("rows·d overflows"))?;
    if d == 0 || x.len() != total || gamma.len() != d {
        return Err(Error::misuse("rmsnorm shapes do not match"));
    }
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    let RmsScaling { k, g } = RmsScaling::new(d, bound, f)?;
    let eps_total = encode_bits(eps * d as f64, g)?;
    if eps <= 0.0 || eps_total == 0 {
        return Err(Error::misuse("rmsnorm needs eps > 0 with d·eps·2^g >= 1"));
    }
    let lo = 63 - eps_total.leading_zeros();
    let hi = 60;
    let c = (d as u64) << (g - f);
    let row_of: Vec<usize> = (0..total).map(|i| i / d).collect();
    let col_of: Vec<usize> = (0..total).map(|i| i % d).collect();

    let (mut ca, mut cb) = (ctx.fork(), ctx.fork());
    let branch_a = async {
        let c_ = &mut ca;
        let xs = if k > 0 {
            proto::trunc(c_, x, k).await?
        } else {
            x.clone()
        };
        let sq = proto::mul(c_, x, &xs).await?;
        let t = (2 * f - k) - g;
        let sq = if t > 0 {
            proto::trunc(c_, &sq, t).await?
        } else {
            sq
        };
        let s = sq.sum_chunks(d)?.add_public_scalar(eps_total);
        proto::rsqrt_scaled(c_, &s, lo, hi, R_EXTRA_BITS, c).await
    };
    let branch_b = async {
        let c_ = &mut cb;
        let p = proto::mul(c_, x, &gamma.gather(&col_of)?).await?;
        proto::trunc(c_, &p, f - XG_EXTRA_BITS).await
    };
    let (r, xg) = puma_core::try_join(branch_a, branch_b).await?;
    let y = proto::mul(&mut ctx, &xg, &r.gather(&row_of)?).await?;
    proto::trunc(&mut ctx, &y, f + XG_EXTRA_BITS + R_EXTRA_BITS).await
}

/// SiLU(x) = x·σ(x) with the logistic σ(x) = e^x/(e^x + e^0): the first entry of a
/// softmax over the pair [x, 0], so that the exponential, its range reduction (the pair's
/// maximum) and the reciprocal of the sum in [1, 2] are those of the softmax protocol
/// ([`proto::softmax_rows_with`], all elements batched as rows of two), then one product
/// with x and a truncation. Built here from public core protocols because
/// [`proto::silu`]'s polynomial is off by 0.014 even at x = 0.
///
/// # Errors
/// As [`proto::softmax_rows_with`]; `Protocol` on a malformed message.
pub async fn silu_precise(ctx: &mut Ctx, x: &Shares, exp: ExpApprox) -> Result<Shares, Error> {
    let n = x.len();
    let mut ctx = ctx.fork();
    let f = ctx.fixed().frac_bits();
    let zero = Shares::zeros(x.party(), n);
    // Rows [x_i, 0]: interleave x with zeros.
    let both = Shares::concat(&[x, &zero])?;
    let idx: Vec<usize> = (0..n).flat_map(|i| [i, n + i]).collect();
    let pairs = both.gather(&idx)?;
    let valid = vec![2usize; n];
    let probs = proto::softmax_rows_with(&mut ctx, &pairs, n, 2, &valid, exp).await?;
    let first: Vec<usize> = (0..n).map(|i| 2 * i).collect();
    let sigma = probs.gather(&first)?;
    let y = proto::mul(&mut ctx, x, &sigma).await?;
    proto::trunc(&mut ctx, &y, f).await
}

/// One layer's shared weights.
struct SharedLayer {
    attn_norm: Shares,
    /// `d × (q + 2kv)`: q (pre-scaled by 1/√hd), k, v columns.
    w_qkv: Shares,
    wo: Shares,
    mlp_norm: Shares,
    /// `d × 2I`: gate, up columns.
    w_gu: Shares,
    w_down: Shares,
}

/// One party's shares of a LLaMA-style model.
pub struct SharedLlama {
    cfg: LlamaConfig,
    /// `d × V`: the token embedding, transposed (the LM head too when tied).
    embed_t: Shares,
    /// `d × V`: an untied LM head, transposed.
    head_t: Option<Shares>,
    layers: Vec<SharedLayer>,
    norm: Shares,
}

impl std::fmt::Debug for SharedLlama {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SharedLlama {{ party: {}, layers: {} }}",
            self.embed_t.party(),
            self.layers.len()
        )
    }
}

fn tensor_sizes(cfg: &LlamaConfig) -> Vec<usize> {
    let (d, v, i) = (cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size);
    let (q, kv) = (cfg.q_dim(), cfg.kv_dim());
    let mut sizes = vec![d * v];
    for _ in 0..cfg.num_hidden_layers {
        sizes.extend_from_slice(&[d, d * (q + 2 * kv), q * d, d, d * 2 * i, i * d]);
    }
    sizes.push(d);
    if !cfg.tie_word_embeddings {
        sizes.push(d * v);
    }
    sizes
}

fn encode_iter<'a>(
    fx: FixedPoint,
    n: usize,
    xs: impl Iterator<Item = &'a f64>,
) -> Result<Vec<u64>, Error> {
    let mut out = Vec::with_capacity(n);
    for &x in xs {
        out.push(fx.encode(x)?);
    }
    Ok(out)
}

/// The matrices `parts` (same number of rows, each with its scale factor) side by side,
/// row-major, encoded: the fused `[d, q + 2kv]` and `[d, 2I]` weights.
fn encode_hcat(fx: FixedPoint, parts: &[(&ndarray::Array2<f64>, f64)]) -> Result<Vec<u64>, Error> {
    let rows = parts.first().map_or(0, |(m, _)| m.nrows());
    let n: usize = parts.iter().map(|(m, _)| m.len()).sum();
    let mut out = Vec::with_capacity(n);
    for r in 0..rows {
        for (m, s) in parts {
            for &x in m.row(r) {
                out.push(fx.encode(x * s)?);
            }
        }
    }
    Ok(out)
}

fn encode_weights(
    cfg: &LlamaConfig,
    w: &LlamaWeights,
    fx: FixedPoint,
) -> Result<Vec<Vec<u64>>, Error> {
    let scale = 1.0 / (cfg.head_dim as f64).sqrt();
    let mut out = Vec::new();
    out.push(encode_iter(fx, w.embed.len(), w.embed.t().iter())?);
    for l in &w.layers {
        out.push(encode_iter(fx, l.attn_norm.len(), l.attn_norm.iter())?);
        out.push(encode_hcat(
            fx,
            &[(&l.wq, scale), (&l.wk, 1.0), (&l.wv, 1.0)],
        )?);
        out.push(encode_iter(fx, l.wo.len(), l.wo.iter())?);
        out.push(encode_iter(fx, l.mlp_norm.len(), l.mlp_norm.iter())?);
        out.push(encode_hcat(fx, &[(&l.w_gate, 1.0), (&l.w_up, 1.0)])?);
        out.push(encode_iter(fx, l.w_down.len(), l.w_down.iter())?);
    }
    out.push(encode_iter(fx, w.norm.len(), w.norm.iter())?);
    if !cfg.tie_word_embeddings {
        let head = w.lm_head();
        out.push(encode_iter(fx, head.len(), head.t().iter())?);
    }
    Ok(out)
}

impl SharedLlama {
    /// Shares the model: `owner` passes its weights (`Some` only there); every party passes
    /// the same public config. All tensors travel as one masked vector from the owner.
    ///
    /// Rounds: 1. Bytes: 8 per parameter from the owner (a tied head once).
    ///
    /// # Errors
    /// `Misuse` if the owner's weights do not match the config or do not fit the
    /// fixed-point format; `Protocol` on a malformed message.
    pub async fn share(
        ctx: &mut Ctx,
        owner: PartyId,
        cfg: &LlamaConfig,
        weights: Option<&LlamaWeights>,
    ) -> Result<SharedLlama, Error> {
        cfg.validate()
            .map_err(|_| Error::misuse("invalid LLaMA configuration"))?;
        let sizes = tensor_sizes(cfg);
        let fx = ctx.fixed();
        let encoded = match (ctx.me() == owner, weights) {
            (true, Some(w)) => {
                w.check_shapes(cfg)
                    .map_err(|_| Error::misuse("weights do not match the config"))?;
                if cfg.tie_word_embeddings && w.lm_head.is_some() {
                    return Err(Error::misuse(
                        "the config ties the LM head, the weights do not",
                    ));
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
        let embed_t = take()?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for _ in 0..cfg.num_hidden_layers {
            layers.push(SharedLayer {
                attn_norm: take()?,
                w_qkv: take()?,
                wo: take()?,
                mlp_norm: take()?,
                w_gu: take()?,
                w_down: take()?,
            });
        }
        let norm = take()?;
        let head_t = if cfg.tie_word_embeddings {
            None
        } else {
            Some(take()?)
        };
        Ok(SharedLlama {
            cfg: cfg.clone(),
            embed_t,
            head_t,
            layers,
            norm,
        })
    }

    /// The public configuration.
    pub fn config(&self) -> &LlamaConfig {
        &self.cfg
    }

    fn head_t(&self) -> &Shares {
        self.head_t.as_ref().unwrap_or(&self.embed_t)
    }
}

/// Per-layer secret-shared keys (RoPE applied) and values of all positions so far, per KV
/// head (`T × hd`).
#[derive(Debug, Default)]
pub struct SharedLlamaCache {
    keys: Vec<Vec<Shares>>,
    values: Vec<Vec<Shares>>,
    len: usize,
}

impl SharedLlamaCache {
    /// Positions cached so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

fn add_cost(costs: &mut LayerCosts, kind: &'static str, before: Meter, after: Meter) {
    let bytes = after.payload_bytes_sent - before.payload_bytes_sent;
    let epochs = after.epoch - before.epoch;
    match costs.entries.iter_mut().find(|(k, _, _)| *k == kind) {
        Some(e) => {
            e.1 += bytes;
            e.2 += epochs;
        }
        None => costs.entries.push((kind, bytes, epochs)),
    }
}

/// The embeddings (`rows × d`) of the shared one-hot rows `onehot` (`rows × V`): the
/// product with the transposed embedding, `(E^T · onehot^T)^T`, with local transposes.
async fn embed(
    ctx: &mut Ctx,
    model: &SharedLlama,
    onehot: &Shares,
    rows: usize,
) -> Result<Shares, Error> {
    let (d, v) = (model.cfg.hidden_size, model.cfg.vocab_size);
    let hot_t = if rows == 1 {
        onehot.clone()
    } else {
        let idx: Vec<usize> = (0..v)
            .flat_map(|j| (0..rows).map(move |i| i * v + j))
            .collect();
        onehot.gather(&idx)?
    };
    // No truncation: the one-hot is integral.
    let e_t = proto::matmul(ctx, &model.embed_t, &hot_t, d, v, rows).await?;
    if rows == 1 {
        return Ok(e_t);
    }
    let idx: Vec<usize> = (0..rows)
        .flat_map(|i| (0..d).map(move |j| j * rows + i))
        .collect();
    e_t.gather(&idx)
}

/// Rotary embedding of `x` laid out as `heads × rows × hd` (row i at position
/// `start + i`): out = x·C + swap(x)·S' with public C, S' at f bits (local), then one
/// truncation by f (done by the caller, batched).
fn rope_local(
    x: &Shares,
    heads: usize,
    rows: usize,
    hd: usize,
    start: usize,
    theta: f64,
    f: u32,
) -> Result<Shares, Error> {
    let half = hd / 2;
    let n = heads * rows * hd;
    let mut cs = Vec::with_capacity(n);
    let mut ss = Vec::with_capacity(n);
    let mut swap = Vec::with_capacity(n);
    let angles: Vec<(Vec<f64>, Vec<f64>)> = (0..rows)
        .map(|i| rope::cos_sin(start + i, hd, theta))
        .collect();
    for h in 0..heads {
        for (i, (cos, sin)) in angles.iter().enumerate() {
            let base = (h * rows + i) * hd;
            for c in 0..hd {
                let p = c % half;
                let (cv, sv) = (
                    cos.get(p).copied().unwrap_or(1.0),
                    sin.get(p).copied().unwrap_or(0.0),
                );
                cs.push(encode_bits(cv, f)?);
                // x'[c] = x[c]·cos − x[c+half]·sin (c < half); x[c]·cos + x[c−half]·sin.
                if c < half {
                    ss.push(encode_bits(-sv, f)?);
                    swap.push(base + c + half);
                } else {
                    ss.push(encode_bits(sv, f)?);
                    swap.push(base + c - half);
                }
            }
        }
    }
    x.mul_public(&cs)?.add(&x.gather(&swap)?.mul_public(&ss)?)
}

#[allow(clippy::too_many_arguments)]
/// Evaluates the layers on `x` (`rows × d`, positions `cache.len()..`), extending the
/// cache; returns the residual stream before the final norm.
async fn layers_forward(
    ctx: &mut Ctx,
    model: &SharedLlama,
    mut x: Shares,
    rows: usize,
    cache: &mut SharedLlamaCache,
    settings: &LlamaSettings,
    costs: &mut LayerCosts,
    step: usize,
    observer: Option<&Observer>,
) -> Result<Shares, Error> {
    let cfg = &model.cfg;
    let (d, h, kvh, hd, inter) = (
        cfg.hidden_size,
        cfg.num_attention_heads,
        cfg.num_key_value_heads,
        cfg.head_dim,
        cfg.intermediate_size,
    );
    let g = cfg.group_size();
    let (qd, kvd) = (cfg.q_dim(), cfg.kv_dim());
    let width = qd + 2 * kvd;
    let past = cache.len;
    let total = past + rows;
    let f = ctx.fixed().frac_bits();
    if cache.keys.is_empty() {
        cache.keys = (0..cfg.num_hidden_layers).map(|_| Vec::new()).collect();
        cache.values = (0..cfg.num_hidden_layers).map(|_| Vec::new()).collect();
    }
    // Gathers from the qkv rows: q as H × rows × hd, k and v as KV × rows × hd.
    let heads_idx = |off: usize, n_heads: usize| -> Vec<usize> {
        let mut idx = Vec::with_capacity(n_heads * rows * hd);
        for hh in 0..n_heads {
            for i in 0..rows {
                idx.extend((0..hd).map(|j| i * width + off + hh * hd + j));
            }
        }
        idx
    };
    let (q_idx, k_idx, v_idx) = (
        heads_idx(0, h),
        heads_idx(qd, kvh),
        heads_idx(qd + kvd, kvh),
    );
    // Stacked query rows per KV head: (j, i) ↦ row j·rows + i of block kv; its key limit.
    let valid: Vec<usize> = (0..kvh)
        .flat_map(|_| (0..g).flat_map(move |_| (0..rows).map(move |i| past + i + 1)))
        .collect();
    let merge: Vec<usize> = (0..rows)
        .flat_map(|i| {
            (0..h).flat_map(move |hh| {
                let (kv, j) = (hh / g, hh % g);
                (0..hd).map(move |c| kv * g * rows * hd + (j * rows + i) * hd + c)
            })
        })
        .collect();
    let kt_idx: Vec<usize> = (0..hd)
        .flat_map(|j| (0..total).map(move |t| t * hd + j))
        .collect();
    let gate_idx: Vec<usize> = (0..rows)
        .flat_map(|i| (0..inter).map(move |j| i * 2 * inter + j))
        .collect();
    let up_idx: Vec<usize> = gate_idx.iter().map(|&j| j + inter).collect();
    for (layer, blk) in model.layers.iter().enumerate() {
        let m0 = ctx.meter();
        let a = rms_norm_rows(
            ctx,
            &x,
            rows,
            d,
            &blk.attn_norm,
            cfg.rms_norm_eps,
            settings.residual_bound,
        )
        .await?;
        let m1 = ctx.meter();
        add_cost(costs, "rmsnorm", m0, m1);
        let qkv = proto::matmul_fixed(ctx, &a, &blk.w_qkv, rows, d, width).await?;
        let m2 = ctx.meter();
        add_cost(costs, "linear", m1, m2);
        // RoPE on q and k: a local linear map with public coefficients, one truncation.
        let q = rope_local(&qkv.gather(&q_idx)?, h, rows, hd, past, cfg.rope_theta, f)?;
        let k = rope_local(&qkv.gather(&k_idx)?, kvh, rows, hd, past, cfg.rope_theta, f)?;
        let qk = proto::trunc(ctx, &Shares::concat(&[&q, &k])?, f).await?;
        let (q, k_new) = qk.split_at(h * rows * hd)?;
        let v_new = qkv.gather(&v_idx)?;
        let m3 = ctx.meter();
        add_cost(costs, "rope", m2, m3);
        let (keys, values) = match (cache.keys.get_mut(layer), cache.values.get_mut(layer)) {
            (Some(k), Some(v)) => (k, v),
            _ => return Err(Error::bug("KV cache has the wrong number of layers")),
        };
        if keys.is_empty() {
            *keys = (0..kvh).map(|_| Shares::zeros(ctx.me(), 0)).collect();
            *values = (0..kvh).map(|_| Shares::zeros(ctx.me(), 0)).collect();
        }
        let mut kt_parts = Vec::with_capacity(kvh);
        for kv in 0..kvh {
            let ks = k_new.slice(kv * rows * hd..(kv + 1) * rows * hd)?;
            let vs = v_new.slice(kv * rows * hd..(kv + 1) * rows * hd)?;
            let (kc, vc) = match (keys.get_mut(kv), values.get_mut(kv)) {
                (Some(k), Some(v)) => (k, v),
                _ => return Err(Error::bug("KV cache has the wrong number of heads")),
            };
            *kc = Shares::concat(&[kc, &ks])?;
            *vc = Shares::concat(&[vc, &vs])?;
            kt_parts.push(kc.gather(&kt_idx)?);
        }
        let kt = Shares::concat(&kt_parts.iter().collect::<Vec<_>>())?;
        let vcat = Shares::concat(&values.iter().collect::<Vec<_>>())?;
        // Query heads of one KV head stacked as g·rows rows: one product per KV head.
        let scores = proto::matmul_batch(ctx, &q, &kt, kvh, (g * rows, hd, total)).await?;
        let scores = proto::trunc(ctx, &scores, f).await?;
        let m4 = ctx.meter();
        add_cost(costs, "attention matmul", m3, m4);
        let probs =
            proto::softmax_rows_with(ctx, &scores, h * rows, total, &valid, settings.softmax_exp)
                .await?;
        let m5 = ctx.meter();
        add_cost(costs, "softmax", m4, m5);
        let ctxv = proto::matmul_batch(ctx, &probs, &vcat, kvh, (g * rows, total, hd)).await?;
        let ctxv = proto::trunc(ctx, &ctxv, f).await?;
        let merged = ctxv.gather(&merge)?;
        let m6 = ctx.meter();
        add_cost(costs, "attention matmul", m5, m6);
        let attn = proto::matmul_fixed(ctx, &merged, &blk.wo, rows, qd, d).await?;
        x = x.add(&attn)?;
        let m7 = ctx.meter();
        add_cost(costs, "linear", m6, m7);
        let a2 = rms_norm_rows(
            ctx,
            &x,
            rows,
            d,
            &blk.mlp_norm,
            cfg.rms_norm_eps,
            settings.residual_bound,
        )
        .await?;
        let m8 = ctx.meter();
        add_cost(costs, "rmsnorm", m7, m8);
        let gu = proto::matmul_fixed(ctx, &a2, &blk.w_gu, rows, d, 2 * inter).await?;
        let m9 = ctx.meter();
        add_cost(costs, "linear", m8, m9);
        let gate = gu.gather(&gate_idx)?;
        let act = match settings.silu {
            SiluApprox::Piecewise => proto::silu(ctx, &gate).await?,
            SiluApprox::Precise => silu_precise(ctx, &gate, settings.softmax_exp).await?,
        };
        let m10 = ctx.meter();
        add_cost(costs, "silu", m9, m10);
        let hidden = proto::mul_fixed(ctx, &act, &gu.gather(&up_idx)?).await?;
        let mlp = proto::matmul_fixed(ctx, &hidden, &blk.w_down, rows, inter, d).await?;
        x = x.add(&mlp)?;
        add_cost(costs, "linear", m10, ctx.meter());
        if let Some(obs) = observer {
            obs(Progress::Layer { step, layer });
        }
    }
    cache.len = total;
    Ok(x)
}

/// The client's one-hot rows of `ids` (`len × V`), shared.
async fn share_onehot(
    ctx: &mut Ctx,
    client: PartyId,
    ids: Option<&[u32]>,
    len: usize,
    v: usize,
) -> Result<Shares, Error> {
    let values = match (ctx.me() == client, ids) {
        (true, Some(p)) => {
            if p.len() != len || p.iter().any(|&id| id as usize >= v) {
                return Err(Error::misuse("ids must be len ids below vocab_size"));
            }
            let mut hot = vec![0u64; len * v];
            for (t, &id) in p.iter().enumerate() {
                hot[t * v + id as usize] = 1;
            }
            Some(hot)
        }
        (true, None) => return Err(Error::misuse("the client must pass its ids")),
        (false, _) => None,
    };
    proto::share_input(ctx, client, values.as_deref(), len * v).await
}

/// One forward pass over a whole sequence, revealing the logits of **every** position to
/// the client (for element-wise checks). The client passes its ids (`Some` there only);
/// `len` is public. Returns the `len × V` logits (row-major) at the client.
///
/// # Errors
/// `Misuse` for an empty or too long input or ids outside the vocabulary; `Protocol` on a
/// malformed message.
pub async fn forward_logits(
    ctx: &mut Ctx,
    model: &SharedLlama,
    client: PartyId,
    ids: Option<&[u32]>,
    len: usize,
    settings: &LlamaSettings,
) -> Result<Option<Vec<f64>>, Error> {
    let cfg = &model.cfg;
    let (d, v) = (cfg.hidden_size, cfg.vocab_size);
    if len == 0 || len > cfg.max_position_embeddings {
        return Err(Error::misuse(
            "input length must be in 1..=max_position_embeddings",
        ));
    }
    let onehot = share_onehot(ctx, client, ids, len, v).await?;
    let x = embed(ctx, model, &onehot, len).await?;
    let mut cache = SharedLlamaCache::default();
    let mut costs = LayerCosts::default();
    let hidden = layers_forward(
        ctx, model, x, len, &mut cache, settings, &mut costs, 0, None,
    )
    .await?;
    let hidden = rms_norm_rows(
        ctx,
        &hidden,
        len,
        d,
        &model.norm,
        cfg.rms_norm_eps,
        settings.residual_bound,
    )
    .await?;
    let logits = proto::matmul_fixed(ctx, &hidden, model.head_t(), len, d, v).await?;
    let fx = ctx.fixed();
    Ok(proto::reveal_to(ctx, &logits, client)
        .await?
        .map(|raw| fx.decode_slice(&raw)))
}

/// What one secure generation produced at one party.
#[derive(Clone, Debug, Default)]
pub struct LlamaGeneration {
    /// The generated ids, at the client only (empty elsewhere).
    pub ids: Vec<u32>,
    /// The revealed last-position logits of each step (client only, `RevealLogits`).
    pub logits: Vec<Vec<f64>>,
    /// Communication per layer kind at this party.
    pub costs: LayerCosts,
    /// Payload bytes and epochs of the prompt step and of each further step.
    pub step_costs: Vec<(u64, u32)>,
}

/// Greedy generation of `max_new` tokens under secure computation, with the secret KV
/// cache. The client passes its prompt (`Some` there only); the prompt length is public.
/// Ties in the argmax go to the lowest id.
///
/// # Errors
/// `Misuse` for an empty or too long prompt or ids outside the vocabulary; `Protocol` on a
/// malformed message.
#[allow(clippy::too_many_arguments)]
pub async fn generate(
    ctx: &mut Ctx,
    model: &SharedLlama,
    client: PartyId,
    prompt: Option<&[u32]>,
    prompt_len: usize,
    max_new: usize,
    mode: OutputMode,
    settings: &LlamaSettings,
    observer: Option<Observer>,
) -> Result<LlamaGeneration, Error> {
    let cfg = &model.cfg;
    let (d, v) = (cfg.hidden_size, cfg.vocab_size);
    if prompt_len == 0 || prompt_len.saturating_add(max_new) > cfg.max_position_embeddings {
        return Err(Error::misuse(
            "prompt length must be in 1..=max_position_embeddings - max_new",
        ));
    }
    let fx = ctx.fixed();
    let mut out = LlamaGeneration::default();
    let mut cache = SharedLlamaCache::default();
    let mut generated_shared: Vec<Shares> = Vec::new();
    let mut step_begin = ctx.meter();
    let mut onehot = share_onehot(ctx, client, prompt, prompt_len, v).await?;
    add_cost(&mut out.costs, "input", step_begin, ctx.meter());
    let mut rows = prompt_len;
    for step in 0..max_new {
        let start = ctx.meter();
        let mut next_input_begin = None;
        let x = embed(ctx, model, &onehot, rows).await?;
        add_cost(&mut out.costs, "embedding", start, ctx.meter());
        let hidden = layers_forward(
            ctx,
            model,
            x,
            rows,
            &mut cache,
            settings,
            &mut out.costs,
            step,
            observer.as_ref(),
        )
        .await?;
        let m0 = ctx.meter();
        let last = hidden.slice((rows - 1) * d..rows * d)?;
        let last = rms_norm_rows(
            ctx,
            &last,
            1,
            d,
            &model.norm,
            cfg.rms_norm_eps,
            settings.residual_bound,
        )
        .await?;
        let m1 = ctx.meter();
        add_cost(&mut out.costs, "rmsnorm", m0, m1);
        let logits = proto::matmul_fixed(ctx, &last, model.head_t(), 1, d, v).await?;
        let m2 = ctx.meter();
        add_cost(&mut out.costs, "lm head", m1, m2);
        match mode {
            OutputMode::RevealLogits => {
                let next_hot = match proto::reveal_to(ctx, &logits, client).await? {
                    Some(raw) => {
                        let vals = fx.decode_slice(&raw);
                        let id = argmax_lowest(&vals);
                        out.ids.push(id as u32);
                        out.logits.push(vals);
                        Some(vec![id as u32])
                    }
                    None => None,
                };
                add_cost(&mut out.costs, "output", m2, ctx.meter());
                if step + 1 < max_new {
                    let m3 = ctx.meter();
                    next_input_begin = Some(m3);
                    onehot = share_onehot(ctx, client, next_hot.as_deref(), 1, v).await?;
                    add_cost(&mut out.costs, "input", m3, ctx.meter());
                }
            }
            OutputMode::SecureArgmax | OutputMode::Private => {
                let (_, hot) =
                    proto::argmax_rows(ctx, &logits, 1, v, settings.logit_compare_width).await?;
                let iota: Vec<u64> = (0..v as u64).collect();
                let prod = hot.mul_public(&iota)?;
                let id_share = prod.sum_chunks(v)?;
                if mode == OutputMode::SecureArgmax {
                    if let Some(raw) = proto::reveal_to(ctx, &id_share, client).await? {
                        out.ids.push(raw.first().copied().unwrap_or(0) as u32);
                    }
                } else {
                    generated_shared.push(id_share);
                }
                add_cost(&mut out.costs, "output", m2, ctx.meter());
                onehot = hot;
            }
        }
        rows = 1;
        let end = next_input_begin.unwrap_or_else(|| ctx.meter());
        out.step_costs.push((
            end.payload_bytes_sent - step_begin.payload_bytes_sent,
            end.epoch - step_begin.epoch,
        ));
        step_begin = end;
        if let Some(obs) = observer.as_ref() {
            obs(Progress::Step { step });
        }
    }
    if mode == OutputMode::Private && !generated_shared.is_empty() {
        let all = Shares::concat(&generated_shared.iter().collect::<Vec<_>>())?;
        if let Some(raw) = proto::reveal_to(ctx, &all, client).await? {
            out.ids = raw.iter().map(|&x| x as u32).collect();
        }
    }
    Ok(out)
}
