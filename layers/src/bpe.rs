//! Byte-level BPE tokenizers in Hugging Face's `tokenizer.json` form (GPT-2 style:
//! `ByteLevel` pre-tokenizer with GPT-2's split pattern, a `BPE` model with ranked merges,
//! added special tokens), as used by LLaMA-style checkpoints such as SmolLM2; also built from
//! a GGUF file's `tokenizer.ggml.*` metadata (`model = gpt2`).
//!
//! Encoding follows `tokenizers`: the text is first split at added special tokens (matched
//! literally, longest first), every other piece is pre-tokenised by GPT-2's pattern
//! (`'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`, written out
//! by hand below), mapped byte by byte to GPT-2's printable alphabet, and merged by the
//! lowest-ranked merge rule until none applies. No BOS/EOS is added.

use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use crate::gguf::GgufFile;

/// Why a tokenizer could not be built or an id not decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BpeError {
    /// The file could not be read or parsed.
    #[error("tokenizer file: {0}")]
    File(String),
    /// The tokenizer is not a byte-level BPE this module implements.
    #[error("unsupported tokenizer: {0}")]
    Unsupported(String),
    /// An id is not in the vocabulary.
    #[error("token id {0} is not in the vocabulary")]
    UnknownToken(u32),
}

/// A byte-level BPE tokenizer.
pub struct BpeTokenizer {
    vocab: HashMap<String, u32>,
    id_to_token: Vec<Option<String>>,
    merges: HashMap<(String, String), usize>,
    /// Added special tokens, longest first.
    specials: Vec<(String, u32)>,
    byte_to_char: [char; 256],
    char_to_byte: HashMap<char, u8>,
}

impl std::fmt::Debug for BpeTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "BpeTokenizer {{ vocab: {}, merges: {}, specials: {} }}",
            self.vocab.len(),
            self.merges.len(),
            self.specials.len()
        )
    }
}

#[derive(Deserialize)]
struct RawFile {
    model: RawModel,
    #[serde(default)]
    added_tokens: Vec<RawAdded>,
}

#[derive(Deserialize)]
struct RawModel {
    #[serde(rename = "type")]
    kind: String,
    vocab: HashMap<String, u32>,
    merges: Vec<RawMerge>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawMerge {
    Pair([String; 2]),
    Joined(String),
}

#[derive(Deserialize)]
struct RawAdded {
    id: u32,
    content: String,
}

/// GPT-2's reversible map of bytes to printable characters.
fn bytes_to_unicode() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable =
            (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            b
        } else {
            n += 1;
            255 + n
        };
        if let Some(slot) = out.get_mut(b as usize) {
            *slot = char::from_u32(c).unwrap_or('\0');
        }
    }
    out
}

/// Character classes of GPT-2's pattern.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Letter,
    Number,
    Space,
    Other,
}

fn class(c: char) -> Class {
    if c.is_alphabetic() {
        Class::Letter
    } else if c.is_numeric() {
        Class::Number
    } else if c.is_whitespace() {
        Class::Space
    } else {
        Class::Other
    }
}

/// Splits `text` as GPT-2's pre-tokenisation pattern does.
fn pre_tokenize(text: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let end_of = |i: usize| chars.get(i).map_or(text.len(), |&(p, _)| p);
    let cls = |i: usize| chars.get(i).map(|&(_, c)| class(c));
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let start = end_of(i);
        let c = chars.get(i).map_or(' ', |&(_, c)| c);
        // Contractions.
        if c == '\'' {
            let rest = text.get(start + 1..).unwrap_or("");
            let len = ["re", "ve", "ll", "s", "t", "m", "d"]
                .iter()
                .find(|s| rest.starts_with(*s))
                .map(|s| s.len());
            if let Some(l) = len {
                out.push(text.get(start..start + 1 + l).unwrap_or(""));
                i += 1 + l;
                continue;
            }
        }
        // An optional space followed by letters, numbers or other symbols.
        let (j0, k) = if c == ' ' {
            match cls(i + 1) {
                Some(k) if k != Class::Space => (i + 1, Some(k)),
                _ => (i, None),
            }
        } else {
            (i, Some(class(c)).filter(|&k| k != Class::Space))
        };
        if let Some(k) = k {
            let mut j = j0;
            while cls(j) == Some(k) {
                j += 1;
            }
            out.push(text.get(start..end_of(j)).unwrap_or(""));
            i = j;
            continue;
        }
        // Whitespace: `\s+(?!\S)` then `\s+` — a run before a non-space leaves its last
        // character to the next token.
        let mut j = i;
        while cls(j) == Some(Class::Space) {
            j += 1;
        }
        if j < chars.len() && j - i > 1 {
            j -= 1;
        }
        out.push(text.get(start..end_of(j)).unwrap_or(""));
        i = j;
    }
    out
}

