//! The AVX-512 ring matmul: `vpmullq` products in an 8×16 register tile, with B packed
//! into 16-column panels per `KC × NC` cache block. Only [`matmul_acc`] is reachable, and
//! only after [`detected`] said yes.
//!
//! Why this shape: Z_2^64 products are one `vpmullq` per 8 lanes, so the tile keeps 16
//! accumulators (8 rows × 2 vectors) in registers and reuses each loaded B vector for 8
//! rows and each broadcast A value for 16 columns. A rows are read in place (8 sequential
//! streams); B is packed when at least two row tiles share it, and read in place otherwise
//! (one-row products such as the LM head would spend as long packing as multiplying).
#![allow(unsafe_code)]

use core::arch::x86_64::{
    __m512i, __mmask8, _mm512_add_epi64, _mm512_loadu_si512, _mm512_mask_storeu_epi64,
    _mm512_maskz_loadu_epi64, _mm512_mullo_epi64, _mm512_reduce_add_epi64, _mm512_set1_epi64,
    _mm512_setzero_si512,
};

use super::blocking::{Plan, for_each_tile};
use super::x86;

/// Rows of the register tile.
const MR: usize = 8;
/// Columns of the register tile (two vectors of 8 lanes).
const NR: usize = 16;
/// Depth of a cache block: a packed B panel (`KC × NR` words, 16 KiB) stays in L1.
const KC: usize = 128;
/// Columns of a cache block: the packed block (`KC × NC` words, 1 MiB) stays in L2.
const NC: usize = 1024;

/// Whether this CPU and OS support the AVX-512 F and DQ instructions the kernel uses.
pub(super) fn detected() -> bool {
    // CPUID leaf 7 EBX bits 16/17: AVX-512 F/DQ. XCR0 bits 1, 2, 5, 6, 7: the OS saves
    // SSE, AVX and all AVX-512 state.
    let f_dq = (1 << 16) | (1 << 17);
    x86::leaf7_ebx().is_some_and(|ebx| ebx & f_dq == f_dq) && x86::os_saves(0xe6)
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
        // A matrix-vector product (e.g. the LM head as `wte · h`): one dot product per
        // row, 8 lanes over k, instead of tiles with 15 of 16 columns masked off.
        for (i, c_i) in c.iter_mut().step_by(ldc.max(1)).take(m).enumerate() {
            *c_i = c_i.wrapping_add(dot(&a[i * k..][..k], &b[..k]));
        }
        return;
    }
    // B is packed when at least two row tiles share it.
    let plan = Plan {
        mr: MR,
        kc: KC,
        nc: NC,
    };
    for_each_tile::<NR>(&plan, m > MR, a, b, ldb, c, ldc, (m, k, n), |t| {
        tile(t.mr, t.nr, t.kc, t.a, t.lda, t.b, t.ldb, t.c, t.ldc)
    });
}

/// One register tile with `mr ≤ MR` rows: dispatches to the unrolled kernel for `mr`.
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
    // The bounds the unsafe loads and stores rely on, checked once per tile.
    let ok = kc > 0
        && nr > 0
        && nr <= NR
        && a.len() >= (mr - 1) * lda + kc
        && b.len() >= (kc - 1) * ldb + nr
        && c.len() >= (mr - 1) * ldc + nr
        && ldb >= nr;
    if !ok {
        return;
    }
    let lo = lane_mask(nr);
    let hi = lane_mask(nr.saturating_sub(8));
    // SAFETY: `detected()` was checked by the caller of `matmul_acc` (the only entry), and
    // the bounds above cover every unmasked lane the kernel touches.
    unsafe {
        match mr {
            1 => micro::<1>(kc, a, lda, b, ldb, lo, hi, c, ldc),
            2 => micro::<2>(kc, a, lda, b, ldb, lo, hi, c, ldc),
            3 => micro::<3>(kc, a, lda, b, ldb, lo, hi, c, ldc),
            4 => micro::<4>(kc, a, lda, b, ldb, lo, hi, c, ldc),
            5 => micro::<5>(kc, a, lda, b, ldb, lo, hi, c, ldc),
            6 => micro::<6>(kc, a, lda, b, ldb, lo, hi, c, ldc),
            7 => micro::<7>(kc, a, lda, b, ldb, lo, hi, c, ldc),
            _ => micro::<MR>(kc, a, lda, b, ldb, lo, hi, c, ldc),
        }
    }
}

