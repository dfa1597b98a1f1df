//! The AVX2 ring matmul, for x86-64 CPUs without AVX-512 (e.g. AMD Zen 2 and 3): products
//! in a 3×8 register tile, with B packed into 8-column panels per `KC × NC` cache block;
//! products of up to three rows stream B by rows instead. Only [`matmul_acc`] is reachable,
//! and only after [`detected`] said yes.
//!
//! Why this shape: AVX2 has no 64-bit lane multiply. Modulo 2^64,
//! `x·y = xₗyₗ + 2^32·(xₗyₕ + xₕyₗ)`, and the cross terms only matter modulo 2^32. So the
//! tile multiplies each B vector by two broadcasts of the A value: `vpmuludq` by `x` gives
//! the 64-bit `xₗyₗ`, `vpmulld` by `x` with its halves swapped gives `xₕyₗ` and `xₗyₕ` in
//! the two 32-bit halves of each lane, and the halves are summed once per tile: two
//! multiplies per 4 products. The 12 accumulators (3 rows × 2 vectors × low and cross), the
//! two B vectors and the two broadcasts fill the 16 ymm registers.
#![allow(unsafe_code)]

use core::arch::x86_64::{
    __m256i, _mm256_add_epi32, _mm256_add_epi64, _mm256_loadu_si256, _mm256_mul_epu32,
    _mm256_mullo_epi32, _mm256_set1_epi64x, _mm256_setzero_si256, _mm256_slli_epi64,
    _mm256_srli_epi64, _mm256_storeu_si256,
};

use super::blocking::{Plan, for_each_tile};
use super::x86;

/// Rows of the register tile.
const MR: usize = 3;
/// Columns of the register tile (two vectors of 4 lanes).
const NR: usize = 8;
/// Depth of a cache block: a packed B panel (`KC × NR` words, 8 KiB) stays in L1.
const KC: usize = 256;
/// Columns of a cache block: the packed block (`KC × NC` words, 1 MiB) stays in L2.
const NC: usize = 512;

/// Whether this CPU and OS support AVX2.
pub(super) fn detected() -> bool {
    // CPUID leaf 7 EBX bit 5: AVX2; XCR0 bits 1 and 2: the OS saves SSE and AVX state.
    x86::leaf7_ebx().is_some_and(|ebx| ebx & (1 << 5) != 0) && x86::os_saves(0x6)
}

/// `c += a · b` (wrapping) for `a` `m×k` row-major, `b` `k×n` with row stride `ldb`,
/// `c` `m×n` with row stride `ldc`. The caller checked [`detected`] and the slice lengths
/// (`a`: `m·k`, `b`: `(k-1)·ldb + n`, `c`: `(m-1)·ldc + n`, `ldb, ldc ≥ n`).
#[allow(clippy::too_many_arguments)]
pub(super) fn matmul_acc(
    a: &[u64],
    b: &[u64],
    ldb: usize,
    c: &mut [u64],
    ldc: usize,
    m: usize,
    k: usize,
    n: usize,
) {
    if n == 1 && ldb == 1 {
        // A matrix-vector product (e.g. the LM head as `wte · h`): one dot product per row.
        for (i, c_i) in c.iter_mut().step_by(ldc.max(1)).take(m).enumerate() {
            *c_i = c_i.wrapping_add(dot(&a[i * k..][..k], &b[..k]));
        }
        return;
    }
    if m <= MR {
        // A single row tile (a KV-cached step's products, the LM head as `h · wteᵀ`): B is
        // streamed row by row, as it lies in memory, instead of in column panels whose
        // rows are `ldb` words apart and which no other row tile would reuse.
        for (i, a_row) in a.chunks_exact(k).take(m).enumerate() {
            row_acc(a_row, b, ldb, &mut c[i * ldc..][..n], n);
        }
        return;
    }
    // Past the branch above at least two row tiles share each block of B: it is packed.
    let plan = Plan {
        mr: MR,
        kc: KC,
        nc: NC,
    };
    for_each_tile::<NR>(&plan, true, a, b, ldb, c, ldc, (m, k, n), |t| {
        tile(t.mr, t.nr, t.kc, t.a, t.lda, t.b, t.ldb, t.c, t.ldc)
    });
}

/// Columns of C accumulated at once by [`row_acc`]: its two accumulator rows (8 KiB)
/// stay in L1 beside the streamed B rows.
const ROW_BLOCK: usize = 512;

