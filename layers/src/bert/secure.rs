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
//! the rounds: matrix products with one truncation, LayerNorm, GeLU ([`crate::nn::GeluApprox`]) and a
//! softmax over each sequence's real tokens (padded positions are never computed).

use puma_core::proto;
use puma_core::{BoxedProtocol, Ctx, Error, FixedPoint, PartyId, Shares, Width};

use super::config::BertConfig;
use super::plain::BertBatch;
use super::weights::BertWeights;
use crate::gpt2::secure::encode_all;
use crate::gpt2::weights::LayerNormWeights;
use crate::nn::activation::mlp_ring;
use crate::nn::attention::{self, Heads};
use crate::nn::client::{ClientAt, Delivered};
use crate::nn::embedding::embed;
use crate::nn::{
    Activation, LayerCosts, LayerKind, Linear, Norm, Observer, Progress, SecureSettings,
    ShareObserver, SharedTensors, TensorPlan, share_plan_observed,
};
use puma_core::proto::share_one_hot;

/// The public shape of a model's heads: every party must pass the same value. (Serde
/// form `{"pooler": bool, "labels": n}`, for a share store's config text; checked when a
/// model is built.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BertHeads {
    /// Whether the model has a pooler (BERT's `pooler.dense`, RoBERTa's
    /// `classifier.dense`).
    pub pooler: bool,
    /// Number of classification labels (0: no classifier).
    pub labels: usize,
}

/// Most classification labels a party accepts in an announced [`BertHeads`].
pub const MAX_LABELS: usize = 1 << 16;

impl BertHeads {
    /// The owner tells the other parties its model's heads (public, like the config): the
    /// owner passes `Some`, the others `None`; every party returns them.
    ///
    /// Rounds: 1. Bytes: 16 from the owner to each peer.
    ///
    /// # Errors
    /// `Misuse` if the owner passes nothing; `Protocol` if the announced heads are
    /// malformed (more than [`MAX_LABELS`] labels, or a classifier without a pooler).
    pub fn announce<'a>(
        ctx: &'a mut Ctx,
        owner: PartyId,
        heads: Option<BertHeads>,
    ) -> BoxedProtocol<'a, BertHeads> {
        Box::pin(async move {
            let me = ctx.me();
            let words = match (me == owner, heads) {
                (true, Some(h)) => {
                    let v = [u64::from(h.pooler), h.labels as u64];
                    ctx.send(me.next(), &v, Width::W64)?;
                    ctx.send(me.prev(), &v, Width::W64)?;
                    v.to_vec()
                }
                (true, None) => return Err(Error::misuse("the model owner must pass its heads")),
                (false, _) => ctx.recv(owner, 2, Width::W64).await?,
            };
            let labels = words
                .get(1)
                .and_then(|&l| usize::try_from(l).ok())
                .filter(|&l| l <= MAX_LABELS);
            let pooler = words.first().copied();
            match (pooler, labels) {
                (Some(p @ (0 | 1)), Some(labels)) if p == 1 || labels == 0 => Ok(BertHeads {
                    pooler: p == 1,
                    labels,
                }),
                _ => Err(Error::protocol(owner, "malformed model heads")),
            }
        })
    }

    /// The heads of loaded weights.
    pub fn of(w: &BertWeights) -> BertHeads {
        BertHeads {
            pooler: w.pooler.is_some(),
            labels: w.num_labels(),
        }
    }
}

/// The public shape of a shared BERT / RoBERTa model: its config and heads. What an owner
/// outside the parties announces and a share store keeps (as JSON).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BertSpec {
    /// The architecture.
    pub config: BertConfig,
    /// The heads.
    pub heads: BertHeads,
}

impl BertSpec {
    /// The spec of loaded weights.
    pub fn of(config: &BertConfig, weights: &BertWeights) -> BertSpec {
        BertSpec {
            config: config.clone(),
            heads: BertHeads::of(weights),
        }
    }

    /// Whether the config is valid and the heads fit it.
    ///
    /// # Errors
    /// `Misuse` naming what is wrong in general terms.
    pub fn validate(&self) -> Result<(), Error> {
        check_shape(&self.config, self.heads)
    }

