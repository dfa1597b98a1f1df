//! The AVX2 ring matmul, for x86-64 CPUs without AVX-512 (e.g. AMD Zen 2 and 3). Products
//! of up to 64 rows (prompts, batches, KV-cached steps) stream B row by row as it lies in
//! memory, three rows of A at a time ([`stream_rows`]); larger ones use a 3×8 register
//! tile, with B packed into 8-column panels per `KC × NC` cache block. Products of one to
//! three columns, whatever their rows (the LM head as `head · hiddenᵀ`), are dot products
//! of A's rows with B's columns ([`dots`]). Only [`matmul_acc`] is reachable, and only after
//! [`detected`] said yes.
//!
//! Why streaming for few rows: packing B costs a pass over it, which few rows do not repay,
//! and a row of B is contiguous where a panel's rows are `ldb` words apart. On this
//! project's Zen 3 host (`MATMUL_NUM_THREADS=1 cargo bench -p puma-layers --bench kernel`) the
//! stream made 3.5–5 G products per second for 1 to 64 rows where the packed tile made
//! 1.6–3.9 below 32 rows; from 64 rows on the two are within the host's noise.
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
    _mm256_mullo_epi32, _mm256_set1_epi64x, _mm256_setzero_si256, _mm256_shuffle_epi32,
    _mm256_slli_epi64, _mm256_srli_epi64, _mm256_storeu_si256,
};