/// `c_row += a_row · B[.., 0..n]` (wrapping) with B of row stride `ldb`: for each block of
/// columns, every B row is streamed once into accumulators of `Σ xₗyₗ` and the cross terms.
fn row_acc(a_row: &[u64], b: &[u64], ldb: usize, c_row: &mut [u64], n: usize) {
    let mut j0 = 0;
    while j0 < n {
        let w = ROW_BLOCK.min(n - j0);
        let vec_w = w / 4 * 4;
        let mut low = [0u64; ROW_BLOCK];
        let mut cross = [0u64; ROW_BLOCK];
        for (p, &x) in a_row.iter().enumerate() {
            let b_row = &b[p * ldb + j0..][..w];
            // SAFETY: `detected()` was checked by the caller of `matmul_acc` (the only
            // entry); `b_row`, `low` and `cross` hold at least `vec_w` words.
            unsafe { axpy_split(x, &b_row[..vec_w], &mut low[..vec_w], &mut cross[..vec_w]) };
            // The columns past the last whole vector: full products into `low`.
            for (l, &y) in low[vec_w..w].iter_mut().zip(&b_row[vec_w..]) {
                *l = l.wrapping_add(x.wrapping_mul(y));
            }
        }
        for ((y, l), cr) in c_row[j0..j0 + w].iter_mut().zip(&low).zip(&cross) {
            *y = y.wrapping_add(l.wrapping_add(cr << 32));
        }
        j0 += w;
    }
}

/// `low += xₗ·yₗ` and `cross += xₗ·yₕ + xₕ·yₗ`, lane by lane over `y` (whose length is a
/// multiple of 4, as are `low`'s and `cross`'s, all equal).
///
/// # Safety
/// AVX2 is available; `low` and `cross` are at least as long as `y`.
#[target_feature(enable = "avx2")]
unsafe fn axpy_split(x: u64, y: &[u64], low: &mut [u64], cross: &mut [u64]) {
    let xv = _mm256_set1_epi64x(x as i64);
    let xh = _mm256_set1_epi64x((x >> 32) as i64);
    let (yp, lp, cp) = (y.as_ptr(), low.as_mut_ptr(), cross.as_mut_ptr());
    for j in (0..y.len() / 4).map(|q| 4 * q) {
        // SAFETY: j + 4 ≤ y.len() ≤ low.len(), cross.len().
        unsafe {
            let yv = _mm256_loadu_si256(yp.add(j).cast());
            let (l, c) = split_product(xv, xh, yv, _mm256_srli_epi64::<32>(yv));
            let lo = _mm256_loadu_si256(lp.add(j).cast());
            let cr = _mm256_loadu_si256(cp.add(j).cast());
            _mm256_storeu_si256(lp.add(j).cast(), _mm256_add_epi64(lo, l));
            _mm256_storeu_si256(cp.add(j).cast(), _mm256_add_epi64(cr, c));
        }
    }
}

/// One register tile with `mr ≤ MR` rows and `nr ≤ NR` columns of C; `b` holds whole
/// rows of NR words (packed and zero-padded when `nr < NR`).
#[allow(clippy::too_many_arguments)]
fn tile(
    mr: usize,
    nr: usize,
    kc: usize,
    a: &[u64],
    lda: usize,
    b: &[u64],
    ldb: usize,
    c: &mut [u64],
    ldc: usize,
) {
    // The bounds the unsafe loads rely on, checked once per tile.
    let ok = kc > 0
        && (1..=MR).contains(&mr)
        && (1..=NR).contains(&nr)
        && a.len() >= (mr - 1) * lda + kc
        && b.len() >= (kc - 1) * ldb + NR
        && ldb >= NR
        && c.len() >= (mr - 1) * ldc + nr;
    if !ok {
        return;
    }
    let mut sums = [[0u64; NR]; MR];
    // SAFETY: `detected()` was checked by the caller of `matmul_acc` (the only entry), and
    // the bounds above cover every word the kernel loads.
    unsafe {
        match mr {
            1 => sums[..1].copy_from_slice(&micro::<1>(kc, a, lda, b, ldb)),
            2 => sums[..2].copy_from_slice(&micro::<2>(kc, a, lda, b, ldb)),
            _ => sums.copy_from_slice(&micro::<MR>(kc, a, lda, b, ldb)),
        }
    }
    for (r, sum) in sums.iter().enumerate().take(mr) {
        for (y, s) in c[r * ldc..][..nr].iter_mut().zip(sum) {
            *y = y.wrapping_add(*s);
        }
    }
}

/// `Σ x_p·y_p` (wrapping) of two equally long slices.
fn dot(x: &[u64], y: &[u64]) -> u64 {
    let n = x.len().min(y.len());
    // SAFETY: `detected()` was checked by the caller of `matmul_acc` (the only entry), and
    // `n` is within both slices.
    unsafe { dot_avx2(&x[..n], &y[..n]) }
}

/// The 64-bit products of 4 lanes, split as `(xₗyₗ, xₗyₕ + xₕyₗ)`.
///
/// # Safety
/// AVX2 is available.
#[target_feature(enable = "avx2")]
fn split_product(x: __m256i, xh: __m256i, y: __m256i, yh: __m256i) -> (__m256i, __m256i) {
    (
        _mm256_mul_epu32(x, y),
        _mm256_add_epi64(_mm256_mul_epu32(x, yh), _mm256_mul_epu32(xh, y)),
    )
}

