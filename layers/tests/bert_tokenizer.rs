//! The checkpoint tokenizer against the ids stored in the BERT fixtures (made with
//! `transformers`' tokenizer on the same files): WordPiece from `vocab.txt` and from
//! `tokenizer.json`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::bert_common;

use bert_common::{Reference, minilm_dir, minilm_tags, model_dir};
use puma_layers::{Tokenizer, TokenizerError, TokenizerSource};

#[test]
fn minilm_sentences_tokenize_to_the_fixture_ids() {
    // bert-tiny-random ships all-MiniLM-L6-v2's tokenizer files unchanged.
    let dir = model_dir("bert-tiny-random");
    // tokenizer.json (all-MiniLM-L6-v2's pads to 128 by itself: switched off) is read
    // first; vocab.txt alone gives the same ids.
    let from_json = Tokenizer::from_dir(&dir).unwrap();
    assert_eq!(
        from_json.source(),
        &TokenizerSource::TokenizerJson(dir.join("tokenizer.json"))
    );
    let from_vocab = vocab_txt_only(&dir);
    let r = Reference::load("minilm-l6");
    for tok in [&from_json, &from_vocab] {
        assert_eq!(tok.vocab_size(), 30522);
        let sentences = r.meta("sentences");
        let sentences = sentences.as_array().unwrap();
        assert_eq!(sentences.len(), 24);
        for (tag, s) in minilm_tags().iter().zip(sentences) {
            let expected = r.batch(tag).input_ids;
            assert_eq!(
                tok.encode(s.as_str().unwrap()).unwrap(),
                expected,
                "{tag}: {s}"
            );
        }
    }
}

/// The tokenizer of `dir` read from `vocab.txt` and `tokenizer_config.json` only (copied
/// into a temporary directory without `tokenizer.json`).
fn vocab_txt_only(dir: &std::path::Path) -> Tokenizer {
    let tmp = tempfile::tempdir().unwrap();
    for f in ["vocab.txt", "tokenizer_config.json"] {
        std::fs::copy(dir.join(f), tmp.path().join(f)).unwrap();
    }
    let tok = Tokenizer::from_dir(tmp.path()).unwrap();
    assert_eq!(
        tok.source(),
        &TokenizerSource::VocabTxt(tmp.path().join("vocab.txt"))
    );
    tok
}

#[test]
fn tiny_inputs_and_pair_tokenize_to_the_fixture_ids() {
    let dir = model_dir("bert-tiny-random");
    let from_vocab = vocab_txt_only(&dir);
    let from_json = Tokenizer::from_dir(&dir).unwrap();
    let r = Reference::load("bert-tiny-random");
    let inputs = r.meta("inputs");
    for (i, input) in inputs.as_array().unwrap().iter().enumerate() {
        let tag = format!("s{}", i + 1);
        let expected = r.batch(&tag);
        let a = input[0].as_str().unwrap();
        for tok in [&from_vocab, &from_json] {
            let (ids, types) = match input[1].as_str() {
                Some(b) => tok.encode_pair(a, b).unwrap(),
                None => {
                    let ids = tok.encode(a).unwrap();
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
    for tok in [
        Tokenizer::from_dir(&model_dir("bert-tiny-random")).unwrap(),
        vocab_txt_only(&model_dir("bert-tiny-random")),
    ] {
        let enc = |t: &str| tok.encode(t).unwrap();
        // Lower-casing, accent stripping, punctuation splitting, CJK spacing and cleaning.
        assert_eq!(enc("CAFÉ"), enc("cafe"));
        assert_eq!(enc("hello,world"), enc("hello , world"));
        assert_eq!(enc("a\u{0}\tb"), enc("a b"));
        assert_eq!(enc(""), [101, 102]);
        // Other (C*) characters such as private use are dropped, as in `transformers`;
        // no piece matches the crab emoji: [UNK] (100).
        assert_eq!(enc("\u{e000}"), [101, 102]);
        assert_eq!(enc("\u{1F980}"), [101, 100, 102]);
        assert_eq!(enc(&"a".repeat(101)), [101, 100, 102]);
        // Special-token text is the special token.
        assert_eq!(enc("[SEP]"), [101, 102, 102]);
        // Continuations decode back onto their word.
        let ids = enc("windowsill");
        assert!(ids.len() > 3);
        assert_eq!(tok.decode(&ids).unwrap(), "[CLS] windowsill [SEP]");
        assert!(matches!(
            tok.decode(&[40000]),
            Err(TokenizerError::UnknownToken(40000))
        ));
    }
    assert!(matches!(
        Tokenizer::from_dir(std::path::Path::new("/nonexistent")),
        Err(TokenizerError::Missing { .. })
    ));
}

/// The real all-MiniLM-L6-v2 directory (when fetched) tokenizes to the fixture's ids with
/// its own files.
#[test]
fn real_minilm_directory_tokenizes_to_the_fixture_ids() {
    let Some(dir) = minilm_dir() else {
        return;
    };
    let tok = Tokenizer::from_dir(&dir).unwrap();
    let r = Reference::load("minilm-l6");
    let sentences = r.meta("sentences");
    for (tag, s) in minilm_tags().iter().zip(sentences.as_array().unwrap()) {
        let expected = r.batch(tag).input_ids;
        assert_eq!(
            tok.encode(s.as_str().unwrap()).unwrap(),
            expected,
            "{tag}: {s}"
        );
    }
}
