//! The service's configuration file, `service.toml`, shared by the three servers and
//! their clients (each host keeps only its own key and store):
//!
//! ```toml
//! peer_timeout_secs = 30      # longest wait for another server within a request
//! max_running = 4             # requests computed at once (server 0 orders them)
//! max_queued = 16             # requests waiting for a slot; more are refused (busy)
//! queue_wait_secs = 60        # longest wait for a slot
//! deadline_secs = 600         # longest a request may run (a client may ask for less)
//! accept_uploads = true       # whether owners may upload models
//!
//! [[server]]
//! id = 0
//! peer_addr = "10.0.0.1:7000"    # where the other servers connect (P0 and P1)
//! client_addr = "10.0.0.1:7100"  # where clients and owners connect
//! cert = "p0.cert.pem"           # pinned by the other servers and by clients
//! key = "p0.key.pem"             # on server 0's host only
//! store = "p0-store"             # folder of server 0's share stores, on its host only
//! # ... one [[server]] table each for ids 1 and 2
//! ```
//!
//! Paths are relative to the file's folder.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use puma_core::PartyId;
use puma_transports::tls::{Identity, Pins, read_cert};
use serde::Deserialize;

/// The parsed `service.toml`.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// Longest wait for another server within a request.
    pub peer_timeout: Duration,
    /// Requests computed at once.
    pub max_running: usize,
    /// Requests waiting for a slot.
    pub max_queued: usize,
    /// Longest wait for a slot.
    pub queue_wait: Duration,
    /// Longest a request may run.
    pub deadline: Duration,
    /// Whether owners may upload models.
    pub accept_uploads: bool,
    /// The three servers, by index.
    pub servers: [ServerEntry; 3],
}

/// One server's entry.
#[derive(Clone, Debug)]
pub struct ServerEntry {
    /// Where the other servers connect, as written.
    pub peer_addr: String,
    /// Where clients and owners connect, as written.
    pub client_addr: String,
    /// Its certificate.
    pub cert: PathBuf,
    /// Its private key, on its own host.
    pub key: Option<PathBuf>,
    /// Its share-store folder, on its own host.
    pub store: Option<PathBuf>,
}

/// A configuration that cannot be used; the message names the file and the culprit.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default = "d30")]
    peer_timeout_secs: u64,
    #[serde(default = "d4")]
    max_running: usize,
    #[serde(default = "d16")]
    max_queued: usize,
    #[serde(default = "d60")]
    queue_wait_secs: u64,
    #[serde(default = "d600")]
    deadline_secs: u64,
    #[serde(default)]
    accept_uploads: bool,
    server: Vec<RawServer>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    id: u8,
    peer_addr: String,
    client_addr: String,
    cert: PathBuf,
    key: Option<PathBuf>,
    store: Option<PathBuf>,
}

fn d4() -> usize {
    4
}
fn d16() -> usize {
    16
}
fn d30() -> u64 {
    30
}
fn d60() -> u64 {
    60
}
fn d600() -> u64 {
    600
}

/// The `[[server]]` sections of a `service.toml` for three servers at `peer` and
/// `client` addresses (server i at index i), with the development PKI's file names (as
/// `keygen` writes them: `pN.cert.pem`, `pN.key.pem`) and store folders `pN-store`, all
/// relative to the file.
pub fn development_servers<A: std::fmt::Display>(peer: &[A], client: &[A]) -> String {
    peer.iter()
        .zip(client)
        .enumerate()
        .map(|(i, (peer, client))| {
            format!(
                "\n[[server]]\nid = {i}\npeer_addr = \"{peer}\"\nclient_addr = \"{client}\"\n\
                 cert = \"p{i}.cert.pem\"\nkey = \"p{i}.key.pem\"\nstore = \"p{i}-store\"\n"
            )
        })
        .collect()
}

/// Longest timeout or deadline accepted, so that adding it to a clock cannot overflow.
const MAX_SECS: u64 = 7 * 24 * 3600;

