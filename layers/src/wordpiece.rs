//! BERT's WordPiece tokenizer, read from a checkpoint's `vocab.txt` (and
//! `tokenizer_config.json`), or from its `tokenizer.json`.
//!
//! The pipeline is `transformers`' `BertTokenizer` (and the `tokenizers` crate's
//! `BertNormalizer` + `BertPreTokenizer` + `WordPiece`): clean the text (drop NUL, U+FFFD
//! and control characters, map whitespace to spaces), put spaces around CJK ideographs,
//! split on whitespace, lower-case and strip accents (NFD, then drop non-spacing marks)
//! when the checkpoint is uncased, split off punctuation, then greedy longest-match-first
//! WordPiece with the `##` continuation prefix; words of more than 100 characters, or with
//! no match, become `[UNK]`. Single inputs are wrapped as `[CLS] … [SEP]`, pairs as
//! `[CLS] a [SEP] b [SEP]` with token types 0 / 1. Nothing is padded or truncated: a
//! `tokenizer.json` that asks for fixed padding (as all-MiniLM-L6-v2's does) is read for
//! its vocabulary and normaliser only.
//!
//! Punctuation is ASCII punctuation plus the Unicode punctuation blocks (Latin-1's
//! ¡ § « ¶ · » ¿, General Punctuation, CJK Symbols and Punctuation, the full-width
//! forms); Python's `unicodedata` category P* also covers rarer scripts' marks.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use unicode_normalization::UnicodeNormalization;

/// Why a WordPiece tokenizer could not be built or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WordPieceError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON file is malformed or not a WordPiece tokenizer.
    #[error("invalid tokenizer file: {0}")]
    Format(String),
    /// A special token the tokenizer needs is not in the vocabulary.
    #[error("the vocabulary has no {0} token")]
    MissingSpecial(String),
    /// An id is not in the vocabulary.
    #[error("token id {0} is not in the vocabulary")]
    UnknownId(u32),
}

/// A BERT WordPiece tokenizer.
#[derive(Clone)]
pub struct WordPieceTokenizer {
    vocab: HashMap<String, u32>,
    tokens: Vec<String>,
    lowercase: bool,
    strip_accents: bool,
    chinese_chars: bool,
    prefix: String,
    unk: u32,
    cls: u32,
    sep: u32,
    pad: u32,
}

impl std::fmt::Debug for WordPieceTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "WordPieceTokenizer {{ vocab: {}, lowercase: {} }}",
            self.tokens.len(),
            self.lowercase
        )
    }
}

/// Longest word WordPiece splits (longer ones are `[UNK]`).
const MAX_WORD_CHARS: usize = 100;

#[derive(Deserialize, Default)]
struct TokenizerConfig {
    do_lower_case: Option<bool>,
    strip_accents: Option<bool>,
    tokenize_chinese_chars: Option<bool>,
    unk_token: Option<String>,
    cls_token: Option<String>,
    sep_token: Option<String>,
    pad_token: Option<String>,
}

#[derive(Deserialize)]
struct TokenizerJson {
    normalizer: Option<NormalizerJson>,
    model: ModelJson,
}

#[derive(Deserialize)]
struct NormalizerJson {
    #[serde(rename = "type")]
    kind: String,
    lowercase: Option<bool>,
    strip_accents: Option<bool>,
    handle_chinese_chars: Option<bool>,
}

#[derive(Deserialize)]
struct ModelJson {
    #[serde(rename = "type")]
    kind: String,
    vocab: HashMap<String, u32>,
    unk_token: Option<String>,
    continuing_subword_prefix: Option<String>,
}

fn read(path: &Path) -> Result<String, WordPieceError> {
    std::fs::read_to_string(path).map_err(|source| WordPieceError::Io {
        path: path.to_owned(),
        source,
    })
}

