//! # puma-layers
//!
//! Everything about models above the core: checkpoint and GGUF loading, tokenizers, the
//! plaintext `f64` reference models, and the secure models built from the shared layer
//! library [`nn`] (see docs/ARCHITECTURE.md, The model layer).
//!
//! - [`nn`]: model sharing as a plan of named tensors, `Linear`, attention (multi-head and
//!   grouped-query, causal with a KV cache or bidirectional), norms, activations, cost
//!   metering, and the one decoder path ([`nn::decoder`]) with its generation loop.
//! - [`gpt2`], [`llama`]: decoder architectures (config, loader, plaintext model, and the
//!   wiring into [`nn::decoder`]); [`bert`]: BERT / RoBERTa encoders on the same layers.
//! - [`tokenizer`] (a checkpoint's own tokenizer, read with Hugging Face's `tokenizers`
//!   crate for every architecture), [`gguf`], and [`kernel`] (a threaded matrix kernel for
//!   large hosts).
//! - [`stopping`]: a checkpoint's end-of-sequence ids (generation config, config, GGUF).
//! - [`store`]: a party's share store, the file from which a computing server restores
//!   its shares of a model without the owner.
//! - [`upload`]: a model owner outside the parties deals its checkpoint to three servers,
//!   which assemble their shares of it.
//! - [`limits`]: the one bound on model size that every configuration is checked against
//!   before any party allocates for it.
//!
//! ## Example: a secret linear layer among three simulated parties
//! ```
//! use puma_core::{proto, sim::Sim, FixedPoint, PartyId};
//! use puma_layers::nn::Linear;
//!
//! let fx = FixedPoint::default();
//! let x: Vec<u64> = [1.0, 2.0, 3.0, 4.0].iter().map(|&v| fx.encode(v).unwrap()).collect();
//! let w: Vec<u64> = [0.5, -1.0].iter().map(|&v| fx.encode(v).unwrap()).collect();
//! let out = Sim::new(1).run(move |me| {
//!     let (x, w) = (x.clone(), w.clone());
//!     move |mut ctx| async move {
//!         // P0 holds the input (2 × 2), P1 the weight (2 × 1); the bias is none.
//!         let xs = proto::share_input(&mut ctx, PartyId::P0, (me == PartyId::P0).then_some(&x[..]), 4).await?;
//!         let ws = proto::share_input(&mut ctx, PartyId::P1, (me == PartyId::P1).then_some(&w[..]), 2).await?;
//!         let layer = Linear::new(ws, None, 2, 1)?;
//!         let y = layer.forward(&mut ctx, &xs, 2).await?;
//!         proto::reveal_all(&mut ctx, &y).await
//!     }
//! });
//! let [y, _, _] = out.into_results().unwrap();
//! let y = fx.decode_slice(&y);
//! assert!((y[0] - (-1.5)).abs() < 1e-5 && (y[1] - (-2.5)).abs() < 1e-5);
//! ```

pub mod bert;
pub mod gguf;
pub mod gpt2;
pub mod kernel;
pub mod limits;
pub mod llama;
pub mod nn;
mod safetensors_reader;
pub mod stopping;
pub mod store;
pub mod tokenizer;
pub mod upload;

pub use gpt2::config::{Activation, ConfigError, Gpt2Config, InputError};
pub use gpt2::weights::{Gpt2Block, Gpt2Weights, LayerNormWeights, LoadError, load_gpt2};
pub use tokenizer::{Tokenizer, TokenizerError, TokenizerSource};