impl ServiceConfig {
    /// Reads and checks a `service.toml`.
    ///
    /// # Errors
    /// [`ConfigError`] naming the file and what is wrong.
    pub fn from_file(path: &Path) -> Result<ServiceConfig, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        ServiceConfig::from_toml_str(&text, base)
            .map_err(|e| ConfigError(format!("{}: {}", path.display(), e.0)))
    }

    /// Parses a `service.toml` text; relative paths are joined to `base`.
    ///
    /// # Errors
    /// [`ConfigError`] for malformed text, limits out of range, servers missing or twice.
    pub fn from_toml_str(text: &str, base: &Path) -> Result<ServiceConfig, ConfigError> {
        let raw: Raw = toml::from_str(text).map_err(|e| ConfigError(e.to_string()))?;
        for (name, v) in [
            ("peer_timeout_secs", raw.peer_timeout_secs),
            ("queue_wait_secs", raw.queue_wait_secs),
            ("deadline_secs", raw.deadline_secs),
        ] {
            if v == 0 || v > MAX_SECS {
                return Err(ConfigError(format!(
                    "{name} = {v} is outside 1..={MAX_SECS}"
                )));
            }
        }
        if raw.max_running == 0 || raw.max_running > 1024 {
            return Err(ConfigError(format!(
                "max_running = {} is outside 1..=1024",
                raw.max_running
            )));
        }
        if raw.max_queued > 1 << 16 {
            return Err(ConfigError(format!(
                "max_queued = {} is above 65536",
                raw.max_queued
            )));
        }
        let mut servers: [Option<ServerEntry>; 3] = [None, None, None];
        for s in raw.server {
            let slot = servers
                .get_mut(usize::from(s.id))
                .ok_or_else(|| ConfigError(format!("server id {} is not 0, 1 or 2", s.id)))?;
            if slot.is_some() {
                return Err(ConfigError(format!("server {} is listed twice", s.id)));
            }
            *slot = Some(ServerEntry {
                peer_addr: s.peer_addr,
                client_addr: s.client_addr,
                cert: base.join(s.cert),
                key: s.key.map(|k| base.join(k)),
                store: s.store.map(|k| base.join(k)),
            });
        }
        let [Some(a), Some(b), Some(c)] = servers else {
            return Err(ConfigError("the file must list servers 0, 1 and 2".into()));
        };
        Ok(ServiceConfig {
            peer_timeout: Duration::from_secs(raw.peer_timeout_secs),
            max_running: raw.max_running,
            max_queued: raw.max_queued,
            queue_wait: Duration::from_secs(raw.queue_wait_secs),
            deadline: Duration::from_secs(raw.deadline_secs),
            accept_uploads: raw.accept_uploads,
            servers: [a, b, c],
        })
    }

    /// Server `party`'s entry.
    pub fn server(&self, party: PartyId) -> &ServerEntry {
        let [a, b, c] = &self.servers;
        match party {
            PartyId::P0 => a,
            PartyId::P1 => b,
            PartyId::P2 => c,
        }
    }

    /// Server `me`'s identity and its pins of the other two servers.
    ///
    /// # Errors
    /// [`ConfigError`] if `me` has no key here or a PEM file is unreadable.
    pub fn identity_and_pins(&self, me: PartyId) -> Result<(Identity, Pins), ConfigError> {
        let mine = self.server(me);
        let key = mine
            .key
            .as_ref()
            .ok_or_else(|| ConfigError(format!("no key for server {} in the file", me.index())))?;
        let identity =
            Identity::from_pem_files(&mine.cert, key).map_err(|e| ConfigError(e.to_string()))?;
        let mut pins = Pins::new();
        for p in [me.next(), me.prev()] {
            let cert = read_cert(&self.server(p).cert).map_err(|e| ConfigError(e.to_string()))?;
            pins = pins.with(p, cert);
        }
        Ok((identity, pins))
    }
}

/// Resolves `host:port` to one socket address.
///
/// # Errors
/// [`ConfigError`] if it does not resolve.
pub fn resolve(addr: &str) -> Result<SocketAddr, ConfigError> {
    addr.to_socket_addrs()
        .map_err(|e| ConfigError(format!("address {addr:?}: {e}")))?
        .next()
        .ok_or_else(|| ConfigError(format!("address {addr:?} resolves to nothing")))
}
