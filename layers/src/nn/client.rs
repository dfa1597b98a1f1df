//! Where the client of a generation is: one of the three computing parties, or outside
//! them (the thin client of a service), and how its input reaches the parties and its
//! results leave them.
//!
//! A client that is a party shares its prompt and learns its tokens through the session's
//! own protocols. An outside client deals its prompt's one-hot rows to the parties before
//! the session ([`puma_core::dealing`]); each party hands its shares of every result meant
//! for the client to its host ([`Deliver`]), which sends the components to the client, and
//! the client reconstructs them ([`puma_core::dealing::reconstruct`]). No party learns the
//! prompt or a token.

use std::sync::Arc;

use puma_core::dealing::{self, Dealt, Seed, Span};
use puma_core::{Ctx, Error, PartyId, Shares, proto};

use super::embedding::one_hot_rows;
use super::generate::Decoding;

/// What a [`Delivery`] to an outside client holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivered {
    /// The ids picked at a step, one per sequence still going, in batch order
    /// (`SecureArgmax` mode).
    StepIds {
        /// The generation step (0 = the prompt).
        step: usize,
    },
    /// All generated ids at the end, sequence after sequence, each as long as that
    /// sequence ran (`Private` mode).
    FinalIds,
    /// An encoder's outputs, at the fixed point's fractional bits: what the client asked
    /// for, concatenated in the order of `bert::secure::Revealed`'s fields.
    Encoded,
}

/// One result for an outside client: this party's shares of it.
#[derive(Debug)]
pub struct Delivery {
    /// What it is.
    pub what: Delivered,
    /// This party's shares: token ids (integers), or an encoder's outputs (fixed point).
    pub shares: Shares,
}

/// Hands a party's shares of a result to its host, for the outside client.
pub type Deliver = Arc<dyn Fn(Delivery) + Send + Sync>;

/// Where the client is.
pub enum ClientAt {
    /// The client is this computing party.
    Party(PartyId),
    /// The client is outside the parties.
    Outside {
        /// This party's shares of the one-hot input rows of all prompts, in batch order,
        /// dealt by the client: `total × vocab` for a decoder, `total × (vocab + types)`
        /// for an encoder.
        prompt_hot: Shares,
        /// Where this party's shares of the client's results go.
        deliver: Deliver,
    },
}

impl std::fmt::Debug for ClientAt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientAt::Party(p) => write!(f, "ClientAt::Party({p})"),
            ClientAt::Outside { prompt_hot, .. } => {
                write!(f, "ClientAt::Outside {{ {prompt_hot:?} }}")
            }
        }
    }
}

impl From<PartyId> for ClientAt {
    fn from(p: PartyId) -> ClientAt {
        ClientAt::Party(p)
    }
}

impl ClientAt {
    /// The client's party, if it is one.
    pub fn party(&self) -> Option<PartyId> {
        match self {
            ClientAt::Party(p) => Some(*p),
            ClientAt::Outside { .. } => None,
        }
    }

    /// The client's party, for a step only a party client takes.
    ///
    /// # Errors
    /// `Bug` for an outside client (the rules were checked against it before).
    pub(super) fn party_for(&self, step: &'static str) -> Result<PartyId, Error> {
        self.party().ok_or(Error::bug(step))
    }

    /// Gives the client a result: `shares` revealed to a client that is a party (the
    /// values, there only), or this party's shares handed to an outside client's
    /// [`Deliver`] as `what` (then `None` everywhere).
    ///
    /// # Errors
    /// `Protocol` if a party client receives a malformed message.
    pub(crate) async fn give(
        &self,
        ctx: &mut Ctx,
        shares: Shares,
        what: Delivered,
    ) -> Result<Option<Vec<u64>>, Error> {
        match self {
            ClientAt::Party(to) => proto::reveal_to(ctx, &shares, *to).await,
            ClientAt::Outside { deliver, .. } => {
                deliver(Delivery { what, shares });
                Ok(None)
            }
        }
    }
}

/// The outside client's prompts as dealt one-hot rows: the message for each party, and the
/// rows' length (`total × vocab`) that every party announces. `seeds` are fresh from the
/// client's own entropy; `stream` tells this input apart from others dealt with them.
///
/// # Errors
/// `Misuse` for no prompt, an empty prompt, or an id outside the vocabulary.
pub fn deal_prompts(
    prompts: &[Vec<u32>],
    vocab: usize,
    seeds: &[Seed; 2],
    stream: u64,
) -> Result<[Dealt; 3], Error> {
    if prompts.is_empty() || prompts.iter().any(Vec::is_empty) {
        return Err(Error::misuse("an outside client needs non-empty prompts"));
    }
    let all = prompts.concat();
    deal_hot(&all, all.len(), 1, vocab, seeds, stream)
}

