//! The cost report (`puma_core::cost_report`, printed by the `cost` example) covers every
//! protocol, and each row's rounds and bits per unit (summed over the three parties) are
//! the figures documented in docs/PROTOCOLS.md: the table below is copied from there.

use puma_core::cost_report::{Batch, cost_rows};

/// (row name, rounds, bits per unit in total), as documented in docs/PROTOCOLS.md, Cost
/// summary (and each protocol's Rounds and bytes section).
const DOCUMENTED: &[(&str, u32, f64)] = &[
    // Input sharing and reveal
    ("share_input (owner P0)", 1, 64.0),
    ("share_input_parts, 3 parts (owner P0)", 1, 64.0),
    (
        "share_input_streamed, 2 tensors in 3 chunks (owner P0)",
        3,
        64.0,
    ),
    (
        "share_one_hot, 4 rows over GPT-2's 50,257 columns (owner P0)",
        1,
        4736.0,
    ),
    ("reveal_all", 1, 192.0),
    ("reveal_to(P0)", 1, 64.0),
    // Products and truncation
    ("mul", 1, 192.0),
    ("square", 1, 192.0),
    ("mul_fixed (product + fused truncation)", 2, 264.0),
    ("square_fixed", 2, 264.0),
    ("trunc, d = 1", 1, 68.0),
    ("trunc, d = 12", 1, 112.0),
    ("trunc, d = 18", 1, 136.0),
    ("trunc, d = 30", 1, 184.0),
    (
        "reshare_trunc_summands of mul_summands, Z_2^56 → Z_2^56",
        2,
        240.0,
    ),
    (
        "reshare_trunc_summands of mul_summands, Z_2^56 → Z_2^64",
        2,
        280.0,
    ),
    (
        "reshare_cut_summands of mul_summands, Z_2^64 → Z_2^46",
        1,
        138.0,
    ),
    ("matmul 24×768 · 768×64", 1, 192.0),
    ("matmul_fixed 24×768 · 768×64", 2, 264.0),
    ("matmul_batch 12 × (32×64 · 64×32)", 1, 192.0),
    ("matmul_batch_fixed 12 × (32×64 · 64×32)", 2, 264.0),
    (
        "matmul_batch_summands 12 × (32×64 · 64×32), reshare_trunc_summands into Z_2^49",
        2,
        189.0,
    ),
    // Boolean and comparisons
    ("and, w = 64", 1, 192.0),
    ("and, w = 1", 1, 3.0),
    ("msb, k = 64", 7, 796.0),
    ("msb, k = 40", 7, 484.0),
    ("msb, k = 32", 6, 383.0),
    ("msb, k = 16", 5, 178.0),
    ("msb_with(MsbForm::TwoRound), k = 64", 8, 544.0),
    ("msb_with(MsbForm::TwoRound), k = 18", 7, 133.0),
    ("lt, k = 32", 6, 383.0),
    ("lt_public, k = 32", 6, 383.0),
    ("msb_masked, k = 64", 3, 1466.0),
    ("msb_masked, k = 23", 3, 387.0),
    ("lt_thresholds, k = 63, 43 thresholds", 3, 54998.0),
    ("lt_thresholds, k = 25, 6 thresholds", 3, 3974.0),
    ("eq_public, k = 64", 7, 253.0),
    ("eq_public, k = 32", 6, 125.0),
    ("eq_public, k = 16", 5, 61.0),
    ("eq, k = 32", 6, 125.0),
    ("b2a", 1, 256.0),
    ("mul_bit (b2a + mul)", 2, 448.0),
    ("select (b2a + mul)", 2, 448.0),
    // Max and argmax
    ("max_rows, rows of 32 (a prompt), k = 32", 13, 200886.0),
    ("argmax_rows, rows of 32 (a prompt), k = 32", 13, 200886.0),
    (
        "max_rows, 12 rows of 33 (a KV-cached step), k = 32",
        13,
        213584.0,
    ),
    (
        "argmax_rows (default method), 1 row of 50257, k = 41",
        97,
        64087536.0,
    ),
    (
        "argmax_rows_with Hybrid { 32 }, 1 row of 50257, k = 41",
        113,
        62151360.0,
    ),
    (
        "max_rows_with Tournament, 1 row of 50257, k = 41",
        144,
        47493944.0,
    ),
    // Reciprocal and reciprocal square root
    ("reciprocal, lo = 8, hi = 38", 6, 125590.0),
    ("reciprocal_extra, lo = 8, hi = 38, extra = 20", 6, 118150.0),
    ("reciprocal_extra, lo = 17, hi = 22, extra = 12", 6, 17091.0),
    ("rsqrt, lo = 8, hi = 38, extra = 0", 6, 86466.0),
    (
        "rsqrt_scaled, lo = 18, hi = 61, extra = 8, c = 768·2^8 (LayerNorm's)",
        6,
        138230.0,
    ),
    (
        "rsqrt_scaled, lo = 13, hi = 60, extra = 8, c = 576·2^3 (RMSNorm's)",
        6,
        155026.0,
    ),
    // Exponential and softmax
    ("neg_exp_with, Puma t = 5", 11, 1777.0),
    ("neg_exp_with, Puma t = 8", 17, 2737.0),
    ("neg_exp_with, Taylor2 t = 4", 11, 1773.0),
    ("neg_exp_with, Taylor2 t = 8", 19, 3053.0),
    ("neg_exp_with, Minimax", 11, 2186.0),
    ("softmax_rows, rows of 32, Puma t = 5", 32, 286177.0),
    ("softmax_rows_with, rows of 32, Minimax", 29, 267521.0),
    (
        "softmax_rows_with, causal 32 rows over 32 keys, Minimax",
        29,
        118669.25,
    ),
    (
        "softmax_rows_with, 12 rows of 33 (a KV-cached step), Minimax",
        29,
        284004.0,
    ),
    (
        "softmax_matmul_batch, 12 × 32 causal rows over 32 keys, heads of 64, Minimax",
        29,
        150377.5,
    ),
    (
        "softmax_matmul_batch_of_products, the same from the products in Z_2^51",
        30,
        154865.5,
    ),
    // Normalisation
    ("layernorm_rows, rows of 768, ε = 1e-5", 11, 587888.0),
    (
        "layernorm_rows_unscaled, rows of 768, ε = 1e-5",
        11,
        385136.0,
    ),
    (
        "rms_norm_rows, rows of 576, ε = 1e-5, bound 2^15",
        10,
        477985.0,
    ),
    (
        "rms_norm_rows_unscaled, rows of 576, ε = 1e-5, bound 2^15",
        10,
        325921.0,
    ),
    // Activations
    ("gelu (PUMA fit)", 8, 3677.0),
    ("gelu_with(GeluFit::PUMA)", 8, 3677.0),
    ("gelu_with(GeluFit::MINIMAX)", 8, 3677.0),
    ("gelu_precise(GeluForm::Erf)", 10, 2700.0),
    ("gelu_precise(GeluForm::Tanh)", 10, 2700.0),
    ("gelu_chebyshev(GeluForm::Erf)", 10, 1583.0),
    ("gelu_chebyshev(GeluForm::Tanh)", 10, 1583.0),
    ("silu (piecewise polynomial)", 8, 2934.0),
    ("silu_chebyshev", 16, 2282.0),
    (
        "gelu_chebyshev_into(GeluForm::Erf, Z_2^64 → Z_2^56)",
        10,
        1543.0,
    ),
    ("silu_chebyshev_into(Z_2^56)", 16, 2242.0),
    (
        "gelu_chebyshev_into(GeluForm::Erf, Z_2^46 → Z_2^56)",
        10,
        1579.0,
    ),
    ("tanh", 27, 11643.0),
    // Sampling
    ("sample_rows, T = 0.7, rows of 16", 33, 107989.0),
    (
        "sample_rows, T = 0.8, top-k 8, top-p 0.9, min-p 0.2, rows of 16",
        351,
        393321.0,
    ),
    ("sample_rows, T = 1, 1 row of 50257", 107, 203719056.0),
    (
        "sample_rows, top-k 50, top-p 0.9, 1 row of 50257",
        436,
        1038809616.0,
    ),
];

