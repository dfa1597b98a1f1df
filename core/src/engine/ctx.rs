//! `Ctx`: what a protocol sees of its session — party id, tagged messaging and randomness.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::future::poll_fn;
use core::task::Poll;

use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};
use spin::Mutex;

use crate::engine::budget::{self, Budget};
use crate::engine::mailbox::{Mailbox, OutRecord};
use crate::error::Error;
use crate::fixed::FixedPoint;
use crate::kernel::MatmulKernel;
use crate::party::PartyId;
use crate::prss::PartyKeys;
use crate::ring::Width;
use crate::share::Shares;
use crate::wire;

/// Session-wide state that every context shares.
pub(crate) struct Shared {
    pub(crate) me: PartyId,
    pub(crate) mailbox: Arc<Mutex<Mailbox>>,
    pub(crate) keys: PartyKeys,
    pub(crate) kernel: Arc<dyn MatmulKernel>,
    pub(crate) fixed: FixedPoint,
    pub(crate) budget: Budget,
}

const DOMAIN_FORK: u64 = 0x666f_726b;
const DOMAIN_MSG: u64 = 0x6d73_6700;
const DOMAIN_RAND: u64 = 0x7261_6e64;
const DOMAIN_PRIVATE: u64 = 0x7072_6976;

/// SplitMix64 finaliser: a bijective mixer with full avalanche.
const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The tag of item `n` in domain `domain` under `path`.
const fn derive(path: u64, domain: u64, n: u64) -> u64 {
    mix(path ^ mix(domain.wrapping_add(mix(n.wrapping_add(0x9e37_79b9_7f4a_7c15)))))
}

/// A reading of [`Ctx::meter`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meter {
    /// Payload bytes this party has queued for its peers since the session started.
    pub payload_bytes_sent: u64,
    /// The lockstep epoch this party is in (1 for the first).
    pub epoch: u32,
}

/// A protocol's handle on its session.
///
/// Every context has a path, derived deterministically from its parent by [`Ctx::fork`];
/// the path names its messages (matched by tag, so joined sub-protocols
/// share rounds) and its correlated randomness (fresh per context and per draw). A context
/// is not `Clone`: two copies would reuse tags and randomness.
pub struct Ctx {
    shared: Arc<Shared>,
    path: u64,
    forks: u64,
    sent: [u64; 3],
    received: [u64; 3],
    draws: u64,
    private_draws: u64,
}

impl core::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "Ctx {{ me: {}, path: {:#018x} }}",
            self.shared.me, self.path
        )
    }
}

impl Ctx {
    pub(crate) fn root(shared: Arc<Shared>) -> Ctx {
        Ctx {
            shared,
            path: 0x7075_6d61,
            forks: 0,
            sent: [0; 3],
            received: [0; 3],
            draws: 0,
            private_draws: 0,
        }
    }

    fn child(&self, path: u64) -> Ctx {
        Ctx {
            shared: self.shared.clone(),
            path,
            forks: 0,
            sent: [0; 3],
            received: [0; 3],
            draws: 0,
            private_draws: 0,
        }
    }

    /// This party.
    pub fn me(&self) -> PartyId {
        self.shared.me
    }

    /// The session's fixed-point format.
    pub fn fixed(&self) -> FixedPoint {
        self.shared.fixed
    }

    /// The session's matrix kernel.
    pub fn kernel(&self) -> &dyn MatmulKernel {
        &*self.shared.kernel
    }

    /// This party's progress so far: payload bytes it sent and the epoch it is in. Layers
    /// take differences of two readings to attribute communication to a layer kind.
    pub fn meter(&self) -> Meter {
        let mb = self.shared.mailbox.lock();
        Meter {
            payload_bytes_sent: mb.payload_total,
            epoch: mb.visible + 1,
        }
    }

    /// A fresh child context: the n-th fork of a context has the same path at every party.
    /// Give each concurrently running sub-protocol its own fork.
    pub fn fork(&mut self) -> Ctx {
        let n = self.forks;
        self.forks += 1;
        self.child(derive(self.path, DOMAIN_FORK, n))
    }

    /// Queues `values`, packed at `width` bits each, for party `to` in the current epoch.
    /// Returns at once; the record leaves when every task of the session waits.
    ///
    /// Only public words can be sent: shares are not messages (see [`Shares`]).
    ///
    /// # Errors
    /// `Misuse` when sending to oneself.
    pub fn send(&mut self, to: PartyId, values: &[u64], width: Width) -> Result<(), Error> {
        let mut bytes = Vec::new();
        wire::pack(values, width, &mut bytes);
        self.queue_record(to, values.len(), bytes)
    }

