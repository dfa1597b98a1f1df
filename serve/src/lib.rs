//! # puma-serve
//!
//! One computing server of the secure inference service (docs/ARCHITECTURE.md, Service):
//! three such servers hold a model's shares once and serve many requests of outside
//! clients at once, each request its own session over one connection per pair of
//! servers ([`puma_transports::mux`]). A client deals its prompt to the three servers
//! ([`puma_layers::nn::client`]), each server runs the generation (or, for an encoder,
//! the encoder) on shares and hands its shares of every token (or of the outputs) back
//! for the client ([`puma_layers::nn::ClientAt::Outside`]); no server learns the input or
//! a result.
//!
//! - [`server`]: the [`Server`]: its models, requests and status.
//! - [`model`]: what a server holds of a model (a decoder or an encoder).
//! - [`admission`]: bounded concurrency with a bounded queue.
//! - [`cancel`]: ending one request from outside (client gone, deadline).
//! - [`protocol`]: the messages of clients and owners, and their framing.
//! - [`config`]: the service's configuration file.
//! - [`daemon`]: a server as a network service (the `puma-serve` program).
//! - [`client`]: the thin client and the owner's upload (the `puma-client` program).
//! - [`events`]: the server's log lines.

pub mod admission;
pub mod cancel;
pub mod client;
pub mod config;
pub mod daemon;
pub mod events;
pub mod model;
pub mod protocol;
pub mod server;

pub use admission::{Admission, Permit};
pub use model::ServedModel;
pub use server::{EncodeRequest, GenerateRequest, ServeError, ServeOptions, Server, SessionCost};
