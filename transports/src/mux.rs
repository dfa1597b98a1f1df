//! Many sessions over one connection per pair of parties: the links of a long-running
//! computing server, where each request runs as its own session with its own session id.
//!
//! A [`Mux`] holds one party's two authenticated connections (TCP with mutual TLS, as in
//! [`crate::tcp`]). A reader task per peer reads frames and a router hands each to the
//! session its header names (`session_id`). [`Mux::open`] gives a session its own
//! [`MuxLink`], which implements [`Link`], so [`crate::drive`] runs a session over it as
//! over any other link; sessions run at once on their own threads.
//!
//! The parties open a session when each of them has the request, so a peer's first frames
//! of a session may arrive before this party opens it: the router keeps them (at most
//! [`MuxOptions::max_early_bytes`] in all, each session's for at most
//! [`MuxOptions::early_ttl`]) and hands them over on `open`. Frames of a session that has
//! ended here (a peer's last END frame, or frames that cross an abort) are dropped.
//! A frame whose header cannot be read is dropped too: the session it was meant for, if
//! any, ends in a timeout and names the peer.
//!
//! Per session the router's queue is not bounded: the engine's lockstep epochs keep a
//! peer at most one epoch ahead of a session, so what waits is at most one epoch's frames.
//! When a peer's connection ends, every open session is told (`Recv::Closed`), and sessions
//! opened later are told at once, so they fail naming the peer instead of waiting.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use puma_core::{PartyId, wire};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

use crate::driver::{Link, Recv};
use crate::error::TransportError;
use crate::net::{Event, WireCounters, read_frames, runtime, write_frames};
use crate::tcp::{Endpoints, establish};
use crate::tls::{Identity, Pins};

/// Settings of a [`Mux`].
#[derive(Clone, Debug)]
pub struct MuxOptions {
    /// How long to wait for the peers to connect.
    pub connect_timeout: Duration,
    /// Largest frame accepted from a peer (the sessions' `max_frame_len`).
    pub max_frame_len: usize,
    /// Frames queued per peer before a send waits.
    pub send_queue_frames: usize,
    /// Most bytes of frames kept for sessions not yet open here.
    pub max_early_bytes: usize,
    /// How long frames of a session not yet open here are kept.
    pub early_ttl: Duration,
}

impl Default for MuxOptions {
    fn default() -> Self {
        MuxOptions {
            connect_timeout: crate::DEFAULT_TIMEOUT,
            max_frame_len: puma_core::Config::DEFAULT_MAX_FRAME_LEN,
            send_queue_frames: 64,
            max_early_bytes: 256 << 20,
            early_ttl: Duration::from_secs(60),
        }
    }
}

/// Ended sessions remembered, to drop their late frames.
const ENDED_REMEMBERED: usize = 4096;

/// Frames of a session that is not open here yet.
struct Early {
    since: Instant,
    frames: Vec<(PartyId, Vec<u8>)>,
}

#[derive(Default)]
struct Routes {
    open: HashMap<u64, std_mpsc::Sender<Recv>>,
    early: HashMap<u64, Early>,
    early_bytes: usize,
    ended: HashSet<u64>,
    ended_order: VecDeque<u64>,
    /// Peers whose connection has ended.
    gone: [bool; 3],
    /// Frames dropped: unreadable, of ended sessions, or over the early limits.
    dropped: u64,
}

impl Routes {
    fn end(&mut self, id: u64) {
        self.open.remove(&id);
        if let Some(e) = self.early.remove(&id) {
            self.early_bytes -= e.frames.iter().map(|(_, f)| f.len()).sum::<usize>();
        }
        if self.ended.insert(id) {
            self.ended_order.push_back(id);
            if self.ended_order.len() > ENDED_REMEMBERED
                && let Some(old) = self.ended_order.pop_front()
            {
                self.ended.remove(&old);
            }
        }
    }

