//! The blocking run loop: one session over one [`Link`], the only copy of it.
//!
//! ```text
//! loop {
//!     match session.poll_output() {
//!         Output::Transmit(t)             => link.send(t.to, t.frame),
//!         Output::Yielded                 => continue,
//!         Output::Pending { waiting_for } => match link.recv(time left until the deadline) {
//!             Event::Frame { from, bytes } => session.handle_input(Input::Frame { from, bytes }),
//!             Event::Closed { peer, .. }   => remember; fail if the session needs `peer`,
//!             Event::TimedOut              => session.handle_input(Input::Timeout),
//!         },
//!         Output::Done(result)            => return result,
//!     }
//! }
//! ```
//!
//! `puma_transports::drive` runs this loop over its `std` links (in memory, TCP+TLS,
//! QUIC) through a thin adapter; a host without `std` runs it over a [`StreamLink`].
//!
//! The timeout is an idle timeout: each wait for data may last up to `timeout_ms`, and the
//! clock restarts whenever a frame arrives. When it expires the session ends with
//! [`ErrorKind::Timeout`] naming the peer it waited for, after sending abort frames to its
//! peers. A send that makes no progress fails on the link's own send timeout, and that
//! failure ends the run at once: taking the stalled peer for one that has left and then
//! waiting for it again would cost a second timeout.
//!
//! [`StreamLink`]: crate::StreamLink

use alloc::vec::Vec;

use puma_core::{ErrorKind, Input, Output, PartyId, Session};

use crate::Event;

/// The idle timeout [`run`] is usually given: 30 seconds without any frame.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// A party's connections to its two peers and the host's clock, as [`run`] sees them.
///
/// Implementations move whole frames, keep them in order per peer, and tell the sender of
/// each frame truthfully (over a network: from the authenticated connection it came on).
pub trait Link {
    /// Why a link operation, or the run, failed.
    type Error: LinkError;

    /// Sends one frame to `to`; frames to one peer must arrive in the order sent.
    ///
    /// # Errors
    /// An error for which [`LinkError::is_lost`] holds if the link to `to` is gone; any
    /// other error (a send that made no progress, a frame refused while reading
    /// meanwhile) ends the run.
    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), Self::Error>;

    /// Waits at most `timeout_ms` milliseconds for the next frame or close from either
    /// peer.
    ///
    /// # Errors
    /// A failure that is not just a closed link (which is [`Event::Closed`]).
    fn recv(&mut self, timeout_ms: u64) -> Result<Event, Self::Error>;

    /// Milliseconds since some fixed point in the past; never goes backwards.
    fn now_ms(&mut self) -> u64;
}

impl<L: Link + ?Sized> Link for &mut L {
    type Error = L::Error;

    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), Self::Error> {
        (**self).send(to, frame)
    }

    fn recv(&mut self, timeout_ms: u64) -> Result<Event, Self::Error> {
        (**self).recv(timeout_ms)
    }

    fn now_ms(&mut self) -> u64 {
        (**self).now_ms()
    }
}

/// The error of a [`Link`], which also carries the failures [`run`] reports itself.
pub trait LinkError: From<puma_core::Error> {
    /// The link to `peer` ended (in the middle of a frame if `truncated`) while the
    /// session still needed it.
    fn lost(peer: PartyId, truncated: bool) -> Self;

    /// Whether this error, from a send to `peer`, says only that the link to `peer` is
    /// gone: the frame is dropped and the run goes on, since a peer that has finished may
    /// leave (one that left early reports its own failure).
    fn is_lost(&self, peer: PartyId) -> bool;
}

