//! # puma-core
//!
//! The `no_std` (+ `alloc`) heart of puma-rs: secure three-party computation with 2-out-of-3
//! replicated secret sharing over Z_2^64 (semi-honest, honest majority), after PUMA.
//!
//! It holds the ring and fixed point ([`ring`], [`fixed`]), arithmetic and boolean
//! replicated shares ([`Shares`], [`BitShares`]), correlated randomness from ChaCha keyed
//! in a one-round setup, the wire format ([`wire`]), the sans-IO [`Session`] engine and the
//! protocols ([`proto`]). It performs no IO, reads no clock and draws no OS randomness:
//! the host feeds frames in and sends the frames it polls out.
//!
//! ## The run loop
//! ```text
//! session.handle_input(Input::Frame { from, bytes })?;     // a frame from a peer
//! loop {
//!     match session.poll_output() {
//!         Output::Transmit(t)   => send(t.to, t.frame),      // in order per peer
//!         Output::Yielded       => continue,
//!         Output::Pending { .. } => break,                   // wait for the next frame
//!         Output::Done(result)  => return result,
//!     }
//! }
//! ```
//!
//! ## Example: a secure fixed-point product among three simulated parties
//! ```
//! use puma_core::{proto, sim::Sim, FixedPoint, PartyId};
//!
//! let fx = FixedPoint::default();
//! let (x, y) = (fx.encode(1.5).unwrap(), fx.encode(-2.25).unwrap());
//! let out = Sim::new(7).run(move |me| move |mut ctx| async move {
//!     // P0 owns x, P1 owns y; both are shared, multiplied, and revealed to P2 only.
//!     let xs = proto::share_input(&mut ctx, PartyId::P0, (me == PartyId::P0).then_some(&[x][..]), 1).await?;
//!     let ys = proto::share_input(&mut ctx, PartyId::P1, (me == PartyId::P1).then_some(&[y][..]), 1).await?;
//!     let z = proto::mul_fixed(&mut ctx, &xs, &ys).await?;
//!     proto::reveal_to(&mut ctx, &z, PartyId::P2).await
//! });
//! let [_, _, at_p2] = out.into_results().unwrap();
//! let z = fx.decode(at_p2.unwrap()[0]);
//! assert!((z - (-3.375)).abs() <= 2.0 / fx.scale());
//! ```
#![no_std]

extern crate alloc;

#[cfg(feature = "dev")]
pub mod cost_report;
pub mod dealing;
pub mod engine;
pub mod error;
pub mod fixed;
pub mod kernel;
pub mod party;
pub mod proto;
mod prss;
pub mod ring;
pub mod share;
#[cfg(feature = "dev")]
pub mod sim;
pub mod wire;

pub use engine::{
    BoxedProtocol, Config, Ctx, Input, Meter, Output, Session, Stats, Transmit, join, join_all,
    try_join, try_join_all,
};
pub use error::{Error, ErrorKind};
pub use fixed::FixedPoint;
pub use party::PartyId;
pub use ring::Width;
pub use share::{BitShares, Shares, Summands};
