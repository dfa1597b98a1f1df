//! Heavy local kernels behind a small trait, so std callers can plug in SIMD or threads.

use alloc::vec::Vec;
use core::ops::Range;

// Compiled only on Rust 1.89+ (see build.rs), where the AVX-512 intrinsics are stable.
#[cfg(all(target_arch = "x86_64", puma_avx2))]
#[clippy::msrv = "1.89"]
mod avx2;
#[cfg(all(target_arch = "x86_64", puma_avx512))]
#[clippy::msrv = "1.89"]
mod avx512;
#[cfg(all(target_arch = "x86_64", any(puma_avx512, puma_avx2)))]
mod blocking;
#[cfg(all(target_arch = "x86_64", any(puma_avx512, puma_avx2)))]
mod x86;

/// Ring matrix multiplication over Z_2^64 (wrapping), row-major.
pub trait MatmulKernel: Send + Sync {
    /// `c += a · b` where `a` is `m×k`, `b` is `k×n` and `c` is `m×n`, all row-major.
    ///
    /// Callers guarantee the slice lengths; implementations may assume them.
    fn matmul_acc(&self, a: &[u64], b: &[u64], c: &mut [u64], m: usize, k: usize, n: usize);

    /// `c += a · b[.., cols]`: the product's column band `cols` only, where `a` is `m×k`,
    /// `b` is `k×n` and `c` is `m × cols.len()`, all row-major. Threaded kernels hand each
    /// thread a band, so that each reads only its part of `b`.
    ///
    /// Callers guarantee the slice lengths and `cols.end ≤ n`. The default gathers the
    /// band of `b` and calls [`matmul_acc`](MatmulKernel::matmul_acc).
    #[allow(clippy::too_many_arguments)]
    fn matmul_acc_cols(
        &self,
        a: &[u64],
        b: &[u64],
        c: &mut [u64],
        m: usize,
        k: usize,
        n: usize,
        cols: Range<usize>,
    ) {
        let w = cols.end.saturating_sub(cols.start);
        if w == 0 || cols.end > n {
            return;
        }
        let band: Vec<u64> = b
            .chunks_exact(n)
            .take(k)
            .flat_map(|row| &row[cols.clone()])
            .copied()
            .collect();
        self.matmul_acc(a, &band, c, m, k, w);
    }
}

/// The portable kernel: no `unsafe`, no threads. Columns are cut into blocks of
/// 256 so that a row block of C and the matching slice of each B row stay in
/// L1/L2; four rows of A share every load of a B row, and the inner loop streams
/// contiguous slices (it auto-vectorises).
#[derive(Clone, Copy, Debug, Default)]
pub struct PortableKernel;

/// Columns of B and C per block.
const COL_BLOCK: usize = 256;

impl MatmulKernel for PortableKernel {
    fn matmul_acc(&self, a: &[u64], b: &[u64], c: &mut [u64], m: usize, k: usize, n: usize) {
        if m == 0 || n == 0 || k == 0 {
            return;
        }
        let (Some(a), Some(b), Some(c)) = (
            a.get(..m.saturating_mul(k)),
            b.get(..k.saturating_mul(n)),
            c.get_mut(..m.saturating_mul(n)),
        ) else {
            return;
        };
        let mut j0 = 0;
        while j0 < n {
            let j1 = (j0 + COL_BLOCK).min(n);
            let mut c4 = c.chunks_exact_mut(4 * n);
            let mut a4 = a.chunks_exact(4 * k);
            for (cb, ab) in (&mut c4).zip(&mut a4) {
                let (c0, r) = cb.split_at_mut(n);
                let (c1, r) = r.split_at_mut(n);
                let (c2, c3) = r.split_at_mut(n);
                let (c0, c1, c2, c3) = (
                    &mut c0[j0..j1],
                    &mut c1[j0..j1],
                    &mut c2[j0..j1],
                    &mut c3[j0..j1],
                );
                let (a0, r) = ab.split_at(k);
                let (a1, r) = r.split_at(k);
                let (a2, a3) = r.split_at(k);
                for (p, b_row) in b.chunks_exact(n).enumerate() {
                    let b_row = &b_row[j0..j1];
                    let (x0, x1, x2, x3) = (a0[p], a1[p], a2[p], a3[p]);
                    for ((((y0, y1), y2), y3), &bv) in c0
                        .iter_mut()
                        .zip(c1.iter_mut())
                        .zip(c2.iter_mut())
                        .zip(c3.iter_mut())
                        .zip(b_row)
                    {
                        *y0 = y0.wrapping_add(x0.wrapping_mul(bv));
                        *y1 = y1.wrapping_add(x1.wrapping_mul(bv));
                        *y2 = y2.wrapping_add(x2.wrapping_mul(bv));
                        *y3 = y3.wrapping_add(x3.wrapping_mul(bv));
                    }
                }
            }
            for (c_row, a_row) in c4
                .into_remainder()
                .chunks_exact_mut(n)
                .zip(a4.remainder().chunks_exact(k))
            {
                let c_row = &mut c_row[j0..j1];
                for (&x, b_row) in a_row.iter().zip(b.chunks_exact(n)) {
                    for (y, &bv) in c_row.iter_mut().zip(&b_row[j0..j1]) {
                        *y = y.wrapping_add(x.wrapping_mul(bv));
                    }
                }
            }
            j0 = j1;
        }
    }
}

