//! TCP with mutual TLS between pinned party certificates.
//!
//! Each pair of parties shares one TCP connection: the party with the higher index dials,
//! the lower one accepts (P0 accepts P1 and P2, P1 dials P0 and accepts P2, P2 dials
//! both). Both ends present their certificate and accept only the peer's pinned one
//! ([`crate::tls`]); the acceptor learns which party dialled from the certificate, never
//! from anything the dialer says. Once it has identified the dialer, the acceptor writes
//! one byte; the dialer waits for it, so that a dialer whose certificate is refused learns
//! so at connect time (in TLS 1.3 the server checks the client's certificate after the
//! client has finished its side of the handshake).
//!
//! Frames then flow as described in [`crate::net`]; Nagle's algorithm is off, because a
//! round's last frame must leave at once.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use puma_core::PartyId;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_rustls::{TlsAcceptor, TlsConnector, TlsStream};

use crate::error::TransportError;
use crate::net::{FrameSink, NetLink, NetOptions, Parts, roles, runtime};
use crate::tls::{Identity, Pins, client_config, server_config, server_name};

/// The byte an acceptor sends once it has identified and accepted the dialer.
pub(crate) const ACCEPTED: u8 = 0xA5;

impl FrameSink for WriteHalf<TlsStream<TcpStream>> {
    async fn close(mut self) {
        // close_notify, then FIN.
        let _ = self.shutdown().await;
    }
}

/// Where a party's peers are and who it is.
#[derive(Clone, Debug)]
pub struct Endpoints {
    /// This party.
    pub me: PartyId,
    /// The address of each peer this party dials (the peers with a lower index); other
    /// entries are ignored.
    pub peers: [Option<SocketAddr>; 3],
}

/// Connects party `me` to its peers over TCP with mutual TLS and returns its link.
///
/// `listener` is the bound socket on which the peers with a higher index dial in (P0 and
/// P1 need one, P2 none). Dialing retries until the peer listens or `opts.timeout`
/// passes, so the three parties may start in any order.
///
/// # Errors
/// - [`TransportError::Tls`] when a peer presents a certificate other than its pinned one,
///   or refuses this party's (the peer is named when this party dialled it).
/// - [`TransportError::Connect`] naming a peer that was unreachable or did not connect
///   within `opts.timeout`.
/// - [`TransportError::Local`] for a missing listener or pin.
pub fn connect(
    endpoints: &Endpoints,
    listener: Option<std::net::TcpListener>,
    identity: &Identity,
    pins: &Pins,
    opts: NetOptions,
) -> Result<NetLink, TransportError> {
    let rt = runtime()?;
    let timeout = opts.timeout;
    let parts = Parts::new(endpoints.me, rt, opts);
    let streams = parts
        .rt
        .block_on(establish(endpoints, listener, identity, pins, timeout))?;
    let mut writers = Vec::new();
    for (peer, stream) in streams {
        let (r, w) = tokio::io::split(stream);
        parts.spawn_reader(peer, r);
        let (tx, h) = parts.spawn_writer(peer, w);
        writers.push((peer, tx, h));
    }
    Ok(parts.finish(writers, None))
}

/// The authenticated TLS connections of party `endpoints.me` to both peers, dialled and
/// accepted as [`connect`] describes, within `timeout`. Runs on the caller's runtime.
///
/// # Errors
/// As [`connect`].
pub(crate) async fn establish(
    endpoints: &Endpoints,
    listener: Option<std::net::TcpListener>,
    identity: &Identity,
    pins: &Pins,
    timeout: Duration,
) -> Result<Vec<(PartyId, TlsStream<TcpStream>)>, TransportError> {
    let me = endpoints.me;
    let (dials, accepts) = roles(me);
    let server = if accepts.is_empty() {
        None
    } else {
        let l = listener.ok_or_else(|| {
            TransportError::Local(format!("{me} accepts connections and needs a listener"))
        })?;
        l.set_nonblocking(true)
            .map_err(|e| TransportError::Local(format!("listener: {e}")))?;
        let cfg = Arc::new(server_config(identity, pins, &accepts)?);
        Some((l, cfg))
    };
    let mut dial_cfgs = Vec::new();
    for &p in &dials {
        let addr = endpoints
            .peers
            .get(p.index())
            .copied()
            .flatten()
            .ok_or_else(|| TransportError::Local(format!("no address for {p}")))?;
        dial_cfgs.push((p, addr, Arc::new(client_config(identity, pins, p)?)));
    }
    let deadline = Instant::now() + timeout;
    let accepting = async {
        match server {
            Some((l, cfg)) => {
                let l = TcpListener::from_std(l)
                    .map_err(|e| TransportError::Local(format!("listener: {e}")))?;
                accept_all(l, cfg, pins, &accepts, deadline).await
            }
            None => Ok(Vec::new()),
        }
    };
    let dialing = async {
        let tasks: Vec<_> = dial_cfgs
            .into_iter()
            .map(|(p, addr, cfg)| tokio::spawn(dial(p, addr, cfg, deadline)))
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            match t.await {
                Ok(r) => out.push(r?),
                Err(e) => return Err(TransportError::Local(format!("dial task: {e}"))),
            }
        }
        Ok(out)
    };
    let (a, d) = tokio::join!(accepting, dialing);
    let mut all = d?;
    all.extend(a?);
    Ok(all)
}

