//! The tokenizer of a checkpoint, read from the checkpoint's own files with Hugging Face's
//! `tokenizers` crate, for every architecture (GPT-2, LLaMA, BERT, RoBERTa).
//!
//! [`Tokenizer::from_dir`] looks in the checkpoint directory for, in this order:
//! - `tokenizer.json` (any model the crate reads: byte-level BPE, WordPiece, ...); its
//!   built-in padding and truncation are switched off, as `transformers` ignores them
//!   (all-MiniLM-L6-v2's pads every input to 128);
//! - `vocab.json` + `merges.txt`: byte-level BPE, GPT-2's (nothing added around the text)
//!   or, when `tokenizer_config.json` names a RoBERTa tokenizer or `config.json` has
//!   `model_type` `roberta`, RoBERTa's (`<s> … </s>`, pairs `<s> a </s></s> b </s>`);
//! - `vocab.txt`: BERT WordPiece with the options of `tokenizer_config.json`
//!   (lower-casing by default; `[CLS] … [SEP]`, pairs `[CLS] a [SEP] b [SEP]`).
//!
//! [`Tokenizer::from_gguf`] builds the same byte-level BPE from a GGUF file's
//! `tokenizer.ggml.*` metadata (the crate cannot read GGUF itself), and
//! [`Tokenizer::gpt2`] is GPT-2's own tokenizer (`r50k_base`, the tables of
//! `models/gpt2-shakespeare/`, compiled in), the fallback for a GPT-2 checkpoint that ships
//! no tokenizer files.
//!
//! GPT-2's `<|endoftext|>` is an ordinary vocabulary entry here, so text never encodes to
//! it (a prompt cannot inject an end of text); the added special tokens of a
//! `tokenizer.json` (SmolLM2's `<|im_start|>`), of BERT and of RoBERTa are matched in the
//! text, as `transformers` does.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::bpe::{BPE, Merges, Vocab};
use tokenizers::models::wordpiece::WordPiece;
use tokenizers::normalizers::bert::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::processors::roberta::RobertaProcessing;
use tokenizers::{AddedToken, EncodeInput};

use crate::gguf::GgufFile;

/// GPT-2's `encoder.json` and `vocab.bpe` (as `vocab.json` / `merges.txt`), byte for byte
/// the tables of OpenAI's `r50k_base`.
const GPT2_VOCAB: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../models/gpt2-shakespeare/vocab.json"
));
const GPT2_MERGES: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../models/gpt2-shakespeare/merges.txt"
));

/// Longest word WordPiece splits (longer ones are `[UNK]`), as in `transformers`.
const MAX_WORD_CHARS: usize = 100;

/// Why a tokenizer could not be built, or a text encoded or ids decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// The directory holds none of the tokenizer files.
    #[error(
        "{} has no tokenizer: no tokenizer.json, vocab.json + merges.txt or vocab.txt",
        dir.display()
    )]
    Missing {
        /// The checkpoint directory.
        dir: PathBuf,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A tokenizer file (or a GGUF file's tokenizer metadata) is malformed or describes a
    /// tokenizer that cannot be used.
    #[error("invalid tokenizer file {}: {reason}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The tokenizer failed on a text (the text itself is not in the message).
    #[error("cannot encode the text: {0}")]
    Encode(String),
    /// The tokenizer failed on ids of its vocabulary.
    #[error("cannot decode the ids: {0}")]
    Decode(String),
    /// An id is not in the vocabulary.
    #[error("token id {0} is not in the vocabulary")]
    UnknownToken(u32),
}

/// Where a [`Tokenizer`] came from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenizerSource {
    /// A `tokenizer.json` file.
    TokenizerJson(PathBuf),
    /// GPT-2 byte-level BPE from `vocab.json` + `merges.txt` in this directory.
    Gpt2Files(PathBuf),
    /// RoBERTa byte-level BPE from `vocab.json` + `merges.txt` in this directory.
    RobertaFiles(PathBuf),
    /// BERT WordPiece from this `vocab.txt`.
    VocabTxt(PathBuf),
    /// A GGUF file's `tokenizer.ggml.*` metadata.
    Gguf,
    /// GPT-2's tokenizer compiled into this crate.
    BuiltinGpt2,
}

