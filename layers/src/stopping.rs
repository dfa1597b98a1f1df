//! A checkpoint's end-of-sequence ids, as its own files give them: Hugging Face's
//! `generation_config.json` (what `transformers` generates with), else `config.json`
//! (`eos_token_id`, a number or a list), else a GGUF file's `tokenizer.ggml.eos_token_id`.
//! Generation ([`crate::nn::Decoding::eos`]) ends after the first of them.

use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::gguf::GgufFile;

/// Why a checkpoint's end-of-sequence ids could not be read.
#[derive(Debug)]
pub enum EosError {
    /// The file exists but could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The file is not JSON, or `eos_token_id` is neither an id nor a list of ids.
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        detail: String,
    },
}

impl fmt::Display for EosError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EosError::Io { path, source } => write!(f, "cannot read {}: {source}", path.display()),
            EosError::Malformed { path, detail } => write!(f, "{}: {detail}", path.display()),
        }
    }
}

impl std::error::Error for EosError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EosError::Io { source, .. } => Some(source),
            EosError::Malformed { .. } => None,
        }
    }
}

/// The largest id list read from a file: real checkpoints name one to a few ids.
const MAX_EOS_IDS: usize = 64;

/// The end-of-sequence ids of a Hugging Face checkpoint directory: `generation_config.json`'s
/// `eos_token_id` if that file names one, else `config.json`'s; empty if neither does.
/// Duplicates are dropped; the order is kept.
///
/// # Errors
/// [`EosError`] naming the file when one exists but cannot be read or parsed, or its
/// `eos_token_id` is not an id (0 ≤ id < 2^32) or a list of at most 64 ids.
pub fn eos_ids_in_dir(dir: &Path) -> Result<Vec<u32>, EosError> {
    for name in ["generation_config.json", "config.json"] {
        let path = dir.join(name);
        if !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|source| EosError::Io {
            path: path.clone(),
            source,
        })?;
        let json: Value = serde_json::from_str(&text).map_err(|e| EosError::Malformed {
            path: path.clone(),
            detail: format!("not JSON: {e}"),
        })?;
        if let Some(ids) = eos_field(&json, &path)? {
            return Ok(ids);
        }
    }
    Ok(Vec::new())
}

/// `eos_token_id` of a JSON config: `None` if absent or null.
fn eos_field(json: &Value, path: &Path) -> Result<Option<Vec<u32>>, EosError> {
    let bad = |detail: String| EosError::Malformed {
        path: path.to_path_buf(),
        detail,
    };
    let id = |v: &Value| {
        v.as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .ok_or_else(|| bad(format!("eos_token_id {v} is not a token id")))
    };
    let ids = match json.get("eos_token_id") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(list)) => {
            if list.len() > MAX_EOS_IDS {
                return Err(bad(format!(
                    "eos_token_id lists {} ids (at most {MAX_EOS_IDS} are read)",
                    list.len()
                )));
            }
            list.iter().map(id).collect::<Result<Vec<u32>, _>>()?
        }
        Some(v) => vec![id(v)?],
    };
    Ok(Some(dedup(ids)))
}

/// The end-of-sequence id of a GGUF file (`tokenizer.ggml.eos_token_id`), if it names one
/// that fits a token id.
pub fn eos_ids_in_gguf(file: &GgufFile) -> Vec<u32> {
    file.metadata()
        .get("tokenizer.ggml.eos_token_id")
        .and_then(|v| v.as_u64())
        .and_then(|x| u32::try_from(x).ok())
        .map(|id| vec![id])
        .unwrap_or_default()
}

/// The end-of-sequence ids of a checkpoint path: a `.gguf` file or a Hugging Face directory.
///
/// # Errors
/// As [`eos_ids_in_dir`]; for a GGUF file, its [`crate::gguf::GgufError`] as
/// [`EosError::Malformed`].
pub fn eos_ids(path: &Path) -> Result<Vec<u32>, EosError> {
    if path.extension().is_some_and(|e| e == "gguf") {
        let file = GgufFile::open(path).map_err(|e| EosError::Malformed {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        Ok(eos_ids_in_gguf(&file))
    } else {
        eos_ids_in_dir(path)
    }
}

fn dedup(ids: Vec<u32>) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::with_capacity(ids.len());
    for id in ids {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("write");
        }
        dir
    }

    #[test]
    fn generation_config_wins_over_config() {
        let d = dir_with(&[
            ("config.json", r#"{"eos_token_id": 7}"#),
            ("generation_config.json", r#"{"eos_token_id": [2, 5, 2]}"#),
        ]);
        assert_eq!(eos_ids_in_dir(d.path()).expect("ids"), vec![2, 5]);
    }

    #[test]
    fn config_is_read_when_generation_config_names_none() {
        let d = dir_with(&[
            ("config.json", r#"{"eos_token_id": 50256}"#),
            ("generation_config.json", r#"{"eos_token_id": null}"#),
        ]);
        assert_eq!(eos_ids_in_dir(d.path()).expect("ids"), vec![50256]);
        let none = dir_with(&[("config.json", r#"{"vocab_size": 10}"#)]);
        assert!(eos_ids_in_dir(none.path()).expect("ids").is_empty());
    }

    #[test]
    fn malformed_ids_name_the_file() {
        for bad in [
            r#"{"eos_token_id": -1}"#,
            r#"{"eos_token_id": "x"}"#,
            "{",
            r#"{"eos_token_id": 4294967296}"#,
        ] {
            let d = dir_with(&[("generation_config.json", bad)]);
            let e = eos_ids_in_dir(d.path()).expect_err(bad).to_string();
            assert!(e.contains("generation_config.json"), "{e}");
        }
        let long = format!(r#"{{"eos_token_id": {:?}}}"#, vec![1; 65]);
        let d = dir_with(&[("config.json", &long)]);
        assert!(eos_ids_in_dir(d.path()).is_err());
    }

    #[test]
    fn the_shakespeare_model_ends_at_its_endoftext() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/gpt2-shakespeare");
        assert_eq!(eos_ids(&dir).expect("ids"), vec![50256]);
    }
}
