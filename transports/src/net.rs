//! A [`Link`] over byte streams, shared by the TCP and QUIC transports.
//!
//! On the wire each frame is a 4-byte little-endian length followed by the frame's bytes.
//! A length above the frame limit ([`NetOptions::max_frame_len`], the session's
//! `Config::max_frame_len`) is refused before any allocation, with
//! [`TransportError::BadFrame`]; the bytes themselves are checked by the session. Records
//! larger than a frame are split by the engine, so tensors have no size limit.
//!
//! Per peer, a writer task takes frames from a bounded queue
//! ([`NetOptions::send_queue_frames`]) and a reader task pushes the frames it reads into
//! one bounded inbox. When the inbox is full the reader stops reading, so flow control
//! (TCP windows, QUIC stream credit) slows the sender: memory stays bounded on both
//! sides. A send that finds its queue full waits for room and meanwhile moves arriving
//! frames from the inbox into a holding queue that [`Link::recv`] serves first; otherwise
//! three parties that all send a large epoch to each other at once would wait on each
//! other forever. The holding queue is capped by [`NetOptions::max_held_bytes`].
//!
//! The driver runs on the caller's thread and blocks on the link's own tokio runtime.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use puma_core::{Config, Error, PartyId};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::driver::{DEFAULT_TIMEOUT, Link, Recv};
use crate::error::{FrameError, TransportError};

/// Bytes of the length prefix in front of every frame on a stream.
pub const LEN_PREFIX: usize = 4;

/// Settings of a network link.
#[derive(Clone, Debug)]
pub struct NetOptions {
    /// How long to wait for the peers to connect, and for a send to make progress.
    pub timeout: Duration,
    /// Largest frame accepted from a peer (must equal the session's `max_frame_len`).
    pub max_frame_len: usize,
    /// Frames queued per peer before a send waits.
    pub send_queue_frames: usize,
    /// Frames read ahead of the session (for both peers together).
    pub inbox_frames: usize,
    /// Most bytes of frames held while sends wait (see the module docs).
    pub max_held_bytes: usize,
}

impl Default for NetOptions {
    fn default() -> Self {
        NetOptions {
            timeout: DEFAULT_TIMEOUT,
            max_frame_len: Config::DEFAULT_MAX_FRAME_LEN,
            send_queue_frames: 8,
            inbox_frames: 16,
            max_held_bytes: Config::DEFAULT_MAX_BUFFERED,
        }
    }
}

/// Bytes on the wire (length prefixes included, TLS and QUIC overhead excluded), by peer.
#[derive(Debug, Default)]
pub(crate) struct WireCounters {
    sent: [AtomicU64; 3],
    received: [AtomicU64; 3],
}

/// Bytes a link moved, by peer index: frames plus their length prefixes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WireStats {
    /// Bytes written to each peer.
    pub sent: [u64; 3],
    /// Bytes read from each peer.
    pub received: [u64; 3],
}

impl WireCounters {
    /// The bytes moved so far.
    pub(crate) fn snapshot(&self) -> WireStats {
        let load = |a: &[AtomicU64; 3]| a.each_ref().map(|c| c.load(Ordering::Relaxed));
        WireStats {
            sent: load(&self.sent),
            received: load(&self.received),
        }
    }
}