    /// Queues one 64-bit record holding `parts` one after another: the same record (tag,
    /// bytes) as [`Ctx::send`] of their concatenation at [`Width::W64`], without building
    /// the concatenation.
    ///
    /// # Errors
    /// `Misuse` when sending to oneself or when the record length overflows.
    pub(crate) fn send_parts_w64(&mut self, to: PartyId, parts: &[&[u64]]) -> Result<(), Error> {
        if to == self.me() {
            return Err(Error::misuse("a party cannot send to itself"));
        }
        let len = parts
            .iter()
            .try_fold(0usize, |acc, p| acc.checked_add(p.len()))
            .and_then(|n| n.checked_mul(8))
            .ok_or(Error::misuse("record length overflows"))?;
        let mut bytes = Vec::with_capacity(len);
        for p in parts {
            wire::pack(p, Width::W64, &mut bytes);
        }
        self.queue_record(to, len / 8, bytes)
    }

    /// Queues the record `packed` built for party `to`: the same record (tag, bytes) as
    /// [`Ctx::send`] of the values pushed, at the packer's width, without the values ever
    /// held as words.
    ///
    /// # Errors
    /// `Misuse` when sending to oneself.
    pub(crate) fn send_packed(&mut self, to: PartyId, packed: wire::Packer) -> Result<(), Error> {
        let values = packed.count();
        self.queue_record(to, values, packed.finish())
    }

    /// Queues `bytes`, a record of `values` packed values, as this context's next record
    /// for `to`.
    fn queue_record(&mut self, to: PartyId, values: usize, bytes: Vec<u8>) -> Result<(), Error> {
        if to == self.me() {
            return Err(Error::misuse("a party cannot send to itself"));
        }
        let idx = to.index();
        let n = self.sent[idx];
        self.sent[idx] += 1;
        let tag = derive(self.path, DOMAIN_MSG, n);
        self.charge_wire(values);
        self.queue(idx, tag, bytes);
        Ok(())
    }

    fn queue(&mut self, idx: usize, tag: u64, bytes: Vec<u8>) {
        let mut mb = self.shared.mailbox.lock();
        if let Some(q) = mb.payload_queued.get_mut(idx) {
            *q += bytes.len() as u64;
        }
        mb.payload_total += bytes.len() as u64;
        if let Some(out) = mb.outbound.get_mut(idx) {
            out.push(OutRecord { tag, bytes });
        }
    }

    /// Receives the next record from `from` in this context: `n` values of `width` bits.
    ///
    /// # Errors
    /// `Protocol { from }` if the record has the wrong length or padding; `Misuse` when
    /// receiving from oneself.
    pub async fn recv(&mut self, from: PartyId, n: usize, width: Width) -> Result<Vec<u64>, Error> {
        let bytes = self.recv_packed(from, n, width).await?;
        wire::unpack(&bytes, n, width, from)
    }

    /// Receives the next record from `from` (the caller checked `from != me`), as bytes.
    async fn recv_bytes(&mut self, from: PartyId) -> Vec<u8> {
        let idx = from.index();
        let k = self.received[idx];
        self.received[idx] += 1;
        let tag = derive(self.path, DOMAIN_MSG, k);
        // The task goes on past a receive only while the poll has budget left: work that
        // could not yield (draws, element-wise loops) is paid for here, and once one task of
        // a join has used the budget, the others stop here instead of starting their own
        // stretch of local work in the same poll.
        let shared = &self.shared;
        let mut got: Option<Vec<u8>> = None;
        poll_fn(|_cx| {
            let mut mb = shared.mailbox.lock();
            if got.is_none() {
                got = mb.take(from, tag);
            }
            if got.is_none() || !shared.budget.admit(&mut mb, 0) {
                return Poll::Pending;
            }
            got.take().map_or(Poll::Pending, Poll::Ready)
        })
        .await
    }

    /// Receives the next record from `from` as 64-bit words cut into pieces of `sizes`:
    /// the counterpart of [`Ctx::send_parts_w64`] (and of [`Ctx::send`] at
    /// [`Width::W64`] of the concatenation).
    ///
    /// # Errors
    /// `Protocol { from }` if the record is not exactly `8 · Σ sizes` bytes; `Misuse` when
    /// receiving from oneself.
    pub(crate) async fn recv_parts_w64(
        &mut self,
        from: PartyId,
        sizes: &[usize],
    ) -> Result<Vec<Vec<u64>>, Error> {
        let total = sizes
            .iter()
            .try_fold(0usize, |acc, n| acc.checked_add(*n))
            .ok_or(Error::protocol(from, "record length overflows"))?;
        let bytes = self.recv_packed(from, total, Width::W64).await?;
        let mut words = wire::words_w64(&bytes);
        Ok(sizes
            .iter()
            .map(|&n| words.by_ref().take(n).collect())
            .collect())
    }

