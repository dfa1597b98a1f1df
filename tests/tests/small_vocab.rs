//! The Shakespeare GPT-2 with its vocabulary cut down, for the tests of the generation
//! loop's rules (end-of-sequence ids, the client's stop test, drawn tokens, a client
//! outside the parties), which compare one secure run with another of the same model.
//!
//! The blocks are the full model's. The token embedding (tied to the LM head) keeps the
//! tokens of the tests' prompts, the full model's greedy continuations of them, and the
//! lowest ids up to [`VOCAB`] tokens in all. Greedy decoding on it is the full model's,
//! remapped: every step's winner is among the kept tokens, whose logits are unchanged.
//! The steps that grow with the vocabulary (the one-hot input, the LM head, the argmax,
//! sampling) cost about a hundredth of the full model's.

use std::path::Path;

use ndarray::Axis;
use puma_layers::Gpt2Config;
use puma_layers::gpt2::plain::PlainGpt2;
use puma_layers::gpt2::weights::{Gpt2Weights, load_gpt2};

const SHAKESPEARE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/gpt2-shakespeare");

/// The cut vocabulary's size.
pub const VOCAB: usize = 512;

/// The cut model, and which full-model token each of its ids is.
pub struct SmallVocab {
    /// Its config (`vocab_size` = [`VOCAB`]).
    pub config: Gpt2Config,
    /// Its weights.
    pub weights: Gpt2Weights,
    /// `kept[new id]` = the full model's id.
    kept: Vec<u32>,
}

impl SmallVocab {
    /// The model keeping the tokens of `prompts` (full-model ids) and of their full-model
    /// greedy continuations of `continued` tokens.
    pub fn new(prompts: &[&[u32]], continued: usize) -> SmallVocab {
        let (config, weights) = load_gpt2(Path::new(SHAKESPEARE)).unwrap();
        let plain = PlainGpt2::new(config.clone(), weights.clone()).unwrap();
        let mut kept: Vec<u32> = Vec::new();
        for p in prompts {
            kept.extend_from_slice(p);
            kept.extend(plain.generate_greedy(p, continued).unwrap());
        }
        kept.sort_unstable();
        kept.dedup();
        let mut next = 0u32;
        while kept.len() < VOCAB {
            if !kept.contains(&next) {
                kept.push(next);
            }
            next += 1;
        }
        kept.sort_unstable();
        let rows: Vec<usize> = kept.iter().map(|&t| t as usize).collect();
        let weights = Gpt2Weights {
            wte: weights.wte.select(Axis(0), &rows),
            lm_head: weights.lm_head.as_ref().map(|h| h.select(Axis(0), &rows)),
            ..weights
        };
        let config = Gpt2Config {
            vocab_size: VOCAB,
            ..config
        };
        SmallVocab {
            config,
            weights,
            kept,
        }
    }

    /// The cut model's ids of full-model ids (each must be kept).
    pub fn ids(&self, full: &[u32]) -> Vec<u32> {
        full.iter()
            .map(|t| self.kept.binary_search(t).unwrap() as u32)
            .collect()
    }
}
