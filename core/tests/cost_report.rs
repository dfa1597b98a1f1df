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
    ("reveal_all", 1, 192.0),
    ("reveal_to(P0)", 1, 64.0),
    // Products and truncation
    ("mul", 1, 192.0),
    ("square", 1, 192.0),
    ("mul_fixed (product + fused truncation)", 2, 300.0),
    ("square_fixed", 2, 300.0),
    ("trunc, d = 1", 1, 70.0),
    ("trunc, d = 12", 1, 136.0),
    ("trunc, d = 18", 1, 172.0),
    ("trunc, d = 30", 1, 244.0),
    ("matmul 24×768 · 768×64", 1, 192.0),
    ("matmul_fixed 24×768 · 768×64", 2, 300.0),
    ("matmul_batch 12 × (32×64 · 64×32)", 1, 192.0),
    ("matmul_batch_fixed 12 × (32×64 · 64×32)", 2, 300.0),
    // Boolean and comparisons
    ("and, w = 64", 1, 192.0),
    ("and, w = 1", 1, 3.0),
    ("msb, k = 64", 7, 859.0),
    ("msb, k = 40", 7, 523.0),
    ("msb, k = 32", 6, 414.0),
    ("msb, k = 16", 5, 193.0),
    ("lt, k = 32", 6, 414.0),
    ("lt_public, k = 32", 6, 414.0),
    ("eq_public, k = 64", 7, 253.0),
    ("eq_public, k = 32", 6, 125.0),
    ("eq_public, k = 16", 5, 61.0),
    ("eq, k = 32", 6, 125.0),
    ("b2a", 1, 384.0),
    ("mul_bit (b2a + mul)", 2, 576.0),
    ("select (b2a + mul)", 2, 576.0),
    // Max and argmax
    ("max_rows, rows of 32 (a prompt), k = 32", 13, 220230.0),
    ("argmax_rows, rows of 32 (a prompt), k = 32", 13, 220230.0),
    (
        "max_rows, 12 rows of 33 (a KV-cached step), k = 32",
        13,
        234048.0,
    ),
    (
        "argmax_rows (default method), 1 row of 50257, k = 41",
        97,
        79153560.0,
    ),
    (
        "argmax_rows_with Hybrid { 32 }, 1 row of 50257, k = 41",
        113,
        77038304.0,
    ),
    (
        "max_rows_with Tournament, 1 row of 50257, k = 41",
        144,
        55936952.0,
    ),
    // Reciprocal and reciprocal square root
    ("reciprocal, lo = 8, hi = 38", 14, 32956.0),
    ("reciprocal_extra, lo = 8, hi = 38, extra = 20", 14, 32728.0),
    ("reciprocal_extra, lo = 17, hi = 23, extra = 12", 13, 6490.0),
    ("rsqrt, lo = 8, hi = 38, extra = 0", 14, 36798.0),
    (
        "rsqrt_scaled, lo = 18, hi = 61, extra = 8, c = 768·2^8 (LayerNorm's)",
        14,
        72589.0,
    ),
    (
        "rsqrt_scaled, lo = 13, hi = 60, extra = 8, c = 576·2^3 (RMSNorm's)",
        14,
        76519.0,
    ),
    // Exponential and softmax
    ("neg_exp_with, Puma t = 5", 11, 2838.0),
    ("neg_exp_with, Puma t = 8", 17, 3990.0),
    ("neg_exp_with, Taylor2 t = 4", 11, 2832.0),
    ("neg_exp_with, Taylor2 t = 8", 19, 4368.0),
    ("neg_exp_with, Minimax", 11, 3782.0),
    ("softmax_rows, rows of 32, Puma t = 5", 39, 329440.0),
    ("softmax_rows_with, rows of 32, Minimax", 39, 359648.0),
    (
        "softmax_rows_with, causal 32 rows over 32 keys, Minimax",
        39,
        152692.25,
    ),
    (
        "softmax_rows_with, 12 rows of 33 (a KV-cached step), Minimax",
        39,
        378508.0,
    ),
    // Normalisation
    ("layernorm_rows, rows of 768, ε = 1e-5", 19, 792437.0),
    (
        "layernorm_rows_unscaled, rows of 768, ε = 1e-5",
        19,
        562037.0,
    ),
    (
        "rms_norm_rows, rows of 576, ε = 1e-5, bound 2^15",
        19,
        649063.0,
    ),
    // Activations
    ("gelu (PUMA fit)", 8, 4458.0),
    ("gelu_with(GeluFit::PUMA)", 8, 4458.0),
    ("gelu_with(GeluFit::MINIMAX)", 8, 4458.0),
    ("gelu_precise(GeluForm::Erf)", 10, 3200.0),
    ("gelu_precise(GeluForm::Tanh)", 10, 3200.0),
    ("gelu_chebyshev(GeluForm::Erf)", 9, 2514.0),
    ("gelu_chebyshev(GeluForm::Tanh)", 9, 2514.0),
    ("silu (piecewise polynomial)", 8, 3488.0),
    ("silu_chebyshev", 15, 3256.0),
    ("tanh", 35, 8914.0),
    // Sampling
    ("sample_rows, T = 0.7, rows of 16", 33, 145965.0),
    (
        "sample_rows, T = 0.8, top-k 8, top-p 0.9, min-p 0.2, rows of 16",
        351,
        500589.0,
    ),
    ("sample_rows, T = 1, 1 row of 50257", 107, 301468216.0),
    (
        "sample_rows, top-k 50, top-p 0.9, 1 row of 50257",
        436,
        1342414840.0,
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
    assert_eq!(per_party("reveal_to(P0)"), [0.0, 8.0, 0.0]);
    assert_eq!(per_party("reveal_all"), [8.0, 8.0, 8.0]);
}
