//! GPT-2's byte-level BPE tokenizer.
//!
//! A thin wrapper over `tiktoken-rs`'s `r50k_base` encoding, which *is* GPT-2's
//! tokenizer: its ranks are GPT-2's `encoder.json` / `vocab.bpe` (compiled into the crate,
//! so no file or network access at run time) and its pre-tokenising regex is GPT-2's.
//! The only special token is `<|endoftext|>` (id 50256); [`Gpt2Tokenizer::encode`] never
//! produces it from text, and adds no BOS/EOS token.

use tiktoken_rs::CoreBPE;

/// Why tokenizing failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenizerError {
    /// The embedded vocabulary could not be built (a defect of the build, not of the
    /// input).
    #[error("cannot build the GPT-2 tokenizer: {0}")]
    Init(String),
    /// An id is not in the vocabulary.
    #[error("token id {0} is not in the GPT-2 vocabulary")]
    UnknownToken(u32),
}

/// GPT-2's tokenizer (50,257 ids: 50,000 merges, 256 byte tokens, `<|endoftext|>`).
///
/// Building one parses the embedded ranks (tens of milliseconds): build it once and share
/// it; it is `Send + Sync`.
pub struct Gpt2Tokenizer {
    bpe: CoreBPE,
}

impl std::fmt::Debug for Gpt2Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Gpt2Tokenizer(r50k_base)")
    }
}

impl Gpt2Tokenizer {
    /// The id of `<|endoftext|>`, GPT-2's only special token (its BOS and EOS).
    pub const END_OF_TEXT: u32 = 50256;

    /// Number of ids.
    pub const VOCAB_SIZE: usize = 50257;

    /// Builds the tokenizer from the ranks compiled into `tiktoken-rs`.
    ///
    /// # Errors
    /// [`TokenizerError::Init`] if the embedded data cannot be parsed (never for a correct
    /// build).
    pub fn new() -> Result<Gpt2Tokenizer, TokenizerError> {
        let bpe = tiktoken_rs::r50k_base().map_err(|e| TokenizerError::Init(e.to_string()))?;
        Ok(Gpt2Tokenizer { bpe })
    }

    /// The token ids of `text`, as GPT-2's tokenizer (`GPT2Tokenizer` in `transformers`,
    /// without special tokens) produces them. Special-token text such as
    /// `"<|endoftext|>"` is encoded as ordinary text.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.bpe.encode_ordinary(text)
    }

    /// The bytes that `ids` stand for. Byte-level BPE tokens are byte strings, and a
    /// multi-byte UTF-8 character can be split across tokens, so a sequence of ids (for
    /// example a prefix of a generation) need not be valid UTF-8.
    ///
    /// # Errors
    /// [`TokenizerError::UnknownToken`] for an id ≥ 50257.
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>, TokenizerError> {
        self.bpe
            .decode_bytes(ids)
            .map_err(|e| TokenizerError::UnknownToken(e.token))
    }

    /// The text of `ids`. **Lossy:** byte sequences that are not valid UTF-8 (a character
    /// cut between tokens, e.g. at the end of a partial generation) become U+FFFD; use
    /// [`Gpt2Tokenizer::decode_bytes`] for the exact bytes.
    ///
    /// # Errors
    /// [`TokenizerError::UnknownToken`] for an id ≥ 50257.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        let bytes = self.decode_bytes(ids)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}
