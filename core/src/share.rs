//! Arithmetic 2-out-of-3 replicated shares over Z_2^64, vectorised.
//!
//! `Shares` is deliberately not a message: it has no wire encoding and a `Debug` that prints
//! only the party and the length. Values leave a party only through protocols such as
//! [`crate::proto::reveal_to`], or, named for what they are, through
//! [`Shares::components`]: a party's own components, for its share store or for an
//! outside receiver ([`crate::dealing`]).
//!
//! ```compile_fail
//! // Shares cannot be handed to the network layer: `Ctx::send` takes public words only.
//! async fn leak(ctx: &mut puma_core::Ctx, x: &puma_core::Shares) {
//!     let to = ctx.me().next();
//!     ctx.send(to, x, puma_core::Width::W64);
//! }
//! ```

use alloc::vec::Vec;
use core::fmt;
use core::ops::Range;

use crate::error::Error;
use crate::party::PartyId;

/// One party's shares of a vector x ∈ Z_2^64^n: component `x_i` and `x_{i+1}` of each element
/// for party `Pi`, as two parallel vectors.
#[derive(Clone)]
pub struct Shares {
    party: PartyId,
    a: Vec<u64>,
    b: Vec<u64>,
    /// Which component is zero by construction, if one is (an input's third component:
    /// [`Shares::with_zero_a`], [`Shares::with_zero_b`]); public, like the protocol that
    /// made it. Lets a product skip the terms it would multiply by zero, and a drop the
    /// wipe of memory never written. Any in-place change clears it.
    zero: Option<Component>,
}

/// One of a party's two share components.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Component {
    /// `x_i`.
    A,
    /// `x_{i+1}`.
    B,
}

impl fmt::Debug for Shares {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Shares {{ party: {}, len: {} }}",
            self.party,
            self.a.len()
        )
    }
}

fn same_len(x: &Shares, y: &Shares) -> Result<(), Error> {
    if x.party != y.party {
        return Err(Error::misuse("shares of different parties"));
    }
    if x.a.len() != y.a.len() {
        return Err(Error::misuse("share vectors of different lengths"));
    }
    Ok(())
}

impl Shares {
    pub(crate) fn from_parts(party: PartyId, a: Vec<u64>, b: Vec<u64>) -> Shares {
        debug_assert_eq!(a.len(), b.len());
        Shares {
            party,
            a,
            b,
            zero: None,
        }
    }

    /// Shares whose first component is `n` zeros by construction and second `b`.
    pub(crate) fn with_zero_a(party: PartyId, b: Vec<u64>) -> Shares {
        Shares {
            party,
            a: alloc::vec![0; b.len()],
            b,
            zero: Some(Component::A),
        }
    }

    /// Shares whose first component is `a` and second `n` zeros by construction.
    pub(crate) fn with_zero_b(party: PartyId, a: Vec<u64>) -> Shares {
        Shares {
            party,
            b: alloc::vec![0; a.len()],
            a,
            zero: Some(Component::B),
        }
    }

    /// The component that is zero by construction, if any.
    pub(crate) fn zero_component(&self) -> Option<Component> {
        self.zero
    }

    /// This party's first component `x_i` of every element.
    pub(crate) fn a(&self) -> &[u64] {
        &self.a
    }

    /// This party's second component `x_{i+1}` of every element.
    pub(crate) fn b(&self) -> &[u64] {
        &self.b
    }

    /// This party's two components of the elements in `range` (one role block).
    ///
    /// # Errors
    /// `Bug` if the range is outside the vector.
    pub(crate) fn block(&self, range: Range<usize>) -> Result<(&[u64], &[u64]), Error> {
        self.a
            .get(range.clone())
            .zip(self.b.get(range))
            .ok_or(Error::bug("block out of range"))
    }