/// `Σ x_p·y_p` (wrapping) of two equally long slices.
fn dot(x: &[u64], y: &[u64]) -> u64 {
    let n = x.len().min(y.len());
    // SAFETY: `detected()` was checked by the caller of `matmul_acc` (the only entry), and
    // `n` is within both slices.
    unsafe { dot_avx512(&x[..n], &y[..n]) }
}

/// # Safety
/// AVX-512 F and DQ are available and `x.len() == y.len()`.
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn dot_avx512(x: &[u64], y: &[u64]) -> u64 {
    let mut acc = [_mm512_setzero_si512(); 4];
    let (xc, yc) = (x.chunks_exact(32), y.chunks_exact(32));
    let tail: u64 = xc
        .remainder()
        .iter()
        .zip(yc.remainder())
        .fold(0u64, |s, (&a, &b)| s.wrapping_add(a.wrapping_mul(b)));
    for (xs, ys) in xc.zip(yc) {
        for (j, acc_j) in acc.iter_mut().enumerate() {
            // SAFETY: each chunk holds 32 words, so words 8j..8j+8 are in bounds.
            let (xv, yv) = unsafe {
                (
                    _mm512_loadu_si512(xs.as_ptr().add(8 * j).cast()),
                    _mm512_loadu_si512(ys.as_ptr().add(8 * j).cast()),
                )
            };
            *acc_j = _mm512_add_epi64(*acc_j, _mm512_mullo_epi64(xv, yv));
        }
    }
    let sum = _mm512_add_epi64(
        _mm512_add_epi64(acc[0], acc[1]),
        _mm512_add_epi64(acc[2], acc[3]),
    );
    (_mm512_reduce_add_epi64(sum) as u64).wrapping_add(tail)
}

/// The mask of the first `w.min(8)` lanes.
fn lane_mask(w: usize) -> __mmask8 {
    if w >= 8 {
        0xff
    } else {
        ((1u16 << w) - 1) as u8
    }
}

/// `C[0..R, 0..nr] += A[0..R, 0..kc] · B[0..kc, 0..nr]`, lanes past `nr` masked off.
///
/// # Safety
/// AVX-512 F and DQ are available; `a` holds `(R-1)·lda + kc` words, `b` holds
/// `(kc-1)·ldb + nr` words, `c` holds `(R-1)·ldc + nr` words, and `lo`/`hi` enable only
/// the lanes below `nr`.
#[target_feature(enable = "avx512f,avx512dq")]
#[allow(clippy::too_many_arguments)]
unsafe fn micro<const R: usize>(
    kc: usize,
    a: &[u64],
    lda: usize,
    b: &[u64],
    ldb: usize,
    lo: __mmask8,
    hi: __mmask8,
    c: &mut [u64],
    ldc: usize,
) {
    let mut acc: [[__m512i; 2]; R] = [[_mm512_setzero_si512(); 2]; R];
    let ap = a.as_ptr();
    let bp = b.as_ptr();
    for p in 0..kc {
        // SAFETY: row p of the panel starts at p·ldb < b.len(); lanes past nr are masked,
        // and masked-off lanes are never accessed. `wrapping_add` keeps the address
        // computation defined even when the high half is wholly masked.
        let (bl, bh) = unsafe {
            let row = bp.wrapping_add(p * ldb);
            (
                _mm512_maskz_loadu_epi64(lo, row.cast()),
                _mm512_maskz_loadu_epi64(hi, row.wrapping_add(8).cast()),
            )
        };
        for (r, acc_r) in acc.iter_mut().enumerate() {
            // SAFETY: r·lda + p < (R-1)·lda + kc ≤ a.len().
            let x = _mm512_set1_epi64(unsafe { *ap.add(r * lda + p) } as i64);
            acc_r[0] = _mm512_add_epi64(acc_r[0], _mm512_mullo_epi64(x, bl));
            acc_r[1] = _mm512_add_epi64(acc_r[1], _mm512_mullo_epi64(x, bh));
        }
    }
    let cp = c.as_mut_ptr();
    for (r, acc_r) in acc.iter().enumerate() {
        // SAFETY: row r of C starts at r·ldc and holds nr ≤ 16 words within c; the masks
        // enable only those lanes.
        unsafe {
            let row = cp.wrapping_add(r * ldc);
            let hi_row = row.wrapping_add(8);
            let c0 = _mm512_maskz_loadu_epi64(lo, row.cast());
            let c1 = _mm512_maskz_loadu_epi64(hi, hi_row.cast());
            _mm512_mask_storeu_epi64(row.cast(), lo, _mm512_add_epi64(c0, acc_r[0]));
            _mm512_mask_storeu_epi64(hi_row.cast(), hi, _mm512_add_epi64(c1, acc_r[1]));
        }
    }
}
