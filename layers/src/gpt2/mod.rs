//! GPT-2: the plaintext `f64` reference model.

pub mod plain;