    /// The model's tensors ([`plan`]).
    ///
    /// # Errors
    /// As [`BertSpec::validate`].
    pub fn plan(&self) -> Result<TensorPlan, Error> {
        self.validate()?;
        Ok(plan(&self.config, self.heads))
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

    /// The shape of sequences of `lens` real tokens, padded on the right to the longest
    /// (how an outside client's batch is described: the lengths are public).
    pub fn right_padded(lens: &[usize]) -> BatchShape {
        let seq_len = lens.iter().copied().max().unwrap_or(0);
        BatchShape {
            batch: lens.len(),
            seq_len,
            attention_mask: lens
                .iter()
                .flat_map(|&l| (0..seq_len).map(move |t| t < l))
                .collect(),
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
        crate::nn::attention::starts(&self.lens())
    }

    /// Gather indices of each sequence's first real token in the real tokens' rows of
    /// width `d` (`batch × d`): what the pooler reads.
    pub fn first_rows(&self, d: usize) -> Vec<usize> {
        self.starts()
            .into_iter()
            .flat_map(|s| s * d..(s + 1) * d)
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
    /// Communication per layer kind at this party.
    pub costs: LayerCosts,
}

/// One encoder layer's shared layers (post-LN).
struct SharedLayer {
    qkv: Linear,
    attn_out: Linear,
    attn_ln: Norm,
    inter: Linear,
    out: Linear,
    out_ln: Norm,
}

/// One party's shares of a BERT / RoBERTa model.
pub struct SharedBert {
    cfg: BertConfig,
    heads: BertHeads,
    /// `(vocab + types) × d`: word embeddings, then token-type embeddings, so that one
    /// one-hot product gives their sum.
    emb_table: Shares,
    position: Shares,
    emb_ln: Norm,
    layers: Vec<SharedLayer>,
    pooler: Option<Linear>,
    classifier: Option<Linear>,
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

/// The shared tensors of a BERT model, in sharing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BertTensor {
    /// Word embeddings, then token-type embeddings: `(vocab + types) × d`.
    Embeddings,
    Positions,
    EmbLn(LnPart),
    /// Q, K and V side by side (`d × 3d`, the query part pre-scaled by 1/√head_dim).
    QkvWeight(usize),
    QkvBias(usize),
    Layer(usize, LayerPart),
    Pooler(LinPart),
    Classifier(LinPart),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LnPart {
    Gamma,
    Beta,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LinPart {
    Weight,
    Bias,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LayerPart {
    AttnOut(LinPart),
    AttnLn(LnPart),
    Inter(LinPart),
    Out(LinPart),
    OutLn(LnPart),
}

impl BertTensor {
    fn name(self) -> String {
        format!("{self:?}")
    }
}

/// The number of shared parameters of `cfg` with `heads` (`None` if it overflows), for a
/// config within the model size limits (each size, unchecked products).
pub(crate) fn parameters(cfg: &BertConfig, heads: BertHeads) -> Option<usize> {
    tensors(cfg, heads)
        .iter()
        .try_fold(0usize, |acc, (_, n)| acc.checked_add(*n))
}

/// Every tensor with its length, in sharing order.
fn tensors(cfg: &BertConfig, heads: BertHeads) -> Vec<(BertTensor, usize)> {
    use BertTensor as T;
    use LayerPart as P;
    use LinPart::{Bias, Weight};
    use LnPart::{Beta, Gamma};
    let (d, inner) = (cfg.hidden_size, cfg.intermediate_size);
    let mut out = vec![
        (T::Embeddings, (cfg.vocab_size + cfg.type_vocab_size) * d),
        (T::Positions, cfg.max_position_embeddings * d),
        (T::EmbLn(Gamma), d),
        (T::EmbLn(Beta), d),
    ];
    for l in 0..cfg.num_hidden_layers {
        out.extend([
            (T::QkvWeight(l), d * 3 * d),
            (T::QkvBias(l), 3 * d),
            (T::Layer(l, P::AttnOut(Weight)), d * d),
            (T::Layer(l, P::AttnOut(Bias)), d),
            (T::Layer(l, P::AttnLn(Gamma)), d),
            (T::Layer(l, P::AttnLn(Beta)), d),
            (T::Layer(l, P::Inter(Weight)), d * inner),
            (T::Layer(l, P::Inter(Bias)), inner),
            (T::Layer(l, P::Out(Weight)), inner * d),
            (T::Layer(l, P::Out(Bias)), d),
            (T::Layer(l, P::OutLn(Gamma)), d),
            (T::Layer(l, P::OutLn(Beta)), d),
        ]);
    }
    if heads.pooler {
        out.extend([(T::Pooler(Weight), d * d), (T::Pooler(Bias), d)]);
    }
    if heads.labels > 0 {
        out.extend([
            (T::Classifier(Weight), d * heads.labels),
            (T::Classifier(Bias), heads.labels),
        ]);
    }
    out
}

/// The owner's encoding of tensor `t`.
fn encode_tensor(
    cfg: &BertConfig,
    w: &BertWeights,
    t: BertTensor,
    fx: FixedPoint,
) -> Result<Vec<u64>, Error> {
    let mismatch = || Error::misuse("weights do not match the config");
    let d = cfg.hidden_size;
    let scale = 1.0 / (cfg.head_dim() as f64).sqrt();
    let ln = |l: &LayerNormWeights, p: LnPart| match p {
        LnPart::Gamma => encode_all(fx, d, l.gamma.iter()),
        LnPart::Beta => encode_all(fx, d, l.beta.iter()),
    };
    let lin = |l: &super::weights::Linear, p: LinPart| match p {
        LinPart::Weight => encode_all(fx, l.w.len(), l.w.iter()),
        LinPart::Bias => encode_all(fx, l.b.len(), l.b.iter()),
    };
    let layer = |i: usize| w.layers.get(i).ok_or_else(mismatch);
    match t {
        BertTensor::Embeddings => encode_all(
            fx,
            w.word.len() + w.token_type.len(),
            w.word.iter().chain(w.token_type.iter()),
        ),
        BertTensor::Positions => encode_all(fx, w.position.len(), w.position.iter()),
        BertTensor::EmbLn(p) => ln(&w.emb_ln, p),
        BertTensor::QkvWeight(i) => {
            let l = layer(i)?;
            let mut qkv = Vec::with_capacity(d * 3 * d);
            for r in 0..d {
                let (q, k, v) = (l.query.w.row(r), l.key.w.row(r), l.value.w.row(r));
                qkv.extend(q.iter().map(|x| x * scale));
                qkv.extend(k.iter().copied());
                qkv.extend(v.iter().copied());
            }
            encode_all(fx, qkv.len(), qkv.iter())
        }
        BertTensor::QkvBias(i) => {
            let l = layer(i)?;
            let b: Vec<f64> = l
                .query
                .b
                .iter()
                .map(|x| x * scale)
                .chain(l.key.b.iter().copied())
                .chain(l.value.b.iter().copied())
                .collect();
            encode_all(fx, b.len(), b.iter())
        }
        BertTensor::Layer(i, p) => {
            let l = layer(i)?;
            match p {
                LayerPart::AttnOut(q) => lin(&l.attn_out, q),
                LayerPart::AttnLn(q) => ln(&l.attn_ln, q),
                LayerPart::Inter(q) => lin(&l.inter, q),
                LayerPart::Out(q) => lin(&l.out, q),
                LayerPart::OutLn(q) => ln(&l.out_ln, q),
            }
        }
        BertTensor::Pooler(p) => lin(w.pooler.as_ref().ok_or_else(mismatch)?, p),
        BertTensor::Classifier(p) => lin(w.classifier.as_ref().ok_or_else(mismatch)?, p),
    }
}

/// The owner's tensors in [`plan`] order, each encoded when asked for (a named type so
/// that the sharing future stays `Send`).
pub struct OwnerTensors<'a> {
    cfg: &'a BertConfig,
    w: &'a BertWeights,
    tensors: std::vec::IntoIter<(BertTensor, usize)>,
    fx: FixedPoint,
}

impl std::fmt::Debug for OwnerTensors<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Weights are secret: only how many tensors remain is printed.
        write!(f, "OwnerTensors {{ {} left }}", self.tensors.len())
    }
}

/// Owner side: the model's tensors in [`plan`] order, each encoded at `fx` when the
/// iterator reaches it (for an outside dealer, or a content hash of the model,
/// [`crate::store::ModelHasher`]). `heads` are the weights' own ([`BertHeads::of`]).
///
/// # Errors
/// `Misuse` if the config is invalid or the weights do not match it; each item `Misuse`
/// if a value does not fit the fixed-point format.
pub fn encoded_tensors<'a>(
    cfg: &'a BertConfig,
    weights: &'a BertWeights,
    fx: FixedPoint,
) -> Result<OwnerTensors<'a>, Error> {
    let heads = BertHeads::of(weights);
    check_shape(cfg, heads)?;
    if weights.layers.len() != cfg.num_hidden_layers {
        return Err(Error::misuse("weights do not match the config"));
    }
    Ok(OwnerTensors {
        cfg,
        w: weights,
        tensors: tensors(cfg, heads).into_iter(),
        fx,
    })
}

/// The names and lengths of a model's shared tensors, in sharing order: what
/// [`SharedBert::share`] shares and [`SharedBert::from_tensors`] takes. For a config and
/// heads that passed their checks (each size within the limits).
pub fn plan(cfg: &BertConfig, heads: BertHeads) -> TensorPlan {
    let mut plan = TensorPlan::new();
    for (t, n) in tensors(cfg, heads) {
        plan.push(t.name(), n);
    }
    plan
}

/// Whether `cfg` is valid and `heads` fit it.
fn check_shape(cfg: &BertConfig, heads: BertHeads) -> Result<(), Error> {
    cfg.validate()
        .map_err(|_| Error::misuse("invalid BERT configuration"))?;
    if heads.labels > 0 && !heads.pooler {
        return Err(Error::misuse("a classifier needs a pooler"));
    }
    if heads.labels > MAX_LABELS {
        return Err(Error::misuse("too many classification labels"));
    }
    Ok(())
}

impl Iterator for OwnerTensors<'_> {
    type Item = Result<Vec<u64>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let (t, _) = self.tensors.next()?;
        Some(encode_tensor(self.cfg, self.w, t, self.fx))
    }
}

