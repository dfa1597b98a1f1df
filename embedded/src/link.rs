//! The two framed streams of one party.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::fmt;

use embedded_io::{Read, ReadReady, Write, WriteReady};
use puma_core::{Config, PartyId};

use crate::{Clock, Error, Link};

/// Bytes of the little-endian length prefix in front of every frame on a stream (the same
/// as `puma_transports::net::LEN_PREFIX`).
pub const LEN_PREFIX: usize = 4;

/// How long a send may wait for a peer to read, by default: 30 seconds.
pub const DEFAULT_SEND_TIMEOUT_MS: u64 = 30_000;

/// What [`StreamLink::recv`] delivers.
#[derive(PartialEq, Eq)]
pub enum Event {
    /// One whole frame from `from`.
    Frame {
        /// The sender.
        from: PartyId,
        /// The frame's bytes.
        bytes: Vec<u8>,
    },
    /// The stream from `peer` ended after all of its whole frames were delivered.
    Closed {
        /// The peer whose stream ended.
        peer: PartyId,
        /// Whether it ended in the middle of a frame (whose bytes are lost).
        truncated: bool,
    },
    /// Nothing arrived before the timeout.
    TimedOut,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Frames carry masked shares; print only their size.
            Event::Frame { from, bytes } => {
                write!(f, "Frame {{ from: {from}, {} bytes }}", bytes.len())
            }
            Event::Closed { peer, truncated } => f
                .debug_struct("Closed")
                .field("peer", peer)
                .field("truncated", truncated)
                .finish(),
            Event::TimedOut => f.write_str("TimedOut"),
        }
    }
}

/// What is being read from a peer right now.
enum Incoming {
    /// The length prefix, `n` bytes of it so far.
    Len([u8; LEN_PREFIX], usize),
    /// A frame body, `n` bytes of it so far.
    Body(Vec<u8>, usize),
}

impl Incoming {
    fn start() -> Incoming {
        Incoming::Len([0; LEN_PREFIX], 0)
    }

    /// Whether some bytes of a frame have been read but not all.
    fn is_partial(&self) -> bool {
        !matches!(self, Incoming::Len(_, 0))
    }
}

struct Peer<S> {
    io: S,
    incoming: Incoming,
    frames: VecDeque<Vec<u8>>,
    /// The stream ended (or failed); reported once, after its frames.
    closed: bool,
    /// It ended in the middle of a frame.
    truncated: bool,
    reported: bool,
}

/// One party's streams to its two peers, framed with a 4-byte little-endian length.
///
/// Each stream implements [`Read`], [`ReadReady`], [`Write`] and [`WriteReady`]; `C` is
/// the host's [`Clock`].
pub struct StreamLink<S, C> {
    me: PartyId,
    /// By party index; `None` at `me`.
    peers: [Option<Peer<S>>; 3],
    clock: C,
    max_frame_len: usize,
    send_timeout_ms: u64,
    /// Whose frames `recv` looks at first (alternates, so neither peer starves).
    turn: usize,
}

impl<S, C> fmt::Debug for StreamLink<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamLink")
            .field("me", &self.me)
            .field("max_frame_len", &self.max_frame_len)
            .field("send_timeout_ms", &self.send_timeout_ms)
            .finish_non_exhaustive()
    }
}

impl<S: Read + ReadReady + Write + WriteReady, C: Clock> StreamLink<S, C> {
    /// A link for `me` with the stream to `me.next()` and the one to `me.prev()`, accepting
    /// frames up to [`Config::DEFAULT_MAX_FRAME_LEN`] and failing a send that makes no
    /// progress for [`DEFAULT_SEND_TIMEOUT_MS`].
    pub fn new(me: PartyId, to_next: S, to_prev: S, clock: C) -> StreamLink<S, C> {
        let mut peers: [Option<Peer<S>>; 3] = [None, None, None];
        for (p, io) in [(me.next(), to_next), (me.prev(), to_prev)] {
            if let Some(slot) = peers.get_mut(p.index()) {
                *slot = Some(Peer {
                    io,
                    incoming: Incoming::start(),
                    frames: VecDeque::new(),
                    closed: false,
                    truncated: false,
                    reported: false,
                });
            }
        }
        StreamLink {
            me,
            peers,
            clock,
            max_frame_len: Config::DEFAULT_MAX_FRAME_LEN,
            send_timeout_ms: DEFAULT_SEND_TIMEOUT_MS,
            turn: 0,
        }
    }

