//! The `--lan` / `--wan` flags of the programs that time a run over a simulated network.

use puma_transports::mem::Shape;

/// Which simulated network goes between the parties, if any.
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct NetworkFlags {
    /// A simulated 5 Gbit/s, 1 ms round-trip network between the parties.
    #[arg(long, conflicts_with = "wan")]
    pub lan: bool,
    /// A simulated 1 Gbit/s, 20 ms round-trip network between the parties.
    #[arg(long)]
    pub wan: bool,
}

impl NetworkFlags {
    /// The link shape asked for; `None`: as fast as the in-memory channels go.
    pub fn shape(self) -> Option<Shape> {
        match (self.lan, self.wan) {
            (true, _) => Some(Shape::LAN),
            (_, true) => Some(Shape::WAN),
            _ => None,
        }
    }

    /// The network in words, for reports.
    pub fn describe(self) -> &'static str {
        match self.shape() {
            Some(s) if s == Shape::WAN => "WAN (1 Gbit/s, 20 ms RTT)",
            Some(_) => "LAN (5 Gbit/s, 1 ms RTT)",
            None => "no simulated network",
        }
    }
}