    /// This party's shares from its two components `x_i` and `x_{i+1}` (from its share
    /// store, or dealt from outside: [`crate::dealing`]).
    ///
    /// # Errors
    /// `Misuse` if the components have different lengths.
    pub fn from_components(party: PartyId, a: Vec<u64>, b: Vec<u64>) -> Result<Shares, Error> {
        if a.len() != b.len() {
            return Err(Error::misuse("share components of different lengths"));
        }
        Ok(Shares::from_parts(party, a, b))
    }

    /// This party's components `(x_i, x_{i+1})`: secret-share material, only for the
    /// party's own share store and for returning a result to its outside receiver
    /// ([`crate::dealing::reconstruct`]); never for logs.
    pub fn components(&self) -> (&[u64], &[u64]) {
        (&self.a, &self.b)
    }

    /// A sharing of the public vector `values` (component 0 carries it, the others are 0).
    pub fn from_public(party: PartyId, values: &[u64]) -> Shares {
        let n = values.len();
        let zeros = alloc::vec![0u64; n];
        match party {
            PartyId::P0 => Shares::from_parts(party, values.to_vec(), zeros),
            PartyId::P1 => Shares::from_parts(party, zeros.clone(), zeros),
            PartyId::P2 => Shares::from_parts(party, zeros, values.to_vec()),
        }
    }

    /// A sharing of `n` zeros.
    pub fn zeros(party: PartyId, n: usize) -> Shares {
        Shares::from_parts(party, alloc::vec![0; n], alloc::vec![0; n])
    }

    /// The party these shares belong to.
    pub fn party(&self) -> PartyId {
        self.party
    }

    /// Number of shared elements.
    pub fn len(&self) -> usize {
        self.a.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.a.is_empty()
    }

    /// `x + y`.
    ///
    /// # Errors
    /// `Misuse` if the lengths or parties differ.
    pub fn add(&self, y: &Shares) -> Result<Shares, Error> {
        same_len(self, y)?;
        Ok(self.zip(y, u64::wrapping_add))
    }

    /// `x − y`.
    ///
    /// # Errors
    /// `Misuse` if the lengths or parties differ.
    pub fn sub(&self, y: &Shares) -> Result<Shares, Error> {
        same_len(self, y)?;
        Ok(self.zip(y, u64::wrapping_sub))
    }

    /// `x += y` in place.
    ///
    /// # Errors
    /// `Misuse` if the lengths or parties differ.
    pub fn add_assign(&mut self, y: &Shares) -> Result<(), Error> {
        same_len(self, y)?;
        self.zero = None;
        for (s, t) in self.a.iter_mut().zip(&y.a) {
            *s = s.wrapping_add(*t);
        }
        for (s, t) in self.b.iter_mut().zip(&y.b) {
            *s = s.wrapping_add(*t);
        }
        Ok(())
    }

    /// `−x`.
    pub fn neg(&self) -> Shares {
        self.map(u64::wrapping_neg)
    }

    /// `c · x` for a public ring constant `c` (no truncation).
    pub fn scale(&self, c: u64) -> Shares {
        self.map(|v| v.wrapping_mul(c))
    }

    /// `c ⊙ x` elementwise for a public vector `c` (no truncation).
    ///
    /// # Errors
    /// `Misuse` if `c` has a different length.
    pub fn mul_public(&self, c: &[u64]) -> Result<Shares, Error> {
        if c.len() != self.len() {
            return Err(Error::misuse("public vector of a different length"));
        }
        let a = self
            .a
            .iter()
            .zip(c)
            .map(|(v, c)| v.wrapping_mul(*c))
            .collect();
        let b = self
            .b
            .iter()
            .zip(c)
            .map(|(v, c)| v.wrapping_mul(*c))
            .collect();
        Ok(Shares::from_parts(self.party, a, b))
    }

    /// `x + c` for a public vector `c`: component 0 absorbs it (held by P0 and P2).
    ///
    /// # Errors
    /// `Misuse` if `c` has a different length.
    pub fn add_public(&self, c: &[u64]) -> Result<Shares, Error> {
        if c.len() != self.len() {
            return Err(Error::misuse("public vector of a different length"));
        }
        let mut out = self.clone();
        let target = match self.party {
            PartyId::P0 => Some(&mut out.a),
            PartyId::P1 => None,
            PartyId::P2 => Some(&mut out.b),
        };
        if let Some(t) = target {
            for (v, c) in t.iter_mut().zip(c) {
                *v = v.wrapping_add(*c);
            }
        }
        Ok(out)
    }

