//! The state shared between a session and the protocol futures it drives.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::error::Error;
use crate::party::PartyId;

/// A record queued for a peer in the current epoch.
pub(crate) struct OutRecord {
    pub(crate) tag: u64,
    pub(crate) bytes: Vec<u8>,
}

/// A record arriving in chunks.
pub(crate) struct Partial {
    pub(crate) total: u64,
    pub(crate) bytes: Vec<u8>,
    pub(crate) round: u32,
}

/// A complete record not yet consumed by a receive.
pub(crate) struct InRecord {
    pub(crate) bytes: Vec<u8>,
    pub(crate) round: u32,
}

/// Everything the leaf futures touch: outgoing records, incoming records and bookkeeping.
#[derive(Default)]
pub(crate) struct Mailbox {
    /// Records for each peer queued in the current epoch, by party index.
    pub(crate) outbound: [Vec<OutRecord>; 3],
    /// Complete records by `(sender index, tag)`.
    pub(crate) inbound: BTreeMap<(u8, u64), InRecord>,
    /// Records still arriving in chunks by `(sender index, tag)`.
    pub(crate) partial: BTreeMap<(u8, u64), Partial>,
    /// Receives that were pending during the last poll.
    pub(crate) wanted: Vec<(PartyId, u64)>,
    /// Critical-path round: the highest round sent or consumed so far.
    pub(crate) clock: u32,
    /// A task asked to yield to the host.
    pub(crate) yield_requested: bool,
    /// Bytes held in `inbound` and `partial`.
    pub(crate) buffered: usize,
    /// Payload bytes queued per peer (for stats).
    pub(crate) payload_queued: [u64; 3],
}

impl Mailbox {
    /// Takes the complete record `(from, tag)` if it is here; otherwise registers the want.
    pub(crate) fn take(&mut self, from: PartyId, tag: u64) -> Option<Vec<u8>> {
        match self.inbound.remove(&(from as u8, tag)) {
            Some(rec) => {
                self.buffered = self.buffered.saturating_sub(rec.bytes.len());
                self.clock = self.clock.max(rec.round);
                Some(rec.bytes)
            }
            None => {
                self.wanted.push((from, tag));
                None
            }
        }
    }

    /// Whether every pending receive of the last poll can now complete.
    pub(crate) fn wants_satisfied(&self) -> bool {
        self.wanted.iter().all(|(p, t)| self.inbound.contains_key(&(*p as u8, *t)))
    }

    /// The first peer whose record is still missing.
    pub(crate) fn first_missing(&self) -> Option<PartyId> {
        self.wanted
            .iter()
            .find(|(p, t)| !self.inbound.contains_key(&(*p as u8, *t)))
            .map(|(p, _)| *p)
    }

    /// Adds one chunk of a record from `from`.
    pub(crate) fn add_chunk(
        &mut self,
        from: PartyId,
        tag: u64,
        total: u64,
        offset: u64,
        chunk: &[u8],
        round: u32,
        max_buffered: usize,
    ) -> Result<(), Error> {
        let key = (from as u8, tag);
        if self.inbound.contains_key(&key) {
            return Err(Error::protocol(from, "duplicate record tag"));
        }
        let new_buffered = self
            .buffered
            .checked_add(chunk.len())
            .filter(|b| *b <= max_buffered)
            .ok_or(Error::protocol(from, "peer exceeded the receive buffer limit"))?;
        if total > max_buffered as u64 {
            return Err(Error::protocol(from, "record larger than the receive buffer limit"));
        }
        let mut part = match self.partial.remove(&key) {
            Some(p) => p,
            None => {
                if offset != 0 {
                    return Err(Error::protocol(from, "record chunk out of order"));
                }
                Partial { total, bytes: Vec::new(), round }
            }
        };
        if part.total != total || part.bytes.len() as u64 != offset {
            return Err(Error::protocol(from, "record chunk out of order"));
        }
        if offset + chunk.len() as u64 > total {
            return Err(Error::protocol(from, "record chunk overruns its record"));
        }
        part.bytes.extend_from_slice(chunk);
        part.round = part.round.max(round);
        self.buffered = new_buffered;
        if part.bytes.len() as u64 == total {
            self.inbound.insert(key, InRecord { bytes: part.bytes, round: part.round });
        } else {
            self.partial.insert(key, part);
        }
        Ok(())
    }
}
