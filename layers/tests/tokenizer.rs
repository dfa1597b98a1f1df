//! GPT-2's tokenizer against the ids stored with the fixtures.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod common;

use common::Reference;
use puma_layers::{Gpt2Tokenizer, TokenizerError};

/// The gpt2-shakespeare prompts and ids as listed in the fixtures' README.
const SHAKESPEARE: [(&str, &[u32]); 4] = [
    (
        "Q: What is the largest animal?",
        &[48, 25, 1867, 318, 262, 4387, 5044, 30],
    ),
    ("ROMEO:", &[33676, 4720, 25]),
    (
        "Ham.\nTo be, or not to be,",
        &[21281, 13, 198, 2514, 307, 11, 393, 407, 284, 307, 11],
    ),
    (
        "[Enter KING HENRY and his train.]\n\nKING HENRY.\nNow, my good lords, what news from France?",
        &[
            58, 17469, 32957, 367, 1677, 18276, 290, 465, 4512, 8183, 198, 198, 37286, 367, 1677,
            18276, 13, 198, 3844, 11, 616, 922, 33200, 11, 644, 1705, 422, 4881, 30,
        ],
    ),
];

#[test]
fn shakespeare_prompt_ids_are_reproduced() {
    let tok = Gpt2Tokenizer::new().unwrap();
    for (text, ids) in SHAKESPEARE {
        assert_eq!(tok.encode(text), ids, "{text:?}");
        assert_eq!(tok.decode(ids).unwrap(), text);
    }
}

/// Every prompt stored in both reference files (text in the metadata, ids as tensors),
/// including the tiny-random p4 with a non-ASCII em dash.
#[test]
fn reference_prompts_encode_to_stored_ids() {
    let tok = Gpt2Tokenizer::new().unwrap();
    for name in ["gpt2-tiny-random", "gpt2-shakespeare"] {
        let r = Reference::load(name);
        let prompts = r.prompts();
        assert_eq!(prompts.len(), 4);
        for (i, text) in prompts.iter().enumerate() {
            let want = r.ids(&format!("p{}.input_ids", i + 1));
            assert_eq!(tok.encode(text), want, "{name} p{}", i + 1);
            assert_eq!(&tok.decode(&want).unwrap(), text);
        }
    }
}

#[test]
fn greedy_continuations_decode_as_listed() {
    let tok = Gpt2Tokenizer::new().unwrap();
    let r = Reference::load("gpt2-tiny-random");
    assert_eq!(
        tok.decode(&r.ids("p1.greedy_new_ids")).unwrap(),
        "?".repeat(20)
    );
    let r = Reference::load("gpt2-shakespeare");
    assert_eq!(
        tok.decode(&r.ids("p2.greedy_new_ids")).unwrap(),
        "\nI'll be a man.\n\n[Exeunt.]\n\n\n\nSCENE III"
    );
}

#[test]
fn special_tokens_and_errors() {
    let tok = Gpt2Tokenizer::new().unwrap();
    // No BOS/EOS is added, and special-token text is ordinary text.
    assert_eq!(tok.encode(""), Vec::<u32>::new());
    let eot = tok.encode("<|endoftext|>");
    assert!(!eot.contains(&Gpt2Tokenizer::END_OF_TEXT) && eot.len() > 1);
    assert_eq!(
        tok.decode(&[Gpt2Tokenizer::END_OF_TEXT]).unwrap(),
        "<|endoftext|>"
    );
    assert_eq!(
        tok.decode(&[50257]),
        Err(TokenizerError::UnknownToken(50257))
    );
    assert_eq!(
        tok.decode(&[1, u32::MAX]),
        Err(TokenizerError::UnknownToken(u32::MAX))
    );
}

/// A character cut between tokens: `decode_bytes` is exact, `decode` is lossy.
#[test]
fn partial_utf8_decodes_lossily() {
    let tok = Gpt2Tokenizer::new().unwrap();
    let crab = "\u{1F980}";
    let ids = tok.encode(crab);
    assert!(
        ids.len() > 1,
        "the crab emoji takes several byte tokens: {ids:?}"
    );
    assert_eq!(tok.decode(&ids).unwrap(), crab);
    let first = tok.decode_bytes(&ids[..1]).unwrap();
    assert!(crab.as_bytes().starts_with(&first));
    assert!(tok.decode(&ids[..1]).unwrap().contains('\u{FFFD}'));
}

#[test]
fn long_and_odd_inputs_do_not_panic() {
    let tok = Gpt2Tokenizer::new().unwrap();
    for text in [
        " ".repeat(100_000),
        "\n \t".repeat(20_000),
        "x".repeat(50_000),
        "\u{0}\u{FFFF}é".repeat(1000),
    ] {
        let ids = tok.encode(&text);
        assert_eq!(tok.decode(&ids).unwrap(), text);
    }
}
