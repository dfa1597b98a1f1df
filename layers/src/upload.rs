//! A model owner outside the parties: it deals its model to the three servers itself and
//! exits, and each server assembles its shares into the shared model (a decoder,
//! [`SharedDecoder`], or a BERT / RoBERTa encoder, [`SharedBert`]).
//!
//! The owner encodes one tensor at a time, just before it deals it, so it never holds
//! more than one tensor's words beside its checkpoint; tensor `i` of the plan is dealt on
//! stream `i` of the owner's seeds ([`puma_core::dealing`]: two components from seeds,
//! one correction vector). The owner also computes the model's content hash
//! ([`ModelHasher`] over the serialised spec and the encoded tensors), which it announces
//! so that the servers' share stores can be told apart.

use puma_core::dealing::{self, Component, Dealt, Seed, Span};
use puma_core::{Error, FixedPoint, PartyId};

use crate::bert::secure::{BertSpec, SharedBert, encoded_tensors};
use crate::bert::{BertConfig, BertWeights};
use crate::nn::decoder::{DecoderArch, DecoderSpec, SharedDecoder};
use crate::nn::plan::{SharedTensors, TensorPlan};
use crate::nn::range::decoder_range_violation;
use crate::store::{ComponentSeeds, ModelHash, ModelHasher};

/// One tensor as one server receives it from the owner.
#[derive(Debug)]
pub struct DealtTensor {
    /// The tensor's name in the model's plan.
    pub name: String,
    /// Its number of elements.
    pub len: usize,
    /// This server's part of it.
    pub dealt: Dealt,
}

/// The serialised spec ([`DecoderSpec`] or [`BertSpec`]): what the servers rebuild the
/// model's shape from, and what the content hash starts with.
///
/// # Errors
/// `Misuse` if the spec does not serialise (it always does).
pub fn spec_json<S: serde::Serialize>(spec: &S) -> Result<String, Error> {
    serde_json::to_string(spec).map_err(|_| Error::misuse("a model spec does not serialise"))
}

/// Deals `weights` of `arch` to the three servers: for each tensor in plan order,
/// `send` receives the three servers' parts (P0's, P1's, P2's). `seeds` are fresh from
/// the owner's own entropy. Returns the public spec and the model's content hash.
///
/// # Errors
/// `Misuse` for an invalid config, weights that do not match it or that leave the range
/// the protocols support; whatever `send` returns.
pub fn deal_decoder<A: DecoderArch>(
    arch: &A,
    weights: &A::Weights,
    fx: FixedPoint,
    seeds: &[Seed; 2],
    send: impl FnMut([DealtTensor; 3]) -> Result<(), Error>,
) -> Result<(DecoderSpec, ModelHash), Error> {
    let spec = arch.spec()?;
    spec.validate()?;
    arch.check(weights)?;
    if decoder_range_violation(arch, weights, fx)?.is_some() {
        return Err(Error::misuse(
            "a weight leaves the range the protocols support \
             (puma_layers::nn::range::decoder_range_violation names it)",
        ));
    }
    let encoded = spec
        .tensors()?
        .into_iter()
        .map(|(t, _)| arch.encode(weights, t, fx));
    let hash = deal_tensors(&spec_json(&spec)?, &spec.plan()?, encoded, seeds, send)?;
    Ok((spec, hash))
}

/// Deals a BERT / RoBERTa encoder's `weights` to the three servers, as [`deal_decoder`]
/// does a decoder's. Returns the public spec and the model's content hash.
///
/// # Errors
/// `Misuse` for an invalid config or weights that do not match it; whatever `send`
/// returns.
pub fn deal_encoder(
    config: &BertConfig,
    weights: &BertWeights,
    fx: FixedPoint,
    seeds: &[Seed; 2],
    send: impl FnMut([DealtTensor; 3]) -> Result<(), Error>,
) -> Result<(BertSpec, ModelHash), Error> {
    let spec = BertSpec::of(config, weights);
    let plan = spec.plan()?;
    let encoded = encoded_tensors(config, weights, fx)?;
    let hash = deal_tensors(&spec_json(&spec)?, &plan, encoded, seeds, send)?;
    Ok((spec, hash))
}

