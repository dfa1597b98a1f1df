//! A blocking [`Link`] over `embedded-io` byte streams, for hosts with neither threads
//! nor an async runtime (a microcontroller with a UART or a TCP stack, a TEE).
//!
//! Each peer is one stream implementing [`Read`], [`ReadReady`], [`Write`] and
//! [`WriteReady`]; frames go over it with the same 4-byte length prefix as TCP
//! ([`crate::net`]), and a length above the frame limit is refused before anything is
//! allocated. Everything runs on the caller's thread: a send writes only while the
//! stream is ready and otherwise reads whatever the peers have sent, so that three
//! parties that all send a large epoch at once through small buffers never wait on each
//! other; a receive polls both peers. The only other things the link needs from its host
//! are a clock and a way to idle, taken from `std` here (the logic is otherwise plain
//! `embedded-io` and ports to `no_std` by replacing [`std::time::Instant`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use embedded_io::{Read, ReadReady, Write, WriteReady};
use puma_core::{Config, Error, PartyId};

use crate::driver::{Link, Recv};
use crate::error::{FrameError, TransportError};
use crate::net::LEN_PREFIX;

/// What is being read from a peer right now.
enum Incoming {
    /// The length prefix, `n` bytes of it so far.
    Len([u8; LEN_PREFIX], usize),
    /// A frame body, `n` bytes of it so far.
    Body(Vec<u8>, usize),
}

struct Peer<S> {
    io: S,
    incoming: Incoming,
    frames: VecDeque<Vec<u8>>,
    /// The stream ended (or failed); reported once.
    closed: bool,
    reported: bool,
}

/// One party's streams to its two peers.
pub struct StreamLink<S> {
    me: PartyId,
    peers: [Option<Peer<S>>; 3],
    max_frame_len: usize,
    send_timeout: Duration,
    /// Whose frames `recv` looks at first (alternates, so neither peer starves).
    turn: usize,
}

impl<S> std::fmt::Debug for StreamLink<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamLink")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

impl<S: Read + ReadReady + Write + WriteReady> StreamLink<S> {
    /// A link for `me` with the stream to `me.next()` and the one to `me.prev()`, accepting
    /// frames up to [`Config::DEFAULT_MAX_FRAME_LEN`] and failing a send that makes no
    /// progress for 30 seconds.
    pub fn new(me: PartyId, to_next: S, to_prev: S) -> StreamLink<S> {
        let mut peers: [Option<Peer<S>>; 3] = [None, None, None];
        for (p, io) in [(me.next(), to_next), (me.prev(), to_prev)] {
            if let Some(slot) = peers.get_mut(p.index()) {
                *slot = Some(Peer {
                    io,
                    incoming: Incoming::Len([0; LEN_PREFIX], 0),
                    frames: VecDeque::new(),
                    closed: false,
                    reported: false,
                });
            }
        }
        StreamLink {
            me,
            peers,
            max_frame_len: Config::DEFAULT_MAX_FRAME_LEN,
            send_timeout: crate::driver::DEFAULT_TIMEOUT,
            turn: 0,
        }
    }

    /// Sets the largest frame accepted (the session's `max_frame_len`).
    pub fn with_max_frame_len(mut self, max: usize) -> Self {
        self.max_frame_len = max;
        self
    }

    /// Sets how long a send may wait for a peer to read.
    pub fn with_send_timeout(mut self, timeout: Duration) -> Self {
        self.send_timeout = timeout;
        self
    }

