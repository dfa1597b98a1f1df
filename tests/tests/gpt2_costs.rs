//! Pins the communication of secure GPT-2 at the base shape (width 768, 12 heads, MLP
//! 3072, 32 prompt tokens → 1, reveal-logits mode, default settings): one block, and the
//! whole 12-layer, 50257-token forward, in exact payload bytes per party and rounds.
//!
//! The whole forward needs ~8 GB and ~30 s in release, too heavy for a test. Its costs are
//! exact sums, though: every block but the last sees the same shapes (32 rows, no cache), so
//! it costs the same, the last block (which makes only the last row after its keys and
//! values, as no later layer reads the others) costs the same in every run, and the only
//! vocabulary-sized parts (the client's one-hot input, the embedding
//! product, the LM head and the reveal) are linear in the vocabulary V within a residue
//! class of V mod 24 (role blocks split n into thirds, narrow messages are packed to whole
//! bytes every 8 elements). So three small runs at base width determine it:
//! c(L, V) = c(1, 25) + (L − 1)·block + (V − 25)/24·vocab, with block = c(2, 25) − c(1, 25)
//! and vocab = c(1, 49) − c(1, 25) (25 ≡ 49 ≡ 50257 mod 24). The composed figure for L = 12,
//! V = 50257 equals what `cargo run --release -p puma-examples --bin gpt2_base` measures
//! on the real shape (BENCHMARKS.md), so a regression in any protocol, in the block's
//! schedule or in the vocabulary-sized tail fails here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::Arc;

use puma_core::PartyId;
use puma_core::sim::Sim;
use puma_layers::gpt2::config::{Activation, Gpt2Config};
use puma_layers::gpt2::weights::Gpt2Weights;
use puma_layers::nn::{Decoding, LayerKind, OutputMode, SecureSettings, SharedDecoder, generate};
use puma_runner::random_gpt2::random_weights;

const WIDTH: usize = 768;
const HEADS: usize = 12;
const PROMPT: usize = 32;
const BASE_LAYERS: u64 = 12;
const BASE_VOCAB: u64 = 50257;

/// A base-width GPT-2 with `layers` blocks and vocabulary `vocab`, GPT-2's weight scale.
fn model(layers: usize, vocab: usize) -> (Gpt2Config, Gpt2Weights) {
    let (d, inner, p) = (WIDTH, 4 * WIDTH, PROMPT + 1);
    let cfg = Gpt2Config {
        n_layer: layers,
        n_embd: d,
        n_head: HEADS,
        n_inner: inner,
        n_positions: p,
        vocab_size: vocab,
        layer_norm_epsilon: 1e-5,
        activation: Activation::GeluTanh,
    };
    let w = random_weights(&cfg, 7);
    (cfg, w)
}

/// Inference costs of a 32 → 1 run: payload bytes per party and epochs of the step, plus
/// the client's per-layer-kind bytes.
struct Cost {
    bytes: [u64; 3],
    epochs: u32,
    kinds: Vec<(LayerKind, u64, u32)>,
}

fn run(layers: usize, vocab: usize) -> Cost {
    let m = Arc::new(model(layers, vocab));
    let prompt: Vec<u32> = (0..PROMPT as u32)
        .map(|i| (i * 7 + 3) % vocab as u32)
        .collect();
    let out = Sim::new(9).run(move |me| {
        let m = m.clone();
        let prompt = prompt.clone();
        move |mut ctx| async move {
            let (cfg, w) = &*m;
            let shared =
                SharedDecoder::share(&mut ctx, PartyId::P1, cfg, (me == PartyId::P1).then_some(w))
                    .await?;
            generate(
                &mut ctx,
                &shared,
                PartyId::P0,
                (me == PartyId::P0).then_some(&prompt[..]),
                PROMPT,
                &Decoding::new(1, OutputMode::RevealLogits),
                &SecureSettings::default(),
                None,
                None,
            )
            .await
        }
    });
    let g = out.into_results().unwrap();
    assert_eq!(g[0].ids.len(), 1);
    let epochs = g[0].step_costs[0].1;
    assert!(
        g.iter()
            .all(|x| x.step_costs.len() == 1 && x.step_costs[0].1 == epochs)
    );
    Cost {
        bytes: [0, 1, 2].map(|i| g[i].step_costs[0].0),
        epochs,
        kinds: g[0].costs.entries.clone(),
    }
}

/// The bytes the client sent for its input (the client's cost entries: no one else sends
/// any).
fn input_of(cost: &Cost) -> u64 {
    cost.kinds
        .iter()
        .filter(|(k, _, _)| *k == LayerKind::Input)
        .map(|(_, b, _)| b)
        .sum()
}

