//! The one decoder path: a decoder-only Transformer (GPT-2, LLaMA and their kin) described
//! by a public [`DecoderSpec`], shared from the owner's weights through a
//! [`DecoderArch`] (the architecture's wiring: which checkpoint tensor feeds which shared
//! tensor, in which layout), evaluated by one forward pass over a secret-shared KV cache
//! (each further token costs one row of work); the generation loop over it is
//! [`mod@super::generate`].

use std::sync::Arc;

use puma_core::{BoxedProtocol, Ctx, Error, FixedPoint, PartyId, Shares, Summands, Width, proto};

use super::activation::{Activation, mlp_ring};
use super::attention::{self, Heads, KvCache, split_heads, transpose};
use super::cost::{LayerCosts, LayerKind};
use super::embedding::embed;
use super::generate::{Observer, Progress};
use super::linear::Linear;
use super::norm::{Norm, NormKind};
use super::plan::{SharedTensors, TensorPlan, share_plan_observed};
use super::range::{ActivationPeaks, decoder_range_violation};
use super::settings::SecureSettings;
use crate::InputError;
use crate::limits::{self, LimitError};
use puma_core::proto::share_one_hot;

/// How positions enter the model.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Positions {
    /// A learned table of `max_positions × d` added to the token embeddings (GPT-2).
    Learned,
    /// Rotary embeddings of queries and keys with base `theta` (LLaMA).
    Rotary {
        /// The RoPE base.
        theta: f64,
    },
}

/// The public shape of a decoder; every party derives the same from the public config.
/// It serialises (serde) so that a share store can carry it whatever the checkpoint's
/// own config format was.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DecoderSpec {
    /// Vocabulary size.
    pub vocab: usize,
    /// Width of the residual stream.
    pub d: usize,
    /// Number of blocks.
    pub layers: usize,
    /// Attention heads (grouped-query when `kv < q`).
    pub heads: Heads,
    /// Width of the MLP's hidden layer.
    pub inner: usize,
    /// Longest sequence (prompt and generated tokens).
    pub max_positions: usize,
    /// How positions are encoded.
    pub positions: Positions,
    /// The norm before attention and before the MLP in every block.
    pub block_norm: NormKind,
    /// The norm after the last block.
    pub final_norm: NormKind,
    /// Whether the linear layers have biases.
    pub bias: bool,
    /// Whether the MLP is gated (`act(x·W_gate) ⊙ (x·W_up)`, SwiGLU) or plain.
    pub gated: bool,
    /// The MLP's activation.
    pub activation: Activation,
    /// Whether the LM head is the token embedding (tied) or its own tensor.
    pub tied_head: bool,
}

/// A tensor of one block, as the generic decoder names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockTensor {
    /// γ of the norm before attention (`d`).
    AttnNormWeight,
    /// β of the norm before attention (`d`).
    AttnNormBias,
    /// Queries, keys and values side by side, `d × (q_width + 2·kv_width)` (input rows);
    /// the query columns pre-scaled by 1/√head_dim.
    QkvWeight,
    /// Their bias (`q_width + 2·kv_width`, query part pre-scaled).
    QkvBias,
    /// Attention output projection, `q_width × d`.
    AttnOutWeight,
    /// Its bias (`d`).
    AttnOutBias,
    /// γ of the norm before the MLP.
    MlpNormWeight,
    /// β of the norm before the MLP.
    MlpNormBias,
    /// MLP input, `d × inner`, or `d × 2·inner` with each row's gate then up columns.
    MlpInWeight,
    /// Its bias.
    MlpInBias,
    /// MLP output, `inner × d`.
    MlpOutWeight,
    /// Its bias (`d`).
    MlpOutBias,
}

/// A shared tensor of a decoder, as the generic decoder names it; an architecture's
/// [`DecoderArch::encode`] maps each to its checkpoint's tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecoderTensor {
    /// Token embedding, `vocab × d`.
    Embed,
    /// Learned positions, `max_positions × d`.
    Positions,
    /// A tensor of block `layer`.
    Block {
        /// The block.
        layer: usize,
        /// The tensor.
        part: BlockTensor,
    },
    /// γ of the final norm.
    FinalNormWeight,
    /// β of the final norm.
    FinalNormBias,
    /// An untied LM head, `vocab × d`.
    LmHead,
}

impl DecoderTensor {
    /// The tensor's name in plans and messages.
    pub fn name(&self) -> String {
        match self {
            DecoderTensor::Embed => "embed".into(),
            DecoderTensor::Positions => "positions".into(),
            DecoderTensor::Block { layer, part } => format!("layers.{layer}.{part:?}"),
            DecoderTensor::FinalNormWeight => "final_norm.weight".into(),
            DecoderTensor::FinalNormBias => "final_norm.bias".into(),
            DecoderTensor::LmHead => "lm_head".into(),
        }
    }
}

impl DecoderSpec {
    /// Checks the sizes are consistent and within the model size limits.
    ///
    /// # Errors
    /// `Misuse` naming no value: zero sizes, heads that do not divide, a size beyond
    /// [`crate::limits`] (see [`DecoderSpec::check_limits`] for which).
    pub fn validate(&self) -> Result<(), Error> {
        let h = self.heads;
        let ok = self.vocab > 0
            && self.d > 0
            && self.layers > 0
            && self.inner > 0
            && self.max_positions > 0
            && h.q > 0
            && h.kv > 0
            && h.dim > 0
            && h.q % h.kv == 0
            && (!matches!(self.positions, Positions::Rotary { .. }) || h.dim % 2 == 0);
        if !ok {
            return Err(Error::misuse("the decoder's shape is inconsistent"));
        }
        self.check_limits()
            .map_err(|_| Error::misuse("the decoder exceeds the model size limits"))
    }

