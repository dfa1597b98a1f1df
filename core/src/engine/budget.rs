//! The work budget: how much local work one poll of a protocol may do before the session
//! yields to its host (see the [engine docs](super), "Cooperative scheduling").
//!
//! Work is counted in work units: one unit is one 64-bit multiply-add of the local matrix
//! kernel. Other local work is converted at the fixed rates below, measured against the
//! AVX-512 kernel on an x86-64 server core (about 0.05 ns per multiply-add, 3.7 ns per
//! ChaCha12 word, 0.5 to 1 ns per packed element); they need only be right within a small
//! factor.

use spin::Mutex;

use super::mailbox::Mailbox;

/// Work units per 64-bit word drawn from a PRSS stream (ChaCha12).
pub(crate) const PRSS_WORD: u64 = 64;

/// Work units per element packed into or unpacked from a record (at any width: narrow
/// elements cost a shift and a mask each, 64-bit ones a copy).
pub(crate) const WIRE_ELEMENT: u64 = 16;

/// The session's budget and what the current poll has used of it.
pub(crate) struct Budget {
    limit: u64,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Work done in the current poll.
    used: u64,
    /// The epoch (`Mailbox::visible`) in which `used` was counted.
    visible: u32,
    /// A task yielded in the poll `used` counts.
    yielded: bool,
}

impl Budget {
    /// A budget of `limit` work units per poll.
    pub(crate) fn new(limit: u64) -> Budget {
        Budget {
            limit: limit.max(1),
            state: Mutex::new(State::default()),
        }
    }

    /// Work units per poll.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Records `work` units already done (work that could not yield, such as a PRSS draw).
    /// The next [`Budget::admit`] pays for it.
    pub(crate) fn charge(&self, mb: &Mailbox, work: u64) {
        let mut st = self.state.lock();
        refresh(&mut st, mb);
        st.used = st.used.saturating_add(work);
    }

    /// Whether `work` more units may run in this poll: if so they are charged; if not, a
    /// yield is requested and the caller must return `Pending` and ask again when polled.
    ///
    /// A poll always admits its first piece of work, however large, so that every poll
    /// makes progress; and once any task of a poll yields, every other task yields at its
    /// next request, so that the poll ends soon.
    pub(crate) fn admit(&self, mb: &mut Mailbox, work: u64) -> bool {
        let mut st = self.state.lock();
        refresh(&mut st, mb);
        let over = st.used > 0 && st.used.saturating_add(work) > self.limit;
        if mb.yield_requested || over {
            mb.yield_requested = true;
            st.yielded = true;
            return false;
        }
        st.used = st.used.saturating_add(work);
        true
    }

    /// Notes that a task yields in this poll regardless of the budget.
    pub(crate) fn note_yield(&self, mb: &mut Mailbox) {
        let mut st = self.state.lock();
        refresh(&mut st, mb);
        mb.yield_requested = true;
        st.yielded = true;
    }
}

/// Starts a fresh count when a new poll began since `st` was last touched. The session
/// clears `yield_requested` before every poll, and a poll that does not yield ends with
/// every task waiting for data, so the next poll is in a later epoch: a new poll is the
/// first one after a yield or the first one of a new epoch.
fn refresh(st: &mut State, mb: &Mailbox) {
    if (st.yielded && !mb.yield_requested) || st.visible != mb.visible {
        *st = State {
            used: 0,
            visible: mb.visible,
            yielded: false,
        };
    }
}
