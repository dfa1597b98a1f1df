//! Why a BERT checkpoint could not be loaded or an input could not be evaluated.

use std::path::PathBuf;

/// Errors of BERT loading and evaluation. Variants about one tensor name it; none carries
/// input values (token ids may be private).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BertError {
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `config.json` is not JSON of the expected form.
    #[error("invalid config.json: {0}")]
    Json(#[from] serde_json::Error),
    /// The configuration asks for something this crate does not implement, or is
    /// inconsistent (the message names the field).
    #[error("unsupported or invalid configuration: {0}")]
    Config(String),
    /// A size of the configuration exceeds the model size limits of [`crate::limits`]
    /// (the error names the field and the limit).
    #[error(transparent)]
    Limit(#[from] crate::limits::LimitError),
    /// The weights file is not a valid safetensors file.
    #[error("{what} is not a valid safetensors file: {reason}")]
    BadFile {
        /// The file (or `"safetensors bytes"`).
        what: String,
        /// What the parser reports.
        reason: String,
    },
    /// A tensor the model needs is missing (looked up with and without the model prefix).
    #[error(
        "tensor {name} is missing (looked for it with and without the \"bert.\"/\"roberta.\" prefix)"
    )]
    MissingTensor {
        /// The name without prefix.
        name: String,
    },
    /// A tensor's shape does not match the configuration.
    #[error("tensor {name} has shape {found:?}, expected {expected:?}")]
    Shape {
        /// The tensor's name.
        name: String,
        /// The expected shape.
        expected: Vec<usize>,
        /// The shape found.
        found: Vec<usize>,
    },
    /// A tensor's dtype is not F32, F16, BF16 or F64.
    #[error("tensor {name} has dtype {dtype}, expected F32, F16, BF16 or F64")]
    UnsupportedDtype {
        /// The tensor's name.
        name: String,
        /// The dtype found.
        dtype: String,
    },
    /// A tensor holds NaN or an infinity.
    #[error("tensor {name} holds a non-finite value")]
    NonFinite {
        /// The tensor's name.
        name: String,
    },
    /// The model has no pooler or no classification head, but the caller asked for it.
    #[error("the checkpoint has no {0}")]
    MissingHead(&'static str),
    /// An input does not fit the model (the message says which constraint; it never
    /// contains token ids).
    #[error("invalid input: {0}")]
    Input(String),
}
