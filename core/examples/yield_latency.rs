//! How long a host driving three sessions on one thread is kept away by one call of
//! `Session::poll_output`, for a few work budgets, over a GPT-2 base-width block
//! (d = 768, 12 heads, MLP 3072, 32 rows).
//!
//! ```text
//! cargo run --release -p puma-core --example yield_latency
//! ```
//!
//! "longest" is wall time (it includes time the OS ran something else); "of CPU" is the
//! longest poll in this thread's CPU time from `/proc/thread-self/schedstat` (Linux only;
//! some kernels update it only at scheduler ticks, e.g. every 4 ms). "slowest polls" says
//! where the longest polls were, by the rounds the party had completed.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "../tests/yield_block/mod.rs"]
mod yield_block;

use puma_core::engine::Config;
use puma_core::kernel::DetectedKernel;
use yield_block::{Weights, run};

fn main() {
    let w = Weights::random(11);
    println!("kernel: {:?}", DetectedKernel::new().kind());
    println!(
        "{:>10}  {:>7}  {:>7}  {:>12}  {:>11}  {:>9}",
        "budget", "yields", "polls", "longest (ms)", "of CPU (ms)", "total (s)"
    );
    let budgets = [
        (u64::MAX, "unlimited"),
        (1 << 28, "2^28"),
        (1 << 26, "2^26"),
        (1 << 24, "2^24"),
        (1 << 22, "2^22"),
        (Config::DEFAULT_WORK_BUDGET, "default"),
    ];
    let mut reference = None;
    for (budget, name) in budgets {
        let r = run(&w, budget).expect("the block runs");
        // Every budget computes the same block.
        match &reference {
            None => reference = Some(r.outputs.clone()),
            Some(o) => assert_eq!(&r.outputs, o, "outputs differ under budget {name}"),
        }
        let cpu = r.longest_poll_cpu.map_or("n/a".to_string(), |c| {
            format!("{:.1}", c.as_secs_f64() * 1e3)
        });
        println!(
            "{name:>10}  {:>7}  {:>7}  {:>12.1}  {cpu:>11}  {:>9.2}",
            r.yields,
            r.polls,
            r.longest_poll.as_secs_f64() * 1e3,
            r.total.as_secs_f64()
        );
        let slowest: Vec<String> = r
            .slowest
            .iter()
            .take(3)
            .map(|(round, party, c)| {
                format!(
                    "P{party} after round {round}: {:.1} ms",
                    c.as_secs_f64() * 1e3
                )
            })
            .collect();
        println!("{:>10}  slowest polls: {}", "", slowest.join(", "));
    }
}