    /// `x + c` for one public constant added to every element.
    pub fn add_public_scalar(&self, c: u64) -> Shares {
        let mut out = self.clone();
        let target = match self.party {
            PartyId::P0 => Some(&mut out.a),
            PartyId::P1 => None,
            PartyId::P2 => Some(&mut out.b),
        };
        if let Some(t) = target {
            for v in t.iter_mut() {
                *v = v.wrapping_add(c);
            }
        }
        out
    }

    /// The elements in `range`.
    ///
    /// # Errors
    /// `Misuse` if the range is out of bounds.
    pub fn slice(&self, range: Range<usize>) -> Result<Shares, Error> {
        let a = self
            .a
            .get(range.clone())
            .ok_or(Error::misuse("slice out of bounds"))?;
        let b = self
            .b
            .get(range)
            .ok_or(Error::misuse("slice out of bounds"))?;
        Ok(Shares::from_parts(self.party, a.to_vec(), b.to_vec()))
    }

    /// The elements at `indices`, in that order (repeats allowed): reshapes, transposes
    /// and head splits are gathers.
    ///
    /// # Errors
    /// `Misuse` if an index is out of bounds.
    pub fn gather(&self, indices: &[usize]) -> Result<Shares, Error> {
        let mut a = Vec::with_capacity(indices.len());
        let mut b = Vec::with_capacity(indices.len());
        for &i in indices {
            a.push(
                *self
                    .a
                    .get(i)
                    .ok_or(Error::misuse("gather index out of bounds"))?,
            );
            b.push(
                *self
                    .b
                    .get(i)
                    .ok_or(Error::misuse("gather index out of bounds"))?,
            );
        }
        Ok(Shares::from_parts(self.party, a, b))
    }

    /// All parts one after another.
    ///
    /// # Errors
    /// `Misuse` if `parts` is empty or mixes parties.
    pub fn concat(parts: &[&Shares]) -> Result<Shares, Error> {
        let first = parts.first().ok_or(Error::misuse("concat of no parts"))?;
        let n = parts.iter().map(|p| p.len()).sum();
        let mut a = Vec::with_capacity(n);
        let mut b = Vec::with_capacity(n);
        for p in parts {
            if p.party != first.party {
                return Err(Error::misuse("shares of different parties"));
            }
            a.extend_from_slice(&p.a);
            b.extend_from_slice(&p.b);
        }
        Ok(Shares::from_parts(first.party, a, b))
    }

    /// Splits into the first `mid` elements and the rest.
    ///
    /// # Errors
    /// `Misuse` if `mid > len`.
    pub fn split_at(&self, mid: usize) -> Result<(Shares, Shares), Error> {
        if mid > self.len() {
            return Err(Error::misuse("split point out of bounds"));
        }
        let (a0, a1) = self.a.split_at(mid);
        let (b0, b1) = self.b.split_at(mid);
        Ok((
            Shares::from_parts(self.party, a0.to_vec(), b0.to_vec()),
            Shares::from_parts(self.party, a1.to_vec(), b1.to_vec()),
        ))
    }

    /// Sums of consecutive chunks of `chunk` elements (row sums of a row-major matrix with
    /// `chunk` columns). Local and exact.
    ///
    /// # Errors
    /// `Misuse` if `chunk` is 0 or does not divide the length.
    pub fn sum_chunks(&self, chunk: usize) -> Result<Shares, Error> {
        if chunk == 0 || self.len() % chunk != 0 {
            return Err(Error::misuse("chunk length must divide the vector length"));
        }
        Ok(Shares::from_parts(
            self.party,
            chunk_sums(&self.a, chunk),
            chunk_sums(&self.b, chunk),
        ))
    }