/// One-hot input rows dealt by an outside client: `rows` rows of `width` columns, row r
/// holding a one at each of the `per_row` columns `hot[r·per_row..(r + 1)·per_row]` (as
/// [`puma_core::proto::share_one_hot`] shares them for a client that is a party).
///
/// # Errors
/// `Misuse` if `hot` has the wrong length or a column is not below `width`.
pub fn deal_hot(
    hot: &[u32],
    rows: usize,
    per_row: usize,
    width: usize,
    seeds: &[Seed; 2],
    stream: u64,
) -> Result<[Dealt; 3], Error> {
    let values = one_hot_rows(hot, rows, per_row, width)?;
    Ok(dealing::deal(&values, seeds, Span::whole(stream)))
}

/// The outside client's view of a generation: which sequences still go, and their ids so
/// far, from the ids the parties deliver (reconstructed with
/// [`puma_core::dealing::reconstruct`]). It follows the same rules as the parties: a
/// sequence ends at an end-of-sequence id or at the token limit.
#[derive(Clone, Debug)]
pub struct OutsideTokens {
    max_new: usize,
    eos: Vec<u32>,
    vocab: usize,
    /// Per sequence: its ids and whether it goes on.
    seqs: Vec<(Vec<u32>, bool)>,
}

impl OutsideTokens {
    /// A view of `sequences` sequences generated under `decoding` with a model of
    /// `vocab` tokens.
    pub fn new(sequences: usize, decoding: &Decoding, vocab: usize) -> OutsideTokens {
        OutsideTokens {
            max_new: decoding.max_new,
            eos: decoding.eos.clone(),
            vocab,
            seqs: vec![(Vec::new(), decoding.max_new > 0); sequences],
        }
    }

    fn push(&mut self, seq: usize, id: u64) -> Result<u32, Error> {
        let id = u32::try_from(id)
            .ok()
            .filter(|&i| (i as usize) < self.vocab)
            .ok_or(Error::misuse("a delivered id is outside the vocabulary"))?;
        let (max_new, ended) = (self.max_new, self.eos.contains(&id));
        let (ids, going) = self
            .seqs
            .get_mut(seq)
            .ok_or(Error::bug("a sequence beyond the batch"))?;
        ids.push(id);
        *going = !ended && ids.len() < max_new;
        Ok(id)
    }

    /// Takes the ids of one step (`SecureArgmax` mode), one per sequence still going, in
    /// batch order; returns `(sequence, id)` for each.
    ///
    /// # Errors
    /// `Misuse` if the count does not match the sequences still going or an id is
    /// outside the vocabulary.
    pub fn step(&mut self, ids: &[u64]) -> Result<Vec<(usize, u32)>, Error> {
        let going: Vec<usize> = (0..self.seqs.len()).filter(|&i| self.seqs[i].1).collect();
        if going.len() != ids.len() {
            return Err(Error::misuse(
                "the parties delivered another number of ids than sequences going on",
            ));
        }
        going
            .into_iter()
            .zip(ids)
            .map(|(s, &id)| Ok((s, self.push(s, id)?)))
            .collect()
    }

    /// Takes all ids at the end (`Private` mode): sequence after sequence, each until its
    /// end-of-sequence id or the token limit.
    ///
    /// # Errors
    /// `Misuse` if the ids do not split into the sequences exactly.
    pub fn finish(&mut self, ids: &[u64]) -> Result<(), Error> {
        let mut at = ids.iter();
        for s in 0..self.seqs.len() {
            while self.seqs[s].1 {
                let id = at.next().ok_or(Error::misuse(
                    "the parties delivered fewer ids than the sequences ran",
                ))?;
                self.push(s, *id)?;
            }
        }
        if at.next().is_some() {
            return Err(Error::misuse(
                "the parties delivered more ids than the sequences ran",
            ));
        }
        Ok(())
    }

    /// Whether every sequence has ended.
    pub fn done(&self) -> bool {
        self.seqs.iter().all(|(_, going)| !going)
    }

    /// Each sequence's ids so far.
    pub fn ids(&self) -> Vec<Vec<u32>> {
        self.seqs.iter().map(|(ids, _)| ids.clone()).collect()
    }
}
