//! A decoder's prompt step with the model shared as it is needed: the input tensors, then
//! each block just before it runs, then the output tensors. A party holds the shares of
//! one segment at a time (plus the embedding while it is also the tied LM head), and the
//! owner encodes one segment at a time, so a model far larger than memory runs whole
//! (docs/ARCHITECTURE.md, Streamed sharing). The step computes exactly what
//! [`super::generate()`]'s first step computes, with the same protocols, so its inference
//! rounds and bytes are those of the whole-model path.

use std::time::{Duration, Instant};

use puma_core::{BoxedProtocol, Ctx, Error, PartyId, proto};

use super::attention::KvCache;
use super::cost::{LayerCosts, LayerKind};
use super::decoder::{
    Block, DecoderArch, DecoderSpec, DecoderTensor, EncodeTensor, OwnerTensors, Prepared,
    StepLayout, embed_rows_with, logits_with, prepare_owner, take_final_norm,
};
use super::generate::{Observer, Progress};
use super::plan::{SHARE_CHUNK_WORDS, SharedTensors, TensorPlan, share_plan_observed};
use super::settings::SecureSettings;
use puma_core::proto::share_one_hot;

/// What one party measured of a streamed prompt step.
#[derive(Clone, Debug, Default)]
pub struct StreamedStep {
    /// The last prompt position's logits (`vocab`), at the client only.
    pub logits: Option<Vec<f64>>,
    /// Payload bytes this party sent while the model was being shared.
    pub share_bytes: u64,
    /// The model sharing's rounds: one per chunk of [`SHARE_CHUNK_WORDS`] words in each
    /// segment (at least one per segment).
    pub share_rounds: u32,
    /// Every epoch of the step, sharing and inference.
    pub rounds: u32,
    /// Wall time spent sharing the model (the owner encoding, masking and sending; the
    /// others receiving and unpacking).
    pub share_time: Duration,
    /// Payload bytes this party sent for the inference itself.
    pub inference_bytes: u64,
    /// Rounds of the inference itself: [`StreamedStep::rounds`] less the sharing's, but
    /// for the epochs the input segment's sharing has in common with the client's one-hot
    /// rows: one, two when that segment takes several chunks (measured; tests/streamed.rs
    /// checks both against the whole-model step).
    pub inference_rounds: u32,
    /// Wall time of the inference itself.
    pub inference_time: Duration,
    /// The inference's bytes and epochs by layer kind.
    pub costs: LayerCosts,
}

/// The tensors of `spec` cut into the segments the streamed step shares one at a time:
/// the input (embedding, learned positions), each block, the output (final norm, LM head).
fn segments(spec: &DecoderSpec) -> Result<Vec<Vec<(DecoderTensor, usize)>>, Error> {
    let mut input = Vec::new();
    let mut blocks = vec![Vec::new(); spec.layers];
    let mut output = Vec::new();
    for (t, n) in spec.tensors()? {
        match t {
            DecoderTensor::Embed | DecoderTensor::Positions => input.push((t, n)),
            DecoderTensor::Block { layer, .. } => blocks
                .get_mut(layer)
                .ok_or(Error::bug("a block tensor beyond the layer count"))?
                .push((t, n)),
            DecoderTensor::FinalNormWeight
            | DecoderTensor::FinalNormBias
            | DecoderTensor::LmHead => output.push((t, n)),
        }
    }
    let mut all = Vec::with_capacity(spec.layers + 2);
    all.push(input);
    all.extend(blocks);
    all.push(output);
    Ok(all)
}

/// Shares one segment from the owner, adding its cost to `acc`.
async fn share_segment(
    ctx: &mut Ctx,
    owner: PartyId,
    source: Option<&dyn EncodeTensor>,
    segment: &[(DecoderTensor, usize)],
    acc: &mut (u64, u32, Duration),
) -> Result<SharedTensors, Error> {
    let (t0, m0) = (Instant::now(), ctx.meter());
    let mut plan = TensorPlan::new();
    for (t, n) in segment {
        plan.push(t.name(), *n);
    }
    let fx = ctx.fixed();
    let encoded = source.map(|source| OwnerTensors {
        source,
        tensors: segment.iter(),
        fx,
    });
    let words = plan
        .total()
        .ok_or(Error::misuse("the model's size overflows"))?;
    let shared = share_plan_observed(ctx, owner, &plan, encoded, None).await?;
    acc.0 += ctx.meter().payload_bytes_sent - m0.payload_bytes_sent;
    // share_plan's documented rounds (tests/streamed.rs checks them against the epochs).
    let rounds = words.div_ceil(SHARE_CHUNK_WORDS).max(1);
    acc.1 += u32::try_from(rounds).map_err(|_| Error::misuse("the model's size overflows"))?;
    acc.2 += t0.elapsed();
    Ok(shared)
}

