//! Shares dealt by someone outside the three parties, and results returned to them.
//!
//! A model owner uploading a checkpoint and a thin client sending its prompt are not
//! computing parties: they split each value into three components themselves and give
//! party `Pi` the two it holds, `x_i` and `x_{i+1}`. Two components come from seeds, so
//! only one full vector is ever sent, twice:
//!
//! - `x_0 = F(s_0)` and `x_1 = F(s_1)`, where `F(s)` is the ChaCha12 stream under seed `s`
//!   (with a stream id per tensor, and a word offset so that long vectors are dealt in
//!   chunks);
//! - `x_2 = x − x_0 − x_1`, the correction.
//!
//! P0 receives `(s_0, s_1)` and no vector, P1 receives `(s_1, x_2)`, P2 `(x_2, s_0)`. Any
//! one party's view is uniformly random: P0's two streams are independent of `x`, and
//! `x_2` is masked by `x_0`, whose seed only P0 and P2 have.
//!
//! The way back is [`reconstruct`]: each party returns both of its components of a result,
//! and the receiver checks that the two copies of every component agree before adding
//! them, so one party that sends a wrong share is caught (it cannot be told apart from
//! the other holder of that component, so both are named).
//!
//! See docs/PROTOCOLS.md, "Dealing from outside".

use alloc::vec::Vec;
use core::fmt;

use zeroize::Zeroize;

use crate::error::Error;
use crate::party::PartyId;
use crate::prss;
use crate::share::Shares;

/// A 256-bit seed of a dealt component.
pub type Seed = [u8; 32];

/// One component of a dealt vector as its receiver gets it: a seed to expand, or the
/// values themselves.
#[derive(Clone, PartialEq, Eq)]
pub enum Component {
    /// The component is the ChaCha12 stream under this seed.
    Seed(Seed),
    /// The component's values.
    Values(Vec<u64>),
}

impl fmt::Debug for Component {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Seeds and values are secret-share material: only the kind and length show.
        match self {
            Component::Seed(_) => f.write_str("Component::Seed(..)"),
            Component::Values(v) => write!(f, "Component::Values(len {})", v.len()),
        }
    }
}

impl Drop for Component {
    fn drop(&mut self) {
        match self {
            Component::Seed(s) => s.zeroize(),
            Component::Values(v) => v.zeroize(),
        }
    }
}

/// What one party receives of a dealt vector: its components `x_i` and `x_{i+1}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dealt {
    /// The party it is for.
    pub party: PartyId,
    /// `x_i`.
    pub first: Component,
    /// `x_{i+1}`.
    pub second: Component,
}

/// Which words of which stream a dealt vector occupies: the stream id (one per tensor or
/// input) and the offset of its first word (for a long vector dealt in chunks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// The stream id of the seeds.
    pub stream: u64,
    /// The index of the first word within the vector.
    pub start: u64,
}

impl Span {
    /// A whole vector: stream `stream` from its first word.
    pub fn whole(stream: u64) -> Span {
        Span { stream, start: 0 }
    }
}

/// Splits `values` into the three parties' messages, with fresh `seeds` (`s_0`, `s_1`)
/// from the dealer's own entropy (the core draws none). Seeds may be reused across
/// vectors only with distinct spans.
pub fn deal(values: &[u64], seeds: &[Seed; 2], span: Span) -> [Dealt; 3] {
    let [s0, s1] = seeds;
    let mut x2 = expand(s0, span, values.len());
    let x1 = expand(s1, span, values.len());
    for ((c, v), m) in x2.iter_mut().zip(values).zip(&x1) {
        *c = v.wrapping_sub(*c).wrapping_sub(*m);
    }
    let seed = |s: &Seed| Component::Seed(*s);
    [
        Dealt {
            party: PartyId::P0,
            first: seed(s0),
            second: seed(s1),
        },
        Dealt {
            party: PartyId::P1,
            first: seed(s1),
            second: Component::Values(x2.clone()),
        },
        Dealt {
            party: PartyId::P2,
            first: Component::Values(x2),
            second: seed(s0),
        },
    ]
}

