//! GPT-2 (`GPT2LMHeadModel`): its configuration ([`config`]), the checkpoint loader
//! ([`weights`]), the plaintext `f64` reference model ([`plain`]) and the wiring into the
//! one decoder path ([`secure`]).

pub mod config;
pub mod plain;
pub mod secure;
pub mod weights;