/// `low + 2^32 · cross`, lane by lane (wrapping).
///
/// # Safety
/// AVX2 is available.
#[target_feature(enable = "avx2")]
fn combine(low: __m256i, cross: __m256i) -> __m256i {
    _mm256_add_epi64(low, _mm256_slli_epi64::<32>(cross))
}

/// `low + 2^32 · (c₀ + c₁)`, lane by lane (wrapping), where `c₀` and `c₁` are the low and
/// high 32-bit halves of each lane of `cross` (sums of `xₕyₗ` and `xₗyₕ` modulo 2^32).
///
/// # Safety
/// AVX2 is available.
#[target_feature(enable = "avx2")]
fn combine_halves(low: __m256i, cross: __m256i) -> __m256i {
    let sum = _mm256_add_epi32(cross, _mm256_srli_epi64::<32>(cross));
    _mm256_add_epi64(low, _mm256_slli_epi64::<32>(sum))
}

/// The 4 lanes of `v`.
///
/// # Safety
/// AVX2 is available.
#[target_feature(enable = "avx2")]
fn lanes(v: __m256i) -> [u64; 4] {
    let mut out = [0u64; 4];
    // SAFETY: `out` holds 4 words, the 32 bytes the store writes.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) };
    out
}

/// # Safety
/// AVX2 is available and `x.len() == y.len()`.
#[target_feature(enable = "avx2")]
unsafe fn dot_avx2(x: &[u64], y: &[u64]) -> u64 {
    let (mut low, mut cross) = ([_mm256_setzero_si256(); 2], [_mm256_setzero_si256(); 2]);
    let (xc, yc) = (x.chunks_exact(8), y.chunks_exact(8));
    let tail: u64 = xc
        .remainder()
        .iter()
        .zip(yc.remainder())
        .fold(0u64, |s, (&a, &b)| s.wrapping_add(a.wrapping_mul(b)));
    for (xs, ys) in xc.zip(yc) {
        for j in 0..2 {
            // SAFETY: each chunk holds 8 words, so words 4j..4j+4 are in bounds.
            let (xv, yv) = unsafe {
                (
                    _mm256_loadu_si256(xs.as_ptr().add(4 * j).cast()),
                    _mm256_loadu_si256(ys.as_ptr().add(4 * j).cast()),
                )
            };
            let (l, c) = split_product(
                xv,
                _mm256_srli_epi64::<32>(xv),
                yv,
                _mm256_srli_epi64::<32>(yv),
            );
            low[j] = _mm256_add_epi64(low[j], l);
            cross[j] = _mm256_add_epi64(cross[j], c);
        }
    }
    let sum = _mm256_add_epi64(combine(low[0], cross[0]), combine(low[1], cross[1]));
    lanes(sum).iter().fold(tail, |s, &v| s.wrapping_add(v))
}

/// `A[0..R, 0..kc] · B[0..kc, 0..NR]` (wrapping), row by row.
///
/// # Safety
/// AVX2 is available; `a` holds `(R-1)·lda + kc` words and `b` holds `(kc-1)·ldb + NR`.
#[target_feature(enable = "avx2")]
unsafe fn micro<const R: usize>(
    kc: usize,
    a: &[u64],
    lda: usize,
    b: &[u64],
    ldb: usize,
) -> [[u64; NR]; R] {
    let mut low: [[__m256i; 2]; R] = [[_mm256_setzero_si256(); 2]; R];
    let mut cross: [[__m256i; 2]; R] = [[_mm256_setzero_si256(); 2]; R];
    let ap = a.as_ptr();
    let bp = b.as_ptr();
    for p in 0..kc {
        // SAFETY: row p of the panel starts at p·ldb and holds NR words within b.
        let (b0, b1) = unsafe {
            let row = bp.add(p * ldb);
            (
                _mm256_loadu_si256(row.cast()),
                _mm256_loadu_si256(row.add(4).cast()),
            )
        };
        for r in 0..R {
            // SAFETY: r·lda + p < (R-1)·lda + kc ≤ a.len().
            let av = unsafe { *ap.add(r * lda + p) };
            let x = _mm256_set1_epi64x(av as i64);
            let x_swapped = _mm256_set1_epi64x(av.rotate_left(32) as i64);
            low[r][0] = _mm256_add_epi64(low[r][0], _mm256_mul_epu32(x, b0));
            low[r][1] = _mm256_add_epi64(low[r][1], _mm256_mul_epu32(x, b1));
            cross[r][0] = _mm256_add_epi32(cross[r][0], _mm256_mullo_epi32(x_swapped, b0));
            cross[r][1] = _mm256_add_epi32(cross[r][1], _mm256_mullo_epi32(x_swapped, b1));
        }
    }
    let mut out = [[0u64; NR]; R];
    for ((o, l), c) in out.iter_mut().zip(&low).zip(&cross) {
        let (v0, v1) = (
            lanes(combine_halves(l[0], c[0])),
            lanes(combine_halves(l[1], c[1])),
        );
        o[..4].copy_from_slice(&v0);
        o[4..].copy_from_slice(&v1);
    }
    out
}
