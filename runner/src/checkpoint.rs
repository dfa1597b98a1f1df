//! What kind of checkpoint a path holds, and its tokenizer: shared by the programs that
//! take a model path (`puma-party`, `puma-client`).

use std::path::Path;

use puma_layers::Tokenizer;
use puma_layers::gguf::GgufFile;

/// The architectures a checkpoint can have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    /// GPT-2 (`GPT2LMHeadModel`).
    Gpt2,
    /// LLaMA-style decoders (Hugging Face directory or GGUF).
    Llama,
    /// BERT and RoBERTa encoders.
    Bert,
}

/// The architecture of the checkpoint at `path`: LLaMA for a `.gguf` file, else
/// `model_type` in its `config.json`.
///
/// # Errors
/// A message naming the file: unreadable, malformed, no or an unsupported `model_type`.
pub fn detect(path: &Path) -> Result<ModelKind, String> {
    if path.extension().is_some_and(|e| e == "gguf") {
        return Ok(ModelKind::Llama);
    }
    let file = if path.is_dir() {
        path.join("config.json")
    } else {
        path.to_path_buf()
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    match v.get("model_type").and_then(|t| t.as_str()) {
        Some("gpt2") => Ok(ModelKind::Gpt2),
        Some("llama") => Ok(ModelKind::Llama),
        Some("bert" | "roberta") => Ok(ModelKind::Bert),
        Some(other) => Err(format!(
            "{}: model_type {other:?} is not supported (gpt2, llama, bert, roberta)",
            file.display()
        )),
        None => Err(format!("{}: no model_type; pass --arch", file.display())),
    }
}

/// The tokenizer of the checkpoint at `path` of architecture `kind`: a GGUF file's
/// embedded vocabulary, GPT-2's `vocab.json` + `merges.txt` (or `tokenizer.json`), or a
/// directory's `tokenizer.json`.
///
/// # Errors
/// A message naming the file that is missing or malformed.
pub fn tokenizer(path: &Path, kind: ModelKind) -> Result<Tokenizer, String> {
    if path.extension().is_some_and(|e| e == "gguf") {
        let f = GgufFile::open(path).map_err(|e| e.to_string())?;
        return Tokenizer::from_gguf(&f, path).map_err(|e| e.to_string());
    }
    match kind {
        ModelKind::Gpt2 => Tokenizer::from_gpt2_dir(path),
        ModelKind::Llama | ModelKind::Bert => Tokenizer::from_dir(path),
    }
    .map_err(|e| e.to_string())
}
