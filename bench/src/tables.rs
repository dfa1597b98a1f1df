//! Markdown tables of `BENCHMARKS.md` generated from the benchmark programs' `--json`
//! output (`scripts/bench-tables.sh`), so that the exact figures (bytes, rounds) cannot drift
//! from what the programs measure.
//!
//! A generated table sits between two comment lines,
//! `<!-- BEGIN GENERATED NAME ... -->` (which also says when and from which commit it was
//! generated) and `<!-- END GENERATED NAME -->`; [`splice`] replaces what is between them.
//! Only machine-independent figures go into generated tables: times are not reproducible.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

/// The name of the table rendered from `gpt2_net --json` ([`gpt2_net_table`]).
pub const GPT2_NET: &str = "gpt2_net";

/// One line of `gpt2_net --json`: one secure generation over one transport.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NetRun {
    /// The transport: `memory`, `tcp+tls` or `quic`.
    pub transport: String,
    /// The model's name.
    pub model: String,
    /// The prompt text.
    pub prompt: String,
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub new_tokens: usize,
    /// The client's ids (prompt excluded).
    pub ids: Vec<u32>,
    /// The ids decoded.
    pub text: String,
    /// Critical-path rounds of the session (model sharing included).
    pub rounds: u32,
    /// Bytes of data frames and of the setup round, the three parties together.
    pub frame_bytes: u64,
    /// Protocol payload bytes, the three parties together.
    pub payload_bytes: u64,
    /// Wall time of the session (not reproducible; not rendered).
    pub seconds: f64,
}

/// Why a table could not be rendered or spliced.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TableError {
    /// A line of the JSON input is not a record of the expected kind.
    #[error("JSON line {line}: {source}")]
    Json {
        /// The 1-based line number.
        line: usize,
        /// What the parser said.
        source: serde_json::Error,
    },
    /// The input held no record.
    #[error("no JSON record in the input")]
    NoRecords,
    /// Two runs that must agree (the same sessions over different transports) do not.
    #[error("the {transport} run's {field} differs from the {first} run's")]
    Disagree {
        /// The first run's transport.
        first: String,
        /// The differing run's transport.
        transport: String,
        /// The field that differs.
        field: &'static str,
    },
    /// The document does not hold exactly one pair of markers for the table.
    #[error("the document has no single BEGIN/END GENERATED {name} marker pair")]
    Markers {
        /// The table's name.
        name: String,
    },
}

/// Parses JSON records, one per non-empty line.
///
/// # Errors
/// [`TableError::Json`] naming the first line that is not a `T`, [`TableError::NoRecords`]
/// if there is none.
pub fn parse_lines<T: for<'de> Deserialize<'de>>(input: &str) -> Result<Vec<T>, TableError> {
    let mut records = Vec::new();
    for (i, line) in input.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        records.push(
            serde_json::from_str(line).map_err(|source| TableError::Json {
                line: i + 1,
                source,
            })?,
        );
    }
    if records.is_empty() {
        return Err(TableError::NoRecords);
    }
    Ok(records)
}

/// `n` with its digits grouped by three with commas.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The `gpt2_net` table: the deterministic figures of the runs, which must agree (the same
/// sessions over each transport).
///
/// # Errors
/// [`TableError::NoRecords`] for no run, [`TableError::Disagree`] naming the first field in
/// which a run differs from the first.
pub fn gpt2_net_table(runs: &[NetRun]) -> Result<String, TableError> {
    let first = runs.first().ok_or(TableError::NoRecords)?;
    for r in &runs[1..] {
        let field = if r.model != first.model {
            "model"
        } else if r.prompt != first.prompt || r.prompt_tokens != first.prompt_tokens {
            "prompt"
        } else if r.ids != first.ids || r.new_tokens != first.new_tokens {
            "ids"
        } else if r.rounds != first.rounds {
            "rounds"
        } else if r.frame_bytes != first.frame_bytes {
            "frame bytes"
        } else if r.payload_bytes != first.payload_bytes {
            "payload bytes"
        } else {
            continue;
        };
        return Err(TableError::Disagree {
            first: first.transport.clone(),
            transport: r.transport.clone(),
            field,
        });
    }
    // A `|` would end the table cell, even inside a code span.
    let cell = |s: String| s.replace('|', "\\|");
    let per_round = first.frame_bytes as f64 / f64::from(first.rounds.max(1)) / 1e3;
    let mut t = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(t, "| figure | value |");
    let _ = writeln!(t, "|---|---|");
    let _ = writeln!(t, "| model | {} |", cell(first.model.clone()));
    let _ = writeln!(
        t,
        "| prompt | `{}` ({} tokens) → {} new tokens |",
        cell(format!("{:?}", first.prompt)),
        first.prompt_tokens,
        first.new_tokens
    );
    let _ = writeln!(t, "| ids | `{:?}` |", first.ids);
    let _ = writeln!(t, "| text | `{}` |", cell(format!("{:?}", first.text)));
    let _ = writeln!(t, "| rounds | {} |", first.rounds);
    let _ = writeln!(
        t,
        "| bytes of frames, three parties (setup included) | {} ({:.1} MB) |",
        grouped(first.frame_bytes),
        first.frame_bytes as f64 / 1e6
    );
    let _ = writeln!(
        t,
        "| payload bytes, three parties | {} ({:.1} MB) |",
        grouped(first.payload_bytes),
        first.payload_bytes as f64 / 1e6
    );
    let _ = writeln!(
        t,
        "| bytes of frames per round, three parties | {per_round:.1} kB |"
    );
    Ok(t)
}

