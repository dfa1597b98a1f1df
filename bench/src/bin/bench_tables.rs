//! Renders a Markdown table of `BENCHMARKS.md` from a benchmark program's `--json` output
//! (read from standard input) and prints it, writes it between the table's markers in a
//! document, or checks that the document's table is current.
//!
//! ```sh
//! gpt2_net --json | bench_tables gpt2_net --doc BENCHMARKS.md --stamp "2026-11-25, commit abc"
//! gpt2_net --json | bench_tables gpt2_net --doc BENCHMARKS.md --check
//! ```
//! `scripts/bench-tables.sh` runs both steps.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use puma_bench::tables::{self, NetRun, TableError};

/// The tables this program renders.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum Table {
    /// `gpt2_net --json`: the 8-token Shakespeare run's rounds and bytes.
    #[value(name = "gpt2_net")]
    Gpt2Net,
}

/// Renders a table of BENCHMARKS.md from a benchmark program's `--json` output on stdin.
#[derive(Debug, Parser)]
#[command(name = "bench_tables", version)]
struct Args {
    /// Which table.
    #[arg(value_enum)]
    table: Table,
    /// The document holding the table's BEGIN/END GENERATED markers; without it the table
    /// is printed.
    #[arg(long, value_name = "FILE")]
    doc: Option<PathBuf>,
    /// With --doc: only check that the document's table equals the rendered one (exit 1 if
    /// not), writing nothing.
    #[arg(long, requires = "doc")]
    check: bool,
    /// With --doc (and without --check): when and from which commit the figures were
    /// generated, written into the begin marker.
    #[arg(long, requires = "doc", conflicts_with = "check")]
    stamp: Option<String>,
}

fn render(table: Table, input: &str) -> Result<(&'static str, String), TableError> {
    match table {
        Table::Gpt2Net => {
            let runs: Vec<NetRun> = tables::parse_lines(input)?;
            Ok((tables::GPT2_NET, tables::gpt2_net_table(&runs)?))
        }
    }
}

fn run(args: &Args) -> Result<bool, String> {
    let mut input = String::new();
    std::io::stdin()
        .read_to_string(&mut input)
        .map_err(|e| format!("standard input: {e}"))?;
    let (name, body) = render(args.table, &input).map_err(|e| e.to_string())?;
    let Some(path) = &args.doc else {
        print!("{body}");
        return Ok(true);
    };
    let doc = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if args.check {
        let current = tables::generated_section(&doc, name)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if current != body {
            eprintln!(
                "{}: the {name} table is stale; run scripts/bench-tables.sh\n--- in the document\n{current}--- rendered\n{body}",
                path.display()
            );
            return Ok(false);
        }
        return Ok(true);
    }
    let stamp = args
        .stamp
        .as_deref()
        .ok_or("--doc without --check needs --stamp (when and from which commit)")?;
    let out =
        tables::splice(&doc, name, stamp, &body).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::write(path, out).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(true)
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("bench_tables: {e}");
            ExitCode::from(2)
        }
    }
}
