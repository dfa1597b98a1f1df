//! The checkpoint tokenizer: GPT-2's against the ids stored with the fixtures, a fine-tune's
//! own `vocab.json` / `merges.txt` (not GPT-2's), RoBERTa's BPE, the built-in fallback, and
//! typed errors for missing or broken files.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::common;

use std::path::Path;

use common::{Reference, model_dir};
use puma_layers::{Tokenizer, TokenizerError, TokenizerSource};

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

/// GPT-2's id of `<|endoftext|>`.
const END_OF_TEXT: u32 = 50256;

/// The Shakespeare checkpoint's own files, and the built-in copy.
fn gpt2_tokenizers() -> [Tokenizer; 2] {
    let own = Tokenizer::from_dir(&model_dir("gpt2-shakespeare")).unwrap();
    assert_eq!(
        own.source(),
        &TokenizerSource::Gpt2Files(model_dir("gpt2-shakespeare"))
    );
    [own, Tokenizer::gpt2().unwrap()]
}

#[test]
fn shakespeare_prompt_ids_are_reproduced() {
    for tok in gpt2_tokenizers() {
        assert_eq!(tok.vocab_size(), 50257);
        for (text, ids) in SHAKESPEARE {
            assert_eq!(tok.encode(text).unwrap(), ids, "{text:?}");
            assert_eq!(tok.decode(ids).unwrap(), text);
        }
    }
}

/// Every prompt stored in both reference files (text in the metadata, ids as tensors),
/// including the tiny-random p4 with a non-ASCII em dash.
#[test]
fn reference_prompts_encode_to_stored_ids() {
    for tok in gpt2_tokenizers() {
        for name in ["gpt2-tiny-random", "gpt2-shakespeare"] {
            let r = Reference::load(name);
            let prompts = r.prompts();
            assert_eq!(prompts.len(), 4);
            for (i, text) in prompts.iter().enumerate() {
                let want = r.ids(&format!("p{}.input_ids", i + 1));
                assert_eq!(tok.encode(text).unwrap(), want, "{name} p{}", i + 1);
                assert_eq!(&tok.decode(&want).unwrap(), text);
            }
        }
    }
}

#[test]
fn greedy_continuations_decode_as_listed() {
    let [tok, _] = gpt2_tokenizers();
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
    for tok in gpt2_tokenizers() {
        // No BOS/EOS is added, and special-token text is ordinary text.
        assert_eq!(tok.encode("").unwrap(), Vec::<u32>::new());
        let eot = tok.encode("<|endoftext|>").unwrap();
        assert!(!eot.contains(&END_OF_TEXT) && eot.len() > 1);
        assert_eq!(tok.decode(&[END_OF_TEXT]).unwrap(), "<|endoftext|>");
        assert!(matches!(
            tok.decode(&[50257]),
            Err(TokenizerError::UnknownToken(50257))
        ));
        assert!(matches!(
            tok.decode(&[1, u32::MAX]),
            Err(TokenizerError::UnknownToken(u32::MAX))
        ));
    }
}

/// A character cut between tokens decodes lossily.
#[test]
fn partial_utf8_decodes_lossily() {
    let [tok, _] = gpt2_tokenizers();
    let crab = "\u{1F980}";
    let ids = tok.encode(crab).unwrap();
    assert!(
        ids.len() > 1,
        "the crab emoji takes several byte tokens: {ids:?}"
    );
    assert_eq!(tok.decode(&ids).unwrap(), crab);
    assert!(tok.decode(&ids[..1]).unwrap().contains('\u{FFFD}'));
}

#[test]
fn long_and_odd_inputs_do_not_panic() {
    let [tok, _] = gpt2_tokenizers();
    for text in [
        " ".repeat(100_000),
        "\n \t".repeat(20_000),
        "x".repeat(50_000),
        "\u{0}\u{FFFF}é".repeat(1000),
    ] {
        let ids = tok.encode(&text).unwrap();
        assert_eq!(tok.decode(&ids).unwrap(), text);
    }
}

/// GPT-2's reversible map of bytes to printable characters (to write a byte-level vocab).
fn byte_char(b: u8) -> char {
    let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
    if printable {
        return char::from(b);
    }
    let n = (0..b)
        .filter(|&c| !((33..=126).contains(&c) || (161..=172).contains(&c) || c >= 174))
        .count() as u32;
    char::from_u32(256 + n).unwrap()
}

