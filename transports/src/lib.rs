//! # puma-transports
//!
//! Moves the frames of [`puma_core::Session`]s between the three computing parties. No
//! transport knows any protocol: each implements the small [`Link`] trait (send a frame to
//! a peer, wait for the next event), and one run loop, [`drive`], turns any link into a
//! complete party.
//!
//! - [`driver`]: the blocking sans-IO run loop, the [`Link`] trait and its events.
//! - [`mem`]: three parties on three OS threads joined by in-memory channels, with
//!   [`mem::run3`] as the one-call entry point for tests, demos and benchmarks.
//! - [`tcp`], [`quic`] ([`net`] for what they share, [`tls`] for the pinned certificates):
//!   one session per connection between three processes.
//! - [`mux`]: many sessions at once over one TCP+TLS connection per pair of parties, for
//!   long-running servers.
//!
//! Faults are errors, never hangs: a peer that stalls past the timeout ends the session
//! with [`ErrorKind::Timeout`](puma_core::ErrorKind::Timeout), one that goes away with
//! [`TransportError::Disconnected`], and the failing party tells the survivors with an
//! abort frame so that they fail fast too.
//!
//! ## Example: a secure product on three threads
//! ```
//! use puma_core::{proto, Config, FixedPoint, PartyId};
//! use puma_transports::mem;
//!
//! let fx = FixedPoint::default();
//! let (x, y) = (fx.encode(1.5).unwrap(), fx.encode(-2.25).unwrap());
//! let out = mem::run3(Config::new(1), 7, move |me| move |mut ctx| async move {
//!     let xs = proto::share_input(&mut ctx, PartyId::P0, (me == PartyId::P0).then_some(&[x][..]), 1).await?;
//!     let ys = proto::share_input(&mut ctx, PartyId::P1, (me == PartyId::P1).then_some(&[y][..]), 1).await?;
//!     let z = proto::mul_fixed(&mut ctx, &xs, &ys).await?;
//!     proto::reveal_all(&mut ctx, &z).await
//! });
//! let [z0, _, _] = out.into_results().unwrap();
//! assert!((fx.decode(z0[0]) - (-3.375)).abs() <= 2.0 / fx.scale());
//! ```

pub mod driver;
pub mod embedded;
mod error;
pub mod loopback;
pub mod mem;
pub mod mux;
pub mod net;
pub mod quic;
pub mod tcp;
pub mod tls;

pub use driver::{DEFAULT_TIMEOUT, Link, Recv, drive};
pub use error::{FrameError, TransportError};