impl std::fmt::Display for TokenizerSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenizerSource::TokenizerJson(p) => write!(f, "{}", p.display()),
            TokenizerSource::Gpt2Files(d) => {
                write!(f, "{} (vocab.json + merges.txt, GPT-2)", d.display())
            }
            TokenizerSource::RobertaFiles(d) => {
                write!(f, "{} (vocab.json + merges.txt, RoBERTa)", d.display())
            }
            TokenizerSource::VocabTxt(p) => write!(f, "{} (BERT WordPiece)", p.display()),
            TokenizerSource::Gguf => f.write_str("GGUF metadata"),
            TokenizerSource::BuiltinGpt2 => f.write_str("built-in GPT-2 (r50k_base)"),
        }
    }
}

/// A checkpoint's tokenizer: text to ids (with the special tokens the checkpoint adds) and
/// back. `Send + Sync`; building one parses the vocabulary (tens of milliseconds for
/// 50,000 merges), so build it once.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    source: TokenizerSource,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tokenizer {{ source: {}, vocab: {} }}",
            self.source,
            self.vocab_size()
        )
    }
}

/// The options of `tokenizer_config.json` this module reads.
#[derive(Deserialize, Default)]
struct TokenizerConfig {
    tokenizer_class: Option<String>,
    do_lower_case: Option<bool>,
    strip_accents: Option<bool>,
    tokenize_chinese_chars: Option<bool>,
    unk_token: Option<SpecialName>,
    cls_token: Option<SpecialName>,
    sep_token: Option<SpecialName>,
    pad_token: Option<SpecialName>,
    mask_token: Option<SpecialName>,
    bos_token: Option<SpecialName>,
    eos_token: Option<SpecialName>,
}

/// A special token in `tokenizer_config.json`: a string, or an `AddedToken` object.
#[derive(Deserialize)]
#[serde(untagged)]
enum SpecialName {
    Plain(String),
    Object { content: String },
}

impl SpecialName {
    fn name(opt: &Option<SpecialName>, default: &str) -> String {
        match opt {
            Some(SpecialName::Plain(s) | SpecialName::Object { content: s }) => s.clone(),
            None => default.to_owned(),
        }
    }
}

/// Runs a `tokenizers` call that may panic on hostile input, turning a panic into `err`.
/// The panic's message is dropped: it may quote the text being encoded (a slicing panic
/// prints the string), which is the client's secret.
fn guarded<T>(
    f: impl FnOnce() -> Result<T, TokenizerError>,
    err: impl FnOnce(String) -> TokenizerError,
) -> Result<T, TokenizerError> {
    catch_unwind(AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(err("the tokenizers crate panicked".to_owned())))
}

fn read(path: &Path) -> Result<Vec<u8>, TokenizerError> {
    std::fs::read(path).map_err(|source| TokenizerError::Io {
        path: path.to_owned(),
        source,
    })
}

fn malformed(path: &Path) -> impl Fn(String) -> TokenizerError + '_ {
    move |reason| TokenizerError::Malformed {
        path: path.to_owned(),
        reason,
    }
}

/// `tokenizer_config.json` in `dir`, or the defaults when there is none.
fn tokenizer_config(dir: &Path) -> Result<TokenizerConfig, TokenizerError> {
    let path = dir.join("tokenizer_config.json");
    if !path.is_file() {
        return Ok(TokenizerConfig::default());
    }
    serde_json::from_slice(&read(&path)?).map_err(|e| malformed(&path)(e.to_string()))
}