    /// `f` applied to every component: a sharing of something else in general (of
    /// ⌊x/2^c⌋ − e mod 2^(64−c) for a shift, of the low parts of x for a mask); the
    /// caller knows what.
    pub(crate) fn map(&self, f: impl Fn(u64) -> u64) -> Shares {
        Shares::from_parts(
            self.party,
            self.a.iter().map(|&v| f(v)).collect(),
            self.b.iter().map(|&v| f(v)).collect(),
        )
    }

    fn zip(&self, y: &Shares, f: impl Fn(u64, u64) -> u64) -> Shares {
        Shares::from_parts(
            self.party,
            self.a.iter().zip(&y.a).map(|(&s, &t)| f(s, t)).collect(),
            self.b.iter().zip(&y.b).map(|(&s, &t)| f(s, t)).collect(),
        )
    }
}

/// One party's boolean (XOR) replicated shares of a vector of `width`-bit values, one value
/// per `u64` word (bits above `width` are zero).
#[derive(Clone)]
pub struct BitShares {
    party: PartyId,
    width: crate::ring::Width,
    a: Vec<u64>,
    b: Vec<u64>,
}

impl fmt::Debug for BitShares {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "BitShares {{ party: {}, width: {}, len: {} }}",
            self.party,
            self.width.bits(),
            self.a.len()
        )
    }
}

impl BitShares {
    pub(crate) fn from_parts(
        party: PartyId,
        width: crate::ring::Width,
        mut a: Vec<u64>,
        mut b: Vec<u64>,
    ) -> BitShares {
        debug_assert_eq!(a.len(), b.len());
        crate::ring::reduce_slice(width, &mut a);
        crate::ring::reduce_slice(width, &mut b);
        BitShares { party, width, a, b }
    }

    pub(crate) fn a(&self) -> &[u64] {
        &self.a
    }

    pub(crate) fn b(&self) -> &[u64] {
        &self.b
    }

    /// This party's two components of the elements in `range` (one role block).
    ///
    /// # Errors
    /// `Bug` if the range is outside the vector.
    pub(crate) fn block(&self, range: Range<usize>) -> Result<(&[u64], &[u64]), Error> {
        self.a
            .get(range.clone())
            .zip(self.b.get(range))
            .ok_or(Error::bug("block out of range"))
    }

    /// This party's two XOR components: secret-share material, for tests that look at
    /// what one party holds (the leakage tests); never for logs.
    #[cfg(feature = "dev")]
    pub fn components(&self) -> (&[u64], &[u64]) {
        (&self.a, &self.b)
    }

    /// Applies a GF(2)-linear map (shifts, masks, bit gathers) to both components, giving
    /// shares of the mapped values at a new width. `f` must be XOR-linear.
    pub(crate) fn map_linear(
        &self,
        width: crate::ring::Width,
        f: impl Fn(u64) -> u64,
    ) -> BitShares {
        // Reduced to the width in the same pass (not a second one, as `from_parts` makes).
        let m = width.mask();
        BitShares {
            party: self.party,
            width,
            a: self.a.iter().map(|&v| f(v) & m).collect(),
            b: self.b.iter().map(|&v| f(v) & m).collect(),
        }
    }

    /// All parts one after another (same width).
    ///
    /// # Errors
    /// `Misuse` if `parts` is empty or mixes parties or widths.
    pub fn concat(parts: &[&BitShares]) -> Result<BitShares, Error> {
        let first = parts.first().ok_or(Error::misuse("concat of no parts"))?;
        let whole: Vec<_> = parts.iter().map(|p| (*p, 0..p.len())).collect();
        BitShares::concat_ranges(&whole, first.width)
    }