impl SharedBert {
    /// Shares the model: `owner` passes its weights (`Some` only there); every party passes
    /// the same public config and heads. The tensors are encoded one at a time as they are
    /// sent and streamed in bounded chunks ([`share_plan`](crate::nn::share_plan)).
    ///
    /// Rounds: `max(1, ⌈P / SHARE_CHUNK_WORDS⌉)` for `P` parameters
    /// ([`crate::nn::SHARE_CHUNK_WORDS`]). Bytes: 8 per parameter from the owner.
    ///
    /// # Errors
    /// `Misuse` if the owner's weights do not match the config and heads or do not fit the
    /// fixed-point format; `Protocol` on a malformed message.
    pub fn share<'a>(
        ctx: &'a mut Ctx,
        owner: PartyId,
        cfg: &'a BertConfig,
        heads: BertHeads,
        weights: Option<&'a BertWeights>,
    ) -> BoxedProtocol<'a, SharedBert> {
        Self::share_observed(ctx, owner, cfg, heads, weights, None)
    }

    /// [`SharedBert::share`], telling `observer` (if any) how far the sharing has come at
    /// this party ([`crate::nn::ShareProgress`], after each chunk).
    ///
    /// # Errors
    /// As [`SharedBert::share`].
    pub fn share_observed<'a>(
        ctx: &'a mut Ctx,
        owner: PartyId,
        cfg: &'a BertConfig,
        heads: BertHeads,
        weights: Option<&'a BertWeights>,
        observer: Option<&'a ShareObserver>,
    ) -> BoxedProtocol<'a, SharedBert> {
        Box::pin(async move {
            check_shape(cfg, heads)?;
            let list = tensors(cfg, heads);
            let plan = plan(cfg, heads);
            let fx = ctx.fixed();
            let weights = match weights {
                Some(w) if ctx.me() == owner => {
                    if BertHeads::of(w) != heads || w.layers.len() != cfg.num_hidden_layers {
                        return Err(Error::misuse("weights do not match the config"));
                    }
                    Some(w)
                }
                _ => None,
            };
            let encoded = weights.map(|w| OwnerTensors {
                cfg,
                w,
                tensors: list.into_iter(),
                fx,
            });
            let shared = share_plan_observed(ctx, owner, &plan, encoded, observer).await?;
            Self::from_tensors(cfg.clone(), heads, shared)
        })
    }

    /// A model of `cfg` with `heads` built from one party's shares of its tensors (named
    /// as [`plan`] names them): from [`SharedBert::share`], a share store
    /// ([`crate::store`]) or an outside dealer.
    ///
    /// # Errors
    /// `Misuse` for an invalid config or heads, or tensors that do not fit their plan
    /// (callers that want the tensor named check with [`SharedTensors::check`] first).
    pub fn from_tensors(
        cfg: BertConfig,
        heads: BertHeads,
        mut shared: SharedTensors,
    ) -> Result<SharedBert, Error> {
        use BertTensor as T;
        use LayerPart as P;
        use LinPart::{Bias, Weight};
        use LnPart::{Beta, Gamma};
        check_shape(&cfg, heads)?;
        shared.check(&plan(&cfg, heads)).map_err(|_| {
            Error::misuse(
                "the shared tensors do not fit the model's plan \
                 (SharedTensors::check names the tensor)",
            )
        })?;
        let mut take = |t: BertTensor| shared.take(&t.name());
        let (d, inner, eps) = (cfg.hidden_size, cfg.intermediate_size, cfg.layer_norm_eps);
        let emb_table = take(T::Embeddings)?;
        let position = take(T::Positions)?;
        let emb_ln = Norm::LayerNorm {
            gamma: take(T::EmbLn(Gamma))?,
            beta: take(T::EmbLn(Beta))?,
            eps,
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for l in 0..cfg.num_hidden_layers {
            let lin = |take: &mut dyn FnMut(BertTensor) -> Result<Shares, Error>,
                       p: fn(LinPart) -> LayerPart,
                       k: usize,
                       n: usize| {
                Linear::new(
                    take(T::Layer(l, p(Weight)))?,
                    Some(take(T::Layer(l, p(Bias)))?),
                    k,
                    n,
                )
            };
            let ln = |take: &mut dyn FnMut(BertTensor) -> Result<Shares, Error>,
                      p: fn(LnPart) -> LayerPart| {
                Ok::<_, Error>(Norm::LayerNorm {
                    gamma: take(T::Layer(l, p(Gamma)))?,
                    beta: take(T::Layer(l, p(Beta)))?,
                    eps,
                })
            };
            let qkv = Linear::new(take(T::QkvWeight(l))?, Some(take(T::QkvBias(l))?), d, 3 * d)?;
            let attn_out = lin(&mut take, P::AttnOut, d, d)?;
            let attn_ln = ln(&mut take, P::AttnLn)?;
            let inter = lin(&mut take, P::Inter, d, inner)?;
            let out = lin(&mut take, P::Out, inner, d)?;
            let out_ln = ln(&mut take, P::OutLn)?;
            layers.push(SharedLayer {
                qkv,
                attn_out,
                attn_ln,
                inter,
                out,
                out_ln,
            });
        }
        let pooler = if heads.pooler {
            Some(Linear::new(
                take(T::Pooler(Weight))?,
                Some(take(T::Pooler(Bias))?),
                d,
                d,
            )?)
        } else {
            None
        };
        let classifier = if heads.labels > 0 {
            Some(Linear::new(
                take(T::Classifier(Weight))?,
                Some(take(T::Classifier(Bias))?),
                d,
                heads.labels,
            )?)
        } else {
            None
        };
        Ok(SharedBert {
            cfg,
            heads,
            emb_table,
            position,
            emb_ln,
            layers,
            pooler,
            classifier,
        })
    }

    /// The party whose shares these are.
    pub fn party(&self) -> PartyId {
        self.emb_table.party()
    }

    /// The public configuration.
    pub fn config(&self) -> &BertConfig {
        &self.cfg
    }

    /// The public head shape.
    pub fn heads(&self) -> BertHeads {
        self.heads
    }

    /// This party's shares of every tensor, named and ordered as [`plan`] lists them:
    /// what a share store saves ([`crate::store::write`]) and [`SharedBert::from_tensors`]
    /// takes back.
    ///
    /// # Errors
    /// `Bug` if the model lacks a tensor of its plan (it was checked when built).
    pub fn tensors(&self) -> Result<Vec<(String, &Shares)>, Error> {
        tensors(&self.cfg, self.heads)
            .into_iter()
            .map(|(t, _)| {
                let shares = self
                    .tensor(t)
                    .ok_or(Error::bug("a BERT model lacks a tensor of its plan"))?;
                Ok((t.name(), shares))
            })
            .collect()
    }

    /// Tensor `t`, if the model has it.
    fn tensor(&self, t: BertTensor) -> Option<&Shares> {
        fn ln(n: &Norm, p: LnPart) -> Option<&Shares> {
            match p {
                LnPart::Gamma => n.weight(),
                LnPart::Beta => n.bias(),
            }
        }
        fn lin(l: &Linear, p: LinPart) -> Option<&Shares> {
            match p {
                LinPart::Weight => Some(l.weight()),
                LinPart::Bias => l.bias(),
            }
        }
        match t {
            BertTensor::Embeddings => Some(&self.emb_table),
            BertTensor::Positions => Some(&self.position),
            BertTensor::EmbLn(p) => ln(&self.emb_ln, p),
            BertTensor::QkvWeight(l) => Some(self.layers.get(l)?.qkv.weight()),
            BertTensor::QkvBias(l) => self.layers.get(l)?.qkv.bias(),
            BertTensor::Layer(l, part) => {
                let layer = self.layers.get(l)?;
                match part {
                    LayerPart::AttnOut(p) => lin(&layer.attn_out, p),
                    LayerPart::AttnLn(p) => ln(&layer.attn_ln, p),
                    LayerPart::Inter(p) => lin(&layer.inter, p),
                    LayerPart::Out(p) => lin(&layer.out, p),
                    LayerPart::OutLn(p) => ln(&layer.out_ln, p),
                }
            }
            BertTensor::Pooler(p) => lin(self.pooler.as_ref()?, p),
            BertTensor::Classifier(p) => lin(self.classifier.as_ref()?, p),
        }
    }
}