fn add(counter: &[AtomicU64; 3], peer: PartyId, n: usize) {
    if let Some(c) = counter.get(peer.index()) {
        c.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// What a reader task reports.
pub(crate) enum Event {
    Frame(PartyId, Vec<u8>),
    /// The peer's stream ended: cleanly (`true`, the peer closed it) or not (a reset,
    /// an end without TLS close_notify, a lost QUIC connection: a crash or a cut).
    Closed(PartyId, bool),
    Failed(TransportError),
}

/// The write half of a stream, with the transport's way to end it cleanly.
pub(crate) trait FrameSink: AsyncWrite + Unpin + Send + 'static {
    /// Ends the stream after everything written so far has been delivered.
    fn close(self) -> impl Future<Output = ()> + Send;
}

/// Reads frames from `peer` until the stream ends, then reports why.
pub(crate) async fn read_frames<R: AsyncRead + Unpin>(
    peer: PartyId,
    mut r: R,
    max: usize,
    tx: mpsc::Sender<Event>,
    wire: Arc<WireCounters>,
) {
    let last = loop {
        let mut len = [0u8; LEN_PREFIX];
        // A clean end is an end between frames; any other end or error is a lost link.
        match r.read(&mut len[..1]).await {
            Ok(0) => break Event::Closed(peer, true),
            Err(_) => break Event::Closed(peer, false),
            Ok(_) => {}
        }
        if r.read_exact(&mut len[1..]).await.is_err() {
            break Event::Closed(peer, false);
        }
        let n = u32::from_le_bytes(len) as usize;
        if n > max {
            break Event::Failed(TransportError::BadFrame {
                peer,
                reason: FrameError::Oversized {
                    len: n as u64,
                    max: max as u64,
                },
            });
        }
        let mut buf = vec![0u8; n];
        if r.read_exact(&mut buf).await.is_err() {
            break Event::Closed(peer, false);
        }
        add(&wire.received, peer, LEN_PREFIX + n);
        if tx.send(Event::Frame(peer, buf)).await.is_err() {
            // The link is gone: nobody wants the rest.
            return;
        }
    };
    let _ = tx.send(last).await;
}

/// Writes queued frames to `peer` until the queue closes, then ends the stream.
pub(crate) async fn write_frames<W: FrameSink>(
    peer: PartyId,
    mut w: W,
    mut rx: mpsc::Receiver<Vec<u8>>,
    wire: Arc<WireCounters>,
) {
    while let Some(frame) = rx.recv().await {
        let Ok(len) = u32::try_from(frame.len()) else {
            return;
        };
        if w.write_all(&len.to_le_bytes()).await.is_err() || w.write_all(&frame).await.is_err() {
            // Dropping `rx` tells the sender that this peer is unreachable.
            return;
        }
        add(&wire.sent, peer, LEN_PREFIX + frame.len());
        // Flush once the queue is empty: a burst of frames goes out in few packets.
        if rx.is_empty() && w.flush().await.is_err() {
            return;
        }
    }
    let _ = w.flush().await;
    w.close().await;
}

/// Extra state a transport keeps alive for the link's lifetime and shuts down last.
pub(crate) trait Teardown: Send {
    /// Ends the connections gracefully, waiting at most until `deadline`.
    fn teardown(
        self: Box<Self>,
        deadline: tokio::time::Instant,
    ) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// One party's connections to its peers over streams (TCP+TLS or QUIC).
pub struct NetLink {
    me: PartyId,
    rt: Option<Runtime>,
    out: [Option<mpsc::Sender<Vec<u8>>>; 3],
    inbox: mpsc::Receiver<Event>,
    inbox_closed: bool,
    held: VecDeque<Event>,
    held_bytes: usize,
    writers: Vec<JoinHandle<()>>,
    reported: [bool; 3],
    /// Peers whose stream ended without a clean close.
    broken: [bool; 3],
    opts: NetOptions,
    wire: Arc<WireCounters>,
    teardown: Option<Box<dyn Teardown>>,
}

/// What [`NetLink::finish`] reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Closing {
    /// Bytes moved, by peer.
    pub wire: WireStats,
    /// Peers whose connection broke instead of closing cleanly (a crash, a reset, a cut
    /// network): when a session fails because another party aborted, these are the
    /// parties that were lost.
    pub broken: Vec<PartyId>,
}

impl std::fmt::Debug for NetLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetLink")
            .field("me", &self.me)
            .field("wire", &self.wire_stats())
            .finish_non_exhaustive()
    }
}

/// The pieces a transport assembles into a [`NetLink`].
pub(crate) struct Parts {
    pub(crate) me: PartyId,
    pub(crate) rt: Runtime,
    pub(crate) opts: NetOptions,
    pub(crate) inbox_tx: mpsc::Sender<Event>,
    pub(crate) inbox: mpsc::Receiver<Event>,
    pub(crate) wire: Arc<WireCounters>,
}

impl Parts {
    pub(crate) fn new(me: PartyId, rt: Runtime, opts: NetOptions) -> Parts {
        let (inbox_tx, inbox) = mpsc::channel(opts.inbox_frames.max(1));
        Parts {
            me,
            rt,
            opts,
            inbox_tx,
            inbox,
            wire: Arc::new(WireCounters::default()),
        }
    }

    /// A sender into the inbox, for a transport's own reader tasks.
    pub(crate) fn inbox_sender(&self) -> mpsc::Sender<Event> {
        self.inbox_tx.clone()
    }

    /// The link's wire counters.
    pub(crate) fn wire(&self) -> Arc<WireCounters> {
        Arc::clone(&self.wire)
    }