/// The dealing both architectures share: each encoded tensor of `plan`, in order, dealt
/// on its own stream and hashed.
fn deal_tensors(
    spec_json: &str,
    plan: &TensorPlan,
    encoded: impl Iterator<Item = Result<Vec<u64>, Error>>,
    seeds: &[Seed; 2],
    mut send: impl FnMut([DealtTensor; 3]) -> Result<(), Error>,
) -> Result<ModelHash, Error> {
    let mut hasher = ModelHasher::new(spec_json);
    let mut encoded = encoded;
    for (stream, (name, len)) in (0u64..).zip(plan.tensors()) {
        let words = encoded
            .next()
            .ok_or(Error::misuse("the model has fewer tensors than its plan"))??;
        if words.len() != *len {
            return Err(Error::misuse(
                "an encoded tensor has another length than its plan",
            ));
        }
        hasher.tensor(name, &words);
        let parts = dealing::deal(&words, seeds, Span::whole(stream));
        send(parts.map(|dealt| DealtTensor {
            name: name.clone(),
            len: *len,
            dealt,
        }))?;
    }
    hasher.finish()
}

/// The seeds this server's parts share across the whole upload, slot by slot: what its
/// share store keeps instead of those components' words. A slot is seeded only if every
/// tensor's part has it as the same seed (tensor `t` on stream `t`, as [`deal_decoder`]
/// and [`deal_encoder`] deal it); a slot dealt as values, or under different seeds, is not.
pub fn common_seeds(tensors: &[DealtTensor]) -> ComponentSeeds {
    let common = |slot: fn(&Dealt) -> &Component| {
        let mut seeds = tensors.iter().map(|t| match slot(&t.dealt) {
            Component::Seed(s) => Some(s),
            Component::Values(_) => None,
        });
        let first = seeds.next().flatten()?;
        seeds.all(|s| s == Some(first)).then_some(*first)
    };
    ComponentSeeds {
        first: common(|d| &d.first),
        second: common(|d| &d.second),
    }
}

/// Server `me`'s shares of a decoder of shape `spec` from the parts the owner dealt it
/// ([`deal_decoder`]), in plan order.
///
/// # Errors
/// `Misuse` for an invalid spec, tensors that do not match its plan (missing, extra,
/// out of order, of another length) or parts for another party.
pub fn assemble_decoder(
    me: PartyId,
    spec: DecoderSpec,
    tensors: impl IntoIterator<Item = DealtTensor>,
) -> Result<SharedDecoder, Error> {
    spec.validate()?;
    let shared = assemble_tensors(me, &spec.plan()?, tensors)?;
    SharedDecoder::from_tensors(spec, shared)
}

/// Server `me`'s shares of an encoder of shape `spec` from the parts the owner dealt it
/// ([`deal_encoder`]), in plan order.
///
/// # Errors
/// As [`assemble_decoder`].
pub fn assemble_encoder(
    me: PartyId,
    spec: BertSpec,
    tensors: impl IntoIterator<Item = DealtTensor>,
) -> Result<SharedBert, Error> {
    let shared = assemble_tensors(me, &spec.plan()?, tensors)?;
    SharedBert::from_tensors(spec.config, spec.heads, shared)
}

/// The assembly both architectures share: every part checked against `plan` and turned
/// into this server's shares.
fn assemble_tensors(
    me: PartyId,
    plan: &TensorPlan,
    tensors: impl IntoIterator<Item = DealtTensor>,
) -> Result<SharedTensors, Error> {
    let mut named = Vec::new();
    let mut expected = plan.tensors().iter();
    for (stream, t) in (0u64..).zip(tensors) {
        match expected.next() {
            Some((name, len)) if *name == t.name && *len == t.len => {}
            _ => {
                return Err(Error::misuse(
                    "the owner's tensors do not follow the model's plan",
                ));
            }
        }
        let shares = t.dealt.into_shares(me, t.len, Span::whole(stream))?;
        named.push((t.name, shares));
    }
    if expected.next().is_some() {
        return Err(Error::misuse(
            "the owner dealt fewer tensors than the plan has",
        ));
    }
    SharedTensors::from_named(plan, named)
        .map_err(|_| Error::misuse("the owner's tensors do not follow the model's plan"))
}