/// The encoder on the client's batch: returns this party's shares of the last hidden
/// state of the **real** tokens only, `n × d` with n = the number of mask-true positions,
/// in batch order (padded positions are never computed: no row-wise work is spent on them,
/// and as keys they are masked out anyway). With `first_only` (a caller that reads only
/// the first tokens, as the pooler does) it returns each sequence's first real token only,
/// `batch × d`: the last layer makes those rows only after its keys and values. Adds the
/// per-kind costs to `costs`; tells `observer` (if any) of each finished layer
/// (`Progress::Layer` with step 0).
///
/// Attention runs per sequence over its real tokens only
/// ([`attention::bidirectional`]: sequences of equal length batched, all sharing rounds).
///
/// # Errors
/// `Misuse` for a batch that does not fit the model or the public shape (no input value
/// is named); `Protocol` on a malformed message.
#[allow(clippy::too_many_arguments)]
pub fn encode_batch<'a>(
    ctx: &'a mut Ctx,
    model: &'a SharedBert,
    client: &'a ClientAt,
    input: Option<&'a BertBatch>,
    (shape, first_only): (&'a BatchShape, bool),
    settings: &'a SecureSettings,
    costs: &'a mut LayerCosts,
    observer: Option<&'a Observer>,
) -> BoxedProtocol<'a, Shares> {
    Box::pin(async move {
        let cfg = &model.cfg;
        shape
            .as_batch()
            .check_shape(cfg)
            .map_err(|_| Error::misuse("batch shape does not fit the model"))?;
        let d = cfg.hidden_size;
        let heads = Heads {
            q: cfg.num_attention_heads,
            kv: cfg.num_attention_heads,
            dim: cfg.head_dim(),
        };
        let real = shape.real_rows();
        let lens = shape.lens();
        let n = real.len();
        let width = cfg.vocab_size + cfg.type_vocab_size;
        let bound = settings.residual_bound;
        let m0 = ctx.meter();
        let one_hot = match client {
            ClientAt::Party(client) => {
                let hot = match input {
                    Some(b) if ctx.me() == *client => {
                        if BatchShape::of(b) != *shape {
                            return Err(Error::misuse(
                                "the client's batch does not fit the model or the public shape",
                            ));
                        }
                        b.check(cfg).map_err(|_| {
                            Error::misuse("the client's batch does not fit the model")
                        })?;
                        Some(input_columns(b, cfg.vocab_size, cfg.type_vocab_size)?)
                    }
                    _ => None,
                };
                share_one_hot(ctx, *client, hot.as_deref(), n, 2, width).await?
            }
            ClientAt::Outside { prompt_hot, .. } => {
                if Some(prompt_hot.len()) != n.checked_mul(width) {
                    return Err(Error::misuse(
                        "the dealt input rows do not fit the model or the public shape",
                    ));
                }
                prompt_hot.clone()
            }
        };
        let m1 = ctx.meter();
        costs.add(LayerKind::Input, m0, m1);
        let emb = embed(ctx, &one_hot, &model.emb_table, n, width, d).await?;
        drop(one_hot);
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
        costs.add(LayerKind::Embedding, m1, m2);
        let mut x = model.emb_ln.forward(ctx, &x, n, d, bound).await?;
        costs.add(LayerKind::LayerNorm, m2, ctx.meter());
        let act = Activation::from(cfg.activation);
        let layers = model.layers.len();
        let mut n = n;
        for (l, layer) in model.layers.iter().enumerate() {
            // The projection's summands are local; the attention finishes them (two rounds,
            // counted as linear) in its own layout.
            let qkv = layer.qkv.summands(ctx, &x, n).await?;
            let first = first_only && l + 1 == layers;
            let exp = settings.softmax_exp;
            let ctxv =
                attention::bidirectional(ctx, heads, qkv, (&lens, first), exp, costs).await?;
            if first {
                // From here on, each sequence's first token only.
                x = x.gather(&shape.first_rows(d))?;
                n = lens.len();
            }
            let a1 = ctx.meter();
            let attn = layer.attn_out.forward(ctx, &ctxv, n).await?;
            let a2 = ctx.meter();
            costs.add(LayerKind::Linear, a1, a2);
            x = layer
                .attn_ln
                .forward(ctx, &x.add(&attn)?, n, d, bound)
                .await?;
            let a3 = ctx.meter();
            costs.add(LayerKind::LayerNorm, a2, a3);
            // The intermediate projection truncated into the ring the activation reads, the
            // activation lifted into the MLP's ring only, and the output projection summed
            // there, as in the decoders (crate::nn::activation::MLP_RING_BITS).
            let input = act.input_ring(settings, ctx.fixed().frac_bits())?;
            let hidden = layer.inter.forward_into(ctx, &x, n, input).await?;
            let a4 = ctx.meter();
            costs.add(LayerKind::Linear, a3, a4);
            let ring = mlp_ring()?;
            let h = act
                .forward_into(ctx, &hidden, settings, (input, ring))
                .await?;
            let a5 = ctx.meter();
            costs.add(act.kind(), a4, a5);
            let o = layer.out.forward_from(ctx, &h, n, ring).await?;
            let a6 = ctx.meter();
            costs.add(LayerKind::Linear, a5, a6);
            x = layer.out_ln.forward(ctx, &x.add(&o)?, n, d, bound).await?;
            costs.add(LayerKind::LayerNorm, a6, ctx.meter());
            if let Some(obs) = observer {
                obs(Progress::Layer { step: 0, layer: l });
            }
        }
        Ok(x)
    })
}

