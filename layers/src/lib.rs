//! # puma-layers
//!
//! The std world above the core: secret tensors with shapes, and (later) the Transformer
//! layers and models built from them. A [`SecretTensor`] is one party's replicated shares
//! of a row-major tensor; layers call the core protocols on the flattened shares and keep
//! shapes here. [`plain`] converts between `ndarray` arrays of reals and the fixed-point
//! ring elements that parties input and reveal.
//!
//! Models: [`config`] and [`checkpoint`] read Hugging Face GPT-2 checkpoints
//! (`config.json` + `model.safetensors`), [`tokenizer`] is GPT-2's byte-level BPE, and
//! [`gpt2::plain`] is the `f64` GPT-2 forward pass (with KV-cached greedy generation) that
//! every secure result is compared against. [`bert`] holds BERT / RoBERTa encoders (loading,
//! plaintext `f64` reference, secure evaluation, sentence embeddings) and [`wordpiece`]
//! BERT's WordPiece tokenizer.
//!
//! ## Example: a secret matrix product among three simulated parties
//! ```
//! use ndarray::array;
//! use puma_core::{sim::Sim, FixedPoint, PartyId};
//! use puma_layers::{matmul_fixed, plain, SecretTensor};
//!
//! let fx = FixedPoint::default();
//! let a = plain::encode_array2(fx, &array![[1.0, 2.0], [3.0, 4.0]]).unwrap();
//! let b = plain::encode_array2(fx, &array![[0.5], [-1.0]]).unwrap();
//! let out = Sim::new(1).run(move |me| {
//!     let (a, b) = (a.clone(), b.clone());
//!     move |mut ctx| async move {
//!         let x = SecretTensor::share_input(&mut ctx, PartyId::P0, (me == PartyId::P0).then_some(&a[..]), vec![2, 2]).await?;
//!         let w = SecretTensor::share_input(&mut ctx, PartyId::P1, (me == PartyId::P1).then_some(&b[..]), vec![2, 1]).await?;
//!         let y = matmul_fixed(&mut ctx, &x, &w).await?;
//!         Ok(y.reveal_all(&mut ctx).await?)
//!     }
//! });
//! let [y, _, _] = out.into_results().unwrap();
//! let y = plain::decode_array2(fx, &y, 2, 1).unwrap();
//! assert!((y[[0, 0]] - (-1.5)).abs() < 1e-5 && (y[[1, 0]] - (-2.5)).abs() < 1e-5);
//! ```

pub mod bert;
pub mod bpe;
pub mod checkpoint;
pub mod config;
mod error;
pub mod gguf;
pub mod gpt2;
pub mod kernel;
pub mod llama;
pub mod nn;
pub mod plain;
mod safetensors_reader;
mod tensor;
pub mod tokenizer;
pub mod wordpiece;

pub use checkpoint::{Gpt2Block, Gpt2Weights, LayerNormWeights, LoadError, load_gpt2};
pub use config::{Activation, ConfigError, Gpt2Config};
pub use error::LayerError;
pub use tensor::{SecretTensor, matmul, matmul_fixed};
pub use tokenizer::{Gpt2Tokenizer, TokenizerError};