    /// Checks every size against [`crate::limits`], the widths before the parameter count
    /// (so that nothing is allocated for an oversized spec).
    ///
    /// # Errors
    /// A [`LimitError`] naming the spec's field (`layers`, `vocab`, `d`, `inner`,
    /// `max_positions`, `heads.q`, `heads.kv`, `heads.dim`, `heads.q · heads.dim`,
    /// `heads.kv · heads.dim`) or `parameters`.
    pub fn check_limits(&self) -> Result<(), LimitError> {
        let h = self.heads;
        limits::check(&[
            ("layers", self.layers, limits::MAX_LAYERS),
            ("vocab", self.vocab, limits::MAX_VOCAB),
            ("d", self.d, limits::MAX_WIDTH),
            ("inner", self.inner, limits::MAX_WIDTH),
            ("max_positions", self.max_positions, limits::MAX_POSITIONS),
            ("heads.q", h.q, limits::MAX_WIDTH),
            ("heads.kv", h.kv, limits::MAX_WIDTH),
            ("heads.dim", h.dim, limits::MAX_WIDTH),
            (
                "heads.q · heads.dim",
                h.q.saturating_mul(h.dim),
                limits::MAX_WIDTH,
            ),
            (
                "heads.kv · heads.dim",
                h.kv.saturating_mul(h.dim),
                limits::MAX_WIDTH,
            ),
        ])?;
        limits::check_parameters(self.parameters().ok())
    }

    /// The number of shared parameters (a tied LM head once).
    ///
    /// # Errors
    /// `Misuse` if a size overflows.
    pub fn parameters(&self) -> Result<usize, Error> {
        self.tensors()?
            .iter()
            .try_fold(0usize, |acc, (_, n)| acc.checked_add(*n))
            .ok_or(Error::misuse("the decoder's size overflows"))
    }

    /// Checks a prompt as generation needs it: not empty, ids below the vocabulary, and
    /// `prompt.len() + max_new` within the model's positions.
    ///
    /// # Errors
    /// [`InputError::Empty`], [`InputError::TooLong`] or [`InputError::TokenOutOfRange`]
    /// naming the first bad id.
    pub fn check_prompt(&self, prompt: &[u32], max_new: usize) -> Result<(), InputError> {
        if prompt.is_empty() {
            return Err(InputError::Empty);
        }
        let len = prompt.len().saturating_add(max_new);
        if len > self.max_positions {
            return Err(InputError::TooLong {
                len,
                n_positions: self.max_positions,
            });
        }
        match prompt
            .iter()
            .enumerate()
            .find(|(_, id)| **id as usize >= self.vocab)
        {
            Some((position, &id)) => Err(InputError::TokenOutOfRange {
                position,
                id,
                vocab_size: self.vocab,
            }),
            None => Ok(()),
        }
    }

    /// The rounds [`SharedDecoder::share`] takes: one per chunk of
    /// [`SHARE_CHUNK_WORDS`](super::SHARE_CHUNK_WORDS) parameters, at least one.
    ///
    /// # Errors
    /// `Misuse` if a size overflows.
    pub fn share_rounds(&self) -> Result<usize, Error> {
        Ok(self.parameters()?.div_ceil(super::SHARE_CHUNK_WORDS).max(1))
    }

    /// The names and lengths of [`DecoderSpec::tensors`]: what [`SharedDecoder::share`]
    /// shares and [`SharedDecoder::from_tensors`] takes.
    ///
    /// # Errors
    /// As [`DecoderSpec::tensors`].
    pub fn plan(&self) -> Result<TensorPlan, Error> {
        let mut plan = TensorPlan::new();
        for (t, n) in self.tensors()? {
            plan.push(t.name(), n);
        }
        Ok(plan)
    }

    /// Every shared tensor with its length, in sharing order.
    ///
    /// # Errors
    /// `Misuse` if a size overflows or there are more than
    /// [`MAX_LAYERS`](crate::limits::MAX_LAYERS) blocks.
    pub fn tensors(&self) -> Result<Vec<(DecoderTensor, usize)>, Error> {
        // The list has a dozen entries per block: bound it before building it.
        if self.layers > limits::MAX_LAYERS {
            return Err(Error::misuse("the decoder exceeds the model size limits"));
        }
        let over = || Error::misuse("the decoder's size overflows");
        let mul = |a: usize, b: usize| a.checked_mul(b).ok_or_else(over);
        let (d, h) = (self.d, self.heads);
        let qkv = h
            .q_width()
            .checked_add(mul(2, h.kv_width())?)
            .ok_or_else(over)?;
        let mlp_in = if self.gated {
            mul(2, self.inner)?
        } else {
            self.inner
        };
        let mut out = vec![(DecoderTensor::Embed, mul(self.vocab, d)?)];
        if self.positions == Positions::Learned {
            out.push((DecoderTensor::Positions, mul(self.max_positions, d)?));
        }
        for layer in 0..self.layers {
            let mut part = |p: BlockTensor, n: usize, present: bool| {
                if present {
                    out.push((DecoderTensor::Block { layer, part: p }, n));
                }
            };
            let (nw, nb) = (self.block_norm.has_weight(), self.block_norm.has_bias());
            part(BlockTensor::AttnNormWeight, d, nw);
            part(BlockTensor::AttnNormBias, d, nb);
            part(BlockTensor::QkvWeight, mul(d, qkv)?, true);
            part(BlockTensor::QkvBias, qkv, self.bias);
            part(BlockTensor::AttnOutWeight, mul(h.q_width(), d)?, true);
            part(BlockTensor::AttnOutBias, d, self.bias);
            part(BlockTensor::MlpNormWeight, d, nw);
            part(BlockTensor::MlpNormBias, d, nb);
            part(BlockTensor::MlpInWeight, mul(d, mlp_in)?, true);
            part(BlockTensor::MlpInBias, mlp_in, self.bias);
            part(BlockTensor::MlpOutWeight, mul(self.inner, d)?, true);
            part(BlockTensor::MlpOutBias, d, self.bias);
        }
        if self.final_norm.has_weight() {
            out.push((DecoderTensor::FinalNormWeight, d));
        }
        if self.final_norm.has_bias() {
            out.push((DecoderTensor::FinalNormBias, d));
        }
        if !self.tied_head {
            out.push((DecoderTensor::LmHead, mul(self.vocab, d)?));
        }
        Ok(out)
    }
}

/// A decoder architecture's wiring: its public spec from its config, and the owner's
/// encoding of each generic tensor from its checkpoint's weights.
pub trait DecoderArch {
    /// The owner's plaintext weights.
    type Weights;

    /// The public shape.
    ///
    /// # Errors
    /// `Misuse` if the config is not a valid model of this architecture.
    fn spec(&self) -> Result<DecoderSpec, Error>;