/// The one-hot columns of a batch's real tokens, in batch order, two per token: the word
/// id and, offset by the vocabulary, the token type. What the client shares (or, outside
/// the parties, deals: [`crate::nn::client::deal_hot`]) as rows of `vocab + types`
/// columns.
///
/// # Errors
/// `Misuse` if the batch is malformed or an id or type is outside `vocab` or `types` (no
/// value is named).
pub fn input_columns(batch: &BertBatch, vocab: usize, types: usize) -> Result<Vec<u32>, Error> {
    let rows = batch.batch.checked_mul(batch.seq_len);
    let fits = rows == Some(batch.input_ids.len())
        && rows == Some(batch.token_type_ids.len())
        && rows == Some(batch.attention_mask.len());
    if !fits {
        return Err(Error::misuse(
            "a batch's ids, types and mask differ in length",
        ));
    }
    let vocab32 = u32::try_from(vocab).map_err(|_| Error::misuse("vocabulary too large"))?;
    let mut hot = Vec::new();
    for ((&id, &t), &real) in batch
        .input_ids
        .iter()
        .zip(&batch.token_type_ids)
        .zip(&batch.attention_mask)
    {
        if !real {
            continue;
        }
        if id as usize >= vocab || t as usize >= types {
            return Err(Error::misuse(
                "an input id or token type is outside the model's vocabulary",
            ));
        }
        hot.extend([id, vocab32 + t]);
    }
    Ok(hot)
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
pub fn sentence_embeddings<'a>(
    ctx: &'a mut Ctx,
    hidden: &'a Shares,
    shape: &'a BatchShape,
    d: usize,
) -> BoxedProtocol<'a, Shares> {
    Box::pin(async move {
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
    })
}