    /// Starts the reader task of `peer` on this link's runtime.
    pub(crate) fn spawn_reader<R: AsyncRead + Unpin + Send + 'static>(&self, peer: PartyId, r: R) {
        let (tx, wire, max) = (
            self.inbox_tx.clone(),
            Arc::clone(&self.wire),
            self.opts.max_frame_len,
        );
        self.rt.spawn(read_frames(peer, r, max, tx, wire));
    }

    /// Starts the writer task of `peer`; returns its queue and handle.
    pub(crate) fn spawn_writer<W: FrameSink>(
        &self,
        peer: PartyId,
        w: W,
    ) -> (mpsc::Sender<Vec<u8>>, JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(self.opts.send_queue_frames.max(1));
        let h = self
            .rt
            .spawn(write_frames(peer, w, rx, Arc::clone(&self.wire)));
        (tx, h)
    }

    pub(crate) fn finish(
        self,
        writers: Vec<(PartyId, mpsc::Sender<Vec<u8>>, JoinHandle<()>)>,
        teardown: Option<Box<dyn Teardown>>,
    ) -> NetLink {
        let mut out: [Option<mpsc::Sender<Vec<u8>>>; 3] = [None, None, None];
        let mut handles = Vec::new();
        for (peer, tx, h) in writers {
            if let Some(slot) = out.get_mut(peer.index()) {
                *slot = Some(tx);
            }
            handles.push(h);
        }
        // Only reader tasks hold inbox senders now: the inbox closes when all have ended.
        drop(self.inbox_tx);
        NetLink {
            me: self.me,
            rt: Some(self.rt),
            out,
            inbox: self.inbox,
            inbox_closed: false,
            held: VecDeque::new(),
            held_bytes: 0,
            writers: handles,
            reported: [false; 3],
            broken: [false; 3],
            opts: self.opts,
            wire: self.wire,
            teardown,
        }
    }
}

/// Builds the multi-threaded runtime of one link: two workers, so that a reader and a
/// writer (TLS or QUIC crypto) progress in parallel.
pub(crate) fn runtime() -> Result<Runtime, TransportError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("puma-net")
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| TransportError::Local(format!("cannot start the network runtime: {e}")))
}

impl NetLink {
    /// The party this link belongs to.
    pub fn me(&self) -> PartyId {
        self.me
    }

    /// Bytes moved so far, by peer (frames and length prefixes).
    pub fn wire_stats(&self) -> WireStats {
        self.wire.snapshot()
    }

    /// Ends the link cleanly: delivers every queued frame, closes this party's streams,
    /// and waits (at most `linger`) for the peers to close theirs, so that no peer loses
    /// frames to a connection reset. Returns the bytes moved. Dropping a link does the
    /// same with a short linger.
    pub fn finish(mut self, linger: Duration) -> Closing {
        self.shutdown(linger);
        Closing {
            wire: self.wire_stats(),
            broken: PartyId::ALL
                .into_iter()
                .filter(|p| self.broken.get(p.index()).copied().unwrap_or(false))
                .collect(),
        }
    }

    fn shutdown(&mut self, linger: Duration) {
        let Some(rt) = self.rt.take() else {
            return;
        };
        self.out = [None, None, None];
        let writers = std::mem::take(&mut self.writers);
        let teardown = self.teardown.take();
        let mut closed = self.reported;
        closed[self.me.index()] = true;
        let broken = &mut self.broken;
        for ev in self.held.drain(..) {
            if let Event::Closed(p, clean) = ev {
                closed[p.index()] = true;
                broken[p.index()] |= !clean;
            }
        }
        let inbox = &mut self.inbox;
        rt.block_on(async {
            let deadline = tokio::time::Instant::now() + linger;
            for w in writers {
                let _ = tokio::time::timeout_at(deadline, w).await;
            }
            while closed.iter().any(|c| !c) {
                match tokio::time::timeout_at(deadline, inbox.recv()).await {
                    Ok(Some(Event::Closed(p, clean))) => {
                        closed[p.index()] = true;
                        broken[p.index()] |= !clean;
                    }
                    Ok(Some(Event::Failed(e))) => {
                        if let Some(p) = e.peer() {
                            closed[p.index()] = true;
                        }
                    }
                    Ok(Some(Event::Frame(..))) => {}
                    Ok(None) | Err(_) => break,
                }
            }
            if let Some(t) = teardown {
                t.teardown(deadline).await;
            }
        });
        rt.shutdown_timeout(Duration::from_millis(100));
    }

