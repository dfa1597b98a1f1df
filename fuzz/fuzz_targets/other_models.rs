//! The other model formats: BERT config + safetensors, LLaMA `config.json`, GGUF files (as
//! LLaMA checkpoints) and `tokenizer.json` (read by the `tokenizers` crate); the first byte picks the format, and for
//! config + weights a two-byte length splits the rest.
//!
//! Checked: no panic, no allocation the file does not back (-rss_limit_mb), accepted
//! configurations within the model size limits — what a party without the weights reads:
//! `config.json`, or only a GGUF file's metadata (`LlamaConfig::from_gguf`) — and loaded
//! weights that match their configuration's shapes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use puma_fuzz::{check_bert, check_decoder};
use puma_layers::bert::{BertConfig, BertWeights};
use puma_layers::gguf::GgufFile;
use puma_layers::llama::LlamaConfig;
use puma_layers::llama::weights::load_gguf_file;
use puma_layers::Tokenizer;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    match sel % 4 {
        0 => {
            let Some((n, rest)) = rest.split_first_chunk::<2>() else {
                return;
            };
            let n = usize::from(u16::from_le_bytes(*n)).min(rest.len());
            let (config, weights) = rest.split_at(n);
            let Ok(text) = std::str::from_utf8(config) else {
                return;
            };
            if let Ok(config) = BertConfig::from_json_str(text) {
                check_bert(&config);
                let _ = BertWeights::from_safetensors_bytes(weights, &config);
            }
        }
        1 => {
            if let Ok(text) = std::str::from_utf8(rest) {
                if let Ok(config) = LlamaConfig::from_json_str(text) {
                    check_decoder(&config);
                }
            }
        }
        2 => {
            if let Ok(file) = GgufFile::from_bytes(rest.to_vec()) {
                // The non-owner's path: the metadata only.
                if let Ok(config) = LlamaConfig::from_gguf(&file) {
                    check_decoder(&config);
                }
                if let Ok((cfg, w)) = load_gguf_file(&file) {
                    assert!(w.check_shapes(&cfg).is_ok());
                }
            }
        }
        _ => {
            let path = std::path::Path::new("tokenizer.json");
            if let Ok(tok) = Tokenizer::from_json_bytes(rest, path) {
                let ids = tok.encode("Hello, wörld 123").unwrap_or_default();
                let _ = tok.decode(&ids);
            }
        }
    }
});
