//! The one bound on model size (`puma_layers::limits`): every architecture's config —
//! `config.json` for GPT-2, LLaMA and BERT, and LLaMA's GGUF metadata — is checked against
//! it when parsed, with an error naming the field, so that a party without the weights
//! never sizes its shares from an unchecked config; published shapes (GPT-2 XL,
//! BERT-large, LLaMA-7B) stay within it; and a hand-built oversized config fails the
//! sharing with an error at every party, before anything is allocated.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use puma_core::sim::Sim;
use puma_core::{ErrorKind, PartyId};
use puma_layers::bert::{BertConfig, BertError};
use puma_layers::gguf::GgufFile;
use puma_layers::limits::{self, LimitError};
use puma_layers::llama::LlamaConfig;
use puma_layers::llama::config::LlamaConfigError;
use puma_layers::nn::{DecoderArch, SharedDecoder};
use puma_layers::{ConfigError, Gpt2Config, Gpt2Weights};

const GPT2_XL: &str = r#"{"model_type": "gpt2", "n_layer": 48, "n_embd": 1600, "n_head": 25,
    "n_positions": 1024, "vocab_size": 50257}"#;

const LLAMA_7B: &str = r#"{"model_type": "llama", "vocab_size": 32000, "hidden_size": 4096,
    "intermediate_size": 11008, "num_hidden_layers": 32, "num_attention_heads": 32,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-6}"#;

const BERT_LARGE: &str = r#"{"model_type": "bert", "vocab_size": 30522, "hidden_size": 1024,
    "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
    "max_position_embeddings": 512, "type_vocab_size": 2}"#;

/// `text` with the JSON value of `key` replaced by `value`.
fn with(text: &str, key: &str, value: &str) -> String {
    let at = text.find(&format!("\"{key}\":")).expect(key) + key.len() + 3;
    let end = at + text[at..].find([',', '}']).unwrap();
    format!("{} {value}{}", &text[..at], &text[end..])
}

#[track_caller]
fn limit(e: LimitError, field: &str, limit: u64) {
    assert_eq!((e.field, e.limit), (field, limit), "{e}");
    assert!(e.to_string().contains(field), "{e}");
}

#[test]
fn published_shapes_are_within_the_limits() {
    let gpt2 = Gpt2Config::from_json_str(GPT2_XL).unwrap();
    // GPT-2 XL has 1,557,611,200 parameters; the block LayerNorms' γ and β (48 · 6400)
    // are folded into the linear layers before sharing.
    assert_eq!(
        gpt2.spec().unwrap().parameters().unwrap(),
        1_557_611_200 - 48 * 6400
    );
    let llama = LlamaConfig::from_json_str(LLAMA_7B).unwrap();
    // 6,738,415,616 as published (untied head); the block RMSNorms' γ (64 · 4096) are
    // folded into the projections before sharing.
    assert_eq!(
        llama.spec().unwrap().parameters().unwrap(),
        6_738_415_616 - 64 * 4096
    );
    BertConfig::from_json_str(BERT_LARGE).unwrap();
}

