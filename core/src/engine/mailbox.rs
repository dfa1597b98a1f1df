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
    pub(crate) epoch: u32,
}

/// A complete record not yet consumed by a receive.
pub(crate) struct InRecord {
    pub(crate) bytes: Vec<u8>,
    /// The sender's epoch; the record is visible from the receiver's next epoch on.
    pub(crate) epoch: u32,
}

/// One decoded record chunk of a data frame.
pub(crate) struct Chunk<'a> {
    pub(crate) tag: u64,
    pub(crate) total: u64,
    pub(crate) offset: u64,
    pub(crate) bytes: &'a [u8],
    pub(crate) epoch: u32,
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
    /// Records of epochs up to this one may be consumed (the previous epoch).
    pub(crate) visible: u32,
    /// A task asked to yield to the host.
    pub(crate) yield_requested: bool,
    /// A task waits for its host, not for a peer ([`Ctx::wait_for_host`]).
    ///
    /// [`Ctx::wait_for_host`]: crate::Ctx::wait_for_host
    pub(crate) host_wait: bool,
    /// That wait began in this poll (the step before it has just ended).
    pub(crate) host_wait_began: bool,
    /// Bytes held in `inbound` and `partial`.
    pub(crate) buffered: usize,
    /// Payload bytes queued per peer (for stats).
    pub(crate) payload_queued: [u64; 3],
    /// Payload bytes ever queued, to both peers.
    pub(crate) payload_total: u64,
}

impl Mailbox {
    /// Takes the complete, visible record `(from, tag)` if it is here; otherwise registers
    /// the want. Records of the sender's current epoch stay hidden until the next poll, so
    /// what a poll sees never depends on delivery timing.
    pub(crate) fn take(&mut self, from: PartyId, tag: u64) -> Option<Vec<u8>> {
        let key = (from as u8, tag);
        let visible = self
            .inbound
            .get(&key)
            .is_some_and(|r| r.epoch <= self.visible);
        match visible.then(|| self.inbound.remove(&key)).flatten() {
            Some(rec) => {
                self.buffered = self.buffered.saturating_sub(rec.bytes.len());
                Some(rec.bytes)
            }
            None => {
                self.wanted.push((from, tag));
                None
            }
        }
    }

    /// The first peer a pending receive waits for.
    pub(crate) fn first_wanted(&self) -> Option<PartyId> {
        self.wanted.first().map(|(p, _)| *p)
    }

    /// Adds one chunk of a record from `from`.
    pub(crate) fn add_chunk(
        &mut self,
        from: PartyId,
        c: Chunk<'_>,
        max_buffered: usize,
    ) -> Result<(), Error> {
        let Chunk {
            tag,
            total,
            offset,
            bytes: chunk,
            epoch,
        } = c;
        let key = (from as u8, tag);
        if self.inbound.contains_key(&key) {
            return Err(Error::protocol(from, "duplicate record tag"));
        }
        let new_buffered = self
            .buffered
            .checked_add(chunk.len())
            .filter(|b| *b <= max_buffered)
            .ok_or(Error::protocol(
                from,
                "peer exceeded the receive buffer limit",
            ))?;
        if total > max_buffered as u64 {
            return Err(Error::protocol(
                from,
                "record larger than the receive buffer limit",
            ));
        }
        let mut part = match self.partial.remove(&key) {
            Some(p) => p,
            None => {
                if offset != 0 {
                    return Err(Error::protocol(from, "record chunk out of order"));
                }
                // The whole record is announced: reserve it once instead of regrowing
                // (and recopying) it chunk by chunk, but only when it fits the receive
                // budget left, and never fail on a refused reservation.
                let mut bytes = Vec::new();
                let room = max_buffered.saturating_sub(self.buffered) as u64;
                if total <= room {
                    let _ = bytes.try_reserve_exact(total as usize);
                }
                Partial {
                    total,
                    bytes,
                    epoch,
                }
            }
        };
        if part.total != total || part.bytes.len() as u64 != offset {
            return Err(Error::protocol(from, "record chunk out of order"));
        }
        if offset + chunk.len() as u64 > total {
            return Err(Error::protocol(from, "record chunk overruns its record"));
        }
        part.bytes.extend_from_slice(chunk);
        part.epoch = part.epoch.max(epoch);
        self.buffered = new_buffered;
        if part.bytes.len() as u64 == total {
            self.inbound.insert(
                key,
                InRecord {
                    bytes: part.bytes,
                    epoch: part.epoch,
                },
            );
        } else {
            self.partial.insert(key, part);
        }
        Ok(())
    }
}
