//! Fixed-point encoding of reals in Z_2^64: x ↦ round(x · 2^f) in two's complement.

use crate::error::Error;

/// Default number of fractional bits (PUMA's choice).
pub const DEFAULT_FRAC_BITS: u32 = 18;

/// A fixed-point format with `frac_bits` fractional bits over Z_2^64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedPoint {
    frac_bits: u32,
}

impl Default for FixedPoint {
    fn default() -> Self {
        FixedPoint {
            frac_bits: DEFAULT_FRAC_BITS,
        }
    }
}

impl FixedPoint {
    /// A format with `frac_bits` fractional bits.
    ///
    /// # Errors
    /// `Misuse` unless 1 ≤ `frac_bits` ≤ 40 (wider formats leave no room for products).
    pub const fn new(frac_bits: u32) -> Result<FixedPoint, Error> {
        if frac_bits >= 1 && frac_bits <= 40 {
            Ok(FixedPoint { frac_bits })
        } else {
            Err(Error::misuse("fractional bits must be in 1..=40"))
        }
    }

    /// The number of fractional bits `f`.
    pub const fn frac_bits(self) -> u32 {
        self.frac_bits
    }

    /// 2^f as a float.
    pub fn scale(self) -> f64 {
        (1u64 << self.frac_bits) as f64
    }

    /// The encoding of 1.0.
    pub const fn one(self) -> u64 {
        1u64 << self.frac_bits
    }

    /// Encodes `x` as round(x · 2^f) (ties away from zero).
    ///
    /// # Errors
    /// `Misuse` if `x` is not finite or |x · 2^f| ≥ 2^63.
    pub fn encode(self, x: f64) -> Result<u64, Error> {
        let scaled = x * self.scale();
        // 2^63 is exactly representable; anything at or beyond it does not fit an i64.
        const LIMIT: f64 = 9_223_372_036_854_775_808.0;
        if !scaled.is_finite() || scaled.abs() >= LIMIT {
            return Err(Error::misuse("value does not fit the fixed-point format"));
        }
        let r = round_half_away(scaled);
        if r.abs() >= LIMIT {
            return Err(Error::misuse("value does not fit the fixed-point format"));
        }
        Ok((r as i64) as u64)
    }

    /// Encodes every element of `xs`.
    ///
    /// # Errors
    /// As [`FixedPoint::encode`], for the first element that does not fit.
    pub fn encode_slice(self, xs: &[f64]) -> Result<alloc::vec::Vec<u64>, Error> {
        let mut out = alloc::vec::Vec::with_capacity(xs.len());
        self.encode_extend(xs.iter().copied(), &mut out)?;
        Ok(out)
    }

    /// Encodes every value of `xs` onto the end of `out`, each as [`FixedPoint::encode`]
    /// does, in one pass without a test per element that could stop it: a model's weights
    /// encode several times faster than one [`FixedPoint::encode`] call at a time.
    ///
    /// # Errors
    /// As [`FixedPoint::encode`] if any value does not fit; `out` then holds the other
    /// values' encodings and a 0 in place of each that did not, which the caller drops.
    pub fn encode_extend(
        self,
        xs: impl IntoIterator<Item = f64>,
        out: &mut alloc::vec::Vec<u64>,
    ) -> Result<(), Error> {
        let scale = self.scale();
        let mut fits = true;
        out.extend(xs.into_iter().map(|x| {
            let s = x * scale;
            if s.abs() < TWO_POW_52 {
                // round_half_away's own steps, without its tests.
                let t = (s.abs() + 0.5) as i64;
                (if s < 0.0 { t.wrapping_neg() } else { t }) as u64
            } else {
                // Large, infinite or NaN: the general path, which refuses what does not fit.
                self.encode(x).unwrap_or_else(|_| {
                    fits = false;
                    0
                })
            }
        }));
        if fits {
            Ok(())
        } else {
            Err(Error::misuse("value does not fit the fixed-point format"))
        }
    }

    /// Decodes a ring element as a signed fixed-point value.
    pub fn decode(self, v: u64) -> f64 {
        (v as i64) as f64 / self.scale()
    }

    /// Decodes every element of `vs`.
    pub fn decode_slice(self, vs: &[u64]) -> alloc::vec::Vec<f64> {
        vs.iter().map(|&v| self.decode(v)).collect()
    }
}

/// 2^52: from there on every f64 is an integer.
const TWO_POW_52: f64 = 4_503_599_627_370_496.0;

/// Rounds half away from zero without `std` (`f64::round` lives in std).
fn round_half_away(x: f64) -> f64 {
    if x.abs() >= TWO_POW_52 {
        return x;
    }
    let t = (x.abs() + 0.5) as i64 as f64;
    if x < 0.0 { -t } else { t }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The batch encoding is the one-value encoding, for every f64 bit pattern (NaN,
        /// infinities, values too large, ties) and every format.
        #[test]
        fn encode_extend_matches_encode(
            bits in proptest::collection::vec(any::<u64>(), 1..64),
            halves in proptest::collection::vec(-1_000_000i64..1_000_000, 1..64),
            f in 1u32..=40,
        ) {
            let fx = FixedPoint::new(f).unwrap();
            let xs: alloc::vec::Vec<f64> = bits
                .iter()
                .map(|&b| f64::from_bits(b))
                .chain(halves.iter().map(|&h| (h as f64 + 0.5) / fx.scale()))
                .collect();
            let mut out = alloc::vec![7];
            let batch = fx.encode_extend(xs.iter().copied(), &mut out);
            let one: Result<alloc::vec::Vec<u64>, Error> = xs.iter().map(|&x| fx.encode(x)).collect();
            match one {
                Ok(v) => {
                    prop_assert!(batch.is_ok());
                    prop_assert_eq!(&out[1..], &v[..]);
                }
                Err(_) => prop_assert!(batch.is_err()),
            }
            prop_assert_eq!(out[0], 7);
        }
    }

    #[test]
    fn round_trip_and_rounding() {
        let fx = FixedPoint::default();
        assert_eq!(fx.encode(1.0).unwrap(), 1 << 18);
        assert_eq!(fx.encode(-1.0).unwrap(), (-(1i64 << 18)) as u64);
        assert_eq!(fx.decode(fx.encode(-3.25).unwrap()), -3.25);
        // Half an ulp rounds away from zero.
        let half = 0.5 / fx.scale();
        assert_eq!(fx.encode(half).unwrap(), 1);
        assert_eq!(fx.encode(-half).unwrap(), u64::MAX);
        assert!(fx.encode(f64::NAN).is_err());
        assert!(fx.encode(f64::INFINITY).is_err());
        assert!(fx.encode(1e30).is_err());
        assert!(FixedPoint::new(0).is_err());
        assert_eq!(FixedPoint::new(12).unwrap().one(), 4096);
    }
}