/// Whether the checkpoint in `dir` is a RoBERTa (its `tokenizer_config.json` names a
/// RoBERTa tokenizer, or its `config.json` has `model_type` `roberta`).
fn is_roberta(dir: &Path, cfg: &TokenizerConfig) -> bool {
    if let Some(class) = &cfg.tokenizer_class {
        return class.starts_with("Roberta");
    }
    #[derive(Deserialize)]
    struct ModelType {
        model_type: Option<String>,
    }
    std::fs::read(dir.join("config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<ModelType>(&b).ok())
        .and_then(|m| m.model_type)
        .is_some_and(|t| t == "roberta")
}

/// Parses `merges.txt` (an optional `#version` line, then one `a b` pair a line).
fn parse_merges(text: &str, path: &Path) -> Result<Merges, TokenizerError> {
    let mut merges = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if (n == 0 && line.starts_with("#version")) || line.is_empty() {
            continue;
        }
        match line.split_once(' ') {
            Some((a, b)) if !b.contains(' ') => merges.push((a.to_owned(), b.to_owned())),
            _ => {
                return Err(malformed(path)(format!(
                    "line {} is not a pair of tokens",
                    n + 1
                )));
            }
        }
    }
    Ok(merges)
}

/// GPT-2's byte-level BPE pipeline around `bpe`: GPT-2's split pattern without a prefix
/// space, bytes mapped to printable characters, and back on decoding.
fn byte_level(bpe: BPE) -> tokenizers::Tokenizer {
    let mut tk = tokenizers::Tokenizer::new(bpe);
    tk.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    tk.with_decoder(Some(ByteLevel::default()));
    tk
}

impl Tokenizer {
    /// The tokenizer of the checkpoint in `dir` (see the module docs for the files and
    /// their order).
    ///
    /// # Errors
    /// [`TokenizerError::Missing`] if `dir` holds no tokenizer file;
    /// [`TokenizerError::Io`] / [`TokenizerError::Malformed`] naming the file that cannot
    /// be read or used.
    pub fn from_dir(dir: &Path) -> Result<Tokenizer, TokenizerError> {
        let json = dir.join("tokenizer.json");
        if json.is_file() {
            return Tokenizer::from_file(&json);
        }
        let (vocab, merges) = (dir.join("vocab.json"), dir.join("merges.txt"));
        if vocab.is_file() && merges.is_file() {
            let cfg = tokenizer_config(dir)?;
            let roberta = is_roberta(dir, &cfg);
            let bpe = Tokenizer::bpe_files(&read(&vocab)?, &vocab, &read(&merges)?, &merges)?;
            return if roberta {
                Tokenizer::roberta(bpe, &cfg, dir)
            } else {
                Ok(Tokenizer {
                    inner: byte_level(bpe),
                    source: TokenizerSource::Gpt2Files(dir.to_owned()),
                })
            };
        }
        let vocab_txt = dir.join("vocab.txt");
        if vocab_txt.is_file() {
            return Tokenizer::wordpiece(&vocab_txt, &tokenizer_config(dir)?);
        }
        Err(TokenizerError::Missing {
            dir: dir.to_owned(),
        })
    }

    /// [`Tokenizer::from_dir`], or GPT-2's built-in tokenizer ([`Tokenizer::gpt2`]) when
    /// `dir` holds no tokenizer file (a GPT-2 checkpoint saved without one); see
    /// [`Tokenizer::source`] to tell which.
    ///
    /// # Errors
    /// Those of [`Tokenizer::from_dir`] other than [`TokenizerError::Missing`].
    pub fn from_gpt2_dir(dir: &Path) -> Result<Tokenizer, TokenizerError> {
        match Tokenizer::from_dir(dir) {
            Err(TokenizerError::Missing { .. }) => Tokenizer::gpt2(),
            other => other,
        }
    }

    /// Reads a Hugging Face `tokenizer.json` (its padding and truncation are switched
    /// off).
    ///
    /// # Errors
    /// [`TokenizerError::Io`] if unreadable, [`TokenizerError::Malformed`] if the crate
    /// cannot parse it.
    pub fn from_file(path: &Path) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_json_bytes(&read(path)?, path)
    }

    /// Parses the text of a `tokenizer.json`; `path` names it in errors.
    ///
    /// # Errors
    /// [`TokenizerError::Malformed`] if the crate cannot parse it.
    pub fn from_json_bytes(bytes: &[u8], path: &Path) -> Result<Tokenizer, TokenizerError> {
        let inner = guarded(
            || {
                let mut tk = tokenizers::Tokenizer::from_bytes(bytes)
                    .map_err(|e| malformed(path)(e.to_string()))?;
                tk.with_padding(None);
                tk.with_truncation(None)
                    .map_err(|e| malformed(path)(e.to_string()))?;
                Ok(tk)
            },
            malformed(path),
        )?;
        Ok(Tokenizer {
            inner,
            source: TokenizerSource::TokenizerJson(path.to_owned()),
        })
    }

    /// GPT-2's tokenizer (50,257 ids: 256 byte tokens, 50,000 merges, `<|endoftext|>`),
    /// from the tables compiled into this crate.
    ///
    /// # Errors
    /// [`TokenizerError::Malformed`] if the compiled-in tables cannot be parsed (never for
    /// a correct build).
    pub fn gpt2() -> Result<Tokenizer, TokenizerError> {
        let path = Path::new("<built-in GPT-2 tokenizer>");
        let bpe = Tokenizer::bpe_files(GPT2_VOCAB, path, GPT2_MERGES, path)?;
        Ok(Tokenizer {
            inner: byte_level(bpe),
            source: TokenizerSource::BuiltinGpt2,
        })
    }

    /// A byte-level BPE model from the bytes of `vocab.json` and `merges.txt`.
    fn bpe_files(
        vocab: &[u8],
        vocab_path: &Path,
        merges: &[u8],
        merges_path: &Path,
    ) -> Result<BPE, TokenizerError> {
        let map: HashMap<String, u32> =
            serde_json::from_slice(vocab).map_err(|e| malformed(vocab_path)(e.to_string()))?;
        let text = std::str::from_utf8(merges)
            .map_err(|e| malformed(merges_path)(format!("not UTF-8: {e}")))?;
        let merges = parse_merges(text, merges_path)?;
        Tokenizer::bpe(map.into_iter().collect(), merges, merges_path)
    }

    /// Builds the BPE model; `path` names the merges in errors (a merge of tokens missing
    /// from the vocabulary).
    fn bpe(vocab: Vocab, merges: Merges, path: &Path) -> Result<BPE, TokenizerError> {
        guarded(
            || {
                BPE::builder()
                    .vocab_and_merges(vocab, merges)
                    .build()
                    .map_err(|e| malformed(path)(e.to_string()))
            },
            malformed(path),
        )
    }

    /// RoBERTa around a byte-level BPE: its special tokens, `<s> … </s>`.
    fn roberta(bpe: BPE, cfg: &TokenizerConfig, dir: &Path) -> Result<Tokenizer, TokenizerError> {
        let mut tk = byte_level(bpe);
        let names = [
            SpecialName::name(&cfg.bos_token, "<s>"),
            SpecialName::name(&cfg.pad_token, "<pad>"),
            SpecialName::name(&cfg.eos_token, "</s>"),
            SpecialName::name(&cfg.unk_token, "<unk>"),
            SpecialName::name(&cfg.mask_token, "<mask>"),
        ];
        let vocab_path = dir.join("vocab.json");
        let id = |name: &str| {
            tk.token_to_id(name)
                .ok_or_else(|| malformed(&vocab_path)(format!("no {name} token")))
        };
        let (cls, sep) = (id(&names[0])?, id(&names[2])?);
        let processor = RobertaProcessing::new((names[2].clone(), sep), (names[0].clone(), cls))
            .trim_offsets(true)
            .add_prefix_space(false);
        tk.with_post_processor(Some(processor));
        let specials = names
            .iter()
            .filter(|n| tk.token_to_id(n).is_some())
            .map(|n| AddedToken::from(n.clone(), true))
            .collect::<Vec<_>>();
        tk.add_special_tokens(specials)
            .map_err(|e| malformed(&vocab_path)(e.to_string()))?;
        Ok(Tokenizer {
            inner: tk,
            source: TokenizerSource::RobertaFiles(dir.to_owned()),
        })
    }

    /// BERT WordPiece from `vocab.txt` (one token a line, id = line number) and the
    /// options of `tokenizer_config.json`.
    fn wordpiece(path: &Path, cfg: &TokenizerConfig) -> Result<Tokenizer, TokenizerError> {
        let bytes = read(path)?;
        let text =
            std::str::from_utf8(&bytes).map_err(|e| malformed(path)(format!("not UTF-8: {e}")))?;
        let mut vocab = Vocab::default();
        for (i, line) in text.lines().enumerate() {
            let id = u32::try_from(i).map_err(|_| malformed(path)("too many lines".into()))?;
            // The first occurrence wins, as in `transformers` (later duplicates are unused).
            vocab
                .entry(line.trim_end_matches('\r').to_owned())
                .or_insert(id);
        }
        let [unk, cls, sep, pad, mask] = [
            SpecialName::name(&cfg.unk_token, "[UNK]"),
            SpecialName::name(&cfg.cls_token, "[CLS]"),
            SpecialName::name(&cfg.sep_token, "[SEP]"),
            SpecialName::name(&cfg.pad_token, "[PAD]"),
            SpecialName::name(&cfg.mask_token, "[MASK]"),
        ];
        let id = |name: &str| {
            vocab
                .get(name)
                .copied()
                .ok_or_else(|| malformed(path)(format!("no {name} token")))
        };
        let (cls_id, sep_id) = (id(&cls)?, id(&sep)?);
        id(&unk)?;
        let model = guarded(
            || {
                WordPiece::builder()
                    .vocab(vocab.clone())
                    .unk_token(unk.clone())
                    .continuing_subword_prefix("##".into())
                    .max_input_chars_per_word(MAX_WORD_CHARS)
                    .build()
                    .map_err(|e| malformed(path)(e.to_string()))
            },
            malformed(path),
        )?;
        let lowercase = cfg.do_lower_case.unwrap_or(true);
        let mut tk = tokenizers::Tokenizer::new(model);
        tk.with_normalizer(Some(BertNormalizer::new(
            true,
            cfg.tokenize_chinese_chars.unwrap_or(true),
            cfg.strip_accents,
            lowercase,
        )))
        .map_err(|e| malformed(path)(e.to_string()))?;
        tk.with_pre_tokenizer(Some(BertPreTokenizer));
        let specials = [&pad, &unk, &cls, &sep, &mask]
            .into_iter()
            .filter(|n| vocab.contains_key(n.as_str()))
            .map(|n| AddedToken::from(n.clone(), true))
            .collect::<Vec<_>>();
        tk.with_post_processor(Some(BertProcessing::new((sep, sep_id), (cls, cls_id))));
        tk.with_decoder(Some(WordPieceDecoder::new("##".into(), true)));
        tk.add_special_tokens(specials)
            .map_err(|e| malformed(path)(e.to_string()))?;
        Ok(Tokenizer {
            inner: tk,
            source: TokenizerSource::VocabTxt(path.to_owned()),
        })
    }

    /// The tokenizer stored in a GGUF file's metadata (`tokenizer.ggml.model = gpt2`: the
    /// `tokens`, the `merges`, and `token_type`, whose type 3 marks control tokens, added
    /// as special tokens), built as the byte-level BPE of a `tokenizer.json`. `path` names
    /// the file in errors.
    ///
    /// # Errors
    /// [`TokenizerError::Malformed`] for another tokenizer model (e.g. SentencePiece's
    /// `llama`) or missing or inconsistent arrays.
    pub fn from_gguf(file: &GgufFile, path: &Path) -> Result<Tokenizer, TokenizerError> {
        let md = file.metadata();
        let model = md.get("tokenizer.ggml.model").and_then(|v| v.as_str());
        if model != Some("gpt2") {
            return Err(malformed(path)(format!(
                "tokenizer.ggml.model is {model:?}, not the byte-level BPE \"gpt2\""
            )));
        }
        let array = |key: &str| {
            md.get(key)
                .and_then(|v| v.as_array())
                .ok_or_else(|| malformed(path)(format!("no {key} array")))
        };
        let tokens = array("tokenizer.ggml.tokens")?;
        let merges = array("tokenizer.ggml.merges")?;
        let types = md
            .get("tokenizer.ggml.token_type")
            .and_then(|v| v.as_array());
        let mut vocab = Vocab::default();
        let mut specials = Vec::new();
        for (i, t) in tokens.iter().enumerate() {
            let s = t.as_str().ok_or_else(|| {
                malformed(path)(format!("tokenizer.ggml.tokens[{i}] is not a string"))
            })?;
            let id = u32::try_from(i).map_err(|_| malformed(path)("too many tokens".into()))?;
            vocab.insert(s.to_owned(), id);
            let control = types
                .and_then(|ty| ty.get(i))
                .and_then(|v| v.as_u64())
                .is_some_and(|ty| ty == 3);
            if control {
                specials.push(AddedToken::from(s.to_owned(), true));
            }
        }
        let mut pairs = Vec::with_capacity(merges.len());
        for (i, m) in merges.iter().enumerate() {
            match m.as_str().and_then(|s| s.split_once(' ')) {
                Some((a, b)) => pairs.push((a.to_owned(), b.to_owned())),
                None => {
                    return Err(malformed(path)(format!(
                        "tokenizer.ggml.merges[{i}] is not a pair of tokens"
                    )));
                }
            }
        }
        let mut tk = byte_level(Tokenizer::bpe(vocab, pairs, path)?);
        tk.add_special_tokens(specials)
            .map_err(|e| malformed(path)(e.to_string()))?;
        Ok(Tokenizer {
            inner: tk,
            source: TokenizerSource::Gguf,
        })
    }

    /// Where this tokenizer was read from.
    pub fn source(&self) -> &TokenizerSource {
        &self.source
    }

    /// The number of ids, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of `token` (a vocabulary entry or an added token), if any.
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// The ids of `text` with the special tokens the checkpoint adds around a single
    /// input (BERT's `[CLS] … [SEP]`, RoBERTa's `<s> … </s>`; none for GPT-2 and
    /// LLaMA-style tokenizers).
    ///
    /// # Errors
    /// [`TokenizerError::Encode`] if the tokenizer fails on the text.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, TokenizerError> {
        self.run_encode(text.into()).map(|(ids, _)| ids)
    }

    /// The ids of the pair `a`, `b` with the checkpoint's special tokens (BERT:
    /// `[CLS] a [SEP] b [SEP]`), and their token types (0 for `a`'s part, 1 for `b`'s).
    ///
    /// # Errors
    /// [`TokenizerError::Encode`] if the tokenizer fails on the texts.
    pub fn encode_pair(&self, a: &str, b: &str) -> Result<(Vec<u32>, Vec<u32>), TokenizerError> {
        self.run_encode((a, b).into())
    }

    fn run_encode(&self, input: EncodeInput<'_>) -> Result<(Vec<u32>, Vec<u32>), TokenizerError> {
        guarded(
            || {
                let enc = self
                    .inner
                    .encode(input, true)
                    .map_err(|e| TokenizerError::Encode(e.to_string()))?;
                Ok((enc.get_ids().to_vec(), enc.get_type_ids().to_vec()))
            },
            TokenizerError::Encode,
        )
    }

    /// The text of `ids`, special tokens included. **Lossy** for byte-level BPE: bytes
    /// that are not valid UTF-8 (a character cut between tokens, e.g. at the end of a
    /// partial generation) become U+FFFD.
    ///
    /// # Errors
    /// [`TokenizerError::UnknownToken`] for the first id outside the vocabulary (the crate
    /// itself would skip it silently).
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        if let Some(&bad) = ids.iter().find(|&&id| self.inner.id_to_token(id).is_none()) {
            return Err(TokenizerError::UnknownToken(bad));
        }
        guarded(
            || {
                self.inner
                    .decode(ids, false)
                    .map_err(|e| TokenizerError::Decode(e.to_string()))
            },
            TokenizerError::Decode,
        )
    }
}