async fn dial(
    peer: PartyId,
    addr: SocketAddr,
    cfg: Arc<rustls::ClientConfig>,
    deadline: Instant,
) -> Result<(PartyId, TlsStream<TcpStream>), TransportError> {
    let timed_out = || TransportError::Connect {
        peer,
        reason: format!("no connection to {addr} before the deadline"),
    };
    let tcp = loop {
        match tokio::time::timeout_at(deadline, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => break s,
            Ok(Err(e)) => {
                // The peer may not listen yet: retry until the deadline.
                if Instant::now() + Duration::from_millis(50) >= deadline {
                    return Err(TransportError::Connect {
                        peer,
                        reason: format!("{addr}: {e}"),
                    });
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(_) => return Err(timed_out()),
        }
    };
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from(server_name(peer)).map_err(|e| TransportError::Tls {
        peer: Some(peer),
        reason: e.to_string(),
    })?;
    let tls_err = |e: std::io::Error| TransportError::Tls {
        peer: Some(peer),
        reason: e.to_string(),
    };
    let mut tls = tokio::time::timeout_at(deadline, TlsConnector::from(cfg).connect(name, tcp))
        .await
        .map_err(|_| timed_out())?
        .map_err(tls_err)?;
    let mut ack = [0u8; 1];
    tokio::time::timeout_at(deadline, tls.read_exact(&mut ack))
        .await
        .map_err(|_| timed_out())?
        .map_err(tls_err)?;
    if ack[0] != ACCEPTED {
        return Err(TransportError::Tls {
            peer: Some(peer),
            reason: "unexpected acceptance byte".into(),
        });
    }
    Ok((peer, TlsStream::from(tls)))
}

async fn accept_all(
    listener: TcpListener,
    cfg: Arc<rustls::ServerConfig>,
    pins: &Pins,
    expected: &[PartyId],
    deadline: Instant,
) -> Result<Vec<(PartyId, TlsStream<TcpStream>)>, TransportError> {
    let acceptor = TlsAcceptor::from(cfg);
    let mut got: Vec<(PartyId, TlsStream<TcpStream>)> = Vec::new();
    let mut last_refusal: Option<String> = None;
    while got.len() < expected.len() {
        let missing = expected
            .iter()
            .copied()
            .find(|p| got.iter().all(|(q, _)| q != p))
            .unwrap_or(PartyId::P0);
        let late = || TransportError::Connect {
            peer: missing,
            reason: match &last_refusal {
                Some(r) => format!("did not connect before the deadline (refused: {r})"),
                None => "did not connect before the deadline".into(),
            },
        };
        let Ok(accepted) = tokio::time::timeout_at(deadline, listener.accept()).await else {
            return Err(late());
        };
        let Ok((tcp, _)) = accepted else { continue };
        let _ = tcp.set_nodelay(true);
        let mut tls = match tokio::time::timeout_at(deadline, acceptor.accept(tcp)).await {
            Err(_) => return Err(late()),
            // A stranger or a peer with the wrong certificate: refuse it, keep listening.
            Ok(Err(e)) => {
                last_refusal = Some(e.to_string());
                continue;
            }
            Ok(Ok(tls)) => tls,
        };
        let who = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .and_then(|c| pins.identify(c.as_ref(), expected));
        match who {
            Some(p) if got.iter().all(|(q, _)| *q != p) => {
                if tls.write_all(&[ACCEPTED]).await.is_ok() && tls.flush().await.is_ok() {
                    got.push((p, TlsStream::from(tls)));
                }
            }
            _ => last_refusal = Some("a second connection from the same party".into()),
        }
    }
    Ok(got)
}