    fn expire(&mut self, now: Instant, ttl: Duration) {
        let old: Vec<u64> = self
            .early
            .iter()
            .filter(|(_, e)| now.duration_since(e.since) > ttl)
            .map(|(&id, _)| id)
            .collect();
        for id in old {
            if let Some(e) = self.early.remove(&id) {
                self.early_bytes -= e.frames.iter().map(|(_, f)| f.len()).sum::<usize>();
                self.dropped += e.frames.len() as u64;
            }
        }
    }
}

fn lock(routes: &Mutex<Routes>) -> MutexGuard<'_, Routes> {
    // A panic elsewhere cannot leave the routes half-updated in a way that matters here.
    routes.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One party's connections to its peers, shared by many sessions.
pub struct Mux {
    me: PartyId,
    rt: Option<Runtime>,
    out: [Option<mpsc::Sender<Vec<u8>>>; 3],
    routes: Arc<Mutex<Routes>>,
    wire: Arc<WireCounters>,
}

impl std::fmt::Debug for Mux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mux")
            .field("me", &self.me)
            .field("sessions", &self.sessions())
            .finish_non_exhaustive()
    }
}

impl Mux {
    /// Connects party `endpoints.me` to its peers over TCP with mutual TLS, as
    /// [`crate::tcp::connect`] does, for many sessions.
    ///
    /// # Errors
    /// As [`crate::tcp::connect`].
    pub fn connect(
        endpoints: &Endpoints,
        listener: Option<std::net::TcpListener>,
        identity: &Identity,
        pins: &Pins,
        opts: MuxOptions,
    ) -> Result<Mux, TransportError> {
        let rt = runtime()?;
        let streams = rt.block_on(establish(
            endpoints,
            listener,
            identity,
            pins,
            opts.connect_timeout,
        ))?;
        let me = endpoints.me;
        let wire = Arc::new(WireCounters::default());
        let routes = Arc::new(Mutex::new(Routes::default()));
        let (events_tx, events) = mpsc::channel(64);
        let mut out: [Option<mpsc::Sender<Vec<u8>>>; 3] = [None, None, None];
        for (peer, stream) in streams {
            let (r, w) = tokio::io::split(stream);
            rt.spawn(read_frames(
                peer,
                r,
                opts.max_frame_len,
                events_tx.clone(),
                Arc::clone(&wire),
            ));
            let (tx, rx) = mpsc::channel(opts.send_queue_frames.max(1));
            rt.spawn(write_frames(peer, w, rx, Arc::clone(&wire)));
            if let Some(slot) = out.get_mut(peer.index()) {
                *slot = Some(tx);
            }
        }
        drop(events_tx);
        rt.spawn(route(events, Arc::clone(&routes), opts));
        Ok(Mux {
            me,
            rt: Some(rt),
            out,
            routes,
            wire,
        })
    }

    /// The party this mux belongs to.
    pub fn me(&self) -> PartyId {
        self.me
    }

    /// The link of session `session_id`; frames of it that arrived before are delivered
    /// first. The session ends here when the link is dropped.
    ///
    /// # Errors
    /// [`TransportError::Local`] if the session is open or has ended here already (a
    /// session id is used once).
    pub fn open(&self, session_id: u64) -> Result<MuxLink, TransportError> {
        let (tx, inbox) = std_mpsc::channel();
        let mut routes = lock(&self.routes);
        if routes.open.contains_key(&session_id) || routes.ended.contains(&session_id) {
            return Err(TransportError::Local(format!(
                "session {session_id} is already in use on this server"
            )));
        }
        if let Some(early) = routes.early.remove(&session_id) {
            routes.early_bytes -= early.frames.iter().map(|(_, f)| f.len()).sum::<usize>();
            for (from, bytes) in early.frames {
                let _ = tx.send(Recv::Frame { from, bytes });
            }
        }
        for peer in PartyId::ALL {
            if routes.gone[peer.index()] {
                let _ = tx.send(Recv::Closed { peer });
            }
        }
        routes.open.insert(session_id, tx);
        Ok(MuxLink {
            me: self.me,
            session_id,
            out: self.out.clone(),
            inbox,
            routes: Arc::clone(&self.routes),
        })
    }