fn begin_prefix(name: &str) -> String {
    format!("<!-- BEGIN GENERATED {name} ")
}

fn end_line(name: &str) -> String {
    format!("<!-- END GENERATED {name} -->")
}

/// The byte ranges of the begin line (newline included) and of the body of table `name`.
fn locate(doc: &str, name: &str) -> Result<(usize, usize, usize), TableError> {
    let markers = || TableError::Markers {
        name: name.to_owned(),
    };
    let (begin, end) = (begin_prefix(name), end_line(name));
    let mut starts = doc.match_indices(&begin);
    let start = starts.next().ok_or_else(markers)?.0;
    let mut ends = doc.match_indices(&end);
    let end_at = ends.next().ok_or_else(markers)?.0;
    if starts.next().is_some() || ends.next().is_some() || end_at < start {
        return Err(markers());
    }
    let body_start = doc[start..end_at].find('\n').ok_or_else(markers)? + start + 1;
    Ok((start, body_start, end_at))
}

/// The body of generated table `name` in `doc` (the lines between its markers).
///
/// # Errors
/// [`TableError::Markers`] unless `doc` holds exactly one pair of markers for `name`.
pub fn generated_section<'a>(doc: &'a str, name: &str) -> Result<&'a str, TableError> {
    let (_, body_start, end_at) = locate(doc, name)?;
    Ok(&doc[body_start..end_at])
}

/// `doc` with the body of generated table `name` replaced by `body` and its begin marker
/// saying `stamp` (when and from which commit it was generated).
///
/// # Errors
/// [`TableError::Markers`] unless `doc` holds exactly one pair of markers for `name`.
pub fn splice(doc: &str, name: &str, stamp: &str, body: &str) -> Result<String, TableError> {
    let (start, _, end_at) = locate(doc, name)?;
    let mut out = String::with_capacity(doc.len() + body.len());
    out.push_str(&doc[..start]);
    let _ = writeln!(
        out,
        "{}by scripts/bench-tables.sh ({stamp}); do not edit -->",
        begin_prefix(name)
    );
    out.push_str(body);
    if !body.is_empty() && !body.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&doc[end_at..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn digits_are_grouped_by_three() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(194_277_396), "194,277,396");
    }

    #[test]
    fn splice_replaces_only_the_body_and_the_stamp() {
        let doc = "a\n<!-- BEGIN GENERATED t by x (old); do not edit -->\nold\n<!-- END GENERATED t -->\nb\n";
        let out = splice(doc, "t", "2026-11-25, commit abc", "new\n").unwrap();
        assert_eq!(
            out,
            "a\n<!-- BEGIN GENERATED t by scripts/bench-tables.sh (2026-11-25, commit abc); do not edit -->\nnew\n<!-- END GENERATED t -->\nb\n"
        );
        assert_eq!(generated_section(&out, "t").unwrap(), "new\n");
        assert!(matches!(
            splice("no markers", "t", "", ""),
            Err(TableError::Markers { .. })
        ));
        let twice = format!("{doc}{doc}");
        assert!(matches!(
            generated_section(&twice, "t"),
            Err(TableError::Markers { .. })
        ));
    }

    #[test]
    fn runs_that_disagree_are_refused() {
        let run = NetRun {
            transport: "memory".into(),
            model: "m".into(),
            prompt: "p|q".into(),
            prompt_tokens: 2,
            new_tokens: 1,
            ids: vec![7],
            text: "x".into(),
            rounds: 10,
            frame_bytes: 12_345,
            payload_bytes: 12_000,
            seconds: 1.0,
        };
        let mut other = run.clone();
        other.transport = "tcp+tls".into();
        other.seconds = 2.0;
        let table = gpt2_net_table(&[run.clone(), other.clone()]).unwrap();
        assert!(table.contains("| rounds | 10 |"), "{table}");
        assert!(
            table.contains("| bytes of frames, three parties (setup included) | 12,345 (0.0 MB) |")
        );
        assert!(table.contains(r#"`"p\|q"` (2 tokens)"#), "{table}");
        other.frame_bytes += 1;
        let err = gpt2_net_table(&[run, other]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the tcp+tls run's frame bytes differs from the memory run's"
        );
    }
}
