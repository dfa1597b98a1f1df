//! GPT-2 under three-party secure computation: the model owner shares the weights, the client
//! shares its prompt, the parties evaluate the network on shares, and only the client learns
//! the output (logits, or only the generated ids).
//!
//! Every layer runs on [`puma_core::proto`]: matrix products with one truncation, PUMA's
//! LayerNorm, GeLU and softmax, all rows and heads of a layer in the same rounds. A
//! secret-shared KV cache makes each generated token cost one row of work.

use puma_core::proto::{ExpApprox, GeluFit, GeluForm};
use puma_core::{Ctx, Error, FixedPoint, PartyId, Shares, Width, proto};

use crate::checkpoint::Gpt2Weights;
use crate::config::{Activation, Gpt2Config};

/// How the client learns the result of each generation step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputMode {
    /// The last position's logits are revealed to the client, which picks the next id and
    /// shares its one-hot for the next step.
    RevealLogits,
    /// The parties compute the argmax securely and reveal only the id to the client.
    SecureArgmax,
    /// Generated ids stay shared (the argmax one-hot embeds the next token) and are revealed
    /// to the client only at the end.
    Private,
}

/// Which approximation of GeLU the secure model evaluates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GeluApprox {
    /// A piecewise polynomial of PUMA's shape and cost (8 rounds): [`GeluFit::PUMA`] (max
    /// error 0.0199) or [`GeluFit::MINIMAX`] (1.75e-3).
    Piecewise(GeluFit),
    /// [`proto::gelu_precise`] for the model's GeLU form (10 rounds, max error ≤ 1.3e-4):
    /// needed for logits within 2e-2 of plaintext on trained checkpoints.
    Precise,
}

/// Settings of the secure evaluation.
#[derive(Clone, Copy, Debug)]
pub struct SecureSettings {
    /// The exponential inside softmax (PUMA: (1 + x/32)^32). The default, the second-order
    /// base with 8 squarings, is ~150 times more accurate than PUMA's t = 9 at its rounds.
    pub softmax_exp: ExpApprox,
    /// Ring width of the comparisons in max/argmax over the logits.
    pub logit_compare_width: Width,
    /// The GeLU approximation.
    pub gelu: GeluApprox,
}

impl Default for SecureSettings {
    fn default() -> Self {
        SecureSettings {
            softmax_exp: ExpApprox::Minimax,
            logit_compare_width: Width::W64,
            gelu: GeluApprox::Precise,
        }
    }
}

/// One block's shared weights. ln_1's and ln_2's γ and β are folded into the linear layer
/// each feeds (`attn_w`, `attn_b`, `fc_w`, `fc_b`; see [`encode_weights`]), so the block's
/// LayerNorms run without their affine part.
struct SharedBlock {
    attn_w: Shares,
    attn_b: Shares,
    proj_w: Shares,
    proj_b: Shares,
    fc_w: Shares,
    fc_b: Shares,
    fc_proj_w: Shares,
    fc_proj_b: Shares,
}

/// One party's shares of a GPT-2 model.
pub struct SharedGpt2 {
    cfg: Gpt2Config,
    /// `V × d`: embeds one-hot rows, and is the tied LM head (logits are computed as
    /// `wte · hᵀ`, so no transposed copy is stored).
    wte: Shares,
    wpe: Shares,
    blocks: Vec<SharedBlock>,
    ln_f: (Shares, Shares),
}

impl std::fmt::Debug for SharedGpt2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SharedGpt2 {{ party: {}, layers: {} }}",
            self.wte.party(),
            self.blocks.len()
        )
    }
}

/// Sizes of every tensor in sharing order, so that all parties split the one shared
/// vector the same way.
fn tensor_sizes(cfg: &Gpt2Config) -> Vec<usize> {
    let (d, v, p, inner) = (cfg.n_embd, cfg.vocab_size, cfg.n_positions, cfg.n_inner);
    let mut sizes = vec![v * d, p * d];
    for _ in 0..cfg.n_layer {
        sizes.extend_from_slice(&[d * 3 * d, 3 * d, d * d, d, d * inner, inner, inner * d, d]);
    }
    sizes.extend_from_slice(&[d, d]);
    sizes
}

