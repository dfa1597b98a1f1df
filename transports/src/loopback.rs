//! Three parties in one process over real sockets on 127.0.0.1: TCP+TLS or QUIC, with
//! fresh development identities. For tests, benchmarks and comparing transports; a real
//! deployment runs one party per host (see the `puma-party` binary of `puma-examples`).

use std::future::Future;
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::thread;
use std::time::Duration;

use puma_core::{Config, Ctx, Error, PartyId, Session, Stats};

use crate::driver;
use crate::error::TransportError;
use crate::mem::{Outcome, entropy_from_seed};
use crate::mux::{Mux, MuxOptions};
use crate::net::{NetLink, NetOptions, WireStats};
use crate::tcp::Endpoints;
use crate::tls::{Identity, Pins};
use crate::{quic, tcp};

/// A network transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network {
    /// TCP with mutual TLS.
    Tcp,
    /// QUIC.
    Quic,
}

/// Bound sockets and identities of three parties on 127.0.0.1 (ephemeral ports).
#[derive(Debug)]
pub struct LocalNet {
    network: Network,
    identities: [Identity; 3],
    pins: Pins,
    addrs: [Option<SocketAddr>; 3],
    tcp: [Option<TcpListener>; 3],
    udp: [Option<UdpSocket>; 3],
}

fn local(e: std::io::Error) -> TransportError {
    TransportError::Local(format!("cannot bind on 127.0.0.1: {e}"))
}

impl LocalNet {
    /// Binds the sockets and makes three fresh identities, each party pinning the others.
    ///
    /// # Errors
    /// [`TransportError::Local`] if a socket cannot be bound or a key made.
    pub fn new(network: Network) -> Result<LocalNet, TransportError> {
        let identities = [
            Identity::generate(PartyId::P0)?,
            Identity::generate(PartyId::P1)?,
            Identity::generate(PartyId::P2)?,
        ];
        let mut pins = Pins::new();
        for p in PartyId::ALL {
            if let Some(id) = identities.get(p.index()) {
                pins = pins.with(p, id.cert().clone());
            }
        }
        let mut net = LocalNet {
            network,
            identities,
            pins,
            addrs: [None; 3],
            tcp: [None, None, None],
            udp: [None, None, None],
        };
        for p in PartyId::ALL {
            let i = p.index();
            match network {
                // P2 accepts nobody, so it needs no listener.
                Network::Tcp if p != PartyId::P2 => {
                    let l = TcpListener::bind("127.0.0.1:0").map_err(local)?;
                    net.addrs[i] = Some(l.local_addr().map_err(local)?);
                    net.tcp[i] = Some(l);
                }
                Network::Tcp => {}
                Network::Quic => {
                    let s = UdpSocket::bind("127.0.0.1:0").map_err(local)?;
                    net.addrs[i] = Some(s.local_addr().map_err(local)?);
                    net.udp[i] = Some(s);
                }
            }
        }
        Ok(net)
    }

    /// Replaces `party`'s identity (the others keep pinning the original): for tests of
    /// refused certificates.
    pub fn set_identity(&mut self, party: PartyId, identity: Identity) {
        if let Some(slot) = self.identities.get_mut(party.index()) {
            *slot = identity;
        }
    }

    /// Takes party `p`'s connector: call [`PartyNet::connect`] on `p`'s thread.
    pub fn party(&mut self, p: PartyId) -> PartyNet {
        let i = p.index();
        PartyNet {
            network: self.network,
            endpoints: Endpoints {
                me: p,
                peers: self.addrs,
            },
            identity: self.identities.get(i).cloned(),
            pins: self.pins.clone(),
            tcp: self.tcp.get_mut(i).and_then(Option::take),
            udp: self.udp.get_mut(i).and_then(Option::take),
        }
    }
}

/// One party's share of a [`LocalNet`], ready to connect.
#[derive(Debug)]
pub struct PartyNet {
    network: Network,
    endpoints: Endpoints,
    identity: Option<Identity>,
    pins: Pins,
    tcp: Option<TcpListener>,
    udp: Option<UdpSocket>,
}