    /// Sets the largest frame accepted (the session's `max_frame_len`).
    pub fn with_max_frame_len(mut self, max: usize) -> Self {
        self.max_frame_len = max;
        self
    }

    /// Sets how long, in milliseconds, a send may wait for a peer to read.
    pub fn with_send_timeout_ms(mut self, timeout_ms: u64) -> Self {
        self.send_timeout_ms = timeout_ms;
        self
    }

    /// The party this link belongs to.
    pub fn me(&self) -> PartyId {
        self.me
    }

    /// The host's clock.
    pub fn clock(&mut self) -> &mut C {
        &mut self.clock
    }

    /// Sends one frame to `to`, with its length prefix, then flushes.
    ///
    /// While `to` cannot take more bytes, this reads whatever the peers have sent, so that
    /// they can make progress too; those frames are delivered by later [`recv`](Self::recv)s.
    ///
    /// # Errors
    /// - [`Error::Disconnected`] if the stream to `to` fails or accepts no more bytes.
    /// - [`Error::SendStalled`] if `to` takes nothing for the send timeout.
    /// - [`Error::Oversized`] or [`Error::OutOfMemory`] from a frame read meanwhile.
    /// - [`Error::Core`] (misuse) if `to` is `me` or the frame is longer than 4 GiB.
    pub fn send(&mut self, to: PartyId, frame: &[u8]) -> Result<(), Error> {
        let len = u32::try_from(frame.len())
            .map_err(|_| puma_core::Error::misuse("frame longer than 4 GiB"))?;
        let prefix = len.to_le_bytes();
        let total = LEN_PREFIX + frame.len();
        let mut sent = 0usize;
        let mut last_progress = self.clock.now_ms();
        while sent < total {
            let peer = self
                .peers
                .get_mut(to.index())
                .and_then(Option::as_mut)
                .ok_or(puma_core::Error::misuse(
                    "no stream to this party (a party cannot send to itself)",
                ))?;
            let ready = peer
                .io
                .write_ready()
                .map_err(|_| Error::Disconnected { peer: to })?;
            if ready {
                let chunk = if sent < LEN_PREFIX {
                    prefix.get(sent..).unwrap_or_default()
                } else {
                    frame.get(sent - LEN_PREFIX..).unwrap_or_default()
                };
                match peer.io.write(chunk) {
                    Ok(0) | Err(_) => return Err(Error::Disconnected { peer: to }),
                    Ok(n) => {
                        sent += n;
                        last_progress = self.clock.now_ms();
                        continue;
                    }
                }
            }
            // The peer's buffer is full: read meanwhile, so that it can make progress.
            if !self.pump()? {
                if self.clock.now_ms().saturating_sub(last_progress) > self.send_timeout_ms {
                    return Err(Error::SendStalled { peer: to });
                }
                self.clock.idle();
            }
        }
        if let Some(peer) = self.peers.get_mut(to.index()).and_then(Option::as_mut) {
            peer.io
                .flush()
                .map_err(|_| Error::Disconnected { peer: to })?;
        }
        Ok(())
    }

    /// Waits at most `timeout_ms` milliseconds for the next frame or end of stream from
    /// either peer.
    ///
    /// # Errors
    /// [`Error::Oversized`] if a peer announces a frame above the limit (nothing is
    /// allocated for it), [`Error::OutOfMemory`] if its buffer cannot be allocated.
    pub fn recv(&mut self, timeout_ms: u64) -> Result<Event, Error> {
        let deadline = self.clock.now_ms().saturating_add(timeout_ms);
        loop {
            if let Some(ev) = self.next_event() {
                return Ok(ev);
            }
            if !self.pump()? {
                if self.clock.now_ms() >= deadline {
                    return Ok(Event::TimedOut);
                }
                self.clock.idle();
            }
        }
    }