/// The gather indices that transpose a row-major `rows × cols` matrix.
fn transpose_indices(rows: usize, cols: usize) -> Vec<usize> {
    (0..cols)
        .flat_map(|j| (0..rows).map(move |i| i * cols + j))
        .collect()
}

/// Encodes `n` plaintext values into a vector of exactly that capacity.
fn encode_exact(
    fx: FixedPoint,
    n: usize,
    xs: impl IntoIterator<Item = f64>,
) -> Result<Vec<u64>, Error> {
    let mut out = Vec::with_capacity(n);
    for x in xs {
        out.push(fx.encode(x)?);
    }
    Ok(out)
}

/// `(diag(γ)·W, βW + b)`, the weight and bias of a linear layer `W`, `b` (`k × n`, input
/// rows) fed by a LayerNorm with affine part γ, β: (n·γ + β)·W + b = n·(diag(γ)·W) + (βW + b)
/// for the normalised row n, in f64 before encoding.
fn fold_layernorm(
    ln: &crate::checkpoint::LayerNormWeights,
    w: &ndarray::Array2<f64>,
    b: &ndarray::Array1<f64>,
) -> (ndarray::Array2<f64>, ndarray::Array1<f64>) {
    let gamma = ln.gamma.view().insert_axis(ndarray::Axis(1));
    (w * &gamma, ln.beta.dot(w) + b)
}

/// The owner's tensors encoded in sharing order, one vector per entry of `tensor_sizes`.
/// The query columns of the attention weights and bias are pre-scaled by 1/√head_dim,
/// which folds the attention scaling into the shared weights for free; the γ and β of
/// `ln_1` and `ln_2` are folded into the attention and MLP input layers
/// ([`fold_layernorm`]), which saves the γ product of every block LayerNorm (230,400 bits
/// per row of 768) at no cost in rounds. `ln_f` keeps its own γ and β: folding it would
/// need an untied copy of the LM head.
fn encode_weights(
    cfg: &Gpt2Config,
    w: &Gpt2Weights,
    fx: FixedPoint,
) -> Result<Vec<Vec<u64>>, Error> {
    let d = cfg.n_embd;
    let scale = 1.0 / (cfg.head_dim() as f64).sqrt();
    let mut out = Vec::with_capacity(2 + 8 * w.blocks.len() + 2);
    out.push(encode_exact(fx, w.wte.len(), w.wte.iter().copied())?);
    out.push(encode_exact(fx, w.wpe.len(), w.wpe.iter().copied())?);
    for b in &w.blocks {
        let (attn_w, attn_b) = fold_layernorm(&b.ln_1, &b.attn_w, &b.attn_b);
        out.push(encode_exact(
            fx,
            attn_w.len(),
            attn_w
                .indexed_iter()
                .map(|((_, c), v)| if c < d { v * scale } else { *v }),
        )?);
        out.push(encode_exact(
            fx,
            attn_b.len(),
            attn_b
                .iter()
                .enumerate()
                .map(|(c, v)| if c < d { v * scale } else { *v }),
        )?);
        drop((attn_w, attn_b));
        out.push(encode_exact(fx, b.proj_w.len(), b.proj_w.iter().copied())?);
        out.push(encode_exact(fx, b.proj_b.len(), b.proj_b.iter().copied())?);
        let (fc_w, fc_b) = fold_layernorm(&b.ln_2, &b.fc_w, &b.fc_b);
        out.push(encode_exact(fx, fc_w.len(), fc_w.iter().copied())?);
        out.push(encode_exact(fx, fc_b.len(), fc_b.iter().copied())?);
        out.push(encode_exact(
            fx,
            b.fc_proj_w.len(),
            b.fc_proj_w.iter().copied(),
        )?);
        out.push(encode_exact(
            fx,
            b.fc_proj_b.len(),
            b.fc_proj_b.iter().copied(),
        )?);
    }
    out.push(encode_exact(
        fx,
        w.ln_f.gamma.len(),
        w.ln_f.gamma.iter().copied(),
    )?);
    out.push(encode_exact(
        fx,
        w.ln_f.beta.len(),
        w.ln_f.beta.iter().copied(),
    )?);
    Ok(out)
}