#[test]
fn base_shaped_block_and_forward_costs_are_pinned() {
    let one = run(1, 25);
    let two = run(2, 25);
    let wide = run(1, 49);
    let block: [u64; 3] = [0, 1, 2].map(|i| two.bytes[i] - one.bytes[i]);
    let block_epochs = two.epochs - one.epochs;
    // The client's input is two point-function keys per token, 16·(11 + 2·levels) bytes
    // with levels = ⌈log2 ⌈V/8⌉⌉ (2 at V = 25, 3 at V = 49, 13 at 50257): it grows with
    // log V, so it is taken out of the linear extrapolation and added at the base
    // vocabulary.
    let input_bytes = |levels: u64| PROMPT as u64 * 16 * (11 + 2 * levels);
    assert_eq!(input_of(&one), input_bytes(2));
    assert_eq!(input_of(&wide), input_bytes(3));
    let mut vocab: [u64; 3] = [0, 1, 2].map(|i| wide.bytes[i] - one.bytes[i]);
    vocab[0] -= input_bytes(3) - input_bytes(2);
    assert_eq!(
        wide.epochs, one.epochs,
        "rounds do not depend on the vocabulary"
    );
    let steps = (BASE_VOCAB - 25) / 24;
    let mut base: [u64; 3] =
        [0, 1, 2].map(|i| one.bytes[i] + (BASE_LAYERS - 1) * block[i] + steps * vocab[i]);
    base[0] += input_bytes(13) - input_bytes(2);
    let base_epochs = one.epochs + (BASE_LAYERS as u32 - 1) * block_epochs;
    println!("one block: {block:?} bytes per party, {block_epochs} epochs");
    println!("per 24 vocabulary entries: {vocab:?} bytes per party");
    println!(
        "GPT-2 base 32 -> 1: {base:?} bytes per party ({} total), {base_epochs} epochs",
        base.iter().sum::<u64>()
    );
    println!("one layer, V = 25, at the client: {:?}", one.kinds);

    // One block at base width, 32 tokens, per party.
    assert_eq!(block, [11_772_776, 11_770_990, 11_775_578]);
    assert_eq!(block_epochs, 69);
    // Per-layer kinds of one block at the client (bytes, epochs).
    let kind = |c: &Cost, k: &str| c.kinds.iter().find(|e| e.0.name() == k).map(|e| (e.1, e.2));
    let per_block = |k: &str| {
        let (b2, e2) = kind(&two, k).unwrap();
        let (b1, e1) = kind(&one, k).unwrap();
        (b2 - b1, e2 - e1)
    };
    // Closed forms (bytes per party, exact here since every count is divisible by 24):
    // the precise GeLU 1579 bits per element on 32 × 3072 (10 rounds, `gelu_chebyshev_into`
    // reading its input in Z_2^46, its breakpoints in one two-round comparison in Z_2^17,
    // its powers w and Q in Z_2^61 and T_2 in Z_2^44, its join in Z_2^32 lifted into the MLP's Z_2^56; `gelu_precise` takes
    // 2700 and 10); the linear layers 264 bits
    // per output element with the truncation fused into the reshare (2 rounds each):
    // 32·(768 + 768) outputs (values, attention output), the queries and keys truncated
    // into the scores' Z_2^51, 199 bits on 32·(2·768), the MLP's first projection,
    // cut locally into the GeLU's Z_2^46, 138 bits on 32·3072 (1 round), and its output
    // projection, summed in Z_2^56, 280 bits on 32·768;
    // LayerNorm 2 × 11 rounds (each row's sum of squares by limbs, two words per row),
    // softmax 29 (Minimax negExp, its polynomial at 25 fractional
    // bits, its output at f + 4 bits for the row sums, its last square cut to 6 guard
    // bits and joined with its cut-off in Z_2^31, lifted, and the cut-off tested on x cut
    // to 4 fractional bits in Z_2^18 with the two-round first layer; rsqrt and the reciprocal by
    // negative powers by segments in 6 rounds, and the row maxima compare keys cut to 4
    // fractional bits with the three-round `msb_masked`) with the product by V beside its
    // reciprocal
    // (`softmax_matmul_batch_of_products`: the same bytes as `softmax_rows_with` of 12 × 32
    // causal rows with its final products moved to the 12·32·64 outputs, plus the product
    // by V, plus the valid scores' truncation and their keys).
    assert_eq!(per_block("gelu"), (1579 * 32 * 3072 / 24, 10));
    assert_eq!(
        per_block("linear"),
        (
            (264 * 32 * 2 * 768 + 199 * 32 * 2 * 768 + 138 * 32 * 3072 + 280 * 32 * 768) / 24,
            7
        )
    );
    assert_eq!(per_block("layernorm"), (1_027_152, 22));
    // The softmax: 2,406,040 bytes on the truncated scores (29 rounds), plus the truncation
    // of the 12·528 valid scores (Z_2^51 → Z_2^49, 215 bits) and the reshare of their
    // maxima's keys (3·19 bits), one round more than the softmax and one fewer than the
    // scores' truncation before it.
    assert_eq!(
        per_block("softmax"),
        (2_406_040 + (215 + 57) * 12 * 528 / 24, 30)
    );
    // The last block makes one row of GeLU (3072 elements; 32 × 3072 in every other block)
    // in the same rounds.
    assert_eq!(kind(&one, "gelu"), Some((1579 * 3072 / 24, 10)));
    // The whole base-shaped forward (the step's payload bytes per party and epochs, as
    // `gpt2_base` reports them): 426.6 MB in total while the last block made all 32 rows.
    assert_eq!(base, [131_694_522, 132_052_398, 131_705_916]);
    assert_eq!(base_epochs, 844);
}
