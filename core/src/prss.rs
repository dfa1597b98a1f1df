//! Correlated randomness: pairwise ChaCha streams keyed in the one-round setup.
//!
//! After setup, key `K_j` is known to `P_j` and `P_{j-1}`; party `Pi` holds `K_i` (its own
//! seed, sent to `P_{i-1}`) and `K_{i+1}` (received from `P_{i+1}`). `F_j(t)` is the ChaCha12
//! stream under `K_j` with stream id `t`, the tag of the drawing context. From these:
//! zero sharings `α_i = F_i(t) − F_{i+1}(t)`, random sharings with component `j = F_j(t)`,
//! and values known to one pair, all without messages.

use alloc::vec::Vec;

use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};

use crate::error::Error;
use crate::party::PartyId;

/// A 256-bit ChaCha key.
pub(crate) type Key = [u8; 32];

/// The keys one party holds after setup.
pub(crate) struct PartyKeys {
    me: PartyId,
    /// `K_me`, shared with `prev`.
    own: Key,
    /// `K_{me+1}`, shared with `next`.
    next: Key,
    /// This party's private stream key.
    private: Key,
}

impl Drop for PartyKeys {
    fn drop(&mut self) {
        // Keys derive every share mask: wipe them with the session.
        use zeroize::Zeroize;
        self.own.zeroize();
        self.next.zeroize();
        self.private.zeroize();
    }
}

/// Fills `out` with the stream `tag` under `key`.
pub(crate) fn fill(key: &Key, tag: u64, out: &mut [u64]) {
    fill_from(key, tag, 0, out);
}

/// Fills `out` with words `start..start + out.len()` of the stream `tag` under `key`, so
/// that a long stream can be produced in independent chunks.
pub(crate) fn fill_from(key: &Key, tag: u64, start: u64, out: &mut [u64]) {
    let mut rng = ChaCha12Rng::from_seed(*key);
    rng.set_stream(tag);
    // The position counts 32-bit words; each u64 draw takes two.
    rng.set_word_pos(u128::from(start) * 2);
    for x in out {
        *x = rng.next_u64();
    }
}

/// `n` words of the stream `tag` under `key`.
pub(crate) fn stream(key: &Key, tag: u64, n: usize) -> Vec<u64> {
    let mut v = alloc::vec![0u64; n];
    fill(key, tag, &mut v);
    v
}

impl PartyKeys {
    pub(crate) fn new(me: PartyId, own: Key, next: Key, private: Key) -> Self {
        PartyKeys {
            me,
            own,
            next,
            private,
        }
    }

    /// The key of component `j`, if this party holds it.
    pub(crate) fn key(&self, j: PartyId) -> Option<&Key> {
        if j == self.me {
            Some(&self.own)
        } else if j == self.me.next() {
            Some(&self.next)
        } else {
            None
        }
    }

    /// `F_j(tag)`, `n` words.
    pub(crate) fn component(&self, j: PartyId, tag: u64, n: usize) -> Result<Vec<u64>, Error> {
        let key = self
            .key(j)
            .ok_or(Error::bug("party does not hold this PRSS key"))?;
        Ok(stream(key, tag, n))
    }

    /// This party's share `α_me` of an arithmetic zero sharing.
    pub(crate) fn zero_share(&self, tag: u64, n: usize) -> Vec<u64> {
        let mut a = stream(&self.own, tag, n);
        let mut rng = ChaCha12Rng::from_seed(self.next);
        rng.set_stream(tag);
        for x in &mut a {
            *x = x.wrapping_sub(rng.next_u64());
        }
        a
    }

    /// This party's share `β_me` of a boolean (XOR) zero sharing.
    pub(crate) fn zero_share_xor(&self, tag: u64, n: usize) -> Vec<u64> {
        let mut a = stream(&self.own, tag, n);
        let mut rng = ChaCha12Rng::from_seed(self.next);
        rng.set_stream(tag);
        for x in &mut a {
            *x ^= rng.next_u64();
        }
        a
    }

    /// This party's two components `(F_me(tag), F_{me+1}(tag))` of a random sharing.
    pub(crate) fn random_pair(&self, tag: u64, n: usize) -> (Vec<u64>, Vec<u64>) {
        (stream(&self.own, tag, n), stream(&self.next, tag, n))
    }

    /// `n` words of this party's private stream.
    pub(crate) fn private(&self, tag: u64, n: usize) -> Vec<u64> {
        stream(&self.private, tag, n)
    }
}
