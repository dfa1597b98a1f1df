//! The checkpoint tokenizer against the fixtures' stored ids for LLaMA-style byte-level BPE
//! (SmolLM2's tokenizer, `models/llama-tiny-random/tokenizer.json`; the same from the GGUF's
//! metadata when the real model is present).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::llama_common;

use llama_common::{model_dir, smollm2_gguf};
use puma_layers::gguf::GgufFile;
use puma_layers::{Tokenizer, TokenizerError, TokenizerSource};

const CASES: [(&str, &[u32]); 5] = [
    (
        "Q: What is the largest animal?",
        &[65, 42, 1812, 314, 260, 3995, 3161, 47],
    ),
    ("Hello world", &[19556, 905]),
    (
        "On 14 March 2023 the café served 1,024 cups of coffee.",
        &[
            3280, 216, 33, 36, 3903, 216, 34, 32, 34, 35, 260, 37366, 5019, 216, 33, 28, 32, 34,
            36, 12382, 282, 6728, 30,
        ],
    ),
    ("The capital of France is", &[504, 3575, 282, 4649, 314]),
    (
        "<|im_start|>user\nWhat is the largest animal?<|im_end|>\n<|im_start|>assistant\n",
        &[
            1, 4093, 198, 1780, 314, 260, 3995, 3161, 47, 2, 198, 1, 520, 9531, 198,
        ],
    ),
];

fn check(tok: &Tokenizer) {
    for (text, ids) in CASES {
        assert_eq!(tok.encode(text).unwrap(), ids, "{text:?}");
        assert_eq!(tok.decode(ids).unwrap(), text);
    }
    // The fixture's greedy continuation of "The capital of France is".
    assert_eq!(
        tok.decode(&[7042, 30, 198, 198, 504, 2988, 314, 42, 216, 34])
            .unwrap(),
        " Paris.\n\nThe answer is: 2"
    );
    assert!(matches!(
        tok.decode(&[49152]),
        Err(TokenizerError::UnknownToken(49152))
    ));
    // Whitespace runs and contractions split as GPT-2's pattern does; round trips.
    for text in ["a   b\n\n c's  ", "  x", "don't  stop!!", "tab\there"] {
        assert_eq!(tok.decode(&tok.encode(text).unwrap()).unwrap(), text);
    }
}

#[test]
fn smollm2_tokenizer_json_matches_the_fixture_ids() {
    let dir = model_dir("llama-tiny-random");
    let tok = Tokenizer::from_dir(&dir).unwrap();
    assert_eq!(
        tok.source(),
        &TokenizerSource::TokenizerJson(dir.join("tokenizer.json"))
    );
    assert_eq!(tok.vocab_size(), 49152);
    check(&tok);
}

#[test]
fn smollm2_tokenizer_from_gguf_metadata() {
    let Some(path) = smollm2_gguf("smollm2_tokenizer_from_gguf_metadata") else {
        return;
    };
    let tok = Tokenizer::from_gguf(&GgufFile::open(&path).unwrap(), &path).unwrap();
    assert_eq!(tok.source(), &TokenizerSource::Gguf);
    assert_eq!(tok.vocab_size(), 49152);
    check(&tok);
}