/// The pooled output `tanh(pooler(h[first token]))` (`batch × d`) and, with a classifier,
/// the logits (`batch × labels`), from the first tokens' rows `first` (`batch × d`, as
/// [`encode_batch`] returns them with `first_only`, or gathered at
/// [`BatchShape::first_rows`] from its whole output). The first token is each sequence's
/// first real one (position 0 for right padding, as in `transformers`).
///
/// # Errors
/// `Misuse` if the model has no pooler or `first` is not `batch × d`; `Protocol` on a
/// malformed message.
pub fn pool_and_classify<'a>(
    ctx: &'a mut Ctx,
    model: &'a SharedBert,
    first: &'a Shares,
    shape: &'a BatchShape,
) -> BoxedProtocol<'a, (Shares, Option<Shares>)> {
    Box::pin(async move {
        let pooler = model
            .pooler
            .as_ref()
            .ok_or(Error::misuse("the model has no pooler"))?;
        if Some(first.len()) != shape.batch.checked_mul(model.cfg.hidden_size) {
            return Err(Error::misuse("the pooler reads one row per sequence"));
        }
        let p = pooler.forward(ctx, first, shape.batch).await?;
        let pooled = proto::tanh(ctx, &p).await?;
        let logits = match &model.classifier {
            Some(c) => Some(c.forward(ctx, &pooled, shape.batch).await?),
            None => None,
        };
        Ok((pooled, logits))
    })
}