    /// The values of each part's range one after another, reduced to `width` bits (which
    /// must not exceed the parts'), in one copy: what [`BitShares::slice`] of each and
    /// concatenating the slices would give.
    ///
    /// # Errors
    /// `Misuse` if `parts` is empty, mixes parties or widths, or a range is out of bounds.
    pub(crate) fn concat_ranges(
        parts: &[(&BitShares, Range<usize>)],
        width: crate::ring::Width,
    ) -> Result<BitShares, Error> {
        let (first, _) = parts.first().ok_or(Error::misuse("concat of no parts"))?;
        // Sized at once: a growing vector would leave each outgrown buffer, bits of shares,
        // to the allocator unwiped, and copy it.
        let n = parts.iter().map(|(_, r)| r.len()).sum();
        let mut a = Vec::with_capacity(n);
        let mut b = Vec::with_capacity(n);
        let m = width.mask();
        for (p, range) in parts {
            if p.party != first.party || p.width != first.width || width > p.width {
                return Err(Error::misuse("bit shares of different shapes"));
            }
            let (pa, pb) =
                p.a.get(range.clone())
                    .zip(p.b.get(range.clone()))
                    .ok_or(Error::misuse("slice out of bounds"))?;
            a.extend(pa.iter().map(|&v| v & m));
            b.extend(pb.iter().map(|&v| v & m));
        }
        Ok(BitShares {
            party: first.party,
            width,
            a,
            b,
        })
    }

    /// The values in `range`.
    ///
    /// # Errors
    /// `Misuse` if the range is out of bounds.
    pub fn slice(&self, range: Range<usize>) -> Result<BitShares, Error> {
        let a = self
            .a
            .get(range.clone())
            .ok_or(Error::misuse("slice out of bounds"))?;
        let b = self
            .b
            .get(range)
            .ok_or(Error::misuse("slice out of bounds"))?;
        Ok(BitShares {
            party: self.party,
            width: self.width,
            a: a.to_vec(),
            b: b.to_vec(),
        })
    }

    /// A sharing of public `width`-bit values.
    pub fn from_public(party: PartyId, width: crate::ring::Width, values: &[u64]) -> BitShares {
        let zeros = alloc::vec![0u64; values.len()];
        match party {
            PartyId::P0 => BitShares::from_parts(party, width, values.to_vec(), zeros),
            PartyId::P1 => BitShares::from_parts(party, width, zeros.clone(), zeros),
            PartyId::P2 => BitShares::from_parts(party, width, zeros, values.to_vec()),
        }
    }

    /// The party these shares belong to.
    pub fn party(&self) -> PartyId {
        self.party
    }

    /// Bits per value.
    pub fn width(&self) -> crate::ring::Width {
        self.width
    }

    /// Number of shared values.
    pub fn len(&self) -> usize {
        self.a.len()
    }

    /// Whether there are no values.
    pub fn is_empty(&self) -> bool {
        self.a.is_empty()
    }

    /// `x ⊕ y`.
    ///
    /// # Errors
    /// `Misuse` if lengths, widths or parties differ.
    pub fn xor(&self, y: &BitShares) -> Result<BitShares, Error> {
        if self.party != y.party || self.width != y.width || self.len() != y.len() {
            return Err(Error::misuse("bit shares of different shapes"));
        }
        Ok(BitShares {
            party: self.party,
            width: self.width,
            a: self.a.iter().zip(&y.a).map(|(s, t)| s ^ t).collect(),
            b: self.b.iter().zip(&y.b).map(|(s, t)| s ^ t).collect(),
        })
    }

    /// `x ⊕ c` for public values `c`.
    ///
    /// # Errors
    /// `Misuse` if `c` has a different length.
    pub fn xor_public(&self, c: &[u64]) -> Result<BitShares, Error> {
        if c.len() != self.len() {
            return Err(Error::misuse("public vector of a different length"));
        }
        let p = BitShares::from_public(self.party, self.width, c);
        self.xor(&p)
    }