fn expand(seed: &Seed, span: Span, n: usize) -> Vec<u64> {
    let mut v = alloc::vec![0u64; n];
    expand_into(seed, span, &mut v);
    v
}

/// Fills `out` with the component that `seed` stands for at `span`: the words a receiver
/// of [`Component::Seed`] expands, for a holder that keeps the seed and expands it later
/// (a share store).
pub fn expand_into(seed: &Seed, span: Span, out: &mut [u64]) {
    prss::fill_from(seed, span.stream, span.start, out);
}

impl Dealt {
    /// This party's shares of the dealt vector of length `n` at `span`.
    ///
    /// # Errors
    /// `Misuse` if the message is for another party or a vector has another length than
    /// `n` (both name what was found, never a value).
    pub fn into_shares(mut self, me: PartyId, n: usize, span: Span) -> Result<Shares, Error> {
        if self.party != me {
            return Err(Error::misuse("dealt shares are for another party"));
        }
        let first = take_component(&mut self.first, span, n)?;
        let second = take_component(&mut self.second, span, n)?;
        Shares::from_components(me, first, second)
    }
}

/// A component's values, moved out (a long vector is not copied).
fn take_component(c: &mut Component, span: Span, n: usize) -> Result<Vec<u64>, Error> {
    match c {
        Component::Seed(s) => Ok(expand(s, span, n)),
        Component::Values(v) if v.len() == n => Ok(core::mem::take(v)),
        Component::Values(_) => Err(Error::misuse(
            "a dealt component has another length than announced",
        )),
    }
}

/// A receiver's check of the shares returned by the three parties failed: the two
/// holders of one component sent different values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The component (`x_j`) whose two copies differ.
    pub component: usize,
    /// The two parties that hold it (`P_{j-1}` and `P_j`); one of them sent a wrong share.
    pub holders: [PartyId; 2],
    /// The first element at which they differ.
    pub index: usize,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the shares of {} and {} disagree on component {} (element {}): one of them \
             sent a wrong share",
            self.holders[0], self.holders[1], self.component, self.index
        )
    }
}

/// The values of a vector from the three parties' components `(x_i, x_{i+1})`, indexed
/// by party, after checking that both copies of every component agree.
///
/// # Errors
/// [`Mismatch`] naming the two holders of the first component whose copies differ;
/// vectors of different lengths are a mismatch at the shorter length.
pub fn reconstruct(parts: [(&[u64], &[u64]); 3]) -> Result<Vec<u64>, Mismatch> {
    // Component j is P_j's first and P_{j-1}'s second.
    for j in 0..3 {
        let prev = (j + 2) % 3;
        let (held, copy) = (parts[j].0, parts[prev].1);
        if let Some(index) = first_difference(held, copy) {
            return Err(Mismatch {
                component: j,
                holders: [PartyId::ALL[prev], PartyId::ALL[j]],
                index,
            });
        }
    }
    let (x0, x1, x2) = (parts[0].0, parts[1].0, parts[2].0);
    // Agreeing copies tie every length to one party's; differing lengths mean a party
    // sent both of its components short (its peers' copies would not have agreed with
    // only one of them short).
    if let Some(j) = [x1.len(), x2.len()].iter().position(|&l| l != x0.len()) {
        let j = j + 1;
        return Err(Mismatch {
            component: j,
            holders: [PartyId::ALL[j - 1], PartyId::ALL[j]],
            index: x0.len().min(parts[j].0.len()),
        });
    }
    Ok(x0
        .iter()
        .zip(x1)
        .zip(x2)
        .map(|((a, b), c)| a.wrapping_add(*b).wrapping_add(*c))
        .collect())
}

fn first_difference(a: &[u64], b: &[u64]) -> Option<usize> {
    if let Some(i) = a.iter().zip(b).position(|(x, y)| x != y) {
        return Some(i);
    }
    (a.len() != b.len()).then(|| a.len().min(b.len()))
}