/// A fine-tune-like byte-level BPE whose ids are not GPT-2's: the 256 byte tokens in
/// byte order (GPT-2 starts with `!`), then `hi`, `Ġt`, `Ġto`, `<|endoftext|>`, and
/// `extra` more tokens.
fn write_tiny_bpe(dir: &Path, extra: &[&str]) {
    let mut vocab = serde_json::Map::new();
    for b in 0..=255u8 {
        vocab.insert(byte_char(b).to_string(), b.into());
    }
    for (i, t) in ["hi", "Ġt", "Ġto", "<|endoftext|>"]
        .iter()
        .chain(extra)
        .enumerate()
    {
        vocab.insert((*t).to_owned(), (256 + i).into());
    }
    std::fs::write(
        dir.join("vocab.json"),
        serde_json::to_string(&vocab).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("merges.txt"), "#version: 0.2\nh i\nĠ t\nĠt o\n").unwrap();
}

/// A GPT-2 fine-tune with its own vocabulary gets its own ids, not r50k_base's.
#[test]
fn a_fine_tunes_own_vocab_and_merges_are_used() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_bpe(dir.path(), &[]);
    std::fs::write(dir.path().join("config.json"), r#"{"model_type": "gpt2"}"#).unwrap();
    let tok = Tokenizer::from_gpt2_dir(dir.path()).unwrap();
    assert_eq!(
        tok.source(),
        &TokenizerSource::Gpt2Files(dir.path().to_owned())
    );
    assert_eq!(tok.vocab_size(), 260);
    // "hi" and " to" are merges of this vocabulary; "hit" merges only "hi".
    assert_eq!(tok.encode("hi to").unwrap(), [256, 258]);
    assert_eq!(tok.encode("hit").unwrap(), [256, u32::from(b't')]);
    assert_eq!(
        tok.encode("a b").unwrap(),
        [u32::from(b'a'), u32::from(b' '), u32::from(b'b')]
    );
    // r50k_base would give [5303, 284].
    assert_ne!(
        Tokenizer::gpt2().unwrap().encode("hi to").unwrap(),
        [256, 258]
    );
    assert_eq!(tok.decode(&[256, 258]).unwrap(), "hi to");
    assert!(matches!(
        tok.decode(&[260]),
        Err(TokenizerError::UnknownToken(260))
    ));
}

/// RoBERTa's byte-level BPE (named by `tokenizer_config.json`): `<s> … </s>`, pairs
/// `<s> a </s></s> b </s>` with token types 0, special tokens matched in the text.
#[test]
fn roberta_vocab_and_merges_add_its_special_tokens() {
    let dir = tempfile::tempdir().unwrap();
    write_tiny_bpe(dir.path(), &["<s>", "</s>", "<pad>", "<unk>", "<mask>"]);
    std::fs::write(
        dir.path().join("tokenizer_config.json"),
        r#"{"tokenizer_class": "RobertaTokenizer"}"#,
    )
    .unwrap();
    let tok = Tokenizer::from_dir(dir.path()).unwrap();
    assert_eq!(
        tok.source(),
        &TokenizerSource::RobertaFiles(dir.path().to_owned())
    );
    let (s, end) = (260, 261);
    assert_eq!(tok.encode("hi to").unwrap(), [s, 256, 258, end]);
    let (ids, types) = tok.encode_pair("hi", "to").unwrap();
    assert_eq!(
        ids,
        [s, 256, end, end, u32::from(b't'), u32::from(b'o'), end]
    );
    assert_eq!(types, [0; 7]);
    assert_eq!(tok.encode("<mask>").unwrap(), [s, 264, end]);
    // The same files read as a RoBERTa through config.json's model_type.
    std::fs::remove_file(dir.path().join("tokenizer_config.json")).unwrap();
    std::fs::write(
        dir.path().join("config.json"),
        r#"{"model_type": "roberta"}"#,
    )
    .unwrap();
    let tok = Tokenizer::from_dir(dir.path()).unwrap();
    assert_eq!(tok.encode("hi").unwrap(), [s, 256, end]);
}

