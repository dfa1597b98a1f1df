//! Communication metering by layer kind: what each kind of layer costs one party in payload
//! bytes and epochs, for the per-layer breakdowns the programs print and the tests pin.

use puma_core::Meter;

/// The kinds of work a model's communication is attributed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerKind {
    /// The client's one-hot input rows.
    Input,
    /// Token (and position) embedding.
    Embedding,
    /// LayerNorm, with or without its affine part.
    LayerNorm,
    /// RMSNorm.
    RmsNorm,
    /// Linear layers (weight and optional bias), with the rotary embedding of queries and
    /// keys, which applies to their projection's summands.
    Linear,
    /// Softmax over the attention scores, from their products Q·Kᵀ (local) to the product
    /// of its unnormalised weights and the values, which runs beside the softmax's
    /// reciprocal: the scores' truncation, the row maxima, negExp and the normalisation.
    Softmax,
    /// GeLU.
    Gelu,
    /// SiLU (the gate of a SwiGLU MLP).
    Silu,
    /// The language-model head (logits over the vocabulary).
    LmHead,
    /// Revealing or selecting the output (logits, argmax, ids).
    Output,
    /// An encoder's pooler and classifier.
    Pooler,
    /// Mean pooling and L2 normalisation of sentence embeddings.
    MeanPooling,
}

impl LayerKind {
    /// A short lower-case name for reports.
    pub fn name(self) -> &'static str {
        match self {
            LayerKind::Input => "input",
            LayerKind::Embedding => "embedding",
            LayerKind::LayerNorm => "layernorm",
            LayerKind::RmsNorm => "rmsnorm",
            LayerKind::Linear => "linear",
            LayerKind::Softmax => "softmax",
            LayerKind::Gelu => "gelu",
            LayerKind::Silu => "silu",
            LayerKind::LmHead => "lm head",
            LayerKind::Output => "output",
            LayerKind::Pooler => "pooler and classifier",
            LayerKind::MeanPooling => "mean pooling",
        }
    }
}

impl std::fmt::Display for LayerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad` honours the width and alignment of the format string (report tables).
        f.pad(self.name())
    }
}

/// The communication attributed to each layer kind at one party: payload bytes sent and
/// epochs spent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayerCosts {
    /// (kind, bytes, epochs) in first-use order.
    pub entries: Vec<(LayerKind, u64, u32)>,
}

impl LayerCosts {
    /// Attributes what passed between the meter readings `before` and `after` to `kind`.
    pub fn add(&mut self, kind: LayerKind, before: Meter, after: Meter) {
        let bytes = after
            .payload_bytes_sent
            .saturating_sub(before.payload_bytes_sent);
        let epochs = after.epoch.saturating_sub(before.epoch);
        self.add_raw(kind, bytes, epochs);
    }

    fn add_raw(&mut self, kind: LayerKind, bytes: u64, epochs: u32) {
        match self.entries.iter_mut().find(|(k, _, _)| *k == kind) {
            Some(e) => {
                e.1 += bytes;
                e.2 += epochs;
            }
            None => self.entries.push((kind, bytes, epochs)),
        }
    }

    /// Adds every entry of `other` (summing kinds present in both).
    pub fn merge(&mut self, other: &LayerCosts) {
        for &(k, b, e) in &other.entries {
            self.add_raw(k, b, e);
        }
    }

    /// The bytes and epochs of `kind`, if any were attributed to it.
    pub fn get(&self, kind: LayerKind) -> Option<(u64, u32)> {
        self.entries
            .iter()
            .find(|(k, _, _)| *k == kind)
            .map(|&(_, b, e)| (b, e))
    }
}