use alloc::vec::Vec;

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
    match n {
        // Too few columns for a vector: dot products of A's rows with B's columns (the LM
        // head as `head · hiddenᵀ` for one to three positions).
        0 => return,
        1 => return dots::<1>(a, b, ldb, c, ldc, m, k),
        2 => return dots::<2>(a, b, ldb, c, ldc, m, k),
        3 => return dots::<3>(a, b, ldb, c, ldc, m, k),
        _ => {}
    }
    if m <= STREAM_MAX_ROWS {
        stream_rows(a, b, ldb, c, ldc, (m, k, n));
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

/// Rows of C up to which [`stream_rows`] is used instead of packed tiles (past it, the two
/// measured within noise of each other).
const STREAM_MAX_ROWS: usize = 64;

/// Words of the accumulators of [`stream_group`] (its `low` and `cross` rows for every row
/// of C in a group, 8 KiB): they stay in L1 beside the streamed B rows.
const ROW_ACC_WORDS: usize = 1024;

/// Depth of the B blocks [`stream_rows`] visits: a block of 256 rows by a group's columns
/// (at most 512) is read from memory once and stays in L2 while the other row groups read it.
const STREAM_KC: usize = 256;

/// B rows multiplied into the accumulators per pass of [`axpy_split`].
const DEPTH: usize = 4;

/// `c += a · b` (wrapping), shapes as in [`matmul_acc`], by streaming B row by row as it
/// lies in memory: for each block of columns and of depth, every group of up to [`MR`] rows
/// of A reads each B row once into accumulators in L1, loading and storing them once per
/// [`DEPTH`] B rows. No packing: for a few rows, packing B would cost as much as the product.
fn stream_rows(
    a: &[u64],
    b: &[u64],
    ldb: usize,
    c: &mut [u64],
    ldc: usize,
    (m, k, n): (usize, usize, usize),
) {
    // Columns per block: a multiple of the vector width within the accumulators' budget
    // for the largest group.
    let block = ROW_ACC_WORDS / (2 * m.clamp(1, MR)) / 4 * 4;
    let mut j0 = 0;
    while j0 < n {
        let cols = (j0, block.min(n - j0));
        let mut p0 = 0;
        while p0 < k {
            let depth = (p0, STREAM_KC.min(k - p0));
            let mut i = 0;
            while i < m {
                let rows = MR.min(m - i);
                let (a, c) = (&a[i * k..], &mut c[i * ldc..]);
                match rows {
                    1 => stream_group::<1>(a, k, b, ldb, c, ldc, cols, depth),
                    2 => stream_group::<2>(a, k, b, ldb, c, ldc, cols, depth),
                    _ => stream_group::<MR>(a, k, b, ldb, c, ldc, cols, depth),
                }
                i += rows;
            }
            p0 += depth.1;
        }
        j0 += cols.1;
    }
}

/// `C[0..R, j0..j0+w] += A[0..R, p0..p0+d] · B[p0..p0+d, j0..j0+w]` (wrapping), A of row
/// stride `lda`, B of `ldb`, C of `ldc`, with `2·R·w ≤ ROW_ACC_WORDS`.
#[allow(clippy::too_many_arguments)]
fn stream_group<const R: usize>(
    a: &[u64],
    lda: usize,
    b: &[u64],
    ldb: usize,
    c: &mut [u64],
    ldc: usize,
    (j0, w): (usize, usize),
    (p0, d): (usize, usize),
) {
    let vec_w = w / 4 * 4;
    let mut low = [0u64; ROW_ACC_WORDS / 2];
    let mut cross = [0u64; ROW_ACC_WORDS / 2];
    let mut p = p0;
    while p < p0 + d {
        // DEPTH B rows at a time; past the block the rows repeat its last with a zero
        // factor.
        let rows = DEPTH.min(p0 + d - p);
        let b_rows: [&[u64]; DEPTH] =
            core::array::from_fn(|q| &b[(p + q.min(rows - 1)) * ldb + j0..][..w]);
        let xs: [[u64; R]; DEPTH] = core::array::from_fn(|q| {
            core::array::from_fn(|r| if q < rows { a[r * lda + p + q] } else { 0 })
        });
        // SAFETY: `detected()` was checked by the caller of `matmul_acc` (the only entry);
        // every B row holds `w ≥ vec_w` words, and `low` and `cross` hold R rows of
        // `w ≥ vec_w` words.
        unsafe { axpy_split(&xs, &b_rows, vec_w, &mut low, &mut cross, w) };
        // The columns past the last whole vector: full products into `low`.
        for (b_row, xs) in b_rows.iter().zip(&xs).take(rows) {
            for (r, &x) in xs.iter().enumerate() {
                for (l, &y) in low[r * w..][vec_w..w].iter_mut().zip(&b_row[vec_w..]) {
                    *l = l.wrapping_add(x.wrapping_mul(y));
                }
            }
        }
        p += rows;
    }
    for r in 0..R {
        let (l, cr) = (&low[r * w..][..w], &cross[r * w..][..w]);
        for ((y, l), cr) in c[r * ldc + j0..][..w].iter_mut().zip(l).zip(cr) {
            // The two 32-bit halves of the cross lane, summed modulo 2^32 (0 in the tail
            // columns).
            let cross = cr.wrapping_add(cr >> 32);
            *y = y.wrapping_add(l.wrapping_add(cross << 32));
        }
    }
}

/// For each row r < R and each of the DEPTH B rows `ys[q]` with its factor `xs[q][r]`:
/// `low[r·stride..] += xₗ·yₗ` and, in the two 32-bit halves of each `cross[r·stride..]`
/// lane, `+= xₕ·yₗ` and `xₗ·yₕ` (both modulo 2^32), lane by lane over the first `len`
/// words (a multiple of 4). Each B vector is loaded once for all R rows, each accumulator
/// once for all DEPTH B rows, and two multiplies make 4 products, as in [`micro`].
///
/// # Safety
/// AVX2 is available; every `ys[q]` holds at least `len` words, and `low` and `cross` at
/// least `(R-1)·stride + len`.
#[target_feature(enable = "avx2")]
unsafe fn axpy_split<const R: usize>(
    xs: &[[u64; R]; DEPTH],
    ys: &[&[u64]; DEPTH],
    len: usize,
    low: &mut [u64],
    cross: &mut [u64],
    stride: usize,
) {
    let mut x = [[_mm256_setzero_si256(); R]; DEPTH];
    let mut x_swapped = [[_mm256_setzero_si256(); R]; DEPTH];
    for q in 0..DEPTH {
        for r in 0..R {
            // Opaque to the optimiser: knowing that a lane's high half is the low one,
            // LLVM turned `_mm256_mul_epu32` into a full 64-bit product (a second
            // `vpmuludq`, of a high half it did not see was zero) in this loop.
            x[q][r] = core::hint::black_box(_mm256_set1_epi64x(xs[q][r] as i64));
            x_swapped[q][r] = _mm256_set1_epi64x(xs[q][r].rotate_left(32) as i64);
        }
    }
    let yp: [*const u64; DEPTH] = core::array::from_fn(|q| ys[q].as_ptr());
    let (lp, cp) = (low.as_mut_ptr(), cross.as_mut_ptr());
    for j in (0..len / 4).map(|q| 4 * q) {
        // SAFETY: j + 4 ≤ len ≤ ys[q].len(), and r·stride + j + 4 ≤ ·stride + len,
        // within `low` and `cross`.
        unsafe {
            let mut v = [_mm256_setzero_si256(); DEPTH];
            for q in 0..DEPTH {
                v[q] = _mm256_loadu_si256(yp[q].add(j).cast());
            }
            for r in 0..R {
                let at = r * stride + j;
                let mut l = _mm256_loadu_si256(lp.add(at).cast());
                let mut c = _mm256_loadu_si256(cp.add(at).cast());
                for q in 0..DEPTH {
                    l = _mm256_add_epi64(l, _mm256_mul_epu32(x[q][r], v[q]));
                    c = _mm256_add_epi32(c, _mm256_mullo_epi32(x_swapped[q][r], v[q]));
                }
                _mm256_storeu_si256(lp.add(at).cast(), l);
                _mm256_storeu_si256(cp.add(at).cast(), c);
            }
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

/// `c += a · b` (wrapping) for B and C of N < 4 columns, shapes as in [`matmul_acc`]: B's
/// columns are gathered into contiguous vectors (N·k words; A is the large operand here),
/// and each row of A is loaded once for its N dot products.
#[allow(clippy::too_many_arguments)]
fn dots<const N: usize>(
    a: &[u64],
    b: &[u64],
    ldb: usize,
    c: &mut [u64],
    ldc: usize,
    m: usize,
    k: usize,
) {
    let cols: Vec<u64> = (0..N)
        .flat_map(|j| (0..k).map(move |p| b[p * ldb + j]))
        .collect();
    let cols: [&[u64]; N] = core::array::from_fn(|j| &cols[j * k..][..k]);
    for (i, a_row) in a.chunks_exact(k.max(1)).take(m).enumerate() {
        // SAFETY: `detected()` was checked by the caller of `matmul_acc` (the only entry),
        // and every column holds k words, as the row does.
        let sums = unsafe { dot_rows(&a_row[..k], &cols) };
        for (y, s) in c[i * ldc..][..N].iter_mut().zip(sums) {
            *y = y.wrapping_add(s);
        }
    }
}

/// `Σ_p x_p·ys[j][p]` (wrapping) for each j < N, over the length of `x`: each vector of
/// `x` is loaded once for the N columns, and two multiplies make 4 products (`vpmuludq`
/// for the low halves, `vpmulld` by `x` with its halves swapped for both cross terms).
///
/// # Safety
/// AVX2 is available, and every `ys[j]` is at least as long as `x`.
#[target_feature(enable = "avx2")]
unsafe fn dot_rows<const N: usize>(x: &[u64], ys: &[&[u64]; N]) -> [u64; N] {
    let mut low = [[_mm256_setzero_si256(); 2]; N];
    let mut cross = [[_mm256_setzero_si256(); 2]; N];
    let whole = x.len() / 8 * 8;
    let xp = x.as_ptr();
    let yp: [*const u64; N] = core::array::from_fn(|j| ys[j].as_ptr());
    for at in (0..whole).step_by(8) {
        // Two vectors a pass, each into its own accumulators (two chains of additions).
        for h in 0..2 {
            // SAFETY: at + 4h + 4 ≤ whole ≤ x.len() ≤ ys[j].len().
            unsafe {
                let xv = _mm256_loadu_si256(xp.add(at + 4 * h).cast());
                // Each lane's 32-bit halves swapped: (x_h, x_l).
                let x_swapped = _mm256_shuffle_epi32::<0b1011_0001>(xv);
                for j in 0..N {
                    let yv = _mm256_loadu_si256(yp[j].add(at + 4 * h).cast());
                    low[j][h] = _mm256_add_epi64(low[j][h], _mm256_mul_epu32(xv, yv));
                    cross[j][h] = _mm256_add_epi32(cross[j][h], _mm256_mullo_epi32(x_swapped, yv));
                }
            }
        }
    }
    let mut sums = [0u64; N];
    for (j, s) in sums.iter_mut().enumerate() {
        let tail = x[whole..]
            .iter()
            .zip(&ys[j][whole..])
            .fold(0u64, |s, (&a, &b)| s.wrapping_add(a.wrapping_mul(b)));
        let sum = _mm256_add_epi64(
            combine_halves(low[j][0], cross[j][0]),
            combine_halves(low[j][1], cross[j][1]),
        );
        *s = lanes(sum).iter().fold(tail, |s, &v| s.wrapping_add(v));
    }
    sums
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