    /// Reads what is available from every peer; returns whether anything was read.
    fn pump(&mut self) -> Result<bool, TransportError> {
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
                        peer.closed = true;
                        break;
                    }
                }
                let n = match &mut peer.incoming {
                    Incoming::Len(buf, got) => buf.get_mut(*got..).map(|b| peer.io.read(b)),
                    Incoming::Body(buf, got) => buf.get_mut(*got..).map(|b| peer.io.read(b)),
                };
                let n = match n {
                    Some(Ok(0)) | Some(Err(_)) | None => {
                        peer.closed = true;
                        break;
                    }
                    Some(Ok(n)) => n,
                };
                progress = true;
                let next = match &mut peer.incoming {
                    Incoming::Len(buf, got) => {
                        *got += n;
                        if *got < LEN_PREFIX {
                            None
                        } else {
                            let len = u32::from_le_bytes(*buf) as usize;
                            if len > max {
                                peer.closed = true;
                                return Err(TransportError::BadFrame {
                                    peer: p,
                                    reason: FrameError::Oversized {
                                        len: len as u64,
                                        max: max as u64,
                                    },
                                });
                            }
                            Some(Incoming::Body(vec![0; len], 0))
                        }
                    }
                    Incoming::Body(buf, got) => {
                        *got += n;
                        (*got == buf.len()).then_some(Incoming::Len([0; LEN_PREFIX], 0))
                    }
                };
                if let Some(next) = next {
                    let done = std::mem::replace(&mut peer.incoming, next);
                    if let Incoming::Body(frame, _) = done {
                        peer.frames.push_back(frame);
                    }
                }
                // A zero-length frame completes without any body read.
                if let Incoming::Body(buf, 0) = &peer.incoming {
                    if buf.is_empty() {
                        peer.frames.push_back(Vec::new());
                        peer.incoming = Incoming::Len([0; LEN_PREFIX], 0);
                    }
                }
            }
        }
        Ok(progress)
    }

    fn next_event(&mut self) -> Option<Recv> {
        let order = [self.me.next(), self.me.prev()];
        for k in 0..2 {
            let p = order
                .get((self.turn + k) % 2)
                .copied()
                .unwrap_or(self.me.next());
            if let Some(peer) = self.peers.get_mut(p.index()).and_then(Option::as_mut) {
                if let Some(bytes) = peer.frames.pop_front() {
                    self.turn = (self.turn + k + 1) % 2;
                    return Some(Recv::Frame { from: p, bytes });
                }
            }
        }
        for p in order {
            if let Some(peer) = self.peers.get_mut(p.index()).and_then(Option::as_mut) {
                if peer.closed && !peer.reported && peer.frames.is_empty() {
                    peer.reported = true;
                    return Some(Recv::Closed { peer: p });
                }
            }
        }
        None
    }
}

/// Idles briefly when nothing moved (a host without threads would wait for an interrupt).
fn idle() {
    std::thread::sleep(Duration::from_micros(50));
}

impl<S: Read + ReadReady + Write + WriteReady> Link for StreamLink<S> {
    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), TransportError> {
        let len = u32::try_from(frame.len())
            .map_err(|_| TransportError::Core(Error::misuse("frame longer than 4 GiB")))?;
        let prefix = len.to_le_bytes();
        let mut sent = 0usize;
        let total = LEN_PREFIX + frame.len();
        let mut last_progress = Instant::now();
        while sent < total {
            let peer = self
                .peers
                .get_mut(to.index())
                .and_then(Option::as_mut)
                .ok_or(TransportError::Core(Error::misuse(
                    "no link to this party (a party cannot send to itself)",
                )))?;
            let ready = peer
                .io
                .write_ready()
                .map_err(|_| TransportError::Disconnected { peer: to })?;
            if ready {
                let chunk = if sent < LEN_PREFIX {
                    prefix.get(sent..).unwrap_or_default()
                } else {
                    frame.get(sent - LEN_PREFIX..).unwrap_or_default()
                };
                match peer.io.write(chunk) {
                    Ok(0) | Err(_) => return Err(TransportError::Disconnected { peer: to }),
                    Ok(n) => {
                        sent += n;
                        last_progress = Instant::now();
                        continue;
                    }
                }
            }
            // The peer's buffer is full: read meanwhile, so that it can make progress.
            if !self.pump()? {
                if last_progress.elapsed() > self.send_timeout {
                    return Err(TransportError::SendStalled { peer: to });
                }
                idle();
            }
        }
        if let Some(peer) = self.peers.get_mut(to.index()).and_then(Option::as_mut) {
            peer.io
                .flush()
                .map_err(|_| TransportError::Disconnected { peer: to })?;
        }
        Ok(())
    }

    fn recv(&mut self, timeout: Duration) -> Result<Recv, TransportError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(ev) = self.next_event() {
                return Ok(ev);
            }
            if !self.pump()? {
                if Instant::now() >= deadline {
                    return Ok(Recv::TimedOut);
                }
                idle();
            }
        }
    }
}