    /// `x ∧ c` for public values `c` (local).
    ///
    /// # Errors
    /// `Misuse` if `c` has a different length.
    pub fn and_public(&self, c: &[u64]) -> Result<BitShares, Error> {
        if c.len() != self.len() {
            return Err(Error::misuse("public vector of a different length"));
        }
        Ok(BitShares {
            party: self.party,
            width: self.width,
            a: self.a.iter().zip(c).map(|(s, t)| s & t).collect(),
            b: self.b.iter().zip(c).map(|(s, t)| s & t).collect(),
        })
    }
}

// Secret hygiene. Share components are secret-dependent: they are wiped when a value is
// dropped (the whole capacity, by `zeroize`: see `wipe`), and equality compares all of them
// in constant time (`subtle`), so neither freed memory nor comparison timing reveals them.
// Lengths, parties and widths are public.

/// Words per page of [`wipe`]: 4 KiB.
const WIPE_PAGE_WORDS: usize = 512;

/// Zeroizes `words` and its spare capacity, skipping every 4 KiB page of it that already
/// holds only zeros. Why: a component that is zero by design (an input's third
/// component, lazily zeroed memory that the kernels have only read) is mapped to the
/// kernel's shared zero page; writing zeros over it would copy each page on write and
/// flush every core's TLB for it, which made dropping a large model's shares take a third
/// of a run's time. A zero page holds nothing to wipe, and whether a page of a share is
/// all zeros reveals nothing: components are uniform but for the public zero ones.
fn wipe(words: &mut Vec<u64>) {
    use zeroize::Zeroize;
    for page in words.chunks_mut(WIPE_PAGE_WORDS) {
        if page.iter().any(|&w| w != 0) {
            page.zeroize();
        }
    }
    words.spare_capacity_mut().zeroize();
}

/// `x == y` for equally long word slices, in time independent of their contents.
fn ct_words_eq(x: &[u64], y: &[u64]) -> subtle::Choice {
    use subtle::ConstantTimeEq;
    x.ct_eq(y)
}

impl PartialEq for Shares {
    fn eq(&self, other: &Shares) -> bool {
        self.party == other.party
            && bool::from(ct_words_eq(&self.a, &other.a) & ct_words_eq(&self.b, &other.b))
    }
}

impl Eq for Shares {}

impl Drop for Shares {
    fn drop(&mut self) {
        if self.zero != Some(Component::A) {
            wipe(&mut self.a);
        }
        if self.zero != Some(Component::B) {
            wipe(&mut self.b);
        }
    }
}

impl PartialEq for BitShares {
    fn eq(&self, other: &BitShares) -> bool {
        self.party == other.party
            && self.width == other.width
            && bool::from(ct_words_eq(&self.a, &other.a) & ct_words_eq(&self.b, &other.b))
    }
}

impl Eq for BitShares {}

/// One party's summand of a 3-out-of-3 additive sharing: the three parties' words add up
/// to the secret. It is what a product leaves at each party before its reshare
/// ([`crate::proto::matmul_summands`], [`crate::proto::mul_summands`]); a public linear
/// map applied to every party's summand maps the secret, so a caller can apply one
/// before the single reshare and truncation that finish the product
/// ([`crate::proto::reshare_trunc_summands`]; docs/PROTOCOLS.md, Fused truncation).
/// Like [`Shares`], it has no wire encoding and its `Debug` prints only the party and
/// the length.
pub struct Summands {
    party: PartyId,
    v: Vec<u64>,
}

impl fmt::Debug for Summands {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Summands {{ party: {}, len: {} }}",
            self.party,
            self.v.len()
        )
    }
}

impl Summands {
    pub(crate) fn new(party: PartyId, v: Vec<u64>) -> Summands {
        Summands { party, v }
    }

    /// The words, for the protocol that finishes the sharing.
    pub(crate) fn into_words(mut self) -> Vec<u64> {
        core::mem::take(&mut self.v)
    }

    /// The words, for a protocol that reads them without consuming them.
    pub(crate) fn words(&self) -> &[u64] {
        &self.v
    }

    /// The party holding these summands.
    pub fn party(&self) -> PartyId {
        self.party
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.v.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.v.is_empty()
    }

