//! Cooperative scheduling: a GPT-2 base-width block yields to its host under the default
//! work budget, and yielding changes nothing the parties compute or send.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use crate::yield_block;

use puma_core::engine::{Config, try_join};
use puma_core::{Error, FixedPoint, PartyId, Width};
use yield_block::{D, ROWS, Weights, drive, run};

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

/// Two joined tasks: the first spends work between two sends, the second sends at once. A
/// budget below the first task's work makes it yield between its sends, so that the second
/// task queues its record in between; the frames must not show it.
fn two_tasks(budget: u64) -> yield_block::Run<(u64, u64)> {
    drive(budget, |me: PartyId| {
        move |mut ctx: puma_core::engine::Ctx| async move {
            let (to, from) = (me.next(), me.prev());
            let (mut a, mut b) = (ctx.fork(), ctx.fork());
            let first = async {
                a.spend(1000).await;
                a.send(to, &[1], Width::W64)?;
                a.spend(1000).await;
                a.send(to, &[2], Width::W64)?;
                let x = a.recv(from, 1, Width::W64).await?;
                let y = a.recv(from, 1, Width::W64).await?;
                Ok::<_, Error>(x[0] * 10 + y[0])
            };
            let second = async {
                b.send(to, &[3], Width::W64)?;
                Ok::<_, Error>(b.recv(from, 1, Width::W64).await?[0])
            };
            try_join(first, second).await
        }
    })
    .unwrap()
}

#[test]
fn records_leave_in_the_same_order_whatever_the_budget() {
    let free = two_tasks(u64::MAX);
    let tight = two_tasks(1500);
    assert_eq!(free.yields, 0);
    assert!(tight.yields >= 3, "each party yields between its sends");
    assert_eq!(free.outputs, [(12, 3); 3]);
    assert_eq!(tight.outputs, free.outputs);
    assert_eq!(tight.rounds, free.rounds);
    assert!(
        tight.frames == free.frames,
        "frames differ under a work budget"
    );
}