/// Words of the owner's masked record per round while sharing a model (32 MiB): what
/// bounds the owner's and the receiver's message buffers, whatever the model's size.
pub const SHARE_CHUNK_WORDS: usize = 1 << 22;

impl SharedGpt2 {
    /// Shares the model: `owner` passes its weights (`Some` only there; a reference, or the
    /// weights themselves, which are then dropped as soon as they are encoded, before the
    /// masks are drawn); every party passes the same public config. All tensors travel as
    /// one masked vector from the owner, streamed in chunks of [`SHARE_CHUNK_WORDS`] words
    /// ([`proto::share_input_streamed`]), so that no party ever holds the whole message.
    ///
    /// Rounds: `max(1, ⌈P / SHARE_CHUNK_WORDS⌉)` for `P` parameters (30 for GPT-2 base).
    /// Bytes: 8 per parameter from the owner (the tied LM head once, used in place as
    /// `wte`).
    ///
    /// # Errors
    /// `Misuse` if the owner's weights do not match the config or do not fit the fixed-point
    /// format; `Protocol` on a malformed message.
    pub async fn share<W: std::borrow::Borrow<Gpt2Weights>>(
        ctx: &mut Ctx,
        owner: PartyId,
        cfg: &Gpt2Config,
        weights: Option<W>,
    ) -> Result<SharedGpt2, Error> {
        let sizes = tensor_sizes(cfg);
        let fx = ctx.fixed();
        let encoded = match (ctx.me() == owner, weights) {
            (true, Some(owned)) => {
                // Owned weights are dropped at the end of this arm, once encoded.
                let w: &Gpt2Weights = owned.borrow();
                w.check_shapes(cfg)
                    .map_err(|_| Error::misuse("weights do not match the config"))?;
                if w.lm_head.is_some() {
                    return Err(Error::misuse("only GPT-2's tied LM head is supported"));
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
        // One message for the whole model, received straight into one sharing per tensor.
        let encoded = encoded.map(|parts| parts.into_iter().map(Ok));
        let mut rest = proto::share_input_streamed(ctx, owner, encoded, &sizes, SHARE_CHUNK_WORDS)
            .await?
            .into_iter();
        let mut take = || {
            rest.next()
                .ok_or(Error::bug("fewer shared tensors than sizes"))
        };
        let wte = take()?;
        let wpe = take()?;
        let mut blocks = Vec::with_capacity(cfg.n_layer);
        for _ in 0..cfg.n_layer {
            blocks.push(SharedBlock {
                attn_w: take()?,
                attn_b: take()?,
                proj_w: take()?,
                proj_b: take()?,
                fc_w: take()?,
                fc_b: take()?,
                fc_proj_w: take()?,
                fc_proj_b: take()?,
            });
        }
        let ln_f = (take()?, take()?);
        Ok(SharedGpt2 {
            cfg: cfg.clone(),
            wte,
            wpe,
            blocks,
            ln_f,
        })
    }

    /// The public configuration.
    pub fn config(&self) -> &Gpt2Config {
        &self.cfg
    }
}

/// Per-block secret-shared keys and values of all positions so far, per head (`T × hd`).
#[derive(Debug, Default)]
pub struct SharedKvCache {
    keys: Vec<Vec<Shares>>,
    values: Vec<Vec<Shares>>,
    len: usize,
}

impl SharedKvCache {
    /// Positions cached so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Adds a shared bias of length `n` to every row of an `rows × n` matrix.
fn add_bias(x: &Shares, bias: &Shares, rows: usize) -> Result<Shares, Error> {
    let n = bias.len();
    let idx: Vec<usize> = (0..rows * n).map(|i| i % n).collect();
    x.add(&bias.gather(&idx)?)
}

/// `x · w + b` for an `rows × k` input and a `k × n` weight, one truncation.
async fn linear(
    ctx: &mut Ctx,
    x: &Shares,
    w: &Shares,
    b: &Shares,
    rows: usize,
) -> Result<Shares, Error> {
    let n = b.len();
    let k = w.len() / n.max(1);
    let y = proto::matmul_fixed(ctx, x, w, rows, k, n).await?;
    add_bias(&y, b, rows)
}

/// The communication attributed to each layer kind, in payload bytes sent by this party and
/// epochs spent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayerCosts {
    /// (kind, bytes, epochs) in first-use order.
    pub entries: Vec<(&'static str, u64, u32)>,
}

impl LayerCosts {
    fn add(&mut self, kind: &'static str, before: puma_core::Meter, after: puma_core::Meter) {
        let bytes = after.payload_bytes_sent - before.payload_bytes_sent;
        let epochs = after.epoch - before.epoch;
        match self.entries.iter_mut().find(|(k, _, _)| *k == kind) {
            Some(e) => {
                e.1 += bytes;
                e.2 += epochs;
            }
            None => self.entries.push((kind, bytes, epochs)),
        }
    }
}

/// Events for a progress display.
#[derive(Clone, Copy, Debug)]
pub enum Progress {
    /// Block `layer` of the current step finished.
    Layer {
        /// The generation step (0 = the prompt).
        step: usize,
        /// The block index.
        layer: usize,
    },
    /// A generation step finished.
    Step {
        /// The generation step (0 = the prompt).
        step: usize,
    },
}

/// A progress observer (called by every party; a display usually listens to one).
pub type Observer = std::sync::Arc<dyn Fn(Progress) + Send + Sync>;

#[allow(clippy::too_many_arguments)]
/// Evaluates the blocks on `x` (`rows × d`, the embeddings of positions `cache.len()..`),
/// extending the cache; returns the final hidden states before `ln_f`.
async fn blocks_forward(
    ctx: &mut Ctx,
    model: &SharedGpt2,
    mut x: Shares,
    rows: usize,
    cache: &mut SharedKvCache,
    settings: &SecureSettings,
    costs: &mut LayerCosts,
    step: usize,
    observer: Option<&Observer>,
) -> Result<Shares, Error> {
    let cfg = &model.cfg;
    let (d, h, hd) = (cfg.n_embd, cfg.n_head, cfg.head_dim());
    let past = cache.len;
    let total = past + rows;
    if cache.keys.is_empty() {
        cache.keys = (0..cfg.n_layer).map(|_| Vec::new()).collect();
        cache.values = (0..cfg.n_layer).map(|_| Vec::new()).collect();
    }
    for (layer, blk) in model.blocks.iter().enumerate() {
        let m0 = ctx.meter();
        let a = proto::layernorm_rows_unscaled(ctx, &x, rows, d, cfg.layer_norm_epsilon).await?;
        let m1 = ctx.meter();
        costs.add("layernorm", m0, m1);
        let qkv = linear(ctx, &a, &blk.attn_w, &blk.attn_b, rows).await?;
        let m2 = ctx.meter();
        costs.add("linear", m1, m2);
        // Split heads: q, new k and new v as H × rows × hd.
        let head_idx = |part: usize| -> Vec<usize> {
            let mut idx = Vec::with_capacity(h * rows * hd);
            for hh in 0..h {
                for i in 0..rows {
                    for j in 0..hd {
                        idx.push(i * 3 * d + part * d + hh * hd + j);
                    }
                }
            }
            idx
        };
        let q = qkv.gather(&head_idx(0))?;
        let k_new = qkv.gather(&head_idx(1))?;
        let v_new = qkv.gather(&head_idx(2))?;
        let (keys, values) = match (cache.keys.get_mut(layer), cache.values.get_mut(layer)) {
            (Some(k), Some(v)) => (k, v),
            _ => return Err(Error::bug("KV cache has the wrong number of layers")),
        };
        if keys.is_empty() {
            *keys = (0..h).map(|_| Shares::zeros(ctx.me(), 0)).collect();
            *values = (0..h).map(|_| Shares::zeros(ctx.me(), 0)).collect();
        }
        for hh in 0..h {
            let ks = k_new.slice(hh * rows * hd..(hh + 1) * rows * hd)?;
            let vs = v_new.slice(hh * rows * hd..(hh + 1) * rows * hd)?;
            let (kc, vc) = match (keys.get_mut(hh), values.get_mut(hh)) {
                (Some(k), Some(v)) => (k, v),
                _ => return Err(Error::bug("KV cache has the wrong number of heads")),
            };
            *kc = Shares::concat(&[kc, &ks])?;
            *vc = Shares::concat(&[vc, &vs])?;
        }
        // K^T per head (hd × total), stacked.
        let mut kt_parts = Vec::with_capacity(h);
        let kt_idx: Vec<usize> = (0..hd)
            .flat_map(|j| (0..total).map(move |t| t * hd + j))
            .collect();
        for kc in keys.iter() {
            kt_parts.push(kc.gather(&kt_idx)?);
        }
        let kt = Shares::concat(&kt_parts.iter().collect::<Vec<_>>())?;
        let vcat = Shares::concat(&values.iter().collect::<Vec<_>>())?;
        // Scores (the 1/√hd scaling is folded into the query weights).
        let scores = proto::matmul_batch_fixed(ctx, &q, &kt, h, (rows, hd, total)).await?;
        let m3 = ctx.meter();
        costs.add("attention matmul", m2, m3);
        let probs = causal_softmax(ctx, &scores, h, rows, past, settings.softmax_exp).await?;
        let m4 = ctx.meter();
        costs.add("softmax", m3, m4);
        let ctxv = proto::matmul_batch_fixed(ctx, &probs, &vcat, h, (rows, total, hd)).await?;
        // Merge heads back to rows × d.
        let merge: Vec<usize> = (0..rows)
            .flat_map(|i| {
                (0..h).flat_map(move |hh| (0..hd).map(move |j| hh * rows * hd + i * hd + j))
            })
            .collect();
        let merged = ctxv.gather(&merge)?;
        let m5 = ctx.meter();
        costs.add("attention matmul", m4, m5);
        let attn_out = linear(ctx, &merged, &blk.proj_w, &blk.proj_b, rows).await?;
        x = x.add(&attn_out)?;
        let m6 = ctx.meter();
        costs.add("linear", m5, m6);
        let a2 = proto::layernorm_rows_unscaled(ctx, &x, rows, d, cfg.layer_norm_epsilon).await?;
        let m7 = ctx.meter();
        costs.add("layernorm", m6, m7);
        let hidden = linear(ctx, &a2, &blk.fc_w, &blk.fc_b, rows).await?;
        let m8 = ctx.meter();
        costs.add("linear", m7, m8);
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
        let m9 = ctx.meter();
        costs.add("gelu", m8, m9);
        let mlp = linear(ctx, &act, &blk.fc_proj_w, &blk.fc_proj_b, rows).await?;
        x = x.add(&mlp)?;
        costs.add("linear", m9, ctx.meter());
        if let Some(obs) = observer {
            obs(Progress::Layer { step, layer });
        }
    }
    cache.len = total;
    Ok(x)
}

/// Softmax of each score row over the keys it may see: row i of every head (query position
/// `past + i`) sees keys `0..=past + i`. The mask is public, so masked positions are never
/// compared and come back as exact zeros; all rows of all heads share the rounds.
async fn causal_softmax(
    ctx: &mut Ctx,
    scores: &Shares,
    heads: usize,
    rows: usize,
    past: usize,
    exp: ExpApprox,
) -> Result<Shares, Error> {
    let total = past + rows;
    let valid: Vec<usize> = (0..heads)
        .flat_map(|_| (0..rows).map(move |i| past + i + 1))
        .collect();
    proto::softmax_rows_with(ctx, scores, heads * rows, total, &valid, exp).await
}

/// One forward pass over a whole sequence, revealing the logits of **every** position to
/// the client (for perplexity and element-wise checks against a reference). The client
/// passes its ids (`Some` at the client only); `len` is public. Returns the `len × V`
/// logits (row-major) at the client and `None` elsewhere.
///
/// # Errors
/// `Misuse` for an empty or too long input or ids outside the vocabulary; `Protocol` on a
/// malformed message.
pub async fn forward_logits(
    ctx: &mut Ctx,
    model: &SharedGpt2,
    client: PartyId,
    ids: Option<&[u32]>,
    len: usize,
    settings: &SecureSettings,
) -> Result<Option<Vec<f64>>, Error> {
    let cfg = &model.cfg;
    let (d, v) = (cfg.n_embd, cfg.vocab_size);
    if len == 0 || len > cfg.n_positions {
        return Err(Error::misuse("input length must be in 1..=n_positions"));
    }
    let me = ctx.me();
    let values = match (me == client, ids) {
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
    let onehot = proto::share_input(ctx, client, values.as_deref(), len * v).await?;
    let emb = proto::matmul(ctx, &onehot, &model.wte, len, v, d).await?;
    let x = emb.add(&model.wpe.slice(0..len * d)?)?;
    let mut cache = SharedKvCache::default();
    let mut costs = LayerCosts::default();
    let hidden = blocks_forward(
        ctx, model, x, len, &mut cache, settings, &mut costs, 0, None,
    )
    .await?;
    let hidden = proto::layernorm_rows(
        ctx,
        &hidden,
        len,
        d,
        &model.ln_f.0,
        &model.ln_f.1,
        cfg.layer_norm_epsilon,
    )
    .await?;
    // Logitsᵀ = wte · hiddenᵀ (`V × len`), then back to `len × V`: two local permutations
    // of small matrices instead of a stored transpose of the LM head.
    let hidden_t = hidden.gather(&transpose_indices(len, d))?;
    let logits_t = proto::matmul_fixed(ctx, &model.wte, &hidden_t, v, d, len).await?;
    let logits = logits_t.gather(&transpose_indices(v, len))?;
    let fx = ctx.fixed();
    Ok(proto::reveal_to(ctx, &logits, client)
        .await?
        .map(|raw| fx.decode_slice(&raw)))
}

/// What one secure generation produced at one party.
#[derive(Clone, Debug, Default)]
pub struct Generation {
    /// The generated ids, at the client only (empty elsewhere).
    pub ids: Vec<u32>,
    /// The revealed last-position logits of each step (client only, `RevealLogits` mode).
    pub logits: Vec<Vec<f64>>,
    /// Communication per layer kind at this party.
    pub costs: LayerCosts,
    /// Payload bytes and epochs of the prompt step and of each further step.
    pub step_costs: Vec<(u64, u32)>,
}

/// Greedy generation of `max_new` tokens under secure computation.
///
/// The client passes its prompt ids (`Some` at the client only); every party passes the
/// prompt length, which is public. Ties in the argmax go to the lowest id.
///
/// # Errors
/// `Misuse` for an empty or too long prompt or ids outside the vocabulary; `Protocol` on a
/// malformed message.
#[allow(clippy::too_many_arguments)]
pub async fn generate(
    ctx: &mut Ctx,
    model: &SharedGpt2,
    client: PartyId,
    prompt: Option<&[u32]>,
    prompt_len: usize,
    max_new: usize,
    mode: OutputMode,
    settings: &SecureSettings,
    observer: Option<Observer>,
) -> Result<Generation, Error> {
    let cfg = &model.cfg;
    let (d, v) = (cfg.n_embd, cfg.vocab_size);
    if prompt_len == 0 || prompt_len + max_new > cfg.n_positions {
        return Err(Error::misuse(
            "prompt length must be in 1..=n_positions - max_new",
        ));
    }
    let me = ctx.me();
    let fx: FixedPoint = ctx.fixed();
    let mut out = Generation::default();
    let mut cache = SharedKvCache::default();
    let mut generated_shared: Vec<Shares> = Vec::new();
    // The first step's one-hot comes from the client; a step's costs include its input.
    let mut step_begin = ctx.meter();
    let mut onehot: Shares = {
        let values = match (me == client, prompt) {
            (true, Some(p)) => {
                if p.len() != prompt_len || p.iter().any(|&id| id as usize >= v) {
                    return Err(Error::misuse(
                        "prompt ids must be prompt_len ids below vocab_size",
                    ));
                }
                let mut hot = vec![0u64; prompt_len * v];
                for (t, &id) in p.iter().enumerate() {
                    hot[t * v + id as usize] = 1;
                }
                Some(hot)
            }
            (true, None) => return Err(Error::misuse("the client must pass its prompt")),
            (false, _) => None,
        };
        proto::share_input(ctx, client, values.as_deref(), prompt_len * v).await?
    };
    out.costs.add("input", step_begin, ctx.meter());
    let mut rows = prompt_len;
    for step in 0..max_new {
        let start = ctx.meter();
        let mut next_input_begin = None;
        // Embedding: one-hot × wte (no truncation: the one-hot is integral) + positions.
        let emb = proto::matmul(ctx, &onehot, &model.wte, rows, v, d).await?;
        let pos = model.wpe.slice(cache.len() * d..(cache.len() + rows) * d)?;
        let x = emb.add(&pos)?;
        out.costs.add("embedding", start, ctx.meter());
        let hidden = blocks_forward(
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
        // Only the last position is needed for the next token.
        let m0 = ctx.meter();
        let last = hidden.slice((rows - 1) * d..rows * d)?;
        let last = proto::layernorm_rows(
            ctx,
            &last,
            1,
            d,
            &model.ln_f.0,
            &model.ln_f.1,
            cfg.layer_norm_epsilon,
        )
        .await?;
        let m1 = ctx.meter();
        out.costs.add("layernorm", m0, m1);
        // wte · lastᵀ: a `d`-vector is the same in both layouts, so no transpose is needed.
        let logits = proto::matmul_fixed(ctx, &model.wte, &last, v, d, 1).await?;
        let m2 = ctx.meter();
        out.costs.add("lm head", m1, m2);
        match mode {
            OutputMode::RevealLogits => {
                let opened = proto::reveal_to(ctx, &logits, client).await?;
                let next_hot = match opened {
                    Some(raw) => {
                        let vals = fx.decode_slice(&raw);
                        let id = argmax_lowest(&vals);
                        out.ids.push(id as u32);
                        out.logits.push(vals);
                        let mut hot = vec![0u64; v];
                        hot[id] = 1;
                        Some(hot)
                    }
                    None => None,
                };
                out.costs.add("output", m2, ctx.meter());
                if step + 1 < max_new {
                    let m3 = ctx.meter();
                    next_input_begin = Some(m3);
                    onehot = proto::share_input(ctx, client, next_hot.as_deref(), v).await?;
                    out.costs.add("input", m3, ctx.meter());
                }
            }
            OutputMode::SecureArgmax | OutputMode::Private => {
                let (_, hot) =
                    proto::argmax_rows(ctx, &logits, 1, v, settings.logit_compare_width).await?;
                let iota: Vec<u64> = (0..v as u64).collect();
                let id_share = dot_public(&hot, &iota)?;
                if mode == OutputMode::SecureArgmax {
                    if let Some(raw) = proto::reveal_to(ctx, &id_share, client).await? {
                        out.ids.push(raw.first().copied().unwrap_or(0) as u32);
                    }
                } else {
                    generated_shared.push(id_share);
                }
                out.costs.add("output", m2, ctx.meter());
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

/// Σ_j c_j·x_j for a shared vector and public integer weights (local), as a 1-element sharing.
fn dot_public(x: &Shares, c: &[u64]) -> Result<Shares, Error> {
    let prod = x.mul_public(c)?;
    prod.sum_chunks(prod.len().max(1))
}

/// The index of the largest value; ties go to the lowest index.
pub fn argmax_lowest(vals: &[f64]) -> usize {
    let mut best = 0;
    let mut best_v = f64::NEG_INFINITY;
    for (i, &v) in vals.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best
}
