//! Bounded concurrency with a bounded queue: at most `running` requests run at once, at
//! most `queued` more wait for a slot, and any further request is refused at once
//! (back-pressure) rather than piling up.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct Counts {
    running: usize,
    queued: usize,
}

/// The admission of requests to a server.
#[derive(Debug)]
pub struct Admission {
    max_running: usize,
    max_queued: usize,
    counts: Mutex<Counts>,
    freed: Condvar,
}

/// Why a request was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The queue is full.
    Busy,
    /// No slot came free before the deadline.
    Timeout,
}

/// A running request's slot; it frees the slot when dropped.
#[derive(Debug)]
pub struct Permit<'a> {
    admission: &'a Admission,
}

impl Admission {
    /// At most `max_running` requests at once (at least 1) and `max_queued` waiting.
    pub fn new(max_running: usize, max_queued: usize) -> Admission {
        Admission {
            max_running: max_running.max(1),
            max_queued,
            counts: Mutex::default(),
            freed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Counts> {
        // The counts stay consistent under every panic: each update is one statement.
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for a slot for at most `wait`.
    ///
    /// # Errors
    /// [`Refused::Busy`] at once if the queue is full; [`Refused::Timeout`] if no slot
    /// came free in time.
    pub fn admit(&self, wait: Duration) -> Result<Permit<'_>, Refused> {
        let deadline = Instant::now() + wait;
        let mut c = self.lock();
        if c.running < self.max_running {
            c.running += 1;
            return Ok(Permit { admission: self });
        }
        if c.queued >= self.max_queued {
            return Err(Refused::Busy);
        }
        c.queued += 1;
        loop {
            let now = Instant::now();
            if now >= deadline {
                c.queued -= 1;
                return Err(Refused::Timeout);
            }
            c = self
                .freed
                .wait_timeout(c, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if c.running < self.max_running {
                c.queued -= 1;
                c.running += 1;
                return Ok(Permit { admission: self });
            }
        }
    }

    /// Requests running and waiting now.
    pub fn load(&self) -> (usize, usize) {
        let c = self.lock();
        (c.running, c.queued)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut c = self.admission.lock();
        c.running = c.running.saturating_sub(1);
        drop(c);
        self.admission.freed.notify_one();
    }
}