/// A single-threaded ring matmul implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelKind {
    /// 64-bit lane products (`vpmullq`) on x86-64 CPUs with AVX-512 F and DQ.
    Avx512,
    /// 64-bit products from 32-bit ones (`vpmuludq`) on x86-64 CPUs with AVX2.
    Avx2,
    /// [`PortableKernel`].
    Portable,
}

/// The fastest single-threaded kernel this CPU supports, chosen once at construction:
/// AVX-512 where the CPU has AVX-512 F and DQ, else AVX2, else [`PortableKernel`].
#[derive(Clone, Copy, Debug)]
pub struct DetectedKernel {
    kind: KernelKind,
}

impl DetectedKernel {
    /// Probes the CPU (CPUID and XCR0; no OS or std needed).
    pub fn new() -> DetectedKernel {
        #[cfg(all(target_arch = "x86_64", puma_avx512))]
        if avx512::detected() {
            return DetectedKernel {
                kind: KernelKind::Avx512,
            };
        }
        DetectedKernel::avx2().unwrap_or_else(DetectedKernel::portable)
    }

    /// The AVX2 kernel, if this CPU has AVX2 (also where AVX-512 would be chosen: for
    /// comparisons and tests).
    pub fn avx2() -> Option<DetectedKernel> {
        #[cfg(all(target_arch = "x86_64", puma_avx2))]
        if avx2::detected() {
            return Some(DetectedKernel {
                kind: KernelKind::Avx2,
            });
        }
        None
    }

    /// The portable kernel even where SIMD is available (for comparisons).
    pub fn portable() -> DetectedKernel {
        DetectedKernel {
            kind: KernelKind::Portable,
        }
    }

    /// The implementation in use.
    pub fn kind(&self) -> KernelKind {
        self.kind
    }

    /// Whether the AVX-512 kernel is in use.
    pub fn uses_avx512(&self) -> bool {
        self.kind == KernelKind::Avx512
    }

    /// `c += a · b` with `b` of row stride `ldb` and `c` of row stride `ldc` (the SIMD
    /// kernels' common entry); false if no SIMD kernel is in use.
    #[allow(clippy::too_many_arguments, unused_variables)]
    fn simd_acc(
        &self,
        a: &[u64],
        b: &[u64],
        ldb: usize,
        c: &mut [u64],
        ldc: usize,
        m: usize,
        k: usize,
        n: usize,
    ) -> bool {
        match self.kind {
            #[cfg(all(target_arch = "x86_64", puma_avx512))]
            KernelKind::Avx512 => avx512::matmul_acc(a, b, ldb, c, ldc, m, k, n),
            #[cfg(all(target_arch = "x86_64", puma_avx2))]
            KernelKind::Avx2 => avx2::matmul_acc(a, b, ldb, c, ldc, m, k, n),
            _ => return false,
        }
        true
    }
}

impl Default for DetectedKernel {
    fn default() -> Self {
        DetectedKernel::new()
    }
}

impl MatmulKernel for DetectedKernel {
    fn matmul_acc(&self, a: &[u64], b: &[u64], c: &mut [u64], m: usize, k: usize, n: usize) {
        if self.kind == KernelKind::Portable {
            return PortableKernel.matmul_acc(a, b, c, m, k, n);
        }
        if m == 0 || n == 0 || k == 0 {
            return;
        }
        // Short slices break the callers' guarantee: nothing is computed, as in
        // `PortableKernel`.
        if let (Some(a), Some(b), Some(c)) = (
            a.get(..m.saturating_mul(k)),
            b.get(..k.saturating_mul(n)),
            c.get_mut(..m.saturating_mul(n)),
        ) {
            if !self.simd_acc(a, b, n, c, n, m, k, n) {
                PortableKernel.matmul_acc(a, b, c, m, k, n);
            }
        }
    }

