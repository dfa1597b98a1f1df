//! Cooperative scheduling: a GPT-2 base-width block yields to its host under the default
//! work budget, and yielding changes nothing the parties compute or send.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

mod yield_block;

use puma_core::FixedPoint;
use puma_core::engine::Config;
use yield_block::{D, ROWS, Weights, run};

#[test]
fn a_block_yields_under_the_default_budget_and_computes_the_same() {
    let w = Weights::random(11);
    let free = run(&w, u64::MAX).unwrap();
    let default = run(&w, Config::DEFAULT_WORK_BUDGET).unwrap();
    // A budget below any block of the products: every poll does one block and yields.
    let tiny = run(&w, 1 << 16).unwrap();

    assert_eq!(free.yields, 0, "nothing yields without a budget");
    assert!(
        default.yields > 0,
        "the default budget must split the block"
    );
    assert!(tiny.yields > default.yields);

    // Same outputs, frames (byte for byte, in order on every link) and rounds.
    for r in [&default, &tiny] {
        assert_eq!(r.outputs, free.outputs);
        assert_eq!(r.rounds, free.rounds);
        assert!(r.frames == free.frames, "frames differ under a work budget");
    }
    assert_eq!(free.outputs[0], free.outputs[1]);
    assert_eq!(free.outputs[1], free.outputs[2]);

    // The output is a plausible block output: the residual keeps the input's scale, so
    // every value is finite and small.
    let fx = FixedPoint::default();
    let out = fx.decode_slice(&free.outputs[0]);
    assert_eq!(out.len(), ROWS * D);
    assert!(
        out.iter().all(|v| v.abs() < 16.0),
        "block output out of range"
    );
}
