//! A model owner outside the parties: it deals a decoder to the three servers itself and
//! exits, and each server assembles its shares into a [`SharedDecoder`].
//!
//! The owner encodes one tensor at a time, just before it deals it, so it never holds
//! more than one tensor's words beside its checkpoint; tensor `i` of the plan is dealt on
//! stream `i` of the owner's seeds ([`puma_core::dealing`]: two components from seeds,
//! one correction vector). The owner also computes the model's content hash
//! ([`ModelHasher`] over the serialised spec and the encoded tensors), which it announces
//! so that the servers' share stores can be told apart.

use puma_core::dealing::{self, Dealt, Seed, Span};
use puma_core::{Error, FixedPoint, PartyId};

use super::decoder::{DecoderArch, DecoderSpec, SharedDecoder};
use super::plan::SharedTensors;
use super::range::decoder_range_violation;
use crate::store::{ModelHash, ModelHasher};

/// One tensor as one server receives it from the owner.
#[derive(Debug)]
pub struct DealtTensor {
    /// The tensor's generic name ([`super::DecoderTensor::name`]).
    pub name: String,
    /// Its number of elements.
    pub len: usize,
    /// This server's part of it.
    pub dealt: Dealt,
}

/// The serialised spec: what the servers rebuild the model's shape from, and what the
/// content hash starts with.
///
/// # Errors
/// `Misuse` if the spec does not serialise (it always does).
pub fn spec_json(spec: &DecoderSpec) -> Result<String, Error> {
    serde_json::to_string(spec).map_err(|_| Error::misuse("a decoder spec does not serialise"))
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
    mut send: impl FnMut([DealtTensor; 3]) -> Result<(), Error>,
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
    let mut hasher = ModelHasher::new(&spec_json(&spec)?);
    for (stream, (t, len)) in (0u64..).zip(spec.tensors()?) {
        let words = arch.encode(weights, t, fx)?;
        if words.len() != len {
            return Err(Error::misuse(
                "an encoded tensor has another length than its plan",
            ));
        }
        let name = t.name();
        hasher.tensor(&name, &words);
        let parts = dealing::deal(&words, seeds, Span::whole(stream));
        send(parts.map(|dealt| DealtTensor {
            name: name.clone(),
            len,
            dealt,
        }))?;
    }
    hasher.finish().map(|h| (spec, h))
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
    let plan = spec.plan()?;
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
    let tensors = SharedTensors::from_named(&plan, named)
        .map_err(|_| Error::misuse("the owner's tensors do not follow the model's plan"))?;
    SharedDecoder::from_tensors(spec, tensors)
}
