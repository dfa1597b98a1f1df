//! The demo's secure linear layer, end to end over the threaded transport.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use puma_runner::linear::{
    DemoError, LinearDemo, MAX_ELEMENTS, plaintext_linear, pseudo_random, run_linear,
};

#[test]
fn plaintext_reference_is_a_linear_layer() {
    // x = [[1, 2]], W = [[1, 0, 2], [0, 1, 3]], b = [0.5, 0, -1] → [1.5, 2, 7].
    let y = plaintext_linear(
        &[1.0, 2.0],
        &[1.0, 0.0, 2.0, 0.0, 1.0, 3.0],
        &[0.5, 0.0, -1.0],
        1,
        2,
        3,
    );
    assert_eq!(y, vec![1.5, 2.0, 7.0]);
    let r = pseudo_random(1000, 1, 2.0);
    assert!(r.iter().all(|v| v.abs() < 2.0));
    assert!(r.iter().any(|v| *v > 1.5) && r.iter().any(|v| *v < -1.5));
    assert_eq!(r, pseudo_random(1000, 1, 2.0));
}

#[test]
fn secure_linear_layer_matches_f64() {
    let demo = LinearDemo {
        rows: 3,
        k: 40,
        n: 6,
        seed: 9,
    };
    let report = run_linear(demo).unwrap();
    assert_eq!(report.y.len(), 18);
    assert!(report.max_abs_err <= 1e-3, "{}", report.max_abs_err);
    // The outputs are not trivially small, so the check means something.
    assert!(report.reference.iter().any(|v| v.abs() > 0.3));
    assert_eq!(report.rounds(), 4);
    // Only the model owner P1 sends input shares (W and b: 8·(40·6 + 6) bytes) to P0, and
    // every party reshares the 18 outputs (8·18 bytes): P0's payload carries no input.
    let p1_to_p0 = report.stats[1].payload_bytes_sent[0];
    let p0_to_p2 = report.stats[0].payload_bytes_sent[2];
    assert!(p1_to_p0 >= 8 * (40 * 6 + 6), "{p1_to_p0}");
    assert!(p0_to_p2 >= 8 * 3 * 40, "{p0_to_p2}");
}

#[test]
fn unusable_sizes_are_errors() {
    let r = run_linear(LinearDemo {
        rows: 0,
        ..LinearDemo::default()
    });
    assert!(matches!(r, Err(DemoError::BadSize)));
    let r = run_linear(LinearDemo {
        rows: usize::MAX,
        k: 2,
        ..LinearDemo::default()
    });
    assert!(
        matches!(r, Err(DemoError::TooLarge { dims: ["rows", "k"], elements }) if elements == 2 * usize::MAX as u128),
        "{r:?}"
    );
}

/// Sizes whose matrices would not fit in memory are refused before anything is allocated
/// (they used to abort the process on allocation), naming the two sizes; the limit itself
/// is accepted.
#[test]
fn oversized_matrices_are_refused_naming_the_sizes() {
    let huge = LinearDemo {
        rows: 4,
        k: 1 << 30,
        n: 1 << 30,
        ..LinearDemo::default()
    };
    let err = run_linear(huge).unwrap_err();
    assert!(
        matches!(err, DemoError::TooLarge { dims: ["rows", "k"], elements } if elements == 1 << 32),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!(
            "rows × k = 4294967296 elements is more than the limit of {MAX_ELEMENTS} per matrix"
        )
    );
    let wide = LinearDemo {
        rows: 1,
        k: 1,
        n: MAX_ELEMENTS + 1,
        ..LinearDemo::default()
    };
    assert!(matches!(
        wide.elements(),
        Err(DemoError::TooLarge {
            dims: ["k", "n"],
            ..
        })
    ));
    let at_limit = LinearDemo {
        rows: 1,
        k: 1,
        n: MAX_ELEMENTS,
        ..LinearDemo::default()
    };
    assert_eq!(
        at_limit.elements().unwrap(),
        (1, MAX_ELEMENTS, MAX_ELEMENTS)
    );
}
