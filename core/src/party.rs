//! The three computing parties and their ring order.

use core::fmt;

/// One of the three computing parties.
///
/// Party `Pi` holds the replicated components `(x_i, x_{i+1})` of every shared value;
/// indices are taken mod 3, so `P2.next()` is `P0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum PartyId {
    /// Party 0.
    P0 = 0,
    /// Party 1.
    P1 = 1,
    /// Party 2.
    P2 = 2,
}

impl PartyId {
    /// All three parties in index order.
    pub const ALL: [PartyId; 3] = [PartyId::P0, PartyId::P1, PartyId::P2];

    /// The party with index `i mod 3`.
    pub const fn from_index(i: usize) -> PartyId {
        match i % 3 {
            0 => PartyId::P0,
            1 => PartyId::P1,
            _ => PartyId::P2,
        }
    }

    /// The party with index `i`, or `None` when `i > 2` (for decoding untrusted input).
    pub const fn try_from_u8(i: u8) -> Option<PartyId> {
        match i {
            0 => Some(PartyId::P0),
            1 => Some(PartyId::P1),
            2 => Some(PartyId::P2),
            _ => None,
        }
    }

    /// This party's index, 0..3.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// `P_{i+1}`.
    pub const fn next(self) -> PartyId {
        PartyId::from_index(self.index() + 1)
    }

    /// `P_{i-1}`.
    pub const fn prev(self) -> PartyId {
        PartyId::from_index(self.index() + 2)
    }

    /// `P_{i+k}`: the party that plays this party's role under a role rotation by `k`.
    pub const fn shift(self, k: usize) -> PartyId {
        PartyId::from_index(self.index() + k % 3)
    }
}

impl fmt::Display for PartyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "P{}", self.index())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_order() {
        for p in PartyId::ALL {
            assert_eq!(p.next().prev(), p);
            assert_ne!(p.next(), p);
            assert_eq!(p.shift(3), p);
        }
        assert_eq!(PartyId::P2.next(), PartyId::P0);
        assert_eq!(PartyId::P0.prev(), PartyId::P2);
        assert_eq!(PartyId::try_from_u8(3), None);
    }
}