impl BpeTokenizer {
    fn build(
        vocab: HashMap<String, u32>,
        merges: Vec<(String, String)>,
        specials: Vec<(String, u32)>,
    ) -> BpeTokenizer {
        let size = vocab
            .values()
            .chain(specials.iter().map(|(_, id)| id))
            .map(|&id| id as usize + 1)
            .max()
            .unwrap_or(0);
        let mut id_to_token = vec![None; size];
        for (t, &id) in vocab.iter().chain(specials.iter().map(|(t, id)| (t, id))) {
            if let Some(slot) = id_to_token.get_mut(id as usize) {
                *slot = Some(t.clone());
            }
        }
        let merges = merges
            .into_iter()
            .enumerate()
            .map(|(r, p)| (p, r))
            .collect();
        let mut specials = specials;
        specials.sort_by_key(|b| std::cmp::Reverse(b.0.len()));
        let byte_to_char = bytes_to_unicode();
        let char_to_byte = byte_to_char
            .iter()
            .enumerate()
            .map(|(b, &c)| (c, b as u8))
            .collect();
        BpeTokenizer {
            vocab,
            id_to_token,
            merges,
            specials,
            byte_to_char,
            char_to_byte,
        }
    }

    /// Parses a Hugging Face `tokenizer.json` of a byte-level BPE.
    ///
    /// # Errors
    /// [`BpeError::File`] for malformed JSON, [`BpeError::Unsupported`] for another model
    /// type.
    pub fn from_json_str(text: &str) -> Result<BpeTokenizer, BpeError> {
        let raw: RawFile = serde_json::from_str(text).map_err(|e| BpeError::File(e.to_string()))?;
        if raw.model.kind != "BPE" {
            return Err(BpeError::Unsupported(format!(
                "model type {}",
                raw.model.kind
            )));
        }
        let mut merges = Vec::with_capacity(raw.model.merges.len());
        for m in raw.model.merges {
            match m {
                RawMerge::Pair([a, b]) => merges.push((a, b)),
                RawMerge::Joined(s) => match s.split_once(' ') {
                    Some((a, b)) => merges.push((a.to_owned(), b.to_owned())),
                    None => return Err(BpeError::File(format!("merge {s:?} is not a pair"))),
                },
            }
        }
        let specials = raw
            .added_tokens
            .into_iter()
            .map(|a| (a.content, a.id))
            .collect();
        Ok(BpeTokenizer::build(raw.model.vocab, merges, specials))
    }