/// The whole secure evaluation: encoder, then what `outputs` asks for, revealed to the
/// client only in one round. Every party passes the same `shape`, `outputs` and
/// `settings`; the client passes its batch.
///
/// # Errors
/// `Misuse` for inputs that do not fit, or for pooled output / logits from a model without
/// pooler / classifier; `Protocol` on a malformed message.
#[allow(clippy::too_many_arguments)]
pub fn run<'a>(
    ctx: &'a mut Ctx,
    model: &'a SharedBert,
    client: impl Into<ClientAt>,
    input: Option<&'a BertBatch>,
    shape: &'a BatchShape,
    outputs: Outputs,
    settings: &'a SecureSettings,
) -> BoxedProtocol<'a, Revealed> {
    run_observed(ctx, model, client, input, shape, outputs, settings, None)
}

/// [`run`], telling `observer` (if any) of each finished encoder layer
/// (`Progress::Layer { step: 0, layer }`, at every party).
///
/// # Errors
/// As [`run`].
#[allow(clippy::too_many_arguments)]
pub fn run_observed<'a>(
    ctx: &'a mut Ctx,
    model: &'a SharedBert,
    client: impl Into<ClientAt>,
    input: Option<&'a BertBatch>,
    shape: &'a BatchShape,
    outputs: Outputs,
    settings: &'a SecureSettings,
    observer: Option<&'a Observer>,
) -> BoxedProtocol<'a, Revealed> {
    run_observed_at(
        ctx,
        model,
        client.into(),
        input,
        shape,
        outputs,
        settings,
        observer,
    )
}

