//! QUIC (quinn) with the same pinned identities and roles as [`crate::tcp`].
//!
//! One QUIC connection per pair of parties, the higher index dialling; the handshake is
//! TLS 1.3 with both certificates pinned ([`crate::tls`]).
//!
//! **One unidirectional stream per direction**, opened once and kept for the whole
//! session. A party consumes a peer's frames strictly in order (epoch after epoch), so a
//! stream per round would buy nothing against head-of-line blocking and would cost a
//! stream opening per round and reassembly across streams; one ordered stream is exactly
//! the per-link order the engine needs, and its flow-control credit is the
//! back-pressure. The acceptor starts its stream with one acceptance byte once it has
//! identified the dialer, so that a refused dialer learns so at connect time.
//!
//! Windows are sized for bulk transfer (16 MiB per stream, 32 MiB per connection);
//! keep-alives every 2 s and a 10 s idle timeout detect a peer that vanished without
//! closing (a crash that sent nothing), in addition to the session timeout.

use std::net::{SocketAddr, UdpSocket};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use puma_core::PartyId;
use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{
    ClientConfig, Connection, Endpoint, EndpointConfig, IdleTimeout, RecvStream, SendStream,
    ServerConfig, TokioRuntime, TransportConfig, VarInt,
};
use rustls::pki_types::CertificateDer;
use tokio::time::Instant;

use crate::error::TransportError;
use crate::net::{FrameSink, NetLink, NetOptions, Parts, Teardown, roles, runtime};
use crate::tcp::{ACCEPTED, Endpoints};
use crate::tls::{Identity, Pins, client_config, server_config, server_name};

impl FrameSink for SendStream {
    async fn close(mut self) {
        let _ = self.finish();
        // Wait until the peer has read everything: closing the connection earlier would
        // discard data still in flight.
        let _ = self.stopped().await;
    }
}

struct QuicTeardown {
    endpoint: Endpoint,
    conns: Vec<Connection>,
}

impl Teardown for QuicTeardown {
    fn teardown(
        self: Box<Self>,
        deadline: Instant,
    ) -> Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(async move {
            for c in &self.conns {
                c.close(VarInt::from_u32(0), b"done");
            }
            let _ = tokio::time::timeout_at(deadline, self.endpoint.wait_idle()).await;
        })
    }
}

fn transport_config() -> Result<Arc<TransportConfig>, TransportError> {
    let mut t = TransportConfig::default();
    let idle = IdleTimeout::try_from(Duration::from_secs(10))
        .map_err(|e| TransportError::Local(format!("QUIC idle timeout: {e}")))?;
    t.max_concurrent_bidi_streams(VarInt::from_u32(0))
        .max_concurrent_uni_streams(VarInt::from_u32(1))
        .stream_receive_window(VarInt::from_u32(16 << 20))
        .receive_window(VarInt::from_u32(32 << 20))
        .send_window(32 << 20)
        .keep_alive_interval(Some(Duration::from_secs(2)))
        .max_idle_timeout(Some(idle));
    Ok(Arc::new(t))
}

fn quic_err(peer: Option<PartyId>, e: impl std::fmt::Display) -> TransportError {
    TransportError::Tls {
        peer,
        reason: e.to_string(),
    }
}

/// Connects party `me` to its peers over QUIC and returns its link.
///
/// `socket` is this party's bound UDP socket: the peers with a higher index connect to
/// its address; P2 may bind any local port. Dialing waits for a peer that is not up yet
/// until `opts.timeout` passes.
///
/// # Errors
/// As [`crate::tcp::connect`]: [`TransportError::Tls`] for a refused certificate,
/// [`TransportError::Connect`] for a peer that never connected, [`TransportError::Local`]
/// for a socket or configuration problem.
pub fn connect(
    endpoints: &Endpoints,
    socket: UdpSocket,
    identity: &Identity,
    pins: &Pins,
    opts: NetOptions,
) -> Result<NetLink, TransportError> {
    let me = endpoints.me;
    let (dials, accepts) = roles(me);
    let rt = runtime()?;
    let wait = opts.timeout;
    let parts = Parts::new(me, rt, opts);
    let transport = transport_config()?;
    let server = if accepts.is_empty() {
        None
    } else {
        let crypto = QuicServerConfig::try_from(server_config(identity, pins, &accepts)?)
            .map_err(|e| quic_err(None, e))?;
        let mut s = ServerConfig::with_crypto(Arc::new(crypto));
        s.transport_config(Arc::clone(&transport));
        Some(s)
    };
    let mut dial_cfgs = Vec::new();
    for &p in &dials {
        let addr = endpoints
            .peers
            .get(p.index())
            .copied()
            .flatten()
            .ok_or_else(|| TransportError::Local(format!("no address for {p}")))?;
        let crypto = QuicClientConfig::try_from(client_config(identity, pins, p)?)
            .map_err(|e| quic_err(Some(p), e))?;
        let mut c = ClientConfig::new(Arc::new(crypto));
        c.transport_config(Arc::clone(&transport));
        dial_cfgs.push((p, addr, c));
    }
    let (endpoint, conns) = parts.rt.block_on(async {
        let endpoint = Endpoint::new(
            EndpointConfig::default(),
            server,
            socket,
            Arc::new(TokioRuntime),
        )
        .map_err(|e| TransportError::Local(format!("QUIC endpoint: {e}")))?;
        let deadline = Instant::now() + wait;
        let accepting = accept_all(&endpoint, pins, &accepts, deadline);
        let dialing = async {
            let mut out = Vec::new();
            for (p, addr, cfg) in dial_cfgs {
                out.push(dial(&endpoint, p, addr, cfg, deadline).await?);
            }
            Ok::<_, TransportError>(out)
        };
        let (a, d) = tokio::join!(accepting, dialing);
        let mut all = d?;
        all.extend(a?);
        Ok::<_, TransportError>((endpoint, all))
    })?;
    let mut writers = Vec::new();
    let mut keep = Vec::new();
    for (peer, conn, send, recv) in conns {
        match recv {
            // The dialer has its peer's stream already (it carried the acceptance byte).
            Some(r) => parts.spawn_reader(peer, r),
            None => {
                let c = conn.clone();
                let tx = parts.inbox_sender();
                let max = parts.opts.max_frame_len;
                let wire = parts.wire();
                parts.rt.spawn(async move {
                    match c.accept_uni().await {
                        Ok(r) => crate::net::read_frames(peer, r, max, tx, wire).await,
                        Err(_) => {
                            let _ = tx.send(crate::net::Event::Closed(peer, false)).await;
                        }
                    }
                });
            }
        }
        let (tx, h) = parts.spawn_writer(peer, send);
        writers.push((peer, tx, h));
        keep.push(conn);
    }
    Ok(parts.finish(
        writers,
        Some(Box::new(QuicTeardown {
            endpoint,
            conns: keep,
        })),
    ))
}