    /// Receives the next record from `from`, `n` values of `width` bits, as its bytes, for
    /// a caller that decodes them straight into place ([`wire::words_w64`],
    /// [`wire::Unpacker`]) instead of into a vector of its own: the counterpart of
    /// [`Ctx::send`] and [`Ctx::send_packed`].
    ///
    /// # Errors
    /// `Protocol { from }` if the record is not exactly the packed length of `n` values;
    /// `Misuse` when receiving from oneself.
    pub(crate) async fn recv_packed(
        &mut self,
        from: PartyId,
        n: usize,
        width: Width,
    ) -> Result<Vec<u8>, Error> {
        if from == self.me() {
            return Err(Error::misuse("a party cannot receive from itself"));
        }
        let bytes = self.recv_bytes(from).await;
        self.charge_wire(n);
        wire::check_packed_len(&bytes, n, width, from)?;
        Ok(bytes)
    }

    /// Sends `values` to `to` and receives `n` values from `from`, in the same round.
    ///
    /// # Errors
    /// As [`Ctx::send`] and [`Ctx::recv`].
    pub async fn exchange(
        &mut self,
        to: PartyId,
        values: &[u64],
        from: PartyId,
        n: usize,
        width: Width,
    ) -> Result<Vec<u64>, Error> {
        self.send(to, values, width)?;
        self.recv(from, n, width).await
    }

    /// Lets the host run (`Output::Yielded`) before continuing, whatever the budget.
    pub async fn yield_now(&mut self) {
        let mut yielded = false;
        poll_fn(|_cx| {
            if yielded {
                Poll::Ready(())
            } else {
                yielded = true;
                let mut mb = self.shared.mailbox.lock();
                self.shared.budget.note_yield(&mut mb);
                Poll::Pending
            }
        })
        .await;
    }

