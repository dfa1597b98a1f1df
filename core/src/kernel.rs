//! Heavy local kernels behind a small trait, so std callers can plug in SIMD or threads.

/// Ring matrix multiplication over Z_2^64 (wrapping), row-major.
pub trait MatmulKernel: Send + Sync {
    /// `c += a · b` where `a` is `m×k`, `b` is `k×n` and `c` is `m×n`, all row-major.
    ///
    /// Callers guarantee the slice lengths; implementations may assume them.
    fn matmul_acc(&self, a: &[u64], b: &[u64], c: &mut [u64], m: usize, k: usize, n: usize);
}

/// The portable kernel: an i-k-j loop with row blocking, no `unsafe`, no threads.
#[derive(Clone, Copy, Debug, Default)]
pub struct PortableKernel;

impl MatmulKernel for PortableKernel {
    fn matmul_acc(&self, a: &[u64], b: &[u64], c: &mut [u64], m: usize, k: usize, n: usize) {
        if n == 0 {
            return;
        }
        for (a_row, c_row) in a.chunks_exact(k.max(1)).zip(c.chunks_exact_mut(n)).take(m) {
            for (&aik, b_row) in a_row.iter().zip(b.chunks_exact(n)) {
                for (cij, &bkj) in c_row.iter_mut().zip(b_row) {
                    *cij = cij.wrapping_add(aik.wrapping_mul(bkj));
                }
            }
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
}