    /// The elements at `indices`, in that order (local).
    ///
    /// # Errors
    /// `Misuse` if an index is out of range.
    pub fn gather(&self, indices: &[usize]) -> Result<Summands, Error> {
        let v = indices
            .iter()
            .map(|&i| self.v.get(i).copied())
            .collect::<Option<Vec<u64>>>()
            .ok_or(Error::misuse("summand index out of range"))?;
        Ok(Summands::new(self.party, v))
    }

    /// Elementwise product with public ring values `c` (local).
    ///
    /// # Errors
    /// `Misuse` if the lengths differ.
    pub fn mul_public(&self, c: &[u64]) -> Result<Summands, Error> {
        if c.len() != self.v.len() {
            return Err(Error::misuse("public vector of a different length"));
        }
        let v = self
            .v
            .iter()
            .zip(c)
            .map(|(x, c)| x.wrapping_mul(*c))
            .collect();
        Ok(Summands::new(self.party, v))
    }

    /// Elementwise sum (local).
    ///
    /// # Errors
    /// `Misuse` for summands of another party or another length.
    pub fn add(&self, y: &Summands) -> Result<Summands, Error> {
        if self.party != y.party || self.v.len() != y.v.len() {
            return Err(Error::misuse("summands of different parties or lengths"));
        }
        let v = self
            .v
            .iter()
            .zip(&y.v)
            .map(|(x, y)| x.wrapping_add(*y))
            .collect();
        Ok(Summands::new(self.party, v))
    }

    /// Adds the replicated shares `y`, each times the public `scale` (local: every party
    /// adds its first component, so the three summands gain y·`scale` in all).
    ///
    /// # Errors
    /// `Misuse` for shares of another party or another length.
    pub fn add_shares(&self, y: &Shares, scale: u64) -> Result<Summands, Error> {
        if self.party != y.party || self.v.len() != y.a.len() {
            return Err(Error::misuse("shares of different parties or lengths"));
        }
        let v = self
            .v
            .iter()
            .zip(&y.a)
            .map(|(x, a)| x.wrapping_add(a.wrapping_mul(scale)))
            .collect();
        Ok(Summands::new(self.party, v))
    }

    /// The concatenation of `parts`, in order.
    ///
    /// # Errors
    /// `Misuse` if `parts` is empty or mixes parties.
    pub fn concat(parts: &[&Summands]) -> Result<Summands, Error> {
        let first = parts
            .first()
            .ok_or(Error::misuse("nothing to concatenate"))?;
        if parts.iter().any(|p| p.party != first.party) {
            return Err(Error::misuse("summands of different parties"));
        }
        let mut v = Vec::with_capacity(parts.iter().map(|p| p.v.len()).sum());
        for p in parts {
            v.extend_from_slice(&p.v);
        }
        Ok(Summands::new(first.party, v))
    }
}

impl Drop for Summands {
    fn drop(&mut self) {
        wipe(&mut self.v);
    }
}

impl Drop for BitShares {
    fn drop(&mut self) {
        wipe(&mut self.a);
        wipe(&mut self.b);
    }
}