    fn deliver(&mut self, ev: Event) -> Result<Recv, TransportError> {
        match ev {
            Event::Frame(from, bytes) => Ok(Recv::Frame { from, bytes }),
            Event::Closed(peer, clean) => {
                if let Some(r) = self.reported.get_mut(peer.index()) {
                    *r = true;
                }
                if let Some(b) = self.broken.get_mut(peer.index()) {
                    *b |= !clean;
                }
                Ok(Recv::Closed { peer })
            }
            Event::Failed(e) => Err(e),
        }
    }

    fn hold(&mut self, ev: Event) -> Result<(), TransportError> {
        if let Event::Frame(peer, bytes) = &ev {
            self.held_bytes = self.held_bytes.saturating_add(bytes.len());
            if self.held_bytes > self.opts.max_held_bytes {
                return Err(TransportError::Overloaded { peer: *peer });
            }
        }
        self.held.push_back(ev);
        Ok(())
    }
}

impl Drop for NetLink {
    fn drop(&mut self) {
        self.shutdown(Duration::from_secs(2));
    }
}

enum SendWait<'a> {
    Room(mpsc::Permit<'a, Vec<u8>>),
    Closed,
    Event(Option<Event>),
    Stalled,
}

impl Link for NetLink {
    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), TransportError> {
        let tx = self
            .out
            .get(to.index())
            .and_then(Option::as_ref)
            .cloned()
            .ok_or(TransportError::Core(Error::misuse(
                "no link to this party (a party cannot send to itself)",
            )))?;
        let frame = match tx.try_send(frame) {
            Ok(()) => return Ok(()),
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return Err(TransportError::Disconnected { peer: to });
            }
            Err(mpsc::error::TrySendError::Full(f)) => f,
        };
        let Some(rt) = self.rt.as_ref().map(|r| r.handle().clone()) else {
            return Err(TransportError::Disconnected { peer: to });
        };
        let deadline = tokio::time::Instant::now() + self.opts.timeout;
        loop {
            let inbox_closed = self.inbox_closed;
            let inbox = &mut self.inbox;
            let wait = rt.block_on(async {
                tokio::select! {
                    biased;
                    p = tx.reserve() => p.map_or(SendWait::Closed, SendWait::Room),
                    ev = inbox.recv(), if !inbox_closed => SendWait::Event(ev),
                    () = tokio::time::sleep_until(deadline) => SendWait::Stalled,
                }
            });
            match wait {
                SendWait::Room(permit) => {
                    permit.send(frame);
                    return Ok(());
                }
                SendWait::Closed => return Err(TransportError::Disconnected { peer: to }),
                SendWait::Stalled => return Err(TransportError::SendStalled { peer: to }),
                SendWait::Event(Some(ev)) => self.hold(ev)?,
                SendWait::Event(None) => self.inbox_closed = true,
            }
        }
    }

    fn recv(&mut self, timeout: Duration) -> Result<Recv, TransportError> {
        if let Some(ev) = self.held.pop_front() {
            if let Event::Frame(_, b) = &ev {
                self.held_bytes = self.held_bytes.saturating_sub(b.len());
            }
            return self.deliver(ev);
        }
        let Some(rt) = self.rt.as_ref() else {
            return Err(TransportError::Local("the link was shut down".into()));
        };
        let ev = if self.inbox_closed {
            None
        } else {
            let inbox = &mut self.inbox;
            match rt.block_on(async { tokio::time::timeout(timeout, inbox.recv()).await }) {
                Err(_) => return Ok(Recv::TimedOut),
                Ok(ev) => ev,
            }
        };
        match ev {
            Some(ev) => self.deliver(ev),
            None => {
                // Every reader has ended; report a peer whose close was not reported yet.
                self.inbox_closed = true;
                let me = self.me;
                let peer = [me.next(), me.prev()]
                    .into_iter()
                    .find(|p| !self.reported.get(p.index()).copied().unwrap_or(true));
                match peer {
                    Some(p) => self.deliver(Event::Closed(p, false)),
                    None => {
                        // Both closes were reported already: nothing can arrive.
                        std::thread::sleep(timeout);
                        Ok(Recv::TimedOut)
                    }
                }
            }
        }
    }
}

/// Which peers `me` dials (lower indices) and which it accepts (higher indices).
pub(crate) fn roles(me: PartyId) -> (Vec<PartyId>, Vec<PartyId>) {
    let dials = PartyId::ALL
        .into_iter()
        .filter(|p| p.index() < me.index())
        .collect();
    let accepts = PartyId::ALL
        .into_iter()
        .filter(|p| p.index() > me.index())
        .collect();
    (dials, accepts)
}