impl WordPieceTokenizer {
    /// Builds a tokenizer from a vocabulary (`tokens[id]`) and options. `strip_accents`
    /// `None` means "as `lowercase`" (BERT's rule).
    ///
    /// # Errors
    /// [`WordPieceError::MissingSpecial`] if `[UNK]`, `[CLS]`, `[SEP]` or `[PAD]` (or the
    /// names given) is missing.
    pub fn new(
        tokens: Vec<String>,
        lowercase: bool,
        strip_accents: Option<bool>,
        specials: [&str; 4],
    ) -> Result<WordPieceTokenizer, WordPieceError> {
        let mut vocab = HashMap::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            // The first occurrence wins, as in `transformers` (later duplicates are unused).
            vocab.entry(t.clone()).or_insert(i as u32);
        }
        let id = |name: &str| {
            vocab
                .get(name)
                .copied()
                .ok_or_else(|| WordPieceError::MissingSpecial(name.to_owned()))
        };
        let [unk, cls, sep, pad] = specials;
        Ok(WordPieceTokenizer {
            unk: id(unk)?,
            cls: id(cls)?,
            sep: id(sep)?,
            pad: id(pad)?,
            vocab,
            tokens,
            lowercase,
            strip_accents: strip_accents.unwrap_or(lowercase),
            chinese_chars: true,
            prefix: "##".to_owned(),
        })
    }

    /// Reads `dir/vocab.txt` (one token per line, id = line number) with the options of
    /// `dir/tokenizer_config.json` when present (default: lower-casing), or, without
    /// `vocab.txt`, `dir/tokenizer.json`.
    ///
    /// # Errors
    /// [`WordPieceError::Io`] if neither file can be read, [`WordPieceError::Format`] for
    /// malformed JSON, [`WordPieceError::MissingSpecial`] for a missing special token.
    pub fn from_dir(dir: &Path) -> Result<WordPieceTokenizer, WordPieceError> {
        let vocab_path = dir.join("vocab.txt");
        if !vocab_path.is_file() && dir.join("tokenizer.json").is_file() {
            return WordPieceTokenizer::from_tokenizer_json(&read(&dir.join("tokenizer.json"))?);
        }
        let text = read(&vocab_path)?;
        let tokens: Vec<String> = text
            .lines()
            .map(|l| l.trim_end_matches('\r').to_owned())
            .collect();
        let cfg_path = dir.join("tokenizer_config.json");
        let cfg: TokenizerConfig = if cfg_path.is_file() {
            serde_json::from_str(&read(&cfg_path)?)
                .map_err(|e| WordPieceError::Format(format!("tokenizer_config.json: {e}")))?
        } else {
            TokenizerConfig::default()
        };
        let names = [
            cfg.unk_token.as_deref().unwrap_or("[UNK]"),
            cfg.cls_token.as_deref().unwrap_or("[CLS]"),
            cfg.sep_token.as_deref().unwrap_or("[SEP]"),
            cfg.pad_token.as_deref().unwrap_or("[PAD]"),
        ];
        let mut t = WordPieceTokenizer::new(
            tokens,
            cfg.do_lower_case.unwrap_or(true),
            cfg.strip_accents,
            names,
        )?;
        t.chinese_chars = cfg.tokenize_chinese_chars.unwrap_or(true);
        Ok(t)
    }

    /// Reads the text of a `tokenizer.json` with a `WordPiece` model (its padding and
    /// truncation settings are ignored).
    ///
    /// # Errors
    /// [`WordPieceError::Format`] for malformed JSON or another model type,
    /// [`WordPieceError::MissingSpecial`] for a missing special token.
    pub fn from_tokenizer_json(text: &str) -> Result<WordPieceTokenizer, WordPieceError> {
        let tj: TokenizerJson = serde_json::from_str(text)
            .map_err(|e| WordPieceError::Format(format!("tokenizer.json: {e}")))?;
        if tj.model.kind != "WordPiece" {
            return Err(WordPieceError::Format(format!(
                "model type {:?} is not WordPiece",
                tj.model.kind
            )));
        }
        let n = tj
            .model
            .vocab
            .values()
            .map(|&i| i as usize + 1)
            .max()
            .unwrap_or(0);
        if n != tj.model.vocab.len() {
            return Err(WordPieceError::Format("vocabulary ids are not 0..n".into()));
        }
        let mut tokens = vec![String::new(); n];
        for (t, &i) in &tj.model.vocab {
            if let Some(slot) = tokens.get_mut(i as usize) {
                slot.clone_from(t);
            }
        }
        let (lowercase, strip, chinese) = match &tj.normalizer {
            Some(nm) if nm.kind == "BertNormalizer" => (
                nm.lowercase.unwrap_or(true),
                nm.strip_accents,
                nm.handle_chinese_chars.unwrap_or(true),
            ),
            _ => (false, Some(false), true),
        };
        let unk = tj.model.unk_token.unwrap_or_else(|| "[UNK]".into());
        let mut t =
            WordPieceTokenizer::new(tokens, lowercase, strip, [&unk, "[CLS]", "[SEP]", "[PAD]"])?;
        t.chinese_chars = chinese;
        if let Some(p) = tj.model.continuing_subword_prefix {
            t.prefix = p;
        }
        Ok(t)
    }

    /// The vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The `[PAD]` id.
    pub fn pad_id(&self) -> u32 {
        self.pad
    }

    /// The ids of `text` without special tokens.
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        for word in self.basic_tokens(text) {
            self.word_piece(&word, &mut out);
        }
        out
    }

    /// `[CLS] text [SEP]`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = vec![self.cls];
        ids.extend(self.tokenize(text));
        ids.push(self.sep);
        ids
    }

    /// `[CLS] a [SEP] b [SEP]` and its token types (0 up to the first `[SEP]`, then 1).
    pub fn encode_pair(&self, a: &str, b: &str) -> (Vec<u32>, Vec<u32>) {
        let mut ids = self.encode(a);
        let first = ids.len();
        ids.extend(self.tokenize(b));
        ids.push(self.sep);
        let types = (0..ids.len()).map(|i| u32::from(i >= first)).collect();
        (ids, types)
    }

    /// The tokens of `ids`, space-separated, with `##` continuations joined.
    ///
    /// # Errors
    /// [`WordPieceError::UnknownId`] for an id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String, WordPieceError> {
        let mut out = String::new();
        for &id in ids {
            let t = self
                .tokens
                .get(id as usize)
                .ok_or(WordPieceError::UnknownId(id))?;
            match t.strip_prefix(self.prefix.as_str()) {
                Some(rest) if !out.is_empty() => out.push_str(rest),
                _ => {
                    if !out.is_empty() {
                        out.push(' ');
                    }
                    out.push_str(t);
                }
            }
        }
        Ok(out)
    }

    /// BERT's basic tokenizer: cleaned, split on whitespace and punctuation, normalised.
    fn basic_tokens(&self, text: &str) -> Vec<String> {
        let mut cleaned = String::with_capacity(text.len());
        for c in text.chars() {
            if c == '\0' || c == '\u{fffd}' || is_control(c) {
                continue;
            }
            if c.is_whitespace() {
                cleaned.push(' ');
            } else if self.chinese_chars && is_cjk(c) {
                cleaned.push(' ');
                cleaned.push(c);
                cleaned.push(' ');
            } else {
                cleaned.push(c);
            }
        }
        let mut words = Vec::new();
        for raw in cleaned.split_whitespace() {
            let mut w = if self.lowercase {
                raw.to_lowercase()
            } else {
                raw.to_owned()
            };
            if self.strip_accents {
                w = w.nfd().filter(|&c| !is_nonspacing_mark(c)).collect();
            }
            let mut cur = String::new();
            for c in w.chars() {
                if is_punctuation(c) {
                    if !cur.is_empty() {
                        words.push(std::mem::take(&mut cur));
                    }
                    words.push(c.to_string());
                } else {
                    cur.push(c);
                }
            }
            if !cur.is_empty() {
                words.push(cur);
            }
        }
        words
    }

    /// Greedy longest-match-first WordPiece of one word.
    fn word_piece(&self, word: &str, out: &mut Vec<u32>) {
        let chars: Vec<char> = word.chars().collect();
        if chars.len() > MAX_WORD_CHARS {
            out.push(self.unk);
            return;
        }
        let mut pieces = Vec::new();
        let mut start = 0;
        while start < chars.len() {
            let mut end = chars.len();
            let mut found = None;
            while start < end {
                let mut s: String = chars[start..end].iter().collect();
                if start > 0 {
                    s.insert_str(0, &self.prefix);
                }
                if let Some(&id) = self.vocab.get(&s) {
                    found = Some(id);
                    break;
                }
                end -= 1;
            }
            match found {
                Some(id) => {
                    pieces.push(id);
                    start = end;
                }
                None => {
                    out.push(self.unk);
                    return;
                }
            }
        }
        out.extend(pieces);
    }
}