/// The wrapping sums of consecutive runs of `n` words (the last run may be shorter): the
/// local sums behind [`Shares::sum_chunks`] and the row sums of 3-of-3 parts.
pub(crate) fn chunk_sums(v: &[u64], n: usize) -> Vec<u64> {
    v.chunks(n)
        .map(|c| c.iter().fold(0u64, |a, b| a.wrapping_add(*b)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::Width;
    use alloc::{format, vec};

    #[test]
    fn summands_map_locally_refuse_misuse_and_hide_their_words() {
        let p = PartyId::P1;
        let s = Summands::new(p, vec![5, 7, 11]);
        let g = s.gather(&[2, 0]).unwrap();
        assert_eq!(g.v, vec![11, 5]);
        assert_eq!(
            g.mul_public(&[3, u64::MAX]).unwrap().v,
            vec![33, 5u64.wrapping_neg()]
        );
        assert_eq!(s.add(&s).unwrap().v, vec![10, 14, 22]);
        let y = Shares::from_parts(p, vec![1, 2, 3], vec![100, 200, 300]);
        assert_eq!(s.add_shares(&y, 4).unwrap().v, vec![9, 15, 23]);
        assert_eq!(
            Summands::concat(&[&g, &s]).unwrap().v,
            vec![11, 5, 5, 7, 11]
        );
        assert!(s.gather(&[3]).is_err());
        assert!(s.mul_public(&[1]).is_err());
        assert!(s.add(&g).is_err());
        assert!(s.add(&Summands::new(PartyId::P2, vec![0; 3])).is_err());
        assert!(Summands::concat(&[]).is_err());
        assert_eq!(format!("{s:?}"), "Summands { party: P1, len: 3 }");
    }

    #[test]
    fn concatenated_ranges_are_the_slices_concatenated_and_reduced() {
        let w8 = Width::new(8).unwrap();
        let x = BitShares::from_parts(PartyId::P1, w8, vec![1, 2, 0xF3, 4], vec![5, 6, 7, 0xF8]);
        let y = BitShares::from_parts(PartyId::P1, w8, vec![9, 10], vec![11, 12]);
        let w4 = Width::new(4).unwrap();
        let z = BitShares::concat_ranges(&[(&x, 2..4), (&y, 0..1), (&x, 0..1)], w4).unwrap();
        assert_eq!(z.width(), w4);
        assert_eq!((z.a(), z.b()), (&[3, 4, 9, 1][..], &[7, 8, 11, 5][..]));
        // Out of bounds, empty, wider than the parts, or another party's shares.
        assert!(BitShares::concat_ranges(&[(&x, 3..5)], w4).is_err());
        assert!(BitShares::concat_ranges(&[], w4).is_err());
        assert!(BitShares::concat_ranges(&[(&x, 0..1)], Width::W64).is_err());
        let other = BitShares::from_parts(PartyId::P2, w8, vec![1], vec![2]);
        assert!(BitShares::concat_ranges(&[(&x, 0..1), (&other, 0..1)], w4).is_err());
    }

    #[test]
    fn wipe_zeroes_every_page_that_held_a_value() {
        let mut w = vec![0u64; 5 * WIPE_PAGE_WORDS + 7];
        w[2 * WIPE_PAGE_WORDS + 3] = 0xDEAD;
        w[5 * WIPE_PAGE_WORDS + 6] = 1;
        w[0] = u64::MAX;
        wipe(&mut w);
        assert!(w.iter().all(|&x| x == 0));
        assert_eq!(w.len(), 5 * WIPE_PAGE_WORDS + 7);
    }

    fn reconstruct(s: &[Shares; 3]) -> Vec<u64> {
        (0..s[0].len())
            .map(|k| s[0].a[k].wrapping_add(s[1].a[k]).wrapping_add(s[2].a[k]))
            .collect()
    }

    #[test]
    fn public_sharing_and_local_ops() {
        let c = [5u64, u64::MAX, 1 << 63];
        let sh = PartyId::ALL.map(|p| Shares::from_public(p, &c));
        assert_eq!(reconstruct(&sh), c.to_vec());
        let plus = sh.clone().map(|s| s.add_public(&[1, 1, 1]).unwrap());
        assert_eq!(reconstruct(&plus), vec![6, 0, (1 << 63) + 1]);
        let scaled = sh.clone().map(|s| s.scale(3));
        assert_eq!(
            reconstruct(&scaled),
            c.iter().map(|v| v.wrapping_mul(3)).collect::<Vec<_>>()
        );
        let g = sh.clone().map(|s| s.gather(&[2, 0, 0]).unwrap());
        assert_eq!(reconstruct(&g), vec![1 << 63, 5, 5]);
        assert!(sh[0].gather(&[3]).is_err());
        assert!(sh[0].add(&sh[1]).is_err());
        assert_eq!(format!("{:?}", sh[0]), "Shares { party: P0, len: 3 }");
    }
}