    fn matmul_acc_cols(
        &self,
        a: &[u64],
        b: &[u64],
        c: &mut [u64],
        m: usize,
        k: usize,
        n: usize,
        cols: Range<usize>,
    ) {
        if self.kind == KernelKind::Portable {
            return PortableKernel.matmul_acc_cols(a, b, c, m, k, n, cols);
        }
        let w = cols.end.saturating_sub(cols.start);
        if m == 0 || w == 0 || k == 0 || cols.end > n {
            return;
        }
        // The band starts at column `cols.start` of row 0 and ends inside row k-1.
        let (Some(a_used), Some(band), Some(c_used)) = (
            a.get(..m.saturating_mul(k)),
            b.get(cols.start..(k - 1).saturating_mul(n).saturating_add(cols.end)),
            c.get_mut(..m.saturating_mul(w)),
        ) else {
            return;
        };
        if !self.simd_acc(a_used, band, n, c_used, w, m, k, w) {
            PortableKernel.matmul_acc_cols(a, b, c, m, k, n, cols);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_product() {
        let a = [1u64, 2, 3, 4, 5, 6]; // 2×3
        let b = [7u64, 8, 9, 10, 11, 12]; // 3×2
        let mut c = [1u64; 4];
        PortableKernel.matmul_acc(&a, &b, &mut c, 2, 3, 2);
        assert_eq!(c, [59, 65, 140, 155]);
    }

    fn naive(a: &[u64], b: &[u64], c: &mut [u64], m: usize, k: usize, n: usize) {
        for i in 0..m {
            for j in 0..n {
                for p in 0..k {
                    c[i * n + j] =
                        c[i * n + j].wrapping_add(a[i * k + p].wrapping_mul(b[p * n + j]));
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn equals_the_naive_product(m in 0usize..40, k in 0usize..40, n in 0usize..40, seed: u64) {
            let mut s = seed;
            let mut next = || {
                s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
                (s ^ (s >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9)
            };
            let a: alloc::vec::Vec<u64> = (0..m * k).map(|_| next()).collect();
            let b: alloc::vec::Vec<u64> = (0..k * n).map(|_| next()).collect();
            let c0: alloc::vec::Vec<u64> = (0..m * n).map(|_| next()).collect();
            let mut want = c0.clone();
            naive(&a, &b, &mut want, m, k, n);
            let mut got = c0.clone();
            PortableKernel.matmul_acc(&a, &b, &mut got, m, k, n);
            proptest::prop_assert_eq!(&got, &want);
            let mut got = c0;
            DetectedKernel::new().matmul_acc(&a, &b, &mut got, m, k, n);
            proptest::prop_assert_eq!(got, want);
        }

        /// Depths across the SIMD kernels' cache blocks (128, 256) and row counts across
        /// their packing thresholds and register tiles (8, 2).
        #[test]
        fn detected_kernel_equals_the_naive_product(m in 0usize..27, k in 0usize..300, n in 0usize..50, seed: u64) {
            let mut s = seed;
            let mut next = || {
                s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
                (s ^ (s >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9)
            };
            let a: alloc::vec::Vec<u64> = (0..m * k).map(|_| next()).collect();
            let b: alloc::vec::Vec<u64> = (0..k * n).map(|_| next()).collect();
            let c0: alloc::vec::Vec<u64> = (0..m * n).map(|_| next()).collect();
            let mut want = c0.clone();
            naive(&a, &b, &mut want, m, k, n);
            for kernel in simd_kernels() {
                let mut got = c0.clone();
                kernel.matmul_acc(&a, &b, &mut got, m, k, n);
                proptest::prop_assert_eq!(&got, &want, "{:?}", kernel.kind());
            }
        }
    }

    /// The detected kernel and, where the CPU has it, the AVX2 kernel (which AVX-512 CPUs
    /// would not use otherwise).
    fn simd_kernels() -> alloc::vec::Vec<DetectedKernel> {
        core::iter::once(DetectedKernel::new())
            .chain(DetectedKernel::avx2())
            .collect()
    }

    #[test]
    fn column_bands_equal_the_full_product_columns() {
        let (m, k, n) = (11, 140, 75);
        let a: alloc::vec::Vec<u64> = (0..m * k).map(|i| (i as u64) * 7 + 3).collect();
        let b: alloc::vec::Vec<u64> = (0..k * n)
            .map(|i| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .collect();
        let mut full = alloc::vec![0u64; m * n];
        naive(&a, &b, &mut full, m, k, n);
        for cols in [0..n, 0..1, 5..40, 17..75, 74..75] {
            let w = cols.len();
            let want: alloc::vec::Vec<u64> = full
                .chunks_exact(n)
                .flat_map(|row| row[cols.clone()].iter().map(|x| x.wrapping_add(1)))
                .collect();
            for kernel in simd_kernels()
                .into_iter()
                .chain([DetectedKernel::portable()])
            {
                let mut got = alloc::vec![1u64; m * w];
                kernel.matmul_acc_cols(&a, &b, &mut got, m, k, n, cols.clone());
                assert_eq!(got, want, "cols {cols:?}, {:?}", kernel.kind());
            }
        }
    }

    /// `len` words of a first operand: multiples of an odd constant, all bits in play.
    fn operand_a(len: usize) -> alloc::vec::Vec<u64> {
        (0..len)
            .map(|i| (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d))
            .collect()
    }

    /// `len` words of a second operand, unlike [`operand_a`]'s.
    fn operand_b(len: usize) -> alloc::vec::Vec<u64> {
        (0..len)
            .map(|i| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xabcd)
            .collect()
    }

    #[test]
    fn detected_kernel_crosses_column_blocks() {
        // n past the SIMD kernels' 1024- and 512-column cache blocks and k past their
        // 128- and 256-deep ones, with and without B packing (AVX2 packs past 64 rows).
        for m in [1, 2, 3, 9, 17, 70] {
            let (k, n) = (260, 2 * 1024 + 37);
            let (a, b) = (operand_a(m * k), operand_b(k * n));
            let mut want = alloc::vec![7u64; m * n];
            naive(&a, &b, &mut want, m, k, n);
            for kernel in simd_kernels() {
                let mut got = alloc::vec![7u64; m * n];
                kernel.matmul_acc(&a, &b, &mut got, m, k, n);
                assert_eq!(got, want, "m = {m}, {:?}", kernel.kind());
            }
        }
    }

    #[test]
    fn tall_products_of_one_to_three_columns() {
        // The LM head as `head · hiddenᵀ`: many rows, a few columns, k past a whole number
        // of vectors, B read at a row stride wider than its columns.
        let (m, k, ldb) = (70, 37, 5);
        let (a, b_wide) = (operand_a(m * k), operand_b(k * ldb));
        for n in 1..=3 {
            let b: alloc::vec::Vec<u64> = b_wide
                .chunks_exact(ldb)
                .flat_map(|row| row[..n].iter().copied())
                .collect();
            let mut want = alloc::vec![3u64; m * n];
            naive(&a, &b, &mut want, m, k, n);
            for kernel in simd_kernels() {
                let mut got = alloc::vec![3u64; m * n];
                kernel.matmul_acc(&a, &b, &mut got, m, k, n);
                assert_eq!(got, want, "n = {n}, {:?}", kernel.kind());
                // The same columns read in place from the wider B.
                let mut got = alloc::vec![3u64; m * n];
                kernel.matmul_acc_cols(&a, &b_wide, &mut got, m, k, ldb, 0..n);
                assert_eq!(got, want, "n = {n} of {ldb}, {:?}", kernel.kind());
            }
        }
    }

    #[test]
    fn wide_rows_cross_column_blocks() {
        let (m, k, n) = (6, 5, 2 * COL_BLOCK + 3);
        let a: alloc::vec::Vec<u64> = (0..m * k as u64 as usize)
            .map(|i| i as u64 * 3 + 1)
            .collect();
        let b: alloc::vec::Vec<u64> = (0..k * n)
            .map(|i| (i as u64).wrapping_mul(0x9e37_79b9))
            .collect();
        let mut want = alloc::vec![5u64; m * n];
        naive(&a, &b, &mut want, m, k, n);
        let mut got = alloc::vec![5u64; m * n];
        PortableKernel.matmul_acc(&a, &b, &mut got, m, k, n);
        assert_eq!(got, want);
    }
}
