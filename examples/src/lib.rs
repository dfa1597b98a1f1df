//! Runnable examples of puma-rs.