/// Control characters (Cc, Cf) other than the whitespace ones.
fn is_control(c: char) -> bool {
    if matches!(c, '\t' | '\n' | '\r') {
        return false;
    }
    c.is_control()
        || matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{feff}')
}

/// CJK ideographs, as BERT's `_is_chinese_char`.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B820..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F)
}

/// Non-spacing combining marks (category Mn) of the blocks accents decompose into.
fn is_nonspacing_mark(c: char) -> bool {
    matches!(c as u32, 0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F)
}

/// BERT's punctuation: all non-alphanumeric ASCII symbols, and Unicode punctuation.
fn is_punctuation(c: char) -> bool {
    if c.is_ascii() {
        return c.is_ascii_punctuation();
    }
    matches!(c as u32,
        0xA1 | 0xA7 | 0xAB | 0xB6 | 0xB7 | 0xBB | 0xBF
        | 0x2010..=0x2027 | 0x2030..=0x205E | 0x3001..=0x3003 | 0x3008..=0x3011
        | 0x3014..=0x301F | 0xFF01..=0xFF03 | 0xFF05..=0xFF0A | 0xFF0C..=0xFF0F
        | 0xFF1A | 0xFF1B | 0xFF1F | 0xFF20 | 0xFF3B..=0xFF3D | 0xFF3F | 0xFF5B | 0xFF5D)
}