/// One prompt step of a decoder whose model `owner` shares segment by segment as the step
/// reaches it (see the module doc): the client (`ids` given there only, `len` public)
/// learns the logits of the prompt's last position, from which the greedy next token is
/// its argmax. The owner passes its weights (`Some` there only); each segment is encoded
/// when it is shared and every share is dropped once its segment has run. `observer`, if
/// any, hears [`Progress::Layer`] after each block (step 0).
///
/// Rounds and bytes of the inference: those of [`super::generate()`]'s first step in
/// [`super::OutputMode::RevealLogits`] (the model sharing, measured apart: 8 bytes per
/// parameter from the owner, one round per segment and per [`SHARE_CHUNK_WORDS`] words).
///
/// # Errors
/// `Misuse` for an invalid config, weights that do not fit it or the protocols' ranges,
/// an empty or too long prompt or ids outside the vocabulary; `Protocol` on a malformed
/// message.
#[allow(clippy::too_many_arguments)]
pub fn prompt_step_streamed<'a, A>(
    ctx: &'a mut Ctx,
    owner: PartyId,
    arch: &'a A,
    weights: Option<&'a A::Weights>,
    client: PartyId,
    ids: Option<&'a [u32]>,
    len: usize,
    settings: &'a SecureSettings,
    observer: Option<&'a Observer>,
) -> BoxedProtocol<'a, StreamedStep>
where
    A: DecoderArch + Sync,
    A::Weights: Sync,
{
    // Only these checks need the architecture's type; the step itself has none
    // (docs/ARCHITECTURE.md, The engine contract).
    let prepared = prepare_owner(ctx, owner, arch, weights, |spec| {
        if len == 0 || len > spec.max_positions {
            return Err(Error::misuse(
                "input length must be in 1..=the model's maximum positions",
            ));
        }
        Ok(())
    });
    streamed_step(ctx, owner, prepared, client, ids, len, settings, observer)
}

/// Boxes [`streamed_step_body`]: a function without type parameters, so that the generic
/// [`prompt_step_streamed`] does not carry the step's body into its callers' crates.
#[allow(clippy::too_many_arguments)]
fn streamed_step<'a>(
    ctx: &'a mut Ctx,
    owner: PartyId,
    prepared: Prepared<'a>,
    client: PartyId,
    ids: Option<&'a [u32]>,
    len: usize,
    settings: &'a SecureSettings,
    observer: Option<&'a Observer>,
) -> BoxedProtocol<'a, StreamedStep> {
    Box::pin(streamed_step_body(
        ctx, owner, prepared, client, ids, len, settings, observer,
    ))
}