    /// Owner side: whether the weights fit the config (checked before anything is sent).
    ///
    /// # Errors
    /// `Misuse` if they do not.
    fn check(&self, weights: &Self::Weights) -> Result<(), Error>;

    /// The checkpoint's name of tensor `t`, for errors the owner sees (by default the
    /// generic [`DecoderTensor::name`]).
    fn tensor_name(&self, t: DecoderTensor) -> String {
        t.name()
    }

    /// Owner side: the plaintext model's [`ActivationPeaks`] on `ids`, for the range
    /// check before sharing ([`super::range::decoder_range_check`]); `None` for an
    /// architecture without a plaintext model.
    ///
    /// # Errors
    /// `Misuse` if the plaintext model cannot run `ids` on these weights.
    fn activation_peaks(
        &self,
        weights: &Arc<Self::Weights>,
        ids: &[u32],
    ) -> Result<Option<ActivationPeaks>, Error> {
        let _ = (weights, ids);
        Ok(None)
    }

    /// Owner side: tensor `t` encoded at `fx` in the layout [`DecoderTensor`] and
    /// [`BlockTensor`] prescribe.
    ///
    /// # Errors
    /// `Misuse` if a value does not fit the fixed-point format.
    fn encode(
        &self,
        weights: &Self::Weights,
        t: DecoderTensor,
        fx: FixedPoint,
    ) -> Result<Vec<u64>, Error>;
}

/// The owner's weights of some architecture, as the sharing reads them: one tensor at a
/// time, encoded. A trait object, so that the sharing's body ([`SharedDecoder::share`],
/// [`super::streamed::prompt_step_streamed`]) has no type parameter and is compiled once,
/// in this crate, instead of once per architecture in every crate that shares a model
/// (docs/ARCHITECTURE.md, The engine contract).
pub(super) trait EncodeTensor: Send + Sync {
    /// Tensor `t` encoded at `fx`, as [`DecoderArch::encode`].
    fn encode(&self, t: DecoderTensor, fx: FixedPoint) -> Result<Vec<u64>, Error>;
}

/// An architecture and the owner's weights for it.
struct ArchWeights<'a, A: DecoderArch> {
    arch: &'a A,
    weights: &'a A::Weights,
}

impl<A> EncodeTensor for ArchWeights<'_, A>
where
    A: DecoderArch + Sync,
    A::Weights: Sync,
{
    fn encode(&self, t: DecoderTensor, fx: FixedPoint) -> Result<Vec<u64>, Error> {
        self.arch.encode(self.weights, t, fx)
    }
}

/// The owner's tensors in sharing order, each encoded when the sharing asks for it. (A
/// named type rather than a closure: the sharing future holds it across awaits and must
/// stay `Send`.)
pub(super) struct OwnerTensors<'a> {
    pub(super) source: &'a dyn EncodeTensor,
    pub(super) tensors: std::slice::Iter<'a, (DecoderTensor, usize)>,
    pub(super) fx: FixedPoint,
}

impl Iterator for OwnerTensors<'_> {
    type Item = Result<Vec<u64>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        let (t, _) = self.tensors.next()?;
        Some(self.source.encode(*t, self.fx))
    }
}

/// One block's shared layers.
pub(super) struct Block {
    attn_norm: Norm,
    qkv: Linear,
    attn_out: Linear,
    mlp_norm: Norm,
    mlp_in: Linear,
    mlp_out: Linear,
}

impl Block {
    /// Block `layer` of a decoder of shape `spec`, its tensors taken out of `shared`.
    ///
    /// # Errors
    /// `Bug` if `shared` lacks one of them (it was checked against the plan).
    pub(super) fn take(
        spec: &DecoderSpec,
        layer: usize,
        shared: &mut SharedTensors,
    ) -> Result<Block, Error> {
        let (d, h) = (spec.d, spec.heads);
        let qkv_width = h.q_width() + 2 * h.kv_width();
        let mlp_in = if spec.gated {
            2 * spec.inner
        } else {
            spec.inner
        };
        let mut take = |part: BlockTensor, present: bool| {
            shared.take_if(present, &DecoderTensor::Block { layer, part }.name())
        };
        let (nw, nb, b) = (
            spec.block_norm.has_weight(),
            spec.block_norm.has_bias(),
            spec.bias,
        );
        let attn_norm = spec.block_norm.build(
            take(BlockTensor::AttnNormWeight, nw)?,
            take(BlockTensor::AttnNormBias, nb)?,
        )?;
        let qkv = Linear::new(
            take(BlockTensor::QkvWeight, true)?.ok_or(Error::bug("qkv missing"))?,
            take(BlockTensor::QkvBias, b)?,
            d,
            qkv_width,
        )?;
        let attn_out = Linear::new(
            take(BlockTensor::AttnOutWeight, true)?.ok_or(Error::bug("attn_out missing"))?,
            take(BlockTensor::AttnOutBias, b)?,
            h.q_width(),
            d,
        )?;
        let mlp_norm = spec.block_norm.build(
            take(BlockTensor::MlpNormWeight, nw)?,
            take(BlockTensor::MlpNormBias, nb)?,
        )?;
        let mlp_in = Linear::new(
            take(BlockTensor::MlpInWeight, true)?.ok_or(Error::bug("mlp_in missing"))?,
            take(BlockTensor::MlpInBias, b)?,
            d,
            mlp_in,
        )?;
        let mlp_out = Linear::new(
            take(BlockTensor::MlpOutWeight, true)?.ok_or(Error::bug("mlp_out missing"))?,
            take(BlockTensor::MlpOutBias, b)?,
            spec.inner,
            d,
        )?;
        Ok(Block {
            attn_norm,
            qkv,
            attn_out,
            mlp_norm,
            mlp_in,
            mlp_out,
        })
    }
}

/// One party's shares of a decoder.
pub struct SharedDecoder {
    spec: DecoderSpec,
    /// `vocab × d`: embeds one-hot rows, and is the LM head when tied (logits are computed
    /// as `E · hᵀ`, so no transposed copy is stored).
    embed: Shares,
    positions: Option<Shares>,
    blocks: Vec<Block>,
    pub(super) final_norm: Norm,
    head: Option<Shares>,
}