/// Without tokenizer files a GPT-2 directory falls back to the built-in tokenizer, and says
/// so; other loaders get a typed error naming the directory.
#[test]
fn a_directory_without_tokenizer_files() {
    let dir = model_dir("gpt2-tiny-random");
    let tok = Tokenizer::from_gpt2_dir(&dir).unwrap();
    assert_eq!(tok.source(), &TokenizerSource::BuiltinGpt2);
    assert_eq!(tok.encode("Hello world").unwrap(), [15496, 995]);
    match Tokenizer::from_dir(&dir) {
        Err(e @ TokenizerError::Missing { .. }) => {
            assert!(e.to_string().contains("gpt2-tiny-random"), "{e}");
        }
        other => panic!("{other:?}"),
    }
}

fn expect_malformed(r: Result<Tokenizer, TokenizerError>, file: &str) {
    match r {
        Err(e @ TokenizerError::Malformed { .. }) => {
            assert!(e.to_string().contains(file), "{e} does not name {file}");
        }
        other => panic!("expected a malformed {file}: {other:?}"),
    }
}

/// Truncated or garbage files give an error naming the file, never a panic.
#[test]
fn broken_tokenizer_files_are_typed_errors() {
    let good = std::fs::read(model_dir("llama-tiny-random").join("tokenizer.json")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("tokenizer.json");
    let bad_jsons: [&[u8]; 7] = [
        &good[..good.len() / 2],
        b"\x00\xff garbage",
        b"",
        b"{}",
        br#"{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}"#,
        br#"{"model": {"type": "WordPiece", "vocab": {}, "unk_token": "[UNK]"}}"#,
        br#"{"version": "1.0", "added_tokens": [{"id": 4294967295, "content": "x"}], "model": {"type": "BPE", "vocab": {}, "merges": []}}"#,
    ];
    for bad in bad_jsons {
        std::fs::write(&json, bad).unwrap();
        expect_malformed(Tokenizer::from_dir(dir.path()), "tokenizer.json");
    }
    // Files the crate accepts but that make no sense: encoding and decoding return
    // (errors or ids), never panic.
    let odd_jsons: [&[u8]; 2] = [
        br#"{"version": "1.0", "added_tokens": [{"id": 4294967295, "content": "x", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}], "model": {"type": "BPE", "vocab": {}, "merges": []}}"#,
        br#"{"version": "1.0", "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}, "decoder": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}, "model": {"type": "BPE", "vocab": {"a": 7}, "merges": []}}"#,
    ];
    for odd in odd_jsons {
        std::fs::write(&json, odd).unwrap();
        let tok = Tokenizer::from_dir(dir.path()).unwrap();
        let _ = tok.vocab_size();
        let ids = tok.encode("x y a").unwrap_or_default();
        let _ = tok.decode(&ids);
        let _ = tok.decode(&[0, 7, u32::MAX]);
    }
    std::fs::remove_file(&json).unwrap();

    // vocab.json + merges.txt: a merge of unknown tokens, a line of three, bad JSON.
    write_tiny_bpe(dir.path(), &[]);
    std::fs::write(dir.path().join("merges.txt"), "#version: 0.2\nq z\n").unwrap();
    expect_malformed(Tokenizer::from_dir(dir.path()), "merges.txt");
    std::fs::write(dir.path().join("merges.txt"), "h i x\n").unwrap();
    expect_malformed(Tokenizer::from_dir(dir.path()), "merges.txt");
    std::fs::write(dir.path().join("merges.txt"), "h i\n").unwrap();
    std::fs::write(dir.path().join("vocab.json"), "[1, 2").unwrap();
    expect_malformed(Tokenizer::from_dir(dir.path()), "vocab.json");
    std::fs::remove_file(dir.path().join("vocab.json")).unwrap();
    std::fs::remove_file(dir.path().join("merges.txt")).unwrap();

    // vocab.txt without the special tokens; a malformed tokenizer_config.json.
    std::fs::write(dir.path().join("vocab.txt"), "a\nb\n").unwrap();
    expect_malformed(Tokenizer::from_dir(dir.path()), "vocab.txt");
    std::fs::write(dir.path().join("tokenizer_config.json"), "{").unwrap();
    expect_malformed(Tokenizer::from_dir(dir.path()), "tokenizer_config.json");
}
