//! The blocking run loop that drives one [`Session`] over a [`Link`].
//!
//! ```text
//! loop {
//!     match session.poll_output() {
//!         Output::Transmit(t)           => link.send(t.to, t.frame),
//!         Output::Yielded               => continue,
//!         Output::Pending { waiting_for } => match link.recv(time left until the deadline) {
//!             Recv::Frame { from, bytes } => session.handle_input(Input::Frame { from, bytes }),
//!             Recv::Closed { peer }       => remember; fail if the session needs `peer`,
//!             Recv::TimedOut              => session.handle_input(Input::Timeout),
//!         },
//!         Output::Done(result)          => return result,
//!     }
//! }
//! ```
//!
//! The timeout is an idle timeout: each wait for data may last up to `timeout`, and the
//! clock restarts whenever a frame arrives. When it expires the session receives
//! [`Input::Timeout`] and ends with [`ErrorKind::Timeout`](puma_core::ErrorKind::Timeout),
//! after sending abort frames to its peers.
//!
//! A link to a peer that closes is an error only when the session still needs that peer:
//! a party that has finished its part may leave while the other two go on.

use std::time::{Duration, Instant};

use puma_core::{Input, Output, PartyId, Session};

use crate::error::TransportError;

/// The timeout [`mem::run3`](crate::mem::run3) uses: 30 seconds without any frame.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// What a [`Link`] delivers while the session waits.
#[derive(Debug, PartialEq, Eq)]
pub enum Recv {
    /// One whole frame from `from`, authenticated as coming from that party.
    Frame {
        /// The sender.
        from: PartyId,
        /// The frame's bytes.
        bytes: Vec<u8>,
    },
    /// The link from `peer` was closed after all of its frames were delivered.
    Closed {
        /// The peer whose link closed.
        peer: PartyId,
    },
    /// Nothing arrived before the timeout.
    TimedOut,
}

/// A party's connections to its two peers, as the driver sees them.
///
/// Implementations move whole frames, keep them in order per peer, and tell the sender of
/// each frame truthfully (over a network: from the authenticated connection it came on).
pub trait Link {
    /// Sends one frame to `to`; frames to one peer must arrive in the order sent.
    ///
    /// # Errors
    /// [`TransportError::Disconnected`] if the link to `to` is gone.
    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), TransportError>;

    /// Waits at most `timeout` for the next frame or close from either peer.
    ///
    /// # Errors
    /// A transport failure that is not attributable to a single closed peer.
    fn recv(&mut self, timeout: Duration) -> Result<Recv, TransportError>;
}

impl<L: Link + ?Sized> Link for &mut L {
    fn send(&mut self, to: PartyId, frame: Vec<u8>) -> Result<(), TransportError> {
        (**self).send(to, frame)
    }

    fn recv(&mut self, timeout: Duration) -> Result<Recv, TransportError> {
        (**self).recv(timeout)
    }
}

/// Runs `session` to completion over `link`, waiting at most `timeout` for each frame.
///
/// The session is borrowed so that the caller can read [`Session::stats`] afterwards.
///
/// # Errors
/// - [`TransportError::Core`] when the session fails: a malformed frame, an abort by a
///   peer, or [`ErrorKind::Timeout`](puma_core::ErrorKind::Timeout) when no frame came
///   within `timeout`.
/// - [`TransportError::Disconnected`] when the session waits for a peer whose link is
///   gone. Frames that cannot be delivered to a peer that has left are dropped: a session
///   that still completes has everything it needed.
/// - Any error of [`Link::recv`].
///
/// Before returning a transport error the driver makes the session abort, so the
/// surviving peer receives an abort frame (best effort) and fails fast.
pub fn drive<T: 'static>(
    session: &mut Session<T>,
    mut link: impl Link,
    timeout: Duration,
) -> Result<T, TransportError> {
    let me = session.me();
    // Peers whose frames have all arrived and whose link then closed.
    let mut closed = [false; 3];
    // Peers that can no longer receive. Their frames may still be queued for this party,
    // so this alone is no reason to fail.
    let mut unreachable = [false; 3];
    loop {
        match session.poll_output() {
            Output::Transmit(t) => {
                // A peer that has left no longer needs this party's frames (a finished
                // peer may still be sent the END frame of its last epoch). If it left
                // early, it reports its own failure; this party fails only when it needs
                // the peer (see `Pending`).
                if !is_closed(&unreachable, t.to) && link.send(t.to, t.frame.into_bytes()).is_err()
                {
                    set_closed(&mut unreachable, t.to);
                }
            }
            Output::Yielded => {}
            Output::Pending { waiting_for } => {
                let both_closed = is_closed(&closed, me.next()) && is_closed(&closed, me.prev());
                let gone = match waiting_for {
                    Some(p) if is_closed(&closed, p) => Some(p),
                    _ if both_closed => Some(waiting_for.unwrap_or(me.next())),
                    _ => None,
                };
                if let Some(peer) = gone {
                    abort(session, &mut link, &unreachable);
                    return Err(TransportError::Disconnected { peer });
                }
                let deadline = Instant::now() + timeout;
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match link.recv(left) {
                        Ok(Recv::Frame { from, bytes }) => {
                            if let Err(e) = session.handle_input(Input::Frame {
                                from,
                                bytes: &bytes,
                            }) {
                                if matches!(e.kind(), puma_core::ErrorKind::Misuse) {
                                    // The link claims a frame came from this party itself:
                                    // the link is broken, the session still runs.
                                    abort(session, &mut link, &unreachable);
                                    return Err(e.into());
                                }
                                // Otherwise the session has failed; its abort frames and
                                // `Done(Err)` follow from `poll_output`.
                            }
                            break;
                        }
                        Ok(Recv::Closed { peer }) => {
                            set_closed(&mut closed, peer);
                            // A peer that finished may leave; only the one the session
                            // waits for (or both) is missed.
                            let needed = waiting_for == Some(peer)
                                || (is_closed(&closed, me.next()) && is_closed(&closed, me.prev()));
                            if needed {
                                abort(session, &mut link, &unreachable);
                                return Err(TransportError::Disconnected { peer });
                            }
                        }
                        Ok(Recv::TimedOut) => {
                            // The session fails with `Timeout`; aborts and `Done` follow.
                            let _ = session.handle_input(Input::Timeout);
                            break;
                        }
                        Err(e) => {
                            abort(session, &mut link, &unreachable);
                            return Err(e);
                        }
                    }
                }
            }
            Output::Done(result) => return result.map_err(TransportError::from),
        }
    }
}

fn is_closed(closed: &[bool; 3], p: PartyId) -> bool {
    closed.get(p.index()).copied().unwrap_or(true)
}

fn set_closed(closed: &mut [bool; 3], p: PartyId) {
    if let Some(c) = closed.get_mut(p.index()) {
        *c = true;
    }
}

/// Ends `session` and sends its abort frames to the peers still reachable, ignoring errors.
///
/// The core has no host-initiated abort yet, so this reports the host's give-up as a
/// timeout; the peers see `Aborted { by: me }`.
fn abort<T: 'static>(session: &mut Session<T>, link: &mut impl Link, unreachable: &[bool; 3]) {
    if session.is_finished() {
        return;
    }
    let _ = session.handle_input(Input::Timeout);
    loop {
        match session.poll_output() {
            Output::Transmit(t) => {
                if !is_closed(unreachable, t.to) {
                    let _ = link.send(t.to, t.frame.into_bytes());
                }
            }
            Output::Yielded => {}
            Output::Pending { .. } | Output::Done(_) => return,
        }
    }
}