impl std::fmt::Debug for SharedDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SharedDecoder {{ party: {}, layers: {} }}",
            self.embed.party(),
            self.blocks.len()
        )
    }
}

impl SharedDecoder {
    /// Shares a decoder: `owner` passes its weights (`Some` only there), every party the
    /// same public config. The tensors are encoded one at a time as they are sent and
    /// streamed in bounded chunks ([`share_plan`](super::plan::share_plan)).
    ///
    /// Rounds: `max(1, ⌈P / SHARE_CHUNK_WORDS⌉)` for `P` parameters. Bytes: 8 per
    /// parameter from the owner (a tied LM head once).
    ///
    /// # Errors
    /// `Misuse` for an invalid config, or weights that do not match it or do not fit the
    /// fixed-point format; `Protocol` on a malformed message.
    pub fn share<'a, A>(
        ctx: &'a mut Ctx,
        owner: PartyId,
        arch: &'a A,
        weights: Option<&'a A::Weights>,
    ) -> BoxedProtocol<'a, SharedDecoder>
    where
        A: DecoderArch + Sync,
        A::Weights: Sync,
    {
        Self::share_observed(ctx, owner, arch, weights, None)
    }

    /// [`SharedDecoder::share`], telling `observer` (if any) how far the sharing has come
    /// at this party ([`ShareProgress`](super::plan::ShareProgress), after each chunk).
    ///
    /// # Errors
    /// As [`SharedDecoder::share`].
    pub fn share_observed<'a, A>(
        ctx: &'a mut Ctx,
        owner: PartyId,
        arch: &'a A,
        weights: Option<&'a A::Weights>,
        observer: Option<&'a super::plan::ShareObserver>,
    ) -> BoxedProtocol<'a, SharedDecoder>
    where
        A: DecoderArch + Sync,
        A::Weights: Sync,
    {
        // Only these checks need the architecture's type; the box below has none.
        let prepared = prepare_owner(ctx, owner, arch, weights, |_| Ok(()));
        share_prepared(ctx, owner, prepared, observer)
    }

    /// A decoder of shape `spec` built from one party's shares of its tensors (named as
    /// [`DecoderSpec::plan`] names them): from [`SharedDecoder::share`], a share store
    /// ([`crate::store`]) or an outside dealer.
    ///
    /// # Errors
    /// `Misuse` for an invalid spec or tensors that do not fit its plan (callers that want
    /// the tensor named check with [`SharedTensors::check`] first).
    pub fn from_tensors(
        spec: DecoderSpec,
        mut shared: SharedTensors,
    ) -> Result<SharedDecoder, Error> {
        spec.validate()?;
        shared.check(&spec.plan()?).map_err(|_| {
            Error::misuse(
                "the shared tensors do not fit the decoder's plan \
                 (SharedTensors::check names the tensor)",
            )
        })?;
        let mut blocks = Vec::with_capacity(spec.layers);
        for layer in 0..spec.layers {
            blocks.push(Block::take(&spec, layer, &mut shared)?);
        }
        let final_norm = take_final_norm(&spec, &mut shared)?;
        Ok(SharedDecoder {
            embed: shared.take(&DecoderTensor::Embed.name())?,
            positions: shared.take_if(
                spec.positions == Positions::Learned,
                &DecoderTensor::Positions.name(),
            )?,
            head: shared.take_if(!spec.tied_head, &DecoderTensor::LmHead.name())?,
            blocks,
            final_norm,
            spec,
        })
    }

    /// The public shape.
    pub fn spec(&self) -> &DecoderSpec {
        &self.spec
    }

    /// The party whose shares these are.
    pub fn party(&self) -> PartyId {
        self.embed.party()
    }

    /// This party's shares of every tensor, named and ordered as [`DecoderSpec::plan`]
    /// lists them: what a share store saves ([`crate::store::write`]) and
    /// [`SharedDecoder::from_tensors`] takes back.
    ///
    /// # Errors
    /// `Misuse` if the spec's sizes overflow (they were validated when the model was
    /// built, so only a bug gets here).
    pub fn tensors(&self) -> Result<Vec<(String, &Shares)>, Error> {
        self.spec
            .tensors()?
            .into_iter()
            .map(|(t, _)| {
                let shares = self
                    .tensor(t)
                    .ok_or(Error::bug("a decoder lacks a tensor of its spec"))?;
                Ok((t.name(), shares))
            })
            .collect()
    }

    /// Tensor `t`, if the model has it.
    fn tensor(&self, t: DecoderTensor) -> Option<&Shares> {
        use BlockTensor as B;
        match t {
            DecoderTensor::Embed => Some(&self.embed),
            DecoderTensor::Positions => self.positions.as_ref(),
            DecoderTensor::Block { layer, part } => {
                let b = self.blocks.get(layer)?;
                match part {
                    B::AttnNormWeight => b.attn_norm.weight(),
                    B::AttnNormBias => b.attn_norm.bias(),
                    B::QkvWeight => Some(b.qkv.weight()),
                    B::QkvBias => b.qkv.bias(),
                    B::AttnOutWeight => Some(b.attn_out.weight()),
                    B::AttnOutBias => b.attn_out.bias(),
                    B::MlpNormWeight => b.mlp_norm.weight(),
                    B::MlpNormBias => b.mlp_norm.bias(),
                    B::MlpInWeight => Some(b.mlp_in.weight()),
                    B::MlpInBias => b.mlp_in.bias(),
                    B::MlpOutWeight => Some(b.mlp_out.weight()),
                    B::MlpOutBias => b.mlp_out.bias(),
                }
            }
            DecoderTensor::FinalNormWeight => self.final_norm.weight(),
            DecoderTensor::FinalNormBias => self.final_norm.bias(),
            DecoderTensor::LmHead => self.head.as_ref(),
        }
    }

    pub(super) fn head(&self) -> &Shares {
        self.head.as_ref().unwrap_or(&self.embed)
    }

    /// The embeddings of one-hot rows (`positions.len() × vocab`), row i at position
    /// `positions[i]`.
    pub(super) async fn embed_rows(
        &self,
        ctx: &mut Ctx,
        one_hot: &Shares,
        positions: &[usize],
    ) -> Result<Shares, Error> {
        embed_rows_with(
            ctx,
            &self.spec,
            (&self.embed, self.positions.as_ref()),
            one_hot,
            positions,
        )
        .await
    }

    /// The logits (`rows × vocab`) of the residual stream's `rows × d` rows `hidden`: the
    /// final norm, then the head.
    pub(super) async fn logits(
        &self,
        ctx: &mut Ctx,
        hidden: &Shares,
        rows: usize,
        settings: &SecureSettings,
        costs: &mut LayerCosts,
    ) -> Result<Shares, Error> {
        let output = (&self.final_norm, self.head());
        logits_with(ctx, &self.spec, output, hidden, rows, settings, costs).await
    }

    /// Evaluates the blocks on `x`, the new rows of a batch of sequences: sequence s has
    /// `rows[s]` rows at positions `caches[s].len()..` (rows in sequence order), attends
    /// over its own cache only, and extends it. All sequences share every round. Returns
    /// the residual stream before the final norm of the rows whose output is read: the
    /// last `out_rows[s]` of each sequence, in sequence order (the last block computes no
    /// other row after its keys and values; see [`StepLayout::new`]).
    ///
    /// # Errors
    /// `Misuse` unless each sequence reads 1 to `rows[s]` rows; `Protocol` on a malformed
    /// message.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn blocks_forward(
        &self,
        ctx: &mut Ctx,
        mut x: Shares,
        caches: &mut [&mut KvCache],
        (seq_rows, out_rows): (&[usize], &[usize]),
        settings: &SecureSettings,
        costs: &mut LayerCosts,
        step: usize,
        observer: Option<&Observer>,
    ) -> Result<Shares, Error> {
        let layout = StepLayout::new(ctx, &self.spec, caches, seq_rows, out_rows)?;
        let layers = self.blocks.len();
        for (layer, blk) in self.blocks.iter().enumerate() {
            let last = layer + 1 == layers;
            x = blk
                .forward(
                    ctx,
                    &self.spec,
                    &layout,
                    (layer, last),
                    x,
                    caches,
                    settings,
                    costs,
                )
                .await?;
            if let Some(obs) = observer {
                obs(Progress::Layer { step, layer });
            }
        }
        layout.advance(caches);
        Ok(x)
    }
}