type Established = (PartyId, Connection, SendStream, Option<RecvStream>);

async fn dial(
    endpoint: &Endpoint,
    peer: PartyId,
    addr: SocketAddr,
    cfg: ClientConfig,
    deadline: Instant,
) -> Result<Established, TransportError> {
    let timed_out = || TransportError::Connect {
        peer,
        reason: format!("no QUIC connection to {addr} before the deadline"),
    };
    let name = server_name(peer);
    let conn = loop {
        let connecting = endpoint
            .connect_with(cfg.clone(), addr, &name)
            .map_err(|e| TransportError::Connect {
                peer,
                reason: e.to_string(),
            })?;
        match tokio::time::timeout_at(deadline, connecting).await {
            Err(_) => return Err(timed_out()),
            Ok(Ok(c)) => break c,
            // No answer yet (the peer is not up): try again until the deadline.
            Ok(Err(quinn::ConnectionError::TimedOut)) => {}
            Ok(Err(e)) => return Err(quic_err(Some(peer), e)),
        }
        if Instant::now() + Duration::from_millis(50) >= deadline {
            return Err(timed_out());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let send = conn.open_uni().await.map_err(|e| quic_err(Some(peer), e))?;
    let mut recv = tokio::time::timeout_at(deadline, conn.accept_uni())
        .await
        .map_err(|_| timed_out())?
        .map_err(|e| quic_err(Some(peer), e))?;
    let mut ack = [0u8; 1];
    tokio::time::timeout_at(deadline, recv.read_exact(&mut ack))
        .await
        .map_err(|_| timed_out())?
        .map_err(|e| quic_err(Some(peer), e))?;
    if ack[0] != ACCEPTED {
        return Err(quic_err(Some(peer), "unexpected acceptance byte"));
    }
    Ok((peer, conn, send, Some(recv)))
}

async fn accept_all(
    endpoint: &Endpoint,
    pins: &Pins,
    expected: &[PartyId],
    deadline: Instant,
) -> Result<Vec<Established>, TransportError> {
    let mut got: Vec<Established> = Vec::new();
    let mut last_refusal: Option<String> = None;
    while got.len() < expected.len() {
        let missing = expected
            .iter()
            .copied()
            .find(|p| got.iter().all(|g| g.0 != *p))
            .unwrap_or(PartyId::P0);
        let late = |r: &Option<String>| TransportError::Connect {
            peer: missing,
            reason: match r {
                Some(r) => format!("did not connect before the deadline (refused: {r})"),
                None => "did not connect before the deadline".into(),
            },
        };
        let incoming = match tokio::time::timeout_at(deadline, endpoint.accept()).await {
            Err(_) | Ok(None) => return Err(late(&last_refusal)),
            Ok(Some(i)) => i,
        };
        let conn = match tokio::time::timeout_at(deadline, incoming).await {
            Err(_) => return Err(late(&last_refusal)),
            Ok(Err(e)) => {
                // A stranger or a wrong certificate: refuse it, keep listening.
                last_refusal = Some(e.to_string());
                continue;
            }
            Ok(Ok(c)) => c,
        };
        let who = conn
            .peer_identity()
            .and_then(|id| id.downcast::<Vec<CertificateDer<'static>>>().ok())
            .and_then(|certs| {
                certs
                    .first()
                    .and_then(|c| pins.identify(c.as_ref(), expected))
            });
        match who {
            Some(p) if got.iter().all(|g| g.0 != p) => {
                let Ok(mut send) = conn.open_uni().await else {
                    continue;
                };
                if send.write_all(&[ACCEPTED]).await.is_ok() {
                    got.push((p, conn, send, None));
                }
            }
            _ => {
                conn.close(VarInt::from_u32(1), b"duplicate");
                last_refusal = Some("a second connection from the same party".into());
            }
        }
    }
    Ok(got)
}