    /// Reads a `tokenizer.json` file.
    ///
    /// # Errors
    /// [`BpeError::File`] if unreadable, and those of [`BpeTokenizer::from_json_str`].
    pub fn from_file(path: &Path) -> Result<BpeTokenizer, BpeError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BpeError::File(format!("{}: {e}", path.display())))?;
        BpeTokenizer::from_json_str(&text)
    }

    /// The tokenizer stored in a GGUF file's metadata (`tokenizer.ggml.model = gpt2`:
    /// `tokens`, `merges`, `token_type`; type 3 marks control tokens, treated as specials).
    ///
    /// # Errors
    /// [`BpeError::Unsupported`] for another tokenizer model or missing arrays.
    pub fn from_gguf(file: &GgufFile) -> Result<BpeTokenizer, BpeError> {
        let md = file.metadata();
        let model = md.get("tokenizer.ggml.model").and_then(|v| v.as_str());
        if model != Some("gpt2") {
            return Err(BpeError::Unsupported(format!(
                "GGUF tokenizer model {model:?}"
            )));
        }
        let tokens = md
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.as_array())
            .ok_or_else(|| BpeError::Unsupported("no tokenizer.ggml.tokens".into()))?;
        let merges = md
            .get("tokenizer.ggml.merges")
            .and_then(|v| v.as_array())
            .ok_or_else(|| BpeError::Unsupported("no tokenizer.ggml.merges".into()))?;
        let types = md
            .get("tokenizer.ggml.token_type")
            .and_then(|v| v.as_array());
        let mut vocab = HashMap::with_capacity(tokens.len());
        let mut specials = Vec::new();
        for (id, t) in tokens.iter().enumerate() {
            let s = t.as_str().unwrap_or_default().to_owned();
            let control = types
                .and_then(|ty| ty.get(id))
                .and_then(|v| v.as_u64())
                .is_some_and(|ty| ty == 3);
            if control {
                specials.push((s, id as u32));
            } else {
                vocab.insert(s, id as u32);
            }
        }
        let mut pairs = Vec::with_capacity(merges.len());
        for m in merges {
            let s = m.as_str().unwrap_or_default();
            match s.split_once(' ') {
                Some((a, b)) => pairs.push((a.to_owned(), b.to_owned())),
                None => return Err(BpeError::File(format!("merge {s:?} is not a pair"))),
            }
        }
        Ok(BpeTokenizer::build(vocab, pairs, specials))
    }

    /// The number of ids (the largest id plus one).
    pub fn vocab_size(&self) -> usize {
        self.id_to_token.len()
    }

    /// The ids of `text`; added special tokens written in the text (e.g. `<|im_start|>`)
    /// become their ids. Characters without a token (impossible for a byte-level
    /// vocabulary that holds all 256 bytes) are dropped.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            // The earliest special token (longest at equal positions).
            let found = self
                .specials
                .iter()
                .filter_map(|(s, id)| rest.find(s.as_str()).map(|p| (p, s.len(), *id)))
                .min_by_key(|&(p, len, _)| (p, usize::MAX - len));
            let (piece, special) = match found {
                Some((p, len, id)) => (
                    rest.get(..p).unwrap_or(""),
                    Some((id, rest.get(p + len..).unwrap_or(""))),
                ),
                None => (rest, None),
            };
            for word in pre_tokenize(piece) {
                self.encode_word(word, &mut out);
            }
            match special {
                Some((id, after)) => {
                    out.push(id);
                    rest = after;
                }
                None => break,
            }
        }
        out
    }

    fn encode_word(&self, word: &str, out: &mut Vec<u32>) {
        let mut parts: Vec<String> = word
            .bytes()
            .map(|b| self.byte_to_char[b as usize].to_string())
            .collect();
        loop {
            let best = parts
                .windows(2)
                .enumerate()
                .filter_map(|(i, w)| {
                    let (a, b) = (w.first()?, w.get(1)?);
                    self.merges.get(&(a.clone(), b.clone())).map(|&r| (r, i))
                })
                .min();
            let Some((_, i)) = best else { break };
            let right = parts.remove(i + 1);
            if let Some(left) = parts.get_mut(i) {
                left.push_str(&right);
            }
        }
        out.extend(parts.iter().filter_map(|p| self.vocab.get(p).copied()));
    }

    /// The text of `ids` (special tokens as their text; invalid UTF-8 replaced).
    ///
    /// # Errors
    /// [`BpeError::UnknownToken`] for an id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String, BpeError> {
        let mut bytes = Vec::new();
        for &id in ids {
            let t = self
                .id_to_token
                .get(id as usize)
                .and_then(Option::as_ref)
                .ok_or(BpeError::UnknownToken(id))?;
            if self.specials.iter().any(|(_, s)| *s == id) {
                bytes.extend_from_slice(t.as_bytes());
            } else {
                for c in t.chars() {
                    match self.char_to_byte.get(&c) {
                        Some(&b) => bytes.push(b),
                        None => bytes.extend_from_slice(c.to_string().as_bytes()),
                    }
                }
            }
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}
