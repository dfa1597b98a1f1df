//! A decoder of any shape whose weights are drawn from a seed, tensor by tensor, at the
//! moment the owner encodes them: for cost and scale runs (LLaMA-7B's shape and the like),
//! where no checkpoint exists and the model must never exist whole, in plaintext or in
//! shares ([`super::streamed`]).

use puma_core::{Error, FixedPoint};

use super::decoder::{BlockTensor, DecoderArch, DecoderSpec, DecoderTensor};

/// A decoder of shape `spec` with seeded random weights: every matrix, embedding and
/// position table uniform on the fixed-point grid in ±√3·`std` (standard deviation
/// `std`), norm scales 1 and biases 0. The values of tensor t depend on the seed and t's
/// place in the plan only, so any party can ask for any tensor in any order.
#[derive(Clone, Debug, PartialEq)]
pub struct SeededDecoder {
    spec: DecoderSpec,
    seed: u64,
    std: f64,
}

impl SeededDecoder {
    /// Weights of standard deviation `std` drawn from `seed` for a model of shape `spec`.
    ///
    /// # Errors
    /// `Misuse` if `spec` is invalid or `std` is not a finite non-negative number.
    pub fn new(spec: DecoderSpec, seed: u64, std: f64) -> Result<SeededDecoder, Error> {
        spec.validate()?;
        if !(std.is_finite() && std >= 0.0) {
            return Err(Error::misuse(
                "the weights' standard deviation must be finite and non-negative",
            ));
        }
        Ok(SeededDecoder { spec, seed, std })
    }
}

/// xorshift64* (Vigna): fast and plenty for weights nobody needs to be unpredictable.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

impl DecoderArch for SeededDecoder {
    /// Nothing: the seed and the shape make the weights.
    type Weights = ();

    fn spec(&self) -> Result<DecoderSpec, Error> {
        self.spec.validate()?;
        Ok(self.spec.clone())
    }

    fn check(&self, _: &()) -> Result<(), Error> {
        Ok(())
    }

    fn encode(&self, _: &(), t: DecoderTensor, fx: FixedPoint) -> Result<Vec<u64>, Error> {
        let tensors = self.spec.tensors()?;
        let (place, &(_, n)) = tensors
            .iter()
            .enumerate()
            .find(|(_, (u, _))| *u == t)
            .ok_or(Error::misuse("the model has no such tensor"))?;
        let norm_scale = matches!(
            t,
            DecoderTensor::FinalNormWeight
                | DecoderTensor::Block {
                    part: BlockTensor::AttnNormWeight | BlockTensor::MlpNormWeight,
                    ..
                }
        );
        let bias = matches!(
            t,
            DecoderTensor::FinalNormBias
                | DecoderTensor::Block {
                    part: BlockTensor::AttnNormBias
                        | BlockTensor::MlpNormBias
                        | BlockTensor::QkvBias
                        | BlockTensor::AttnOutBias
                        | BlockTensor::MlpInBias
                        | BlockTensor::MlpOutBias,
                    ..
                }
        );
        let mut out = Vec::new();
        out.try_reserve_exact(n)
            .map_err(|_| Error::misuse("a seeded tensor does not fit in memory"))?;
        if norm_scale || bias {
            let v = if norm_scale { fx.encode(1.0)? } else { 0 };
            out.resize(n, v);
            return Ok(out);
        }
        // Uniform integers in [−a, a] on the grid: std·√3 in ring units, by the high half
        // of a 64 × 64-bit product (Lemire) rather than a division per weight; the bias is
        // below 2^-40 for any a a model uses.
        let a = fx.encode(self.std * 3f64.sqrt())?;
        let span = u128::from(a.wrapping_mul(2).wrapping_add(1));
        let mut g =
            XorShift((self.seed ^ (place as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1);
        out.extend((0..n).map(|_| {
            let r = ((u128::from(g.next()) * span) >> 64) as u64;
            r.wrapping_sub(a)
        }));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llama::LlamaConfig;

    fn spec() -> DecoderSpec {
        LlamaConfig {
            vocab_size: 40,
            hidden_size: 8,
            intermediate_size: 12,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            num_key_value_heads: 1,
            head_dim: 4,
            rms_norm_eps: 1e-6,
            rope_theta: 10000.0,
            max_position_embeddings: 16,
            tie_word_embeddings: false,
        }
        .spec()
        .unwrap()
    }

    #[test]
    fn tensors_are_reproducible_distinct_and_of_the_asked_spread() {
        let fx = FixedPoint::default();
        let m = SeededDecoder::new(spec(), 5, 0.02).unwrap();
        let embed = m.encode(&(), DecoderTensor::Embed, fx).unwrap();
        assert_eq!(embed.len(), 40 * 8);
        assert_eq!(embed, m.encode(&(), DecoderTensor::Embed, fx).unwrap());
        let head = m.encode(&(), DecoderTensor::LmHead, fx).unwrap();
        assert_ne!(embed, head, "tensors draw from their own streams");
        let vals = fx.decode_slice(&embed);
        let bound = 0.02 * 3f64.sqrt() + 1e-5;
        assert!(vals.iter().all(|v| v.abs() <= bound));
        let std = (vals.iter().map(|v| v * v).sum::<f64>() / vals.len() as f64).sqrt();
        assert!((std - 0.02).abs() < 0.004, "std {std}");
        let other = SeededDecoder::new(spec(), 6, 0.02).unwrap();
        assert_ne!(embed, other.encode(&(), DecoderTensor::Embed, fx).unwrap());
        let gamma = m.encode(&(), DecoderTensor::FinalNormWeight, fx).unwrap();
        assert_eq!(fx.decode_slice(&gamma), vec![1.0; 8]);
    }

    #[test]
    fn bad_spreads_and_unknown_tensors_are_refused() {
        assert!(SeededDecoder::new(spec(), 1, f64::NAN).is_err());
        assert!(SeededDecoder::new(spec(), 1, -1.0).is_err());
        let m = SeededDecoder::new(spec(), 1, 0.02).unwrap();
        assert!(
            m.encode(&(), DecoderTensor::Positions, FixedPoint::default())
                .is_err()
        );
    }
}
