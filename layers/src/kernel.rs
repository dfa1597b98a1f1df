//! A multithreaded ring matmul kernel for std hosts: [`ThreadedKernel`].

use std::ops::Range;
use std::sync::Arc;

use puma_core::kernel::{DetectedKernel, MatmulKernel};

/// Products smaller than this many multiply-adds run on the calling thread: below it,
/// spawning threads costs more than it saves.
const MIN_PARALLEL_MACS: usize = 1 << 21;

/// Rows per thread at the least, so each thread fills the inner kernel's 8-row tiles.
const MIN_ROWS_PER_THREAD: usize = 8;

/// Splits a product's rows among scoped threads, each running an inner single-threaded
/// kernel on its band of rows.
#[derive(Clone)]
pub struct ThreadedKernel {
    inner: Arc<dyn MatmulKernel>,
    threads: usize,
}

impl core::fmt::Debug for ThreadedKernel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ThreadedKernel")
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl ThreadedKernel {
    /// The CPU's best single-threaded kernel ([`DetectedKernel`]) on all available cores.
    pub fn new() -> ThreadedKernel {
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        ThreadedKernel::with_inner(Arc::new(DetectedKernel::new()), threads)
    }

    /// `inner` on `threads` threads (at least one).
    pub fn with_inner(inner: Arc<dyn MatmulKernel>, threads: usize) -> ThreadedKernel {
        ThreadedKernel {
            inner,
            threads: threads.max(1),
        }
    }

    /// The number of threads a large product uses.
    pub fn threads(&self) -> usize {
        self.threads
    }
}

impl Default for ThreadedKernel {
    fn default() -> Self {
        ThreadedKernel::new()
    }
}

/// Products with fewer rows than this split their columns among threads (so each thread
/// reads only its share of `b`, which dominates memory traffic when `a` is short); taller
/// ones split rows.
const MIN_ROWS_FOR_ROW_SPLIT: usize = 64;

/// Columns per thread at the least in a column split (whole 16-column SIMD tiles).
const MIN_COLS_PER_THREAD: usize = 64;

impl MatmulKernel for ThreadedKernel {
    fn matmul_acc(&self, a: &[u64], b: &[u64], c: &mut [u64], m: usize, k: usize, n: usize) {
        let macs = m.saturating_mul(k).saturating_mul(n);
        if self.threads == 1 || macs < MIN_PARALLEL_MACS || n == 0 || k == 0 || m == 0 {
            self.inner.matmul_acc(a, b, c, m, k, n);
            return;
        }
        let (Some(a), Some(b), Some(c)) = (
            a.get(..m.saturating_mul(k)),
            b.get(..k.saturating_mul(n)),
            c.get_mut(..m.saturating_mul(n)),
        ) else {
            return;
        };
        if m >= MIN_ROWS_FOR_ROW_SPLIT {
            self.split_rows(a, b, c, m, k, n);
        } else {
            self.split_cols(a, b, c, m, k, n);
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
        self.inner.matmul_acc_cols(a, b, c, m, k, n, cols);
    }
}

impl ThreadedKernel {
    /// Bands of whole 8-row tiles, one per thread; the calling thread takes the first.
    fn split_rows(&self, a: &[u64], b: &[u64], c: &mut [u64], m: usize, k: usize, n: usize) {
        let tiles = m.div_ceil(MIN_ROWS_PER_THREAD);
        let rows = tiles.div_ceil(self.threads) * MIN_ROWS_PER_THREAD;
        let inner = &*self.inner;
        std::thread::scope(|s| {
            let mut bands = c.chunks_mut(rows * n).zip(a.chunks(rows * k));
            let first = bands.next();
            for (c_band, a_band) in bands {
                s.spawn(move || inner.matmul_acc(a_band, b, c_band, c_band.len() / n, k, n));
            }
            if let Some((c_band, a_band)) = first {
                inner.matmul_acc(a_band, b, c_band, c_band.len() / n, k, n);
            }
        });
    }

    /// Column bands, one per thread, each computed into its own buffer and added into `c`
    /// (`m·n` additions, small against the `m·k·n` product when `m` is small).
    fn split_cols(&self, a: &[u64], b: &[u64], c: &mut [u64], m: usize, k: usize, n: usize) {
        let threads = self.threads.min(n / MIN_COLS_PER_THREAD).max(1);
        if threads == 1 {
            self.inner.matmul_acc(a, b, c, m, k, n);
            return;
        }
        // Band widths rounded to whole 16-column tiles.
        let width = n.div_ceil(threads).div_ceil(16) * 16;
        let inner = &*self.inner;
        let bands: Vec<Range<usize>> = (0..n)
            .step_by(width)
            .map(|j0| j0..(j0 + width).min(n))
            .collect();
        let results: Vec<(Range<usize>, Vec<u64>)> = std::thread::scope(|s| {
            let handles: Vec<_> = bands
                .iter()
                .skip(1)
                .map(|cols| {
                    let cols = cols.clone();
                    s.spawn(move || {
                        let mut band = vec![0u64; m * cols.len()];
                        inner.matmul_acc_cols(a, b, &mut band, m, k, n, cols.clone());
                        (cols, band)
                    })
                })
                .collect();
            let mut out = Vec::with_capacity(bands.len());
            if let Some(cols) = bands.first() {
                let mut band = vec![0u64; m * cols.len()];
                inner.matmul_acc_cols(a, b, &mut band, m, k, n, cols.clone());
                out.push((cols.clone(), band));
            }
            // A worker can only fail by panicking inside the inner kernel; re-raise it.
            out.extend(handles.into_iter().map(|h| match h.join() {
                Ok(r) => r,
                Err(e) => std::panic::resume_unwind(e),
            }));
            out
        });
        for (cols, band) in results {
            let w = cols.len();
            for (c_row, band_row) in c.chunks_exact_mut(n).zip(band.chunks_exact(w)) {
                for (y, &x) in c_row[cols.clone()].iter_mut().zip(band_row) {
                    *y = y.wrapping_add(x);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(a: &[u64], b: &[u64], c: &mut [u64], m: usize, k: usize, n: usize) {
        for i in 0..m {
            for p in 0..k {
                for j in 0..n {
                    c[i * n + j] =
                        c[i * n + j].wrapping_add(a[i * k + p].wrapping_mul(b[p * n + j]));
                }
            }
        }
    }

    #[test]
    fn threaded_product_equals_the_naive_product() {
        // Large enough to split (≥ 2^21 multiply-adds), with a ragged last band.
        for (m, k, n, threads) in [
            (37, 300, 200, 2),
            (64, 129, 257, 3),
            (24, 700, 130, 4),
            (80, 300, 90, 2),
            (1, 768, 3000, 2),
        ] {
            let a: Vec<u64> = (0..m * k)
                .map(|i| (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d))
                .collect();
            let b: Vec<u64> = (0..k * n)
                .map(|i| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x55)
                .collect();
            let mut want = vec![3u64; m * n];
            naive(&a, &b, &mut want, m, k, n);
            let mut got = vec![3u64; m * n];
            ThreadedKernel::with_inner(Arc::new(DetectedKernel::new()), threads)
                .matmul_acc(&a, &b, &mut got, m, k, n);
            assert_eq!(got, want, "{m}×{k}×{n} on {threads} threads");
        }
    }
}
