//! BERT and RoBERTa encoders: configuration and checkpoint loading ([`config`],
//! [`weights`]), the plaintext `f64` reference ([`plain`]) and the secure three-party
//! evaluation ([`secure`]).
//!
//! Checkpoints are Hugging Face directories, unmodified: `config.json` +
//! `model.safetensors` of a `BertModel`, `BertForSequenceClassification`, `RobertaModel` or
//! `RobertaForSequenceClassification` (tensor names with or without the `bert.` /
//! `roberta.` prefix). The computation is the post-LayerNorm encoder of `transformers`
//! (eager attention, eval mode):
//!
//! ```text
//! x = LN(word[ids] + position[pos] + token_type[types])
//! per layer:  x = LN(x + dense(attn(x)))        attn: softmax(q kᵀ/√hd + mask) v, bidirectional
//!             x = LN(x + out(gelu(inter(x))))
//! pooled = tanh(pooler(x[0]))                    (RoBERTa: the classification head's dense)
//! logits = classifier(pooled)
//! embedding = normalise(mean of x over the valid tokens)   (sentence-transformers)
//! ```

pub mod config;
mod error;
pub mod plain;
pub mod secure;
pub mod weights;

pub use config::{BertConfig, BertFlavor};
pub use error::BertError;
pub use plain::{BertBatch, BertOutput, PlainBert};
pub use weights::{BertLayer, BertWeights, load_bert};
