//! Shaped in-memory links: the same frames and results, delivered no earlier than the
//! latency and bandwidth allow.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use puma_core::{Config, PartyId};
use puma_transports::mem::{self, Shape};

use crate::common;

#[test]
fn shaping_delays_delivery_but_changes_nothing_else() {
    let n = 4096;
    let make = |me: PartyId| {
        let xs = (0..n).map(|i| i as f64 * 0.5).collect();
        move |ctx: puma_core::Ctx| common::squares(ctx, me, xs)
    };
    let plain = mem::run3(Config::new(3), 8, make);
    // 20 ms one way; 80 Mbit/s: a 32 KiB record takes 3.3 ms to go out.
    let shape = Shape {
        bits_per_sec: 80_000_000,
        latency: Duration::from_millis(20),
    };
    let t0 = Instant::now();
    let shaped = mem::run3_shaped(
        Config::new(3),
        8,
        Duration::from_secs(20),
        Some(shape),
        make,
    );
    let took = t0.elapsed();
    common::assert_same_costs(&shaped.stats, &plain.stats, "shaped");
    let rounds = u64::from(shaped.rounds()) + 1; // and the setup round
    assert!(rounds >= 3);
    // Every round waits for at least one frame of the one before: rounds × latency.
    assert!(
        took >= shape.latency * rounds as u32,
        "{took:?} for {rounds} rounds"
    );
    assert_eq!(
        shaped.into_results().unwrap(),
        plain.into_results().unwrap()
    );
}
