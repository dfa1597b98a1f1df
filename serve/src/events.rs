//! The server's log: one line per event on standard error, as `key=value` pairs
//! (`ts`, `party`, `level`, `event`, then the event's fields), for operators and log
//! collectors.
//!
//! Only public facts are logged: names, sizes, session ids, costs, errors. Share material,
//! prompts, ids and seeds never reach a log line; the server does not have the prompt or
//! an id in the clear to begin with, and the fields below are all it is given.

use std::fmt::{self, Display};
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use puma_core::PartyId;

/// How much an event matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Normal operation.
    Info,
    /// Something failed but the server goes on.
    Warn,
    /// The server cannot go on.
    Error,
}

impl Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        })
    }
}

/// The log of server `party`.
#[derive(Clone, Copy, Debug)]
pub struct Log {
    party: PartyId,
}

impl Log {
    /// The log of server `party`.
    pub fn new(party: PartyId) -> Log {
        Log { party }
    }

    /// Writes one event with its fields.
    pub fn event(&self, level: Level, event: &str, fields: &[(&str, &dyn Display)]) {
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let mut line = format!(
            "ts={}.{:03} party={} level={level} event={event}",
            ts / 1000,
            ts % 1000,
            self.party.index()
        );
        for (k, v) in fields {
            line.push(' ');
            line.push_str(k);
            line.push('=');
            line.push_str(&quoted(&v.to_string()));
        }
        line.push('\n');
        // A log that cannot be written must not stop the server.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    /// An [`Level::Info`] event.
    pub fn info(&self, event: &str, fields: &[(&str, &dyn Display)]) {
        self.event(Level::Info, event, fields);
    }

    /// A [`Level::Warn`] event.
    pub fn warn(&self, event: &str, fields: &[(&str, &dyn Display)]) {
        self.event(Level::Warn, event, fields);
    }
}

/// `v` as it is when it is one plain word, else in double quotes with `"` and `\`
/// escaped and line breaks written as `\n`, so that one event stays one line.
fn quoted(v: &str) -> String {
    let plain = !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/[],".contains(c));
    if plain {
        return v.to_owned();
    }
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