impl PartyNet {
    /// Connects to the other two parties (blocks until they connect too).
    ///
    /// # Errors
    /// As [`tcp::connect`] and [`quic::connect`].
    pub fn connect(self, opts: NetOptions) -> Result<NetLink, TransportError> {
        let id = self
            .identity
            .ok_or_else(|| TransportError::Local("no identity".into()))?;
        match self.network {
            Network::Tcp => tcp::connect(&self.endpoints, self.tcp, &id, &self.pins, opts),
            Network::Quic => {
                let s = self
                    .udp
                    .ok_or_else(|| TransportError::Local("no UDP socket".into()))?;
                quic::connect(&self.endpoints, s, &id, &self.pins, opts)
            }
        }
    }
}

impl PartyNet {
    /// Connects to the other two parties for many sessions at once ([`Mux`], TCP only).
    ///
    /// # Errors
    /// As [`Mux::connect`]; [`TransportError::Local`] for QUIC.
    pub fn connect_mux(self, opts: MuxOptions) -> Result<Mux, TransportError> {
        let id = self
            .identity
            .ok_or_else(|| TransportError::Local("no identity".into()))?;
        if self.network != Network::Tcp {
            return Err(TransportError::Local(
                "many sessions per connection run over TCP+TLS only".into(),
            ));
        }
        Mux::connect(&self.endpoints, self.tcp, &id, &self.pins, opts)
    }
}

/// [`crate::mem::run3_with_timeout`] over `network` on 127.0.0.1: the same sessions (same
/// entropy derivation), so the same frames, moved over real sockets. Also returns each
/// party's wire counters.
pub fn run3<T, G, Fut>(
    network: Network,
    cfg: Config,
    entropy_seed: u64,
    timeout: Duration,
    mut make: impl FnMut(PartyId) -> G,
) -> (Outcome<T>, [WireStats; 3])
where
    T: Send + 'static,
    G: FnOnce(Ctx) -> Fut + Send + 'static,
    Fut: Future<Output = Result<T, Error>> + Send + 'static,
{
    type Joined<T> = (Result<T, TransportError>, Stats, WireStats);
    let failed =
        |e: TransportError| -> Joined<T> { (Err(e), Stats::default(), WireStats::default()) };
    let mut net = match LocalNet::new(network) {
        Ok(n) => n,
        Err(e) => {
            let msg = e.to_string();
            let r = || Err(TransportError::Local(msg.clone()));
            return (
                Outcome {
                    results: [r(), r(), r()],
                    stats: Default::default(),
                },
                Default::default(),
            );
        }
    };
    let entropy = entropy_from_seed(entropy_seed);
    let opts = NetOptions {
        timeout,
        max_frame_len: cfg.max_frame_len,
        ..NetOptions::default()
    };
    let jobs = PartyId::ALL.map(|p| {
        let e = entropy.get(p.index()).copied().unwrap_or_default();
        (
            net.party(p),
            Session::new(cfg.clone(), p, e, make(p)),
            opts.clone(),
        )
    });
    let joined: Vec<Joined<T>> = thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|(pn, session, opts)| {
                scope.spawn(move || {
                    let mut session = match session {
                        Ok(s) => s,
                        Err(e) => return failed(e.into()),
                    };
                    let mut link = match pn.connect(opts) {
                        Ok(l) => l,
                        Err(e) => return failed(e),
                    };
                    let r = driver::drive(&mut session, &mut link, timeout);
                    let wire = link.finish(timeout).wire;
                    (r, session.stats(), wire)
                })
            })
            .collect();
        handles
            .into_iter()
            .zip(PartyId::ALL)
            .map(|(h, p)| {
                h.join()
                    .unwrap_or_else(|_| failed(TransportError::Panicked { party: p }))
            })
            .collect()
    });
    let mut results: [Result<T, TransportError>; 3] = [
        Err(TransportError::Panicked { party: PartyId::P0 }),
        Err(TransportError::Panicked { party: PartyId::P1 }),
        Err(TransportError::Panicked { party: PartyId::P2 }),
    ];
    let mut stats: [Stats; 3] = Default::default();
    let mut wire: [WireStats; 3] = Default::default();
    for (i, (r, s, w)) in joined.into_iter().enumerate() {
        if let (Some(rs), Some(ss), Some(ws)) =
            (results.get_mut(i), stats.get_mut(i), wire.get_mut(i))
        {
            *rs = r;
            *ss = s;
            *ws = w;
        }
    }
    (Outcome { results, stats }, wire)
}