/// [`run_observed`] with the client's place converted. Without type parameters, its boxed
/// body is compiled once, here, whatever type the caller passes as the client.
#[allow(clippy::too_many_arguments)]
fn run_observed_at<'a>(
    ctx: &'a mut Ctx,
    model: &'a SharedBert,
    client: ClientAt,
    input: Option<&'a BertBatch>,
    shape: &'a BatchShape,
    outputs: Outputs,
    settings: &'a SecureSettings,
    observer: Option<&'a Observer>,
) -> BoxedProtocol<'a, Revealed> {
    Box::pin(async move {
        if outputs.logits && model.heads.labels == 0 {
            return Err(Error::misuse("the model has no classification head"));
        }
        let mut costs = LayerCosts::default();
        // Only the pooler reads the last layer: its first tokens are all the encoder makes.
        let first_only = !outputs.hidden && !outputs.embeddings;
        let hidden = encode_batch(
            ctx,
            model,
            &client,
            input,
            (shape, first_only),
            settings,
            &mut costs,
            observer,
        )
        .await?;
        let d = model.cfg.hidden_size;
        let mut parts: Vec<Shares> = Vec::new();
        let mut lens = Vec::new();
        if outputs.hidden {
            lens.push(hidden.len());
            parts.push(hidden.clone());
        }
        let m0 = ctx.meter();
        if outputs.pooled || outputs.logits {
            let gathered;
            let first = if first_only {
                &hidden
            } else {
                gathered = hidden.gather(&shape.first_rows(d))?;
                &gathered
            };
            let (pooled, logits) = pool_and_classify(ctx, model, first, shape).await?;
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
        costs.add(LayerKind::Pooler, m0, m1);
        if outputs.embeddings {
            let e = sentence_embeddings(ctx, &hidden, shape, d).await?;
            lens.push(e.len());
            parts.push(e);
        }
        let m2 = ctx.meter();
        costs.add(LayerKind::MeanPooling, m1, m2);
        let all = Shares::concat(&parts.iter().collect::<Vec<_>>())?;
        let opened = client.give(ctx, all, Delivered::Encoded).await?;
        costs.add(LayerKind::Output, m2, ctx.meter());
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
    })
}
