//! Shared parts of the benchmark programs: the records they print with `--json` and the
//! Markdown tables of `BENCHMARKS.md` rendered from those records.

pub mod tables;
