//! The shared layer library every architecture is built from: model sharing as a plan of
//! named tensors streamed in bounded chunks ([`plan`]), linear layers on the fused
//! product+truncation ([`linear`]), one attention for multi-head and grouped-query heads,
//! causal over a KV cache or bidirectional over padded batches ([`attention`]), one-hot
//! input and embedding ([`embedding`]), norms and activations by name ([`norm`],
//! [`activation`]), the owner's check of its weights against the protocols' ranges
//! ([`range`]), cost metering by [`LayerKind`] ([`cost`]), and the one decoder path
//! ([`decoder`]) that GPT-2 and LLaMA plug into with their wiring only, with one
//! generation loop ([`mod@generate`]: output modes, end-of-sequence and stop rules, batches,
//! speculative verification of the client's drafts ([`draft`]), a client among the
//! parties or outside them ([`client`]); an owner outside them deals its model with
//! `crate::upload`). BERT / RoBERTa build their encoder from the same layers (`crate::bert::secure`). See
//! docs/ARCHITECTURE.md for how to add a layer or an architecture.

pub mod activation;
pub mod attention;
pub mod client;
pub mod cost;
pub mod decoder;
pub mod draft;
pub mod embedding;
pub mod generate;
pub mod linear;
pub mod norm;
pub mod plan;
pub mod range;
pub mod seeded;
pub mod settings;
pub mod streamed;

pub use activation::Activation;
pub use attention::{Heads, KvCache};
pub use client::{ClientAt, Deliver, Delivered, Delivery};
pub use cost::{LayerCosts, LayerKind};
pub use decoder::{
    DecoderArch, DecoderSpec, DecoderTensor, Positions, SharedDecoder, forward_logits,
};
pub use draft::{CorpusIndex, Drafter};
pub use generate::{
    Decoding, Finish, Generation, Observer, OutputMode, Progress, StopCheck, argmax_lowest,
    generate, generate_batch,
};
pub use linear::Linear;
pub use norm::{Norm, NormKind};
pub use plan::{
    PlanError, SHARE_CHUNK_WORDS, ShareObserver, ShareProgress, SharedTensors, TensorPlan,
    share_plan, share_plan_in_chunks, share_plan_observed,
};
pub use range::{
    ActivationPeaks, NORM_SCALE_LIMIT, RangeError, calibration_ids, decoder_range_check,
    decoder_range_violation,
};
pub use seeded::SeededDecoder;
pub use settings::{GeluApprox, SecureSettings, SiluApprox};
pub use streamed::{StreamedStep, prompt_step_streamed};