/// Runs `session` to completion over `link`, waiting at most `timeout_ms` milliseconds
/// for each frame.
///
/// The session is borrowed so that the caller can read [`Session::stats`] afterwards.
/// A link that closes is an error only when the session still needs that peer: a peer
/// that has finished its part may leave while the other two go on.
///
/// # Errors
/// - The session's own failure (a malformed frame, an abort by a peer, or
///   [`ErrorKind::Timeout`] naming the peer waited for when no frame came within
///   `timeout_ms`), converted with `From<puma_core::Error>`.
/// - [`LinkError::lost`] when the session waits for a peer whose link has ended.
/// - Any error of [`Link::recv`], and any error of [`Link::send`] but a lost peer's.
///
/// Over a [`StreamLink`](crate::StreamLink) these are [`Error::Core`](crate::Error::Core),
/// [`Error::Disconnected`](crate::Error::Disconnected) or
/// [`Error::Truncated`](crate::Error::Truncated) for a lost peer,
/// [`Error::SendStalled`](crate::Error::SendStalled) for one that stopped reading, and
/// [`Error::Oversized`](crate::Error::Oversized) or
/// [`Error::OutOfMemory`](crate::Error::OutOfMemory) for a frame the link refused.
///
/// Before returning a link error the session is ended and its abort frames are sent to
/// the peers still reachable (best effort), so they fail fast too.
pub fn run<T: 'static, L: Link + ?Sized>(
    session: &mut Session<T>,
    link: &mut L,
    timeout_ms: u64,
) -> Result<T, L::Error> {
    let me = session.me();
    // Peers whose frames have all arrived and whose link then ended.
    let mut closed = Peers::default();
    // Peers whose link ended in the middle of a frame.
    let mut truncated = Peers::default();
    // Peers that can no longer receive; their frames may still be queued for this party.
    let mut unreachable = Peers::default();
    loop {
        match session.poll_output() {
            Output::Transmit(t) => {
                if unreachable.has(t.to) {
                    continue;
                }
                if let Err(e) = link.send(t.to, t.frame.into_bytes()) {
                    unreachable.set(t.to);
                    if !e.is_lost(t.to) {
                        abort(session, link, &unreachable, None);
                        return Err(e);
                    }
                }
            }
            Output::Yielded => {}
            Output::Pending { waiting_for } => {
                // Without a peer named, the session waits for any frame: it fails only
                // when neither peer can send one.
                let both_closed = closed.has(me.next()) && closed.has(me.prev());
                let gone = match waiting_for {
                    Some(p) if closed.has(p) => Some(p),
                    _ if both_closed => Some(waiting_for.unwrap_or(me.next())),
                    _ => None,
                };
                if let Some(peer) = gone {
                    abort(session, link, &unreachable, None);
                    return Err(L::Error::lost(peer, truncated.has(peer)));
                }
                let deadline = link.now_ms().saturating_add(timeout_ms);
                loop {
                    let left = deadline.saturating_sub(link.now_ms());
                    match link.recv(left) {
                        Ok(Event::Frame { from, bytes }) => {
                            if let Err(e) = session.handle_input(Input::Frame {
                                from,
                                bytes: &bytes,
                            }) {
                                if matches!(e.kind(), ErrorKind::Misuse) {
                                    // The link claims a frame came from this party itself:
                                    // the link is broken, the session still runs.
                                    abort(session, link, &unreachable, None);
                                    return Err(e.into());
                                }
                                // Otherwise the session has failed; its abort frames and
                                // `Done(Err)` follow from `poll_output`.
                            }
                            break;
                        }
                        Ok(Event::Closed {
                            peer,
                            truncated: cut,
                        }) => {
                            closed.set(peer);
                            if cut {
                                truncated.set(peer);
                            }
                            let needed = waiting_for == Some(peer)
                                || (closed.has(me.next()) && closed.has(me.prev()));
                            if needed {
                                abort(session, link, &unreachable, None);
                                return Err(L::Error::lost(peer, cut));
                            }
                        }
                        Ok(Event::TimedOut) => {
                            // The peer waited for goes last: if it has stopped reading,
                            // the other one is told before a send to it blocks.
                            let e = session.handle_input(Input::Timeout).err();
                            let suspect = match e.map(|e| e.kind()) {
                                Some(ErrorKind::Timeout { waiting_for }) => Some(waiting_for),
                                _ => None,
                            };
                            abort(session, link, &unreachable, suspect);
                            if let Some(e) = e {
                                return Err(e.into());
                            }
                            break;
                        }
                        Err(e) => {
                            abort(session, link, &unreachable, None);
                            return Err(e);
                        }
                    }
                }
            }
            Output::Done(result) => return result.map_err(L::Error::from),
        }
    }
}

/// One flag per party.
#[derive(Default)]
struct Peers([bool; 3]);

impl Peers {
    fn has(&self, p: PartyId) -> bool {
        self.0.get(p.index()).copied().unwrap_or(true)
    }

    fn set(&mut self, p: PartyId) {
        if let Some(f) = self.0.get_mut(p.index()) {
            *f = true;
        }
    }
}

/// Ends `session` and sends its abort frames to the peers still reachable, the one to
/// `last` after the other, ignoring errors.
///
/// The core has no host-initiated abort, so a session that still runs is ended with
/// [`Input::Timeout`]; the peers see `Aborted { by: me }`.
fn abort<T: 'static, L: Link + ?Sized>(
    session: &mut Session<T>,
    link: &mut L,
    unreachable: &Peers,
    last: Option<PartyId>,
) {
    if session.is_finished() {
        return;
    }
    let _ = session.handle_input(Input::Timeout);
    let mut held = None;
    loop {
        match session.poll_output() {
            Output::Transmit(t) if unreachable.has(t.to) => {}
            Output::Transmit(t) if Some(t.to) == last => held = Some(t),
            Output::Transmit(t) => {
                let _ = link.send(t.to, t.frame.into_bytes());
            }
            Output::Yielded => {}
            Output::Pending { .. } | Output::Done(_) => break,
        }
    }
    if let Some(t) = held {
        let _ = link.send(t.to, t.frame.into_bytes());
    }
}