#[test]
fn a_huge_vocabulary_is_refused_by_name_in_every_architecture() {
    let huge = "1000000000000";
    match Gpt2Config::from_json_str(&with(GPT2_XL, "vocab_size", huge)) {
        Err(ConfigError::Limit(e)) => limit(e, "vocab_size", limits::MAX_VOCAB as u64),
        other => panic!("{other:?}"),
    }
    match LlamaConfig::from_json_str(&with(LLAMA_7B, "vocab_size", huge)) {
        Err(LlamaConfigError::Limit(e)) => limit(e, "vocab_size", limits::MAX_VOCAB as u64),
        other => panic!("{other:?}"),
    }
    match BertConfig::from_json_str(&with(BERT_LARGE, "vocab_size", huge)) {
        Err(BertError::Limit(e)) => limit(e, "vocab_size", limits::MAX_VOCAB as u64),
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_size_field_is_bounded() {
    let big = "4294967296";
    for field in ["n_layer", "n_embd", "n_head", "n_positions", "n_inner"] {
        let text = if field == "n_inner" {
            GPT2_XL.replace("\"n_head\"", "\"n_inner\": 6400, \"n_head\"")
        } else {
            GPT2_XL.to_owned()
        };
        match Gpt2Config::from_json_str(&with(&text, field, big)) {
            Err(ConfigError::Limit(e)) => assert_eq!(e.field, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    for field in [
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "max_position_embeddings",
    ] {
        match LlamaConfig::from_json_str(&with(LLAMA_7B, field, big)) {
            Err(LlamaConfigError::Limit(e)) => assert_eq!(e.field, field),
            other => panic!("{field}: {other:?}"),
        }
    }
    // Heads × head width beyond the widest dimension, each within it.
    let wide_heads = LLAMA_7B.replace("\"rms_norm_eps\"", "\"head_dim\": 65536, \"rms_norm_eps\"");
    match LlamaConfig::from_json_str(&wide_heads) {
        Err(LlamaConfigError::Limit(e)) => assert_eq!(e.field, "num_attention_heads · head_dim"),
        other => panic!("{other:?}"),
    }
    for field in [
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "max_position_embeddings",
        "type_vocab_size",
    ] {
        match BertConfig::from_json_str(&with(BERT_LARGE, field, big)) {
            Err(BertError::Limit(e)) => assert_eq!(e.field, field),
            other => panic!("{field}: {other:?}"),
        }
    }
}

#[test]
fn every_size_within_its_limit_can_still_be_too_many_parameters() {
    // 1024 layers of width 16384: each size allowed, 1.9 T parameters together.
    let text = with(
        &with(
            &with(LLAMA_7B, "num_hidden_layers", "1024"),
            "hidden_size",
            "16384",
        ),
        "intermediate_size",
        "16384",
    );
    match LlamaConfig::from_json_str(&text) {
        Err(LlamaConfigError::Limit(e)) => {
            limit(e, "parameters", limits::MAX_PARAMETERS);
            assert!(e.value > limits::MAX_PARAMETERS);
        }
        other => panic!("{other:?}"),
    }
    let text = with(&with(GPT2_XL, "n_layer", "1024"), "n_embd", "16000");
    assert!(matches!(
        Gpt2Config::from_json_str(&text),
        Err(ConfigError::Limit(LimitError {
            field: "parameters",
            ..
        }))
    ));
    let text = with(
        &with(BERT_LARGE, "num_hidden_layers", "1024"),
        "hidden_size",
        "16384",
    );
    assert!(matches!(
        BertConfig::from_json_str(&text),
        Err(BertError::Limit(LimitError {
            field: "parameters",
            ..
        }))
    ));
}

/// A GGUF file with no tensors and the LLaMA metadata `kv` (u64 sizes).
fn gguf(kv: &[(&str, u64)]) -> Vec<u8> {
    let mut f = b"GGUF".to_vec();
    f.extend_from_slice(&3u32.to_le_bytes());
    f.extend_from_slice(&0u64.to_le_bytes());
    f.extend_from_slice(&(kv.len() as u64 + 2).to_le_bytes());
    let key = |f: &mut Vec<u8>, k: &str| {
        f.extend_from_slice(&(k.len() as u64).to_le_bytes());
        f.extend_from_slice(k.as_bytes());
    };
    key(&mut f, "general.architecture");
    f.extend_from_slice(&8u32.to_le_bytes());
    f.extend_from_slice(&5u64.to_le_bytes());
    f.extend_from_slice(b"llama");
    key(&mut f, "llama.attention.layer_norm_rms_epsilon");
    f.extend_from_slice(&6u32.to_le_bytes());
    f.extend_from_slice(&1e-5f32.to_le_bytes());
    for (k, v) in kv {
        key(&mut f, k);
        f.extend_from_slice(&10u32.to_le_bytes());
        f.extend_from_slice(&v.to_le_bytes());
    }
    f
}

/// What a non-owner reads of a GGUF checkpoint: its metadata, checked like a config.
#[test]
fn gguf_metadata_is_bounded_like_a_config() {
    let sizes = |vocab: u64| {
        vec![
            ("llama.vocab_size", vocab),
            ("llama.embedding_length", 64),
            ("llama.attention.head_count", 4),
            ("llama.feed_forward_length", 128),
            ("llama.block_count", 2),
            ("llama.context_length", 256),
        ]
    };
    let ok = GgufFile::from_bytes(gguf(&sizes(1000))).unwrap();
    assert_eq!(LlamaConfig::from_gguf(&ok).unwrap().vocab_size, 1000);
    let huge = GgufFile::from_bytes(gguf(&sizes(1 << 40))).unwrap();
    match LlamaConfig::from_gguf(&huge) {
        Err(LlamaConfigError::Limit(e)) => limit(e, "vocab_size", limits::MAX_VOCAB as u64),
        other => panic!("{other:?}"),
    }
}

/// A config built by hand (not parsed) with a huge vocabulary: the sharing fails at every
/// party with `Misuse` before anything is allocated (it used to abort the non-owners on
/// an allocation of 16 bytes per parameter).
#[test]
fn sharing_an_oversized_hand_built_config_is_an_error_at_every_party() {
    let mut cfg = Gpt2Config::from_json_str(GPT2_XL).unwrap();
    cfg.vocab_size = 1_000_000_000_000;
    let out = Sim::new(9).run(|_| {
        let cfg = cfg.clone();
        move |mut ctx| async move {
            let none: Option<&Gpt2Weights> = None;
            SharedDecoder::share(&mut ctx, PartyId::P1, &cfg, none)
                .await
                .map(|_| ())
        }
    });
    for r in &out.results {
        let e = r.as_ref().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Misuse, "{e:?}");
    }
    match cfg.validate() {
        Err(ConfigError::Limit(e)) => limit(e, "vocab_size", limits::MAX_VOCAB as u64),
        other => panic!("{other:?}"),
    }
}
