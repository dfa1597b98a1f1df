//! The blocking run loop: one session over one [`StreamLink`].
//!
//! The same loop as `puma_transports::drive`, without `std`: the session's frames go out
//! with [`StreamLink::send`], and while it waits, [`StreamLink::recv`] feeds it frames
//! until the idle timeout (measured on the host's [`Clock`]) expires, which ends the
//! session with [`ErrorKind::Timeout`](puma_core::ErrorKind::Timeout) naming the peer it
//! waited for.

use embedded_io::{Read, ReadReady, Write, WriteReady};
use puma_core::{ErrorKind, Input, Output, PartyId, Session};

use crate::{Clock, Error, Event, StreamLink};

/// The idle timeout [`run`] is usually given: 30 seconds without any frame.
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

/// Runs `session` to completion over `link`, waiting at most `timeout_ms` milliseconds
/// for each frame.
///
/// The session is borrowed so that the caller can read [`Session::stats`] afterwards.
/// A stream that closes is an error only when the session still needs that peer: a peer
/// that has finished its part may leave while the other two go on.
///
/// # Errors
/// - [`Error::Core`] when the session fails: a malformed frame, an abort by a peer, or
///   [`ErrorKind::Timeout`] when no frame came within `timeout_ms`.
/// - [`Error::Disconnected`] or [`Error::Truncated`] when the session waits for a peer
///   whose stream has ended.
/// - [`Error::Oversized`] or [`Error::OutOfMemory`] for a frame the link refused.
///
/// Before returning a link error the session is ended and its abort frames are sent to
/// the peers still reachable (best effort), so they fail fast too.
pub fn run<T, S, C>(
    session: &mut Session<T>,
    link: &mut StreamLink<S, C>,
    timeout_ms: u64,
) -> Result<T, Error>
where
    T: 'static,
    S: Read + ReadReady + Write + WriteReady,
    C: Clock,
{
    let me = session.me();
    // Peers whose frames have all arrived and whose stream then ended.
    let mut closed = [false; 3];
    // Peers whose stream ended in the middle of a frame.
    let mut truncated = [false; 3];
    // Peers that can no longer receive; their frames may still be queued for this party.
    let mut unreachable = [false; 3];
    loop {
        match session.poll_output() {
            Output::Transmit(t) => {
                // A peer that has left no longer needs this party's frames; if it left
                // early it reports its own failure, and this party fails when it needs it.
                if !is_set(&unreachable, t.to) && link.send(t.to, t.frame.as_bytes()).is_err() {
                    set(&mut unreachable, t.to);
                }
            }
            Output::Yielded => {}
            Output::Pending { waiting_for } => {
                let both_closed = is_set(&closed, me.next()) && is_set(&closed, me.prev());
                let gone = match waiting_for {
                    Some(p) if is_set(&closed, p) => Some(p),
                    _ if both_closed => Some(waiting_for.unwrap_or(me.next())),
                    _ => None,
                };
                if let Some(peer) = gone {
                    abort(session, link, &unreachable);
                    return Err(lost(peer, is_set(&truncated, peer)));
                }
                let deadline = link.clock().now_ms().saturating_add(timeout_ms);
                loop {
                    let left = deadline.saturating_sub(link.clock().now_ms());
                    match link.recv(left) {
                        Ok(Event::Frame { from, bytes }) => {
                            if let Err(e) = session.handle_input(Input::Frame {
                                from,
                                bytes: &bytes,
                            }) {
                                if matches!(e.kind(), ErrorKind::Misuse) {
                                    // The link claims a frame came from this party itself.
                                    abort(session, link, &unreachable);
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
                            set(&mut closed, peer);
                            if cut {
                                set(&mut truncated, peer);
                            }
                            let needed = waiting_for == Some(peer)
                                || (is_set(&closed, me.next()) && is_set(&closed, me.prev()));
                            if needed {
                                abort(session, link, &unreachable);
                                return Err(lost(peer, cut));
                            }
                        }
                        Ok(Event::TimedOut) => {
                            // The session fails with `Timeout`; aborts and `Done` follow.
                            let _ = session.handle_input(Input::Timeout);
                            break;
                        }
                        Err(e) => {
                            abort(session, link, &unreachable);
                            return Err(e);
                        }
                    }
                }
            }
            Output::Done(result) => return result.map_err(Error::from),
        }
    }
}

/// The error for a peer whose stream ended while it was needed.
fn lost(peer: PartyId, truncated: bool) -> Error {
    if truncated {
        Error::Truncated { peer }
    } else {
        Error::Disconnected { peer }
    }
}

fn is_set(flags: &[bool; 3], p: PartyId) -> bool {
    flags.get(p.index()).copied().unwrap_or(true)
}

fn set(flags: &mut [bool; 3], p: PartyId) {
    if let Some(f) = flags.get_mut(p.index()) {
        *f = true;
    }
}

/// Ends `session` and sends its abort frames to the peers still reachable, ignoring errors.
///
/// The core has no host-initiated abort, so this reports the host's give-up as a
/// timeout; the peers see `Aborted { by: me }`.
fn abort<T: 'static, S, C>(
    session: &mut Session<T>,
    link: &mut StreamLink<S, C>,
    unreachable: &[bool; 3],
) where
    S: Read + ReadReady + Write + WriteReady,
    C: Clock,
{
    if session.is_finished() {
        return;
    }
    let _ = session.handle_input(Input::Timeout);
    loop {
        match session.poll_output() {
            Output::Transmit(t) => {
                if !is_set(unreachable, t.to) {
                    let _ = link.send(t.to, t.frame.as_bytes());
                }
            }
            Output::Yielded => {}
            Output::Pending { .. } | Output::Done(_) => return,
        }
    }
}
