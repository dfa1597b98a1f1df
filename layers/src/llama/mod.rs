//! LLaMA-style decoders (`LlamaForCausalLM`: RMSNorm, rotary position embeddings, SwiGLU MLP,
//! grouped-query attention, tied or untied LM head), loaded from Hugging Face checkpoints
//! (`config.json` + `model.safetensors`) or from GGUF files, evaluated in plaintext `f64`
//! ([`plain`]) and under three-party secure computation ([`secure`]).

pub mod config;
pub mod plain;
pub mod rope;
pub mod secure;
pub mod weights;

pub use config::LlamaConfig;
pub use weights::{LlamaLayer, LlamaLoadError, LlamaWeights, load_gguf, load_hf};