/// What every block of one step shares: the rows' positions and the gather indices of
/// heads, sequences and the gated MLP's halves, and the rotary maps (which depend on the
/// positions only).
pub(super) struct StepLayout {
    seq_rows: Vec<usize>,
    rows: usize,
    firsts: Vec<usize>,
    q_idx: Vec<usize>,
    k_idx: Vec<usize>,
    v_idx: Vec<usize>,
    gate_idx: Vec<usize>,
    up_idx: Vec<usize>,
    rope: Option<(RopeMap, RopeMap)>,
    out: Option<OutRows>,
}

/// The rows of a step whose output is read (each sequence's last few), when they are not
/// all of them: the last block makes queries, attention, MLP and residual for these only.
struct OutRows {
    /// Per sequence, how many of its last rows.
    seq_rows: Vec<usize>,
    /// Where each sequence's rows start among them.
    firsts: Vec<usize>,
    /// Their indices among the step's rows, in order.
    rows: Vec<usize>,
    /// Gather indices of their queries in the `[q | k | v]` projection, `heads × rows × dim`.
    q_idx: Vec<usize>,
    /// The rotary map of their queries.
    rope_q: Option<RopeMap>,
}

impl OutRows {
    /// Gather indices of their elements in the step's rows of width `d`.
    fn elements(&self, d: usize) -> Vec<usize> {
        self.rows.iter().flat_map(|&i| i * d..(i + 1) * d).collect()
    }
}

impl StepLayout {
    /// The layout of a step whose sequence s adds `seq_rows[s]` rows to `caches[s]` and
    /// whose output is read on its last `out_rows[s]` rows only (the pick after the last
    /// token and after each draft). Every block needs every row's keys and values, but no
    /// later layer reads the last block's other rows, so it makes neither their queries
    /// nor anything after the attention: for a prompt of n tokens, n − 1 rows fewer of the
    /// most expensive part of one block (docs/ARCHITECTURE.md, Decoder path).
    ///
    /// # Errors
    /// `Misuse` unless there is one cache, at least one row per sequence and 1 to
    /// `seq_rows[s]` output rows.
    pub(super) fn new(
        ctx: &Ctx,
        spec: &DecoderSpec,
        caches: &[&mut KvCache],
        seq_rows: &[usize],
        out_rows: &[usize],
    ) -> Result<StepLayout, Error> {
        let h = spec.heads;
        let (qw, kvw) = (h.q_width(), h.kv_width());
        let width = qw + 2 * kvw;
        if caches.len() != seq_rows.len() || seq_rows.contains(&0) {
            return Err(Error::misuse(
                "a batched step needs one cache and at least one row per sequence",
            ));
        }
        if out_rows.len() != seq_rows.len()
            || out_rows
                .iter()
                .zip(seq_rows)
                .any(|(&o, &r)| o == 0 || o > r)
        {
            return Err(Error::misuse(
                "a step reads 1 to all of each sequence's rows",
            ));
        }
        let rows: usize = seq_rows.iter().sum();
        let positions = batch_positions(caches, seq_rows);
        let firsts = attention::starts(seq_rows);
        let out = if out_rows == seq_rows {
            None
        } else {
            let kept: Vec<usize> = firsts
                .iter()
                .zip(seq_rows.iter().zip(out_rows))
                .flat_map(|(&first, (&r, &o))| first + r - o..first + r)
                .collect();
            let rope_q = match spec.positions {
                Positions::Rotary { theta } => {
                    let at: Vec<usize> = kept
                        .iter()
                        .filter_map(|&i| positions.get(i).copied())
                        .collect();
                    Some(RopeMap::new(h.q, &at, h.dim, theta, ctx.fixed())?)
                }
                Positions::Learned => None,
            };
            Some(OutRows {
                seq_rows: out_rows.to_vec(),
                firsts: attention::starts(out_rows),
                q_idx: split_heads(&kept, width, 0, h.q, h.dim),
                rows: kept,
                rope_q,
            })
        };
        let (gate_idx, up_idx): (Vec<usize>, Vec<usize>) = if spec.gated {
            let i = spec.inner;
            (0..rows)
                .flat_map(|r| (0..i).map(move |j| (r * 2 * i + j, r * 2 * i + i + j)))
                .unzip()
        } else {
            (Vec::new(), Vec::new())
        };
        let rope = match spec.positions {
            Positions::Rotary { theta } => {
                let fx = ctx.fixed();
                Some((
                    RopeMap::new(h.q, &positions, h.dim, theta, fx)?,
                    RopeMap::new(h.kv, &positions, h.dim, theta, fx)?,
                ))
            }
            Positions::Learned => None,
        };
        let all: Vec<usize> = (0..rows).collect();
        Ok(StepLayout {
            seq_rows: seq_rows.to_vec(),
            rows,
            // Sequence s's rows within the heads-major layout `heads × rows × dim`.
            firsts,
            q_idx: split_heads(&all, width, 0, h.q, h.dim),
            k_idx: split_heads(&all, width, qw, h.kv, h.dim),
            v_idx: split_heads(&all, width, qw + kvw, h.kv, h.dim),
            gate_idx,
            up_idx,
            rope,
            out,
        })
    }

