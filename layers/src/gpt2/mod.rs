//! GPT-2: the plaintext `f64` reference model and its secure three-party evaluation.

pub mod plain;
pub mod secure;
