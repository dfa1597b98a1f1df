//! GPT-2-shaped models with seeded random weights, for benchmarks that need the shapes of
//! PUMA's tables but no checkpoint.

use ndarray::{Array1, Array2};
use puma_layers::gpt2::config::{Activation, Gpt2Config};
use puma_layers::gpt2::weights::{Gpt2Block, Gpt2Weights, LayerNormWeights};

/// A published GPT-2 shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gpt2Shape {
    /// Name, e.g. `gpt2-base`.
    pub name: &'static str,
    /// Transformer blocks.
    pub layers: usize,
    /// Width of the residual stream.
    pub width: usize,
    /// Attention heads.
    pub heads: usize,
}

/// A published GPT-2 shape, as the programs' `--random-shape` flag names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RandomShape {
    /// GPT-2 base: 12 layers, width 768 (124 M parameters).
    Base,
    /// GPT-2 medium: 24 layers, width 1024.
    Medium,
    /// GPT-2 large: 36 layers, width 1280.
    Large,
}

impl RandomShape {
    /// The shape.
    pub fn shape(self) -> Gpt2Shape {
        match self {
            RandomShape::Base => GPT2_BASE,
            RandomShape::Medium => GPT2_MEDIUM,
            RandomShape::Large => GPT2_LARGE,
        }
    }
}

/// GPT-2 base (124 M parameters).
pub const GPT2_BASE: Gpt2Shape = Gpt2Shape {
    name: "gpt2-base",
    layers: 12,
    width: 768,
    heads: 12,
};
/// GPT-2 medium (355 M parameters).
pub const GPT2_MEDIUM: Gpt2Shape = Gpt2Shape {
    name: "gpt2-medium",
    layers: 24,
    width: 1024,
    heads: 16,
};
/// GPT-2 large (774 M parameters).
pub const GPT2_LARGE: Gpt2Shape = Gpt2Shape {
    name: "gpt2-large",
    layers: 36,
    width: 1280,
    heads: 20,
};

/// GPT-2's vocabulary size.
pub const VOCAB: usize = 50257;
/// GPT-2's context length.
pub const POSITIONS: usize = 1024;

/// A deterministic uniform value in [−1, 1) (SplitMix64).
fn uniform(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// Uniform weights with GPT-2's standard deviation 0.02 (uniform on ±0.02·√3).
fn matrix(rows: usize, cols: usize, state: &mut u64) -> Array2<f64> {
    let s = 0.02 * 3f64.sqrt();
    Array2::from_shape_fn((rows, cols), |_| s * uniform(state))
}

fn ln(d: usize) -> LayerNormWeights {
    LayerNormWeights {
        gamma: Array1::ones(d),
        beta: Array1::zeros(d),
    }
}

/// The public configuration of `shape` with its first `layers` blocks (what the parties
/// other than the model owner know of [`random_gpt2`]'s model).
pub fn shape_config(shape: Gpt2Shape, layers: usize) -> Gpt2Config {
    Gpt2Config {
        n_layer: layers,
        n_embd: shape.width,
        n_head: shape.heads,
        n_inner: 4 * shape.width,
        n_positions: POSITIONS,
        vocab_size: VOCAB,
        layer_norm_epsilon: 1e-5,
        activation: Activation::GeluTanh,
    }
}

/// `shape` with its first `layers` blocks, weights drawn with GPT-2's initialisation scale
/// from a fixed seed (the same weights on every call).
pub fn random_gpt2(shape: Gpt2Shape, layers: usize) -> (Gpt2Config, Gpt2Weights) {
    let cfg = shape_config(shape, layers);
    let w = random_weights(&cfg, 2024);
    (cfg, w)
}

/// Weights of the shape `cfg` describes, drawn with GPT-2's initialisation scale from
/// `seed` (LayerNorms the identity, biases zero; the same weights for the same seed).
pub fn random_weights(cfg: &Gpt2Config, seed: u64) -> Gpt2Weights {
    let (d, v, p, inner) = (cfg.n_embd, cfg.vocab_size, cfg.n_positions, cfg.n_inner);
    let mut st = seed;
    let blocks = (0..cfg.n_layer)
        .map(|_| Gpt2Block {
            ln_1: ln(d),
            attn_w: matrix(d, 3 * d, &mut st),
            attn_b: Array1::zeros(3 * d),
            proj_w: matrix(d, d, &mut st),
            proj_b: Array1::zeros(d),
            ln_2: ln(d),
            fc_w: matrix(d, inner, &mut st),
            fc_b: Array1::zeros(inner),
            fc_proj_w: matrix(inner, d, &mut st),
            fc_proj_b: Array1::zeros(d),
        })
        .collect();
    Gpt2Weights {
        wte: matrix(v, d, &mut st),
        wpe: matrix(p, d, &mut st) * 0.5,
        blocks,
        ln_f: ln(d),
        lm_head: None,
    }
}
