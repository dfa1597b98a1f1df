//! # puma-embedded
//!
//! Runs one party of a [`puma_core::Session`] on a host without an operating system: a
//! microcontroller with a UART or a TCP stack, a TEE. The crate is `#![no_std]` and needs
//! only `alloc`, [`embedded_io`] byte streams to the two peers, and a [`Clock`] from the
//! host.
//!
//! - [`StreamLink`]: the two streams, framed exactly like `puma-transports`' TCP link
//!   (a 4-byte little-endian length, then the frame), so a party here can talk to a `std`
//!   party over any byte pipe. A length above the frame limit is refused before anything
//!   is allocated.
//! - [`run`]: the blocking run loop that drives a session with an idle timeout over any
//!   [`Link`] (a party's connections to its two peers, and a clock): a [`StreamLink`]
//!   here, and through a thin adapter every `std` link of `puma-transports`.
//! - [`Error`]: every way a run fails, each naming the peer at fault where there is one.
//! - `pipe` (feature `dev`): a bounded in-memory pipe with `embedded-io` ends, for tests.
//!
//! Everything runs on the caller's thread. A send writes only while the stream is ready
//! ([`embedded_io::WriteReady`]) and otherwise reads what the peers have sent
//! ([`embedded_io::ReadReady`]), so three parties that all send a large epoch at once
//! through small buffers never wait on each other.
//!
//! ## Example
//! ```no_run
//! use embedded_io::{Read, ReadReady, Write, WriteReady};
//! use puma_core::{Config, Error, PartyId, Session};
//! use puma_embedded::{Clock, StreamLink, run};
//!
//! /// A host timer: milliseconds since boot, and a wait for the next interrupt.
//! struct Timer;
//!
//! impl Clock for Timer {
//!     fn now_ms(&mut self) -> u64 {
//!         0 // read the hardware counter here
//!     }
//!     fn idle(&mut self) {
//!         // wait for an interrupt here
//!     }
//! }
//!
//! /// Party P1 over two streams, e.g. two UARTs or two TCP sockets.
//! fn party<S>(to_next: S, to_prev: S) -> Result<u64, puma_embedded::Error>
//! where
//!     S: Read + ReadReady + Write + WriteReady,
//! {
//!     let me = PartyId::P1;
//!     let mut link = StreamLink::new(me, to_next, to_prev, Timer);
//!     let mut session = Session::new(Config::new(1), me, [7; 32], |_ctx| async {
//!         Ok::<u64, Error>(42)
//!     })?;
//!     run(&mut session, &mut link, puma_embedded::DEFAULT_TIMEOUT_MS)
//! }
//! ```
#![no_std]

extern crate alloc;

mod clock;
mod error;
mod link;
#[cfg(feature = "dev")]
pub mod pipe;
mod run;

pub use clock::Clock;
pub use error::Error;
pub use link::{DEFAULT_SEND_TIMEOUT_MS, Event, LEN_PREFIX, StreamLink};
pub use run::{DEFAULT_TIMEOUT_MS, Link, LinkError, run};