    /// Extends every cache by its sequence's rows, once all blocks have run.
    pub(super) fn advance(&self, caches: &mut [&mut KvCache]) {
        for (cache, &r) in caches.iter_mut().zip(&self.seq_rows) {
            cache.advance(r);
        }
    }
}

impl Block {
    /// This block, layer `layer` of a decoder of shape `spec`, on the residual stream `x`
    /// of a step laid out as `layout`; returns the stream after it: of every row, or with
    /// `last` (the decoder's last block) of the layout's output rows only.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn forward(
        &self,
        ctx: &mut Ctx,
        spec: &DecoderSpec,
        layout: &StepLayout,
        (layer, last): (usize, bool),
        mut x: Shares,
        caches: &mut [&mut KvCache],
        settings: &SecureSettings,
        costs: &mut LayerCosts,
    ) -> Result<Shares, Error> {
        let (d, h, bound) = (spec.d, spec.heads, settings.residual_bound);
        let rows = layout.rows;
        let blk = self;
        let m0 = ctx.meter();
        let a = blk.attn_norm.forward(ctx, &x, rows, d, bound).await?;
        let m1 = ctx.meter();
        costs.add(blk.attn_norm.kind(), m0, m1);
        let f = ctx.fixed().frac_bits();
        // Queries and keys at f bits above f (learned positions) or, rotated as summands
        // at 2f (the rotation, a public linear map, applies before any truncation), at 2f
        // above f: truncated by that shift in the same two rounds as the values by f, with
        // no truncation of their own (docs/ARCHITECTURE.md, Decoder path).
        let out = layout.out.as_ref().filter(|_| last);
        let s = blk.qkv.summands(ctx, &a, rows).await?;
        let vs = s.gather(&layout.v_idx)?;
        let q_idx = out.map_or(&layout.q_idx, |o| &o.q_idx);
        let (qs, ks) = (s.gather(q_idx)?, s.gather(&layout.k_idx)?);
        drop(s);
        let (qk, shift) = match spec.positions {
            Positions::Learned => (Summands::concat(&[&qs, &ks])?, f),
            Positions::Rotary { .. } => {
                let (rq, rk) = layout
                    .rope
                    .as_ref()
                    .ok_or(Error::bug("rotary tables missing"))?;
                let rq = match out {
                    Some(o) => o
                        .rope_q
                        .as_ref()
                        .ok_or(Error::bug("rotary tables missing"))?,
                    None => rq,
                };
                let rotated = [rq.apply_summands(&qs)?, rk.apply_summands(&ks)?];
                (Summands::concat(&[&rotated[0], &rotated[1]])?, 2 * f)
            }
        };
        drop((qs, ks));
        let (qk, v) = attention::finish_qkv(ctx, qk, shift, vs).await?;
        // The rows with queries (all, or the output rows of the last block), per sequence.
        let (q_rows, q_firsts, q_seq_rows) = match out {
            Some(o) => (o.rows.len(), &o.firsts, &o.seq_rows),
            None => (rows, &layout.firsts, &layout.seq_rows),
        };
        let (q, k) = qk.split_at(h.q * q_rows * h.dim)?;
        costs.add(LayerKind::Linear, m1, ctx.meter());
        // Each sequence attends over its own cache; the sequences share the rounds.
        let mut forks: Vec<Ctx> = caches.iter().map(|_| ctx.fork()).collect();
        let mut seq_costs = vec![LayerCosts::default(); caches.len()];
        let mut inputs = Vec::with_capacity(caches.len());
        for ((&first, &r), (&q_first, &qr)) in layout
            .firsts
            .iter()
            .zip(&layout.seq_rows)
            .zip(q_firsts.iter().zip(q_seq_rows))
        {
            inputs.push((
                q.gather(&rows_of_heads(h.q, q_rows, q_first, qr, h.dim))?,
                k.gather(&rows_of_heads(h.kv, rows, first, r, h.dim))?,
                v.gather(&rows_of_heads(h.kv, rows, first, r, h.dim))?,
                (r, qr),
            ));
        }
        let outs = puma_core::try_join_all(
            forks
                .iter_mut()
                .zip(caches.iter_mut())
                .zip(seq_costs.iter_mut())
                .zip(&inputs)
                .map(|(((c, cache), sc), (q, k, v, shape))| {
                    let exp = settings.softmax_exp;
                    attention::causal(c, h, (q, k, v), *shape, cache, layer, exp, sc)
                })
                .collect(),
        )
        .await?;
        // Meters count the whole session, so the sequences, running in lockstep, each
        // measured all of it: one reading is the layer's cost (up to the few extra
        // rounds of a longer sequence's softmax, which land in the next kind).
        if let Some(first) = seq_costs.first() {
            costs.merge(first);
        }
        let attn = Shares::concat(&outs.iter().collect::<Vec<_>>())?;
        let m3 = ctx.meter();
        // From here on, only the rows with queries.
        let rows = q_rows;
        let o = blk.attn_out.forward(ctx, &attn, rows).await?;
        if let Some(kept) = out {
            x = x.gather(&kept.elements(d))?;
        }
        x = x.add(&o)?;
        let m4 = ctx.meter();
        costs.add(LayerKind::Linear, m3, m4);
        let a2 = blk.mlp_norm.forward(ctx, &x, rows, d, bound).await?;
        let m5 = ctx.meter();
        costs.add(blk.mlp_norm.kind(), m4, m5);
        // After the activation, the MLP's products are summed in the narrow ring of
        // MLP_RING_BITS: the gate is made over Z_2^64 (the activation needs it whole), the
        // up projection only in that ring, like the activation's result, their product
        // and the output projection's input. A plain MLP's first projection is truncated
        // into the ring its activation reads (Z_2^46 for the precise GeLU at f = 18).
        let ring = mlp_ring()?;
        let input = if spec.gated {
            Width::W64
        } else {
            spec.activation.input_ring(settings, f)?
        };
        let (act_in, up) = if spec.gated {
            let s = blk.mlp_in.summands(ctx, &a2, rows).await?;
            // The halves' indices run row by row: those of the first `rows` rows lead.
            let n = rows * spec.inner;
            let (gate_idx, up_idx) = (
                layout.gate_idx.get(..n).ok_or(Error::bug("gate indices"))?,
                layout.up_idx.get(..n).ok_or(Error::bug("up indices"))?,
            );
            let (gs, us) = (s.gather(gate_idx)?, s.gather(up_idx)?);
            drop(s);
            let (mut cg, mut cu) = (ctx.fork(), ctx.fork());
            let (gate, up) = puma_core::try_join(
                proto::reshare_trunc_summands(&mut cg, gs, Width::W64, f, Width::W64),
                proto::reshare_trunc_summands(&mut cu, us, Width::W64, f, ring),
            )
            .await?;
            (gate, Some(up))
        } else {
            (blk.mlp_in.forward_into(ctx, &a2, rows, input).await?, None)
        };
        let m6 = ctx.meter();
        costs.add(LayerKind::Linear, m5, m6);
        let act = spec
            .activation
            .forward_into(ctx, &act_in, settings, (input, ring))
            .await?;
        let m7 = ctx.meter();
        costs.add(spec.activation.kind(), m6, m7);
        let act = match up {
            Some(up) => {
                let s = proto::mul_summands(&act, &up)?;
                proto::reshare_trunc_summands(ctx, s, ring, f, ring).await?
            }
            None => act,
        };
        let mlp = blk.mlp_out.forward_from(ctx, &act, rows, ring).await?;
        x = x.add(&mlp)?;
        costs.add(LayerKind::Linear, m7, ctx.meter());
        Ok(x)
    }
}