    /// Reads what is available from every peer; returns whether anything was read.
    fn pump(&mut self) -> Result<bool, Error> {
        let mut progress = false;
        let max = self.max_frame_len;
        for p in PartyId::ALL {
            let Some(peer) = self.peers.get_mut(p.index()).and_then(Option::as_mut) else {
                continue;
            };
            while !peer.closed {
                match peer.io.read_ready() {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(_) => {
                        peer.close();
                        break;
                    }
                }
                let n = match &mut peer.incoming {
                    Incoming::Len(buf, got) => buf.get_mut(*got..).map(|b| peer.io.read(b)),
                    Incoming::Body(buf, got) => buf.get_mut(*got..).map(|b| peer.io.read(b)),
                };
                let n = match n {
                    Some(Ok(n)) if n > 0 => n,
                    _ => {
                        peer.close();
                        break;
                    }
                };
                progress = true;
                peer.advance(p, n, max)?;
            }
        }
        Ok(progress)
    }

    fn next_event(&mut self) -> Option<Event> {
        let order = [self.me.next(), self.me.prev()];
        for k in 0..2 {
            let p = order
                .get((self.turn + k) % 2)
                .copied()
                .unwrap_or(self.me.next());
            if let Some(peer) = self.peers.get_mut(p.index()).and_then(Option::as_mut) {
                if let Some(bytes) = peer.frames.pop_front() {
                    self.turn = (self.turn + k + 1) % 2;
                    return Some(Event::Frame { from: p, bytes });
                }
            }
        }
        for p in order {
            if let Some(peer) = self.peers.get_mut(p.index()).and_then(Option::as_mut) {
                if peer.closed && !peer.reported && peer.frames.is_empty() {
                    peer.reported = true;
                    return Some(Event::Closed {
                        peer: p,
                        truncated: peer.truncated,
                    });
                }
            }
        }
        None
    }
}

impl<S: Read + ReadReady + Write + WriteReady, C: Clock> Link for StreamLink<S, C> {
    type Error = Error;

    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), Error> {
        StreamLink::send(self, to, &frame)
    }

    fn recv(&mut self, timeout_ms: u64) -> Result<Event, Error> {
        StreamLink::recv(self, timeout_ms)
    }

    fn now_ms(&mut self) -> u64 {
        self.clock.now_ms()
    }
}

impl<S> Peer<S> {
    fn close(&mut self) {
        self.closed = true;
        self.truncated = self.incoming.is_partial();
    }

    /// Accounts for `n` bytes just read from `p` into the current prefix or body.
    fn advance(&mut self, p: PartyId, n: usize, max: usize) -> Result<(), Error> {
        let next = match &mut self.incoming {
            Incoming::Len(buf, got) => {
                *got += n;
                if *got < LEN_PREFIX {
                    return Ok(());
                }
                let len = u32::from_le_bytes(*buf) as usize;
                if len > max {
                    self.closed = true;
                    self.truncated = true;
                    return Err(Error::Oversized {
                        peer: p,
                        len: len as u64,
                        max: max as u64,
                    });
                }
                let mut body = Vec::new();
                if body.try_reserve_exact(len).is_err() {
                    self.closed = true;
                    self.truncated = true;
                    return Err(Error::OutOfMemory {
                        peer: p,
                        len: len as u64,
                    });
                }
                body.resize(len, 0);
                Incoming::Body(body, 0)
            }
            Incoming::Body(buf, got) => {
                *got += n;
                if *got < buf.len() {
                    return Ok(());
                }
                Incoming::start()
            }
        };
        if let Incoming::Body(frame, _) = core::mem::replace(&mut self.incoming, next) {
            self.frames.push_back(frame);
        }
        // A zero-length frame completes without any body read.
        if let Incoming::Body(buf, 0) = &self.incoming {
            if buf.is_empty() {
                self.frames.push_back(Vec::new());
                self.incoming = Incoming::start();
            }
        }
        Ok(())
    }
}
