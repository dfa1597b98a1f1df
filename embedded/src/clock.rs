//! What the link needs from its host besides the streams: time and a way to wait.

/// The host's monotonic clock and idle hook.
///
/// `now_ms` must never go backwards; its origin does not matter. `idle` is called when no
/// stream made progress, so a host can sleep briefly, wait for an interrupt, or simply
/// spin (the default).
pub trait Clock {
    /// Milliseconds since some fixed point in the past.
    fn now_ms(&mut self) -> u64;

    /// Waits a little because no stream is ready; returns whenever the host likes.
    fn idle(&mut self) {
        core::hint::spin_loop();
    }
}

impl<C: Clock + ?Sized> Clock for &mut C {
    fn now_ms(&mut self) -> u64 {
        (**self).now_ms()
    }

    fn idle(&mut self) {
        (**self).idle();
    }
}
