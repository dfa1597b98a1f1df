//! The ring Z_2^64 (wrapping `u64`) and narrower rings Z_2^k carried in `u64` words.
//!
//! Every value of Z_2^k is stored in the low `k` bits of a `u64`; reducing each component
//! of a sharing mod 2^k is a ring homomorphism, so a sharing over Z_2^64 becomes a sharing
//! over Z_2^k for free (used by comparisons in narrow rings).

/// The bit width `k` of a ring Z_2^k, with 1 ≤ k ≤ 64.
///
/// Its accessors are `#[inline]`: element loops everywhere read them, and without the
/// attribute a build with several codegen units called them out of line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Width(u32);

impl Width {
    /// Z_2^64, the default ring.
    pub const W64: Width = Width(64);
    /// Single bits (boolean values, packed on the wire).
    pub const BIT: Width = Width(1);

    /// The width `bits`, or `None` outside 1..=64.
    #[inline]
    pub const fn new(bits: u32) -> Option<Width> {
        if bits >= 1 && bits <= 64 {
            Some(Width(bits))
        } else {
            None
        }
    }

    /// The number of bits `k`.
    #[inline]
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// The mask of the low `k` bits.
    #[inline]
    pub const fn mask(self) -> u64 {
        if self.0 == 64 {
            u64::MAX
        } else {
            (1u64 << self.0) - 1
        }
    }

    /// `x mod 2^k`.
    #[inline]
    pub const fn reduce(self, x: u64) -> u64 {
        x & self.mask()
    }

    /// `x mod 2^k` read as a signed integer in [-2^(k-1), 2^(k-1)).
    #[inline]
    pub const fn to_signed(self, x: u64) -> i64 {
        let shift = 64 - self.0;
        ((x << shift) as i64) >> shift
    }

    /// Bytes needed to pack `n` elements of this width back to back.
    pub const fn packed_len(self, n: usize) -> Option<usize> {
        match n.checked_mul(self.0 as usize) {
            Some(bits) => Some(bits.div_ceil(8)),
            None => None,
        }
    }
}

/// Reduces every element of `xs` mod 2^k in place.
pub fn reduce_slice(width: Width, xs: &mut [u64]) {
    let m = width.mask();
    for x in xs {
        *x &= m;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths() {
        assert_eq!(Width::new(0), None);
        assert_eq!(Width::new(65), None);
        let w = Width::new(32).unwrap();
        assert_eq!(w.mask(), 0xffff_ffff);
        assert_eq!(w.to_signed(0xffff_ffff), -1);
        assert_eq!(w.to_signed(0x7fff_ffff), i32::MAX as i64);
        assert_eq!(Width::W64.to_signed(u64::MAX), -1);
        assert_eq!(Width::new(18).unwrap().packed_len(3), Some(7));
        assert_eq!(Width::BIT.packed_len(9), Some(2));
    }
}