#[test]
fn cost_report_lists_every_protocol_with_its_documented_cost() {
    // The smallest batch with exact per-party thirds; the per-unit figures do not depend
    // on it.
    let rows = cost_rows(Batch {
        elements: 24,
        rows: 24,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    let documented: Vec<&str> = DOCUMENTED.iter().map(|d| d.0).collect();
    assert_eq!(
        names, documented,
        "the report's rows are the documented rows"
    );
    for (row, &(name, rounds, bits)) in rows.iter().zip(DOCUMENTED) {
        assert_eq!(
            (row.rounds, row.bits_per_unit()),
            (rounds, bits),
            "{name}: (rounds, bits per {})",
            row.unit
        );
    }
}

#[test]
fn cost_report_owner_and_receiver_rows_fall_on_one_party() {
    let rows = cost_rows(Batch {
        elements: 24,
        rows: 24,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let per_party = |name: &str| {
        rows.iter()
            .find(|r| r.name == name)
            .map(|r| r.bytes_per_unit())
            .unwrap_or_else(|| panic!("no row {name}"))
    };
    assert_eq!(per_party("share_input (owner P0)"), [8.0, 0.0, 0.0]);
    assert_eq!(
        per_party("share_one_hot, 4 rows over GPT-2's 50,257 columns (owner P0)"),
        [592.0, 0.0, 0.0]
    );
    assert_eq!(per_party("reveal_to(P0)"), [0.0, 8.0, 0.0]);
    assert_eq!(per_party("reveal_all"), [8.0, 8.0, 8.0]);
}