    /// Accounts for `work` units of local work the caller is about to do (see the
    /// [engine docs](crate::engine), "Cooperative scheduling"): first lets the host run
    /// (`Output::Yielded`) if this poll of the session has used its work budget.
    ///
    /// Long local loops call it once per block of work, with blocks of at most about
    /// [`Ctx::work_budget`] units. Yielding only interleaves local work: messages, results
    /// and rounds are the same whatever the budget.
    pub async fn spend(&self, work: u64) {
        poll_fn(|_cx| {
            let mut mb = self.shared.mailbox.lock();
            if self.shared.budget.admit(&mut mb, work) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    /// The session's work budget: work units one poll may do before it yields
    /// ([`Config::work_budget`](crate::engine::Config::work_budget)).
    pub fn work_budget(&self) -> u64 {
        self.shared.budget.limit()
    }

    /// Accounts for `work` units of local work already done that could not yield; the
    /// next [`Ctx::spend`] or receive pays for it.
    fn charge(&self, work: u64) {
        let mb = self.shared.mailbox.lock();
        self.shared.budget.charge(&mb, work);
    }

    /// Accounts for packing or unpacking `n` elements of a record.
    fn charge_wire(&self, n: usize) {
        self.charge((n as u64).saturating_mul(budget::WIRE_ELEMENT));
    }

    /// Accounts for a draw of `n` PRSS words.
    fn charge_draw(&self, n: usize) {
        self.charge((n as u64).saturating_mul(budget::PRSS_WORD));
    }

    /// Waits until `ready` returns a value, for input that comes from this party's host
    /// (e.g. the next operation of a long-running session), not from a peer: the end of one
    /// step of the protocol and the start of the next.
    ///
    /// The first poll always waits: the party ends its epoch there, marked IDLE, so that
    /// the step completes at the peers without more input from this party's host. The next
    /// step starts, at every party, in the epoch after all three have ended the step; until
    /// the host provides the input, the party holds its epoch open (see the engine's module
    /// docs, "Idle sessions") and [`Session::poll_output`] returns
    /// `Pending { waiting_for: None }`: poll again after providing it. Every party must call
    /// this the same number of times (once per step), like any other protocol call, and
    /// from the session's only running task (not beside a receive in a [`join`]: the step
    /// ends only when nothing else waits).
    ///
    /// [`join`]: crate::join
    ///
    /// [`Session::poll_output`]: crate::Session::poll_output
    pub async fn wait_for_host<R>(&self, mut ready: impl FnMut() -> Option<R>) -> R {
        let mailbox = self.shared.mailbox.clone();
        let mut began = false;
        poll_fn(|_cx| {
            let r = if began { ready() } else { None };
            match r {
                Some(r) => Poll::Ready(r),
                None => {
                    let mut mb = mailbox.lock();
                    mb.host_wait = true;
                    mb.host_wait_began |= !began;
                    began = true;
                    Poll::Pending
                }
            }
        })
        .await
    }

    fn next_draw(&mut self) -> u64 {
        let n = self.draws;
        self.draws += 1;
        derive(self.path, DOMAIN_RAND, n)
    }

    /// This party's share of an arithmetic zero sharing of length `n` (3-of-3: the three
    /// parties' outputs sum to zero). Every party must call it at the same point.
    pub fn zero_share(&mut self, n: usize) -> Vec<u64> {
        let t = self.next_draw();
        self.charge_draw(n.saturating_mul(2));
        self.shared.keys.zero_share(t, n)
    }

    /// This party's share of a boolean zero sharing (the three outputs XOR to zero).
    pub fn zero_share_xor(&mut self, n: usize) -> Vec<u64> {
        let t = self.next_draw();
        self.charge_draw(n.saturating_mul(2));
        self.shared.keys.zero_share_xor(t, n)
    }

    /// A replicated sharing of `n` uniformly random values that no party knows.
    pub fn random_shares(&mut self, n: usize) -> Shares {
        let t = self.next_draw();
        self.charge_draw(n.saturating_mul(2));
        let (a, b) = self.shared.keys.random_pair(t, n);
        Shares::from_parts(self.me(), a, b)
    }

    /// `n` words known exactly to the pair `{P_j, P_{j-1}}` (the stream of key `K_j`), or
    /// `None` at the third party. Every party must call it at the same point.
    ///
    /// # Errors
    /// `Bug` only if the key bookkeeping is broken.
    pub fn pair_random(&mut self, j: PartyId, n: usize) -> Result<Option<Vec<u64>>, Error> {
        let t = self.next_draw();
        if self.shared.keys.key(j).is_some() {
            self.charge_draw(n);
            Ok(Some(self.shared.keys.component(j, t, n)?))
        } else {
            Ok(None)
        }
    }

    /// The words of [`Ctx::pair_random`] (one draw, one stream) taken piece by piece, so
    /// that no one builds the whole vector and each piece's drawing can be budgeted
    /// ([`Ctx::spend_draw`]); `None` at the third party. Every party must call it at the
    /// same point.
    pub(crate) fn pair_random_stream(&mut self, j: PartyId) -> Option<PairStream> {
        let t = self.next_draw();
        let key = self.shared.keys.key(j)?;
        // The stream of `prss::fill(key, t, ..)`, continued from piece to piece.
        let mut rng = ChaCha12Rng::from_seed(*key);
        rng.set_stream(t);
        Some(PairStream { rng })
    }

    /// [`Ctx::spend`] for drawing `n` PRSS words.
    pub(crate) async fn spend_draw(&self, n: usize) {
        self.spend((n as u64).saturating_mul(budget::PRSS_WORD))
            .await;
    }

    /// `n` words of this party's private randomness. Unlike the correlated draws, a party
    /// may call it alone: it has its own counter.
    pub fn private_random(&mut self, n: usize) -> Vec<u64> {
        let t = derive(self.path, DOMAIN_PRIVATE, self.private_draws);
        self.private_draws += 1;
        self.charge_draw(n);
        self.shared.keys.private(t, n)
    }
}

/// Words known to a pair of parties, drawn piece by piece ([`Ctx::pair_random_stream`]).
pub(crate) struct PairStream {
    rng: ChaCha12Rng,
}

impl PairStream {
    /// The next `n` words.
    ///
    /// # Errors
    /// As [`try_words`].
    pub(crate) fn take(&mut self, n: usize) -> Result<Vec<u64>, Error> {
        let mut v = try_words(n)?;
        v.extend((0..n).map(|_| self.rng.next_u64()));
        Ok(v)
    }

    /// Overwrites `out` with the next `out.len()` words.
    pub(crate) fn fill(&mut self, out: &mut [u64]) {
        for w in out {
            *w = self.rng.next_u64();
        }
    }
}

/// An empty vector with room for `n` words, reserved fallibly: sizes that come from a
/// model's public shape may exceed this machine's memory, which must be an error, not an
/// abort.
///
/// # Errors
/// `Misuse` if the memory cannot be reserved.
pub(crate) fn try_words(n: usize) -> Result<Vec<u64>, Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| Error::misuse("not enough memory for the shares"))?;
    Ok(v)
}
