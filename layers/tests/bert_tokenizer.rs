//! The WordPiece tokenizer against the ids stored in the BERT fixtures (made with
//! `transformers`' tokenizer on the same files).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod bert_common;

use bert_common::{Reference, minilm_tags, model_dir};
use puma_layers::wordpiece::{WordPieceError, WordPieceTokenizer};

#[test]
fn minilm_sentences_tokenize_to_the_fixture_ids() {
    // bert-tiny-random ships all-MiniLM-L6-v2's tokenizer files unchanged.
    let tok = WordPieceTokenizer::from_dir(&model_dir("bert-tiny-random")).unwrap();
    assert_eq!(tok.vocab_size(), 30522);
    let r = Reference::load("minilm-l6");
    let sentences = r.meta("sentences");
    let sentences = sentences.as_array().unwrap();
    assert_eq!(sentences.len(), 24);
    for (tag, s) in minilm_tags().iter().zip(sentences) {
        let expected = r.batch(tag).input_ids;
        assert_eq!(tok.encode(s.as_str().unwrap()), expected, "{tag}: {s}");
    }
}

#[test]
fn tiny_inputs_and_pair_tokenize_to_the_fixture_ids() {
    let dir = model_dir("bert-tiny-random");
    let from_vocab = WordPieceTokenizer::from_dir(&dir).unwrap();
    let json = std::fs::read_to_string(dir.join("tokenizer.json")).unwrap();
    let from_json = WordPieceTokenizer::from_tokenizer_json(&json).unwrap();
    let r = Reference::load("bert-tiny-random");
    let inputs = r.meta("inputs");
    for (i, input) in inputs.as_array().unwrap().iter().enumerate() {
        let tag = format!("s{}", i + 1);
        let expected = r.batch(&tag);
        let a = input[0].as_str().unwrap();
        for tok in [&from_vocab, &from_json] {
            let (ids, types) = match input[1].as_str() {
                Some(b) => tok.encode_pair(a, b),
                None => {
                    let ids = tok.encode(a);
                    let n = ids.len();
                    (ids, vec![0; n])
                }
            };
            assert_eq!(ids, expected.input_ids, "{tag}");
            assert_eq!(types, expected.token_type_ids, "{tag}");
        }
    }
}

#[test]
fn normalisation_and_unknown_words() {
    let tok = WordPieceTokenizer::from_dir(&model_dir("bert-tiny-random")).unwrap();
    // Lower-casing, accent stripping, punctuation splitting, CJK spacing and cleaning.
    assert_eq!(tok.tokenize("CAFÉ"), tok.tokenize("cafe"));
    assert_eq!(tok.tokenize("hello,world"), tok.tokenize("hello , world"));
    assert_eq!(tok.tokenize("a\u{0}\tb"), tok.tokenize("a b"));
    assert_eq!(tok.tokenize(""), Vec::<u32>::new());
    // No piece matches a lone private-use character: [UNK] (100).
    assert_eq!(tok.tokenize("\u{e000}"), vec![100]);
    assert_eq!(tok.tokenize(&"a".repeat(101)), vec![100]);
    // Continuations decode back onto their word.
    let ids = tok.tokenize("windowsill");
    assert!(ids.len() > 1);
    assert_eq!(tok.decode(&ids).unwrap(), "windowsill");
    assert!(matches!(
        tok.decode(&[40000]),
        Err(WordPieceError::UnknownId(40000))
    ));
    assert!(matches!(
        WordPieceTokenizer::from_dir(std::path::Path::new("/nonexistent")),
        Err(WordPieceError::Io { .. })
    ));
    assert!(WordPieceTokenizer::from_tokenizer_json("{}").is_err());
}