/// The body of [`prompt_step_streamed`] once the owner's weights are checked.
#[allow(clippy::too_many_arguments)]
async fn streamed_step_body(
    ctx: &mut Ctx,
    owner: PartyId,
    prepared: Prepared<'_>,
    client: PartyId,
    ids: Option<&[u32]>,
    len: usize,
    settings: &SecureSettings,
    observer: Option<&Observer>,
) -> Result<StreamedStep, Error> {
    let (spec, source) = prepared?;
    let source = source.as_deref();
    let fx = ctx.fixed();
    let mut segs = segments(&spec)?.into_iter();
    let mut shared_cost = (0u64, 0u32, Duration::ZERO);
    let mut costs = LayerCosts::default();
    let start = Instant::now();
    let begin = ctx.meter();

    // The input: the client's one-hot rows, then the embedding.
    let m = ctx.meter();
    let one_hot = share_one_hot(ctx, client, ids, len, 1, spec.vocab).await?;
    costs.add(LayerKind::Input, m, ctx.meter());
    let input = segs.next().ok_or(Error::bug("no input segment"))?;
    // Epochs the input segment's sharing shares with the inference's own, as
    // tests/streamed.rs pins them against the whole-model step: one, whatever the chunks.
    // (With masked one-hot rows it was two over several chunks: the owner, the client's
    // next party, now waits for its point-function keys before it streams.)
    let overlap = 1;
    let mut tensors = share_segment(ctx, owner, source, &input, &mut shared_cost).await?;
    let embed = tensors.take(&DecoderTensor::Embed.name())?;
    let learned = tensors.take_if(
        matches!(spec.positions, super::Positions::Learned),
        &DecoderTensor::Positions.name(),
    )?;
    let positions: Vec<usize> = (0..len).collect();
    let m = ctx.meter();
    let mut x =
        embed_rows_with(ctx, &spec, (&embed, learned.as_ref()), &one_hot, &positions).await?;
    costs.add(LayerKind::Embedding, m, ctx.meter());
    drop((one_hot, learned));
    // A tied head is the embedding: kept for the end, else dropped now.
    let tied = if spec.tied_head {
        Some(embed)
    } else {
        drop(embed);
        None
    };

    // The blocks, each shared just before it runs and dropped after.
    let mut cache = KvCache::default();
    // The last block makes the last position only: the head reads nothing else.
    let layout = StepLayout::new(ctx, &spec, &[&mut cache], &[len], &[1])?;
    for layer in 0..spec.layers {
        let segment = segs
            .next()
            .ok_or(Error::bug("a block segment is missing"))?;
        let mut tensors = share_segment(ctx, owner, source, &segment, &mut shared_cost).await?;
        let block = Block::take(&spec, layer, &mut tensors)?;
        drop(tensors);
        x = block
            .forward(
                ctx,
                &spec,
                &layout,
                (layer, layer + 1 == spec.layers),
                x,
                &mut [&mut cache],
                settings,
                &mut costs,
            )
            .await?;
        if let Some(obs) = observer {
            obs(Progress::Layer { step: 0, layer });
        }
    }

    // The output: the final norm and the head on the last position only.
    let output = segs.next().ok_or(Error::bug("no output segment"))?;
    let mut tensors = share_segment(ctx, owner, source, &output, &mut shared_cost).await?;
    let final_norm = take_final_norm(&spec, &mut tensors)?;
    let head = match tied {
        Some(e) => e,
        None => tensors.take(&DecoderTensor::LmHead.name())?,
    };
    let logits = logits_with(
        ctx,
        &spec,
        (&final_norm, &head),
        &x,
        1,
        settings,
        &mut costs,
    )
    .await?;
    drop(head);
    let m = ctx.meter();
    let revealed = proto::reveal_to(ctx, &logits, client).await?;
    costs.add(LayerKind::Output, m, ctx.meter());
    let end = ctx.meter();
    let (share_bytes, share_rounds, share_time) = shared_cost;
    let rounds = end.epoch - begin.epoch;
    Ok(StreamedStep {
        logits: revealed.map(|raw| fx.decode_slice(&raw)),
        share_bytes,
        share_rounds,
        rounds,
        share_time,
        inference_bytes: (end.payload_bytes_sent - begin.payload_bytes_sent)
            .saturating_sub(share_bytes),
        inference_rounds: (rounds + overlap).saturating_sub(share_rounds),
        inference_time: start.elapsed().saturating_sub(share_time),
        costs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llama::LlamaConfig;

    #[test]
    fn segments_cover_every_tensor_once_in_plan_order() {
        let cfg = LlamaConfig {
            vocab_size: 50,
            hidden_size: 16,
            intermediate_size: 24,
            num_hidden_layers: 3,
            num_attention_heads: 4,
            num_key_value_heads: 2,
            head_dim: 4,
            rms_norm_eps: 1e-6,
            rope_theta: 10000.0,
            max_position_embeddings: 32,
            tie_word_embeddings: false,
        };
        let spec = cfg.spec().unwrap();
        let segs = segments(&spec).unwrap();
        assert_eq!(segs.len(), 5);
        let flat: Vec<(DecoderTensor, usize)> = segs.concat();
        assert_eq!(flat, spec.tensors().unwrap());
        assert_eq!(segs[0], vec![(DecoderTensor::Embed, 50 * 16)]);
        assert_eq!(segs[4].last(), Some(&(DecoderTensor::LmHead, 50 * 16)));
    }
}