    /// Sessions open here now.
    pub fn sessions(&self) -> usize {
        lock(&self.routes).open.len()
    }

    /// Peers whose connection has ended.
    pub fn gone(&self) -> Vec<PartyId> {
        let routes = lock(&self.routes);
        PartyId::ALL
            .into_iter()
            .filter(|p| routes.gone[p.index()])
            .collect()
    }

    /// Frames dropped so far: unreadable, of ended sessions, or over the limits for
    /// sessions not yet open here.
    pub fn dropped_frames(&self) -> u64 {
        lock(&self.routes).dropped
    }

    /// Bytes moved so far, by peer (frames and length prefixes).
    pub fn wire_stats(&self) -> crate::net::WireStats {
        self.wire.snapshot()
    }
}

impl Drop for Mux {
    fn drop(&mut self) {
        // Closing the queues ends the writers, which close their streams.
        self.out = [None, None, None];
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(1));
        }
    }
}

/// Hands each frame to its session, keeps early ones, and tells sessions of lost peers.
async fn route(mut events: mpsc::Receiver<Event>, routes: Arc<Mutex<Routes>>, opts: MuxOptions) {
    while let Some(ev) = events.recv().await {
        let mut r = lock(&routes);
        match ev {
            Event::Frame(from, bytes) => {
                let Ok(h) = wire::decode_header(&bytes, from) else {
                    r.dropped += 1;
                    continue;
                };
                let id = h.session_id;
                if let Some(tx) = r.open.get(&id) {
                    if tx.send(Recv::Frame { from, bytes }).is_err() {
                        r.end(id);
                    }
                } else if r.ended.contains(&id) {
                    r.dropped += 1;
                } else {
                    let now = Instant::now();
                    r.expire(now, opts.early_ttl);
                    if r.early_bytes + bytes.len() > opts.max_early_bytes {
                        r.dropped += 1;
                        continue;
                    }
                    r.early_bytes += bytes.len();
                    r.early
                        .entry(id)
                        .or_insert_with(|| Early {
                            since: now,
                            frames: Vec::new(),
                        })
                        .frames
                        .push((from, bytes));
                }
            }
            Event::Closed(peer, _) | Event::Failed(TransportError::BadFrame { peer, .. }) => {
                if let Some(g) = r.gone.get_mut(peer.index()) {
                    *g = true;
                }
                for tx in r.open.values() {
                    let _ = tx.send(Recv::Closed { peer });
                }
            }
            Event::Failed(_) => {}
        }
    }
}

/// One session's link over a [`Mux`].
pub struct MuxLink {
    me: PartyId,
    session_id: u64,
    out: [Option<mpsc::Sender<Vec<u8>>>; 3],
    inbox: std_mpsc::Receiver<Recv>,
    routes: Arc<Mutex<Routes>>,
}

impl std::fmt::Debug for MuxLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MuxLink")
            .field("me", &self.me)
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

impl MuxLink {
    /// The session this link carries.
    pub fn session_id(&self) -> u64 {
        self.session_id
    }
}

impl Link for MuxLink {
    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), TransportError> {
        let tx = self
            .out
            .get(to.index())
            .and_then(Option::as_ref)
            .ok_or(TransportError::Disconnected { peer: to })?;
        // Sessions run on their own threads, never on the mux's runtime: a blocking send
        // waits for room in the peer's queue without stalling the readers.
        tx.blocking_send(frame)
            .map_err(|_| TransportError::Disconnected { peer: to })
    }

    fn recv(&mut self, timeout: Duration) -> Result<Recv, TransportError> {
        match self.inbox.recv_timeout(timeout) {
            Ok(r) => Ok(r),
            Err(std_mpsc::RecvTimeoutError::Timeout) => Ok(Recv::TimedOut),
            Err(std_mpsc::RecvTimeoutError::Disconnected) => Err(TransportError::Local(
                "the server's connections were shut down".into(),
            )),
        }
    }
}

impl Drop for MuxLink {
    fn drop(&mut self) {
        lock(&self.routes).end(self.session_id);
    }
}
