//! Cost report: measured rounds and bytes of every protocol, from the engine's counters.
//!
//! `cargo run --release -p puma-core --example cost` prints, for every public protocol of
//! `puma_core::proto` grouped by family, the critical-path rounds, the payload bytes each
//! party sent per unit (element, output, row of d) and the bits per unit summed over the
//! three parties. The numbers are deterministic: the same on every machine, listed in
//! docs/PROTOCOLS.md (Cost summary) and pinned by `core/tests/cost_report.rs`.

use puma_core::cost_report::{Batch, cost_rows};

fn main() {
    let batch = Batch::REPORT;
    println!(
        "puma-core protocol costs: payload bytes sent per unit (excluding 60 bytes of frame and record headers per message)"
    );
    println!(
        "and bits per unit summed over the three parties; batches of {} elements and {} rows unless stated.",
        batch.elements, batch.rows
    );
    let rows = match cost_rows(batch) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let mut family = "";
    for row in &rows {
        if row.family != family {
            family = row.family;
            println!("\n## {family}\n");
            println!(
                "{:<72} {:>6}  {:<14} {:>12} {:>12} {:>12} {:>14}",
                "protocol", "rounds", "unit", "bytes P0", "bytes P1", "bytes P2", "bits total"
            );
        }
        let [p0, p1, p2] = row.bytes_per_unit();
        println!(
            "{:<72} {:>6}  {:<14} {:>12.2} {:>12.2} {:>12.2} {:>14.2}",
            row.name,
            row.rounds,
            row.unit,
            p0,
            p1,
            p2,
            row.bits_per_unit()
        );
    }
}
