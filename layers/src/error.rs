//! The error of layer operations.

use std::fmt;

/// Why a layer operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LayerError {
    /// Shapes do not fit the data or each other. Shapes are public, so the message names
    /// them.
    Shape(String),
    /// A core protocol or encoding failed.
    Core(puma_core::Error),
}

impl From<puma_core::Error> for LayerError {
    fn from(e: puma_core::Error) -> Self {
        LayerError::Core(e)
    }
}

impl fmt::Display for LayerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayerError::Shape(msg) => write!(f, "shape error: {msg}"),
            LayerError::Core(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LayerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LayerError::Core(e) => Some(e),
            LayerError::Shape(_) => None,
        }
    }
}

/// Lets protocol closures use `?` on layer operations and still return the core's error
/// (as the simulator and the transports expect): shape errors become `Misuse`.
impl From<LayerError> for puma_core::Error {
    fn from(e: LayerError) -> Self {
        match e {
            LayerError::Core(e) => e,
            LayerError::Shape(_) => puma_core::Error::misuse("tensor shapes do not match"),
        }
    }
}
