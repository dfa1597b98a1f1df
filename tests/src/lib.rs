//! Cross-crate integration tests of puma-rs.
