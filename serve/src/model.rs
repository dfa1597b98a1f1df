//! What a server holds of a model: its shares of a decoder (GPT-2, LLaMA; it generates)
//! or of a BERT / RoBERTa encoder (embeddings, pooled output, logits), built from an
//! owner's upload or from a share store, and the public facts a client sees of it.

use puma_core::{Error, PartyId, Shares};
use puma_layers::bert::secure::{BertSpec, SharedBert};
use puma_layers::nn::{DecoderSpec, SharedDecoder, TensorPlan};
use puma_layers::upload::{DealtTensor, assemble_decoder, assemble_encoder, spec_json};

use crate::protocol::{EncoderInfo, ModelInfo};

/// The architecture name of a decoder, in a share store and an upload: its config is the
/// serialised [`DecoderSpec`], whatever the checkpoint's own config format (GPT-2's
/// `config.json`, LLaMA's GGUF metadata).
pub const DECODER_ARCH: &str = "decoder";

/// The architecture name of a BERT / RoBERTa encoder: its config is the serialised
/// [`BertSpec`].
pub const ENCODER_ARCH: &str = "bert";

/// One server's shares of a model.
#[derive(Debug)]
pub enum ServedModel {
    /// A decoder: generation requests.
    Decoder(SharedDecoder),
    /// An encoder: encode requests.
    Encoder(SharedBert),
}

impl From<SharedDecoder> for ServedModel {
    fn from(m: SharedDecoder) -> ServedModel {
        ServedModel::Decoder(m)
    }
}

impl From<SharedBert> for ServedModel {
    fn from(m: SharedBert) -> ServedModel {
        ServedModel::Encoder(m)
    }
}

/// A spec of either architecture, as an upload or a store announces it.
enum Spec {
    Decoder(DecoderSpec),
    Encoder(BertSpec),
}

impl Spec {
    /// The spec of architecture `arch` in `json`; the error says what is wrong.
    fn parse(arch: &str, json: &str) -> Result<Spec, String> {
        let spec = match arch {
            DECODER_ARCH => serde_json::from_str(json).map(Spec::Decoder),
            ENCODER_ARCH => serde_json::from_str(json).map(Spec::Encoder),
            other => {
                return Err(format!(
                    "the architecture {other:?} is neither {DECODER_ARCH:?} nor {ENCODER_ARCH:?}"
                ));
            }
        };
        spec.map_err(|e| format!("the {arch} spec does not parse: {e}"))
    }

    fn plan(&self) -> Result<TensorPlan, Error> {
        match self {
            Spec::Decoder(s) => {
                s.validate()?;
                s.plan()
            }
            Spec::Encoder(s) => s.plan(),
        }
    }
}

/// The tensors a model of architecture `arch` with spec `json` has, in upload order;
/// the error says what is wrong with the spec.
///
/// # Errors
/// An unknown architecture, a spec that does not parse or is invalid.
pub fn plan_of(arch: &str, json: &str) -> Result<TensorPlan, String> {
    Spec::parse(arch, json)?.plan().map_err(|e| e.to_string())
}

impl ServedModel {
    /// Server `me`'s model from an owner's upload: the architecture and spec it
    /// announced and this server's part of every tensor, in plan order.
    ///
    /// # Errors
    /// What is wrong: the spec, or parts that do not follow its plan.
    pub fn assemble(
        me: PartyId,
        arch: &str,
        json: &str,
        tensors: Vec<DealtTensor>,
    ) -> Result<ServedModel, String> {
        match Spec::parse(arch, json)? {
            Spec::Decoder(s) => assemble_decoder(me, s, tensors).map(ServedModel::Decoder),
            Spec::Encoder(s) => assemble_encoder(me, s, tensors).map(ServedModel::Encoder),
        }
        .map_err(|e| e.to_string())
    }

    /// A model from a share store's architecture, config text and tensors (already
    /// read and checked against the store's own checksums).
    ///
    /// # Errors
    /// What is wrong: the spec, or tensors that do not fit it (named).
    pub fn from_store(
        arch: &str,
        json: &str,
        tensors: puma_layers::nn::SharedTensors,
    ) -> Result<ServedModel, String> {
        let spec = Spec::parse(arch, json)?;
        let plan = spec.plan().map_err(|e| e.to_string())?;
        tensors.check(&plan).map_err(|e| e.to_string())?;
        match spec {
            Spec::Decoder(s) => SharedDecoder::from_tensors(s, tensors).map(ServedModel::Decoder),
            Spec::Encoder(s) => {
                SharedBert::from_tensors(s.config, s.heads, tensors).map(ServedModel::Encoder)
            }
        }
        .map_err(|e| e.to_string())
    }

    /// The party whose shares these are.
    pub fn party(&self) -> PartyId {
        match self {
            ServedModel::Decoder(m) => m.party(),
            ServedModel::Encoder(m) => m.party(),
        }
    }

    /// The architecture name a share store records.
    pub fn arch(&self) -> &'static str {
        match self {
            ServedModel::Decoder(_) => DECODER_ARCH,
            ServedModel::Encoder(_) => ENCODER_ARCH,
        }
    }

    /// The serialised spec a share store records.
    ///
    /// # Errors
    /// `Misuse` if it does not serialise (it always does).
    pub fn spec_json(&self) -> Result<String, Error> {
        match self {
            ServedModel::Decoder(m) => spec_json(m.spec()),
            ServedModel::Encoder(m) => spec_json(&BertSpec {
                config: m.config().clone(),
                heads: m.heads(),
            }),
        }
    }

    /// This server's shares of every tensor, in plan order (what a share store saves).
    ///
    /// # Errors
    /// `Bug` if the model lost a tensor of its plan.
    pub fn tensors(&self) -> Result<Vec<(String, &Shares)>, Error> {
        match self {
            ServedModel::Decoder(m) => m.tensors(),
            ServedModel::Encoder(m) => m.tensors(),
        }
    }

    /// The public facts a client sees of it, under `name`.
    pub fn info(&self, name: &str) -> ModelInfo {
        match self {
            ServedModel::Decoder(m) => ModelInfo {
                name: name.to_owned(),
                vocab: m.spec().vocab,
                max_positions: m.spec().max_positions,
                encoder: None,
            },
            ServedModel::Encoder(m) => {
                let (cfg, heads) = (m.config(), m.heads());
                ModelInfo {
                    name: name.to_owned(),
                    vocab: cfg.vocab_size,
                    max_positions: cfg.max_len(),
                    encoder: Some(EncoderInfo {
                        token_types: cfg.type_vocab_size,
                        hidden: cfg.hidden_size,
                        pooler: heads.pooler,
                        labels: heads.labels,
                    }),
                }
            }
        }
    }
}