/// The final norm of a decoder of shape `spec`, its tensors taken out of `shared`.
///
/// # Errors
/// `Bug` if `shared` lacks one of them (it was checked against the plan).
pub(super) fn take_final_norm(
    spec: &DecoderSpec,
    shared: &mut SharedTensors,
) -> Result<Norm, Error> {
    spec.final_norm.build(
        shared.take_if(
            spec.final_norm.has_weight(),
            &DecoderTensor::FinalNormWeight.name(),
        )?,
        shared.take_if(
            spec.final_norm.has_bias(),
            &DecoderTensor::FinalNormBias.name(),
        )?,
    )
}

/// The owner's weights, checked against the protocols' ranges (`None` at the other
/// parties): callers that want the tensor named call `decoder_range_violation` first; this
/// is the backstop that keeps garbage from being computed.
///
/// # Errors
/// `Misuse` if a weight leaves the supported range or does not fit the config.
pub(super) fn owner_weights<'w, A: DecoderArch>(
    ctx: &Ctx,
    owner: PartyId,
    arch: &A,
    weights: Option<&'w A::Weights>,
) -> Result<Option<&'w A::Weights>, Error> {
    match weights {
        Some(w) if ctx.me() == owner => {
            if decoder_range_violation(arch, w, ctx.fixed())?.is_some() {
                return Err(Error::misuse(
                    "a weight leaves the range the protocols support \
                     (puma_layers::nn::range::decoder_range_violation names it)",
                ));
            }
            Ok(Some(w))
        }
        _ => Ok(None),
    }
}

/// What the sharing's boxed bodies take once the checks that need the architecture's type
/// are done: the spec, and at the owner its weights behind [`EncodeTensor`].
pub(super) type Prepared<'a> = Result<(DecoderSpec, Option<Box<dyn EncodeTensor + 'a>>), Error>;

/// The checks before sharing a decoder of architecture `arch`: its spec is valid, passes
/// the caller's own `check`, and at the owner the weights pass [`owner_weights`].
pub(super) fn prepare_owner<'a, A>(
    ctx: &Ctx,
    owner: PartyId,
    arch: &'a A,
    weights: Option<&'a A::Weights>,
    check: impl FnOnce(&DecoderSpec) -> Result<(), Error>,
) -> Prepared<'a>
where
    A: DecoderArch + Sync,
    A::Weights: Sync,
{
    let spec = arch.spec()?;
    spec.validate()?;
    check(&spec)?;
    let source = owner_weights(ctx, owner, arch, weights)?.map(|weights| {
        let source: Box<dyn EncodeTensor + 'a> = Box::new(ArchWeights { arch, weights });
        source
    });
    Ok((spec, source))
}

/// The body of [`SharedDecoder::share_observed`] once the owner's weights are checked.
fn share_prepared<'a>(
    ctx: &'a mut Ctx,
    owner: PartyId,
    prepared: Prepared<'a>,
    observer: Option<&'a super::plan::ShareObserver>,
) -> BoxedProtocol<'a, SharedDecoder> {
    Box::pin(async move {
        let (spec, source) = prepared?;
        let tensors = spec.tensors()?;
        let plan = spec.plan()?;
        let fx = ctx.fixed();
        let encoded = source.as_deref().map(|source| OwnerTensors {
            source,
            tensors: tensors.iter(),
            fx,
        });
        let shared = share_plan_observed(ctx, owner, &plan, encoded, observer).await?;
        SharedDecoder::from_tensors(spec, shared)
    })
}

/// The embeddings of one-hot rows (`positions.len() × vocab`) by a decoder of shape
/// `spec` whose input tensors are `(embed, positions)`, row i at position `positions[i]`.
pub(super) async fn embed_rows_with(
    ctx: &mut Ctx,
    spec: &DecoderSpec,
    (table, learned): (&Shares, Option<&Shares>),
    one_hot: &Shares,
    positions: &[usize],
) -> Result<Shares, Error> {
    let d = spec.d;
    let x = embed(ctx, one_hot, table, positions.len(), spec.vocab, d).await?;
    match learned {
        Some(p) => {
            let idx: Vec<usize> = positions.iter().flat_map(|&t| t * d..(t + 1) * d).collect();
            x.add(&p.gather(&idx)?)
        }
        None => Ok(x),
    }
}

