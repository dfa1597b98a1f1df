//! Role rotation: protocols with asymmetric roles split their input into three contiguous
//! blocks and let party `P_s` play role 0 on block `s`, so each link carries a third of
//! every role's traffic.

use core::ops::Range;

/// The three role blocks of `n` elements: `[0, n/3)`, `[n/3, 2n/3)`, `[2n/3, n)`.
pub(crate) fn role_blocks(n: usize) -> [Range<usize>; 3] {
    [0..n / 3, n / 3..2 * n / 3, 2 * n / 3..n]
}
