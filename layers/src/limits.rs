//! The one bound on model size, for every architecture and at every party.
//!
//! A configuration (a `config.json`, GGUF metadata, or a value built by hand) is public
//! and may come from anyone: the parties that do not own the weights size their shares of
//! the model, their one-hot inputs and their caches from it alone, before the owner sends
//! a byte. So every size a configuration names is checked against these limits when it is
//! parsed or validated, before anything is allocated, and the model sharing checks the
//! total again ([`crate::nn::share_plan`]). The limits admit the published checkpoints the
//! crate targets with room to spare (GPT-2 up to XL, BERT / RoBERTa up to large,
//! LLaMA-7B and 13B, vocabularies up to 256k); a larger model is rejected with a
//! [`LimitError`] naming the field.
//!
//! A model within the limits may still exceed the machine's memory (each party holds 16
//! bytes per parameter); the sharing then fails with an error instead of aborting.

/// Most Transformer blocks (LLaMA-405B has 126).
pub const MAX_LAYERS: usize = 1024;

/// Largest width of any one dimension: the residual stream, the MLP's hidden layer, all
/// query heads together, one head (LLaMA-70B: 8192 and 28672).
pub const MAX_WIDTH: usize = 65_536;

/// Largest vocabulary, and largest token-type vocabulary (Gemma: 256,000).
pub const MAX_VOCAB: usize = 262_144;

/// Longest sequence a model may declare (its learned position table, or its context for
/// rotary positions; LLaMA-3.1: 131,072).
pub const MAX_POSITIONS: usize = 1 << 20;

/// Most parameters of a shared model, 2^34 ≈ 17.2 G (LLaMA-7B: 6.7 G, LLaMA-13B: 13 G).
pub const MAX_PARAMETERS: u64 = 1 << 34;

/// Most named tensors of a model (a block has at most a dozen, and a few lie outside the
/// blocks): what a share store's table may list.
pub const MAX_TENSORS: usize = 16 * MAX_LAYERS;

/// A size that exceeds its limit (or overflows while it is computed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{field} = {value} exceeds the limit of {limit} (puma_layers::limits)")]
pub struct LimitError {
    /// The configuration field, or the derived quantity (`"parameters"`,
    /// `"num_attention_heads · head_dim"`).
    pub field: &'static str,
    /// Its value (`u64::MAX` if it overflows).
    pub value: u64,
    /// The limit it exceeds.
    pub limit: u64,
}

/// Checks each `(field, value, limit)` in order.
///
/// # Errors
/// A [`LimitError`] for the first value above its limit.
pub fn check(sizes: &[(&'static str, usize, usize)]) -> Result<(), LimitError> {
    for &(field, value, limit) in sizes {
        if value > limit {
            return Err(LimitError {
                field,
                value: wide(value),
                limit: wide(limit),
            });
        }
    }
    Ok(())
}

/// Checks a model's parameter count (`None`: it overflows) against [`MAX_PARAMETERS`].
///
/// # Errors
/// A [`LimitError`] for `"parameters"`.
pub fn check_parameters(count: Option<usize>) -> Result<(), LimitError> {
    let value = count.map_or(u64::MAX, wide);
    if value > MAX_PARAMETERS {
        return Err(LimitError {
            field: "parameters",
            value,
            limit: MAX_PARAMETERS,
        });
    }
    Ok(())
}

/// `n` as a `u64` (saturating; `usize` is at most 64 bits on every supported target).
fn wide(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_the_field_and_admit_llama_7b() {
        assert_eq!(
            check(&[("a", 3, 4), ("vocab_size", 5, 4), ("c", 9, 1)]),
            Err(LimitError {
                field: "vocab_size",
                value: 5,
                limit: 4
            })
        );
        assert_eq!(check(&[("a", 4, 4)]), Ok(()));
        // LLaMA-7B: 6,738,415,616 parameters.
        assert_eq!(check_parameters(Some(6_738_415_616)), Ok(()));
        let e = check_parameters(None).unwrap_err();
        assert_eq!((e.field, e.value), ("parameters", u64::MAX));
        assert_eq!(
            e.to_string(),
            "parameters = 18446744073709551615 exceeds the limit of 17179869184 (puma_layers::limits)"
        );
    }
}