/// The logits (`rows × vocab`) of the residual stream's `rows × d` rows `hidden` by a
/// decoder of shape `spec` whose output layers are `(final_norm, head)`.
pub(super) async fn logits_with(
    ctx: &mut Ctx,
    spec: &DecoderSpec,
    (final_norm, head): (&Norm, &Shares),
    hidden: &Shares,
    rows: usize,
    settings: &SecureSettings,
    costs: &mut LayerCosts,
) -> Result<Shares, Error> {
    let (d, v) = (spec.d, spec.vocab);
    let m0 = ctx.meter();
    let normed = final_norm
        .forward(ctx, hidden, rows, d, settings.residual_bound)
        .await?;
    let m1 = ctx.meter();
    costs.add(final_norm.kind(), m0, m1);
    // Logitsᵀ = head · hiddenᵀ (`vocab × rows`), then back to `rows × vocab`: two local
    // permutations of small matrices instead of a stored transpose of the head.
    let hidden_t = normed.gather(&transpose(rows, d))?;
    let logits_t = proto::matmul_fixed(ctx, head, &hidden_t, v, d, rows).await?;
    let logits = logits_t.gather(&transpose(v, rows))?;
    costs.add(LayerKind::LmHead, m1, ctx.meter());
    Ok(logits)
}

/// The positions of a batched step's rows: sequence s's `seq_rows[s]` rows continue its
/// cache.
fn batch_positions(caches: &[&mut KvCache], seq_rows: &[usize]) -> Vec<usize> {
    caches
        .iter()
        .zip(seq_rows)
        .flat_map(|(c, &r)| c.len()..c.len() + r)
        .collect()
}

/// Gather indices of rows `first..first + rows` of every head in a `heads × total × dim`
/// layout, as a `heads × rows × dim` layout.
fn rows_of_heads(heads: usize, total: usize, first: usize, rows: usize, dim: usize) -> Vec<usize> {
    (0..heads)
        .flat_map(|hh| {
            let base = (hh * total + first) * dim;
            base..base + rows * dim
        })
        .collect()
}

/// The rotary embedding of vectors laid out as `heads × rows × dim` (row i at position
/// `positions[i]`) as a public linear map: out = x·C + swap(x)·S' with C, S' at f bits
/// (local); the caller truncates by f, batched.
struct RopeMap {
    cs: Vec<u64>,
    ss: Vec<u64>,
    swap: Vec<usize>,
}

impl RopeMap {
    fn new(
        heads: usize,
        positions: &[usize],
        dim: usize,
        theta: f64,
        fx: FixedPoint,
    ) -> Result<RopeMap, Error> {
        let half = dim / 2;
        let rows = positions.len();
        let n = heads * rows * dim;
        let mut map = RopeMap {
            cs: Vec::with_capacity(n),
            ss: Vec::with_capacity(n),
            swap: Vec::with_capacity(n),
        };
        let angles: Vec<(Vec<f64>, Vec<f64>)> = positions
            .iter()
            .map(|&t| crate::llama::rope::cos_sin(t, dim, theta))
            .collect();
        for h in 0..heads {
            for (i, (cos, sin)) in angles.iter().enumerate() {
                let base = (h * rows + i) * dim;
                for c in 0..dim {
                    let p = c % half.max(1);
                    let (cv, sv) = (
                        cos.get(p).copied().unwrap_or(1.0),
                        sin.get(p).copied().unwrap_or(0.0),
                    );
                    map.cs.push(fx.encode(cv)?);
                    // x'[c] = x[c]·cos − x[c+half]·sin (c < half); x[c]·cos + x[c−half]·sin.
                    if c < half {
                        map.ss.push(fx.encode(-sv)?);
                        map.swap.push(base + c + half);
                    } else {
                        map.ss.push(fx.encode(sv)?);
                        map.swap.push(base + c - half);
                    }
                }
            }
        }
        Ok(map)
    }

    /// x·C + swap(x)·S' on a product's summands, before its truncation.
    fn apply_summands(&self, x: &Summands) -> Result<Summands, Error> {
        x.mul_public(&self.cs)?
            .add(&x.gather(&self.swap)?.mul_public(&self.ss)?)
    }
}

/// One forward pass over a whole sequence, revealing the logits of **every** position to
/// the client (for perplexity and element-wise checks against a reference). The client
/// passes its ids (`Some` at the client only); `len` is public. Returns the `len × vocab`
/// logits (row-major) at the client and `None` elsewhere.
///
/// # Errors
/// `Misuse` for an empty or too long input or ids outside the vocabulary; `Protocol` on a
/// malformed message.
pub fn forward_logits<'a>(
    ctx: &'a mut Ctx,
    model: &'a SharedDecoder,
    client: PartyId,
    ids: Option<&'a [u32]>,
    len: usize,
    settings: &'a SecureSettings,
) -> BoxedProtocol<'a, Option<Vec<f64>>> {
    Box::pin(async move {
        let spec = &model.spec;
        let v = spec.vocab;
        if len == 0 || len > spec.max_positions {
            return Err(Error::misuse(
                "input length must be in 1..=the model's maximum positions",
            ));
        }
        let one_hot = share_one_hot(ctx, client, ids, len, 1, v).await?;
        let positions: Vec<usize> = (0..len).collect();
        let x = model.embed_rows(ctx, &one_hot, &positions).await?;
        let mut cache = KvCache::default();
        let mut costs = LayerCosts::default();
        let hidden = model
            .blocks_forward(
                ctx,
                x,
                &mut [&mut cache],
                (&[len], &[len]),
                settings,
                &mut costs,
                0,
                None,
            )
            .await?;
        let logits = model
            .logits(ctx, &hidden, len, settings, &mut costs)
            .await?;
        let fx = ctx.fixed();
        Ok(proto::reveal_to(ctx, &logits, client)
            .await?
            .map(|raw| fx.decode_slice(&raw)))
    })
}
