//! The cache blocking the SIMD kernels share: B cut into `KC × NC` blocks, packed into
//! `NR`-column panels when several row tiles read them, and C visited tile by tile.

use alloc::vec::Vec;

/// A kernel's tile and cache-block sizes (the tile's columns, also a packed panel's, are
/// [`for_each_tile`]'s `NR`).
pub(super) struct Plan {
    /// Rows of the register tile.
    pub(super) mr: usize,
    /// Depth of a cache block.
    pub(super) kc: usize,
    /// Columns of a cache block.
    pub(super) nc: usize,
}

/// One register tile's operands: `mr ≤ plan.mr` rows and `nr ≤ plan.nr` columns of C over
/// a depth of `kc`; A at row stride `lda`, the B panel at row stride `ldb` (`plan.nr` when
/// packed), C at row stride `ldc`.
pub(super) struct Tile<'a, 'c> {
    pub(super) mr: usize,
    pub(super) nr: usize,
    pub(super) kc: usize,
    pub(super) a: &'a [u64],
    pub(super) lda: usize,
    pub(super) b: &'a [u64],
    pub(super) ldb: usize,
    pub(super) c: &'c mut [u64],
    pub(super) ldc: usize,
}

/// Calls `tile` on every register tile of `c += a · b` (`a` `m×k` row-major, `b` `k×n` at
/// row stride `ldb`, `c` `m×n` at row stride `ldc`), block by block, tiles of `NR`
/// columns. B is packed into zero-padded `NR`-column panels when `pack`, and read in place
/// otherwise (the tile must then mask the columns past `nr`).
#[allow(clippy::too_many_arguments)]
pub(super) fn for_each_tile<const NR: usize>(
    plan: &Plan,
    pack: bool,
    a: &[u64],
    b: &[u64],
    ldb: usize,
    c: &mut [u64],
    ldc: usize,
    (m, k, n): (usize, usize, usize),
    mut tile: impl FnMut(Tile<'_, '_>),
) {
    let mut packed: Vec<u64> = Vec::new();
    if pack {
        packed.resize(plan.kc.min(k) * plan.nc.min(n.div_ceil(NR) * NR), 0);
    }
    let mut jc = 0;
    while jc < n {
        let nc = plan.nc.min(n - jc);
        let mut pc = 0;
        while pc < k {
            let kc = plan.kc.min(k - pc);
            if pack {
                pack_b::<NR>(b, ldb, (pc, kc), (jc, nc), &mut packed);
            }
            let mut jr = 0;
            while jr < nc {
                let nr = NR.min(nc - jr);
                let (panel, ld_panel): (&[u64], usize) = if pack {
                    (&packed[jr * kc..], NR)
                } else {
                    (&b[pc * ldb + jc + jr..], ldb)
                };
                let mut ir = 0;
                while ir < m {
                    let mr = plan.mr.min(m - ir);
                    tile(Tile {
                        mr,
                        nr,
                        kc,
                        a: &a[ir * k + pc..],
                        lda: k,
                        b: panel,
                        ldb: ld_panel,
                        c: &mut c[ir * ldc + jc + jr..],
                        ldc,
                    });
                    ir += mr;
                }
                jr += nr;
            }
            pc += kc;
        }
        jc += nc;
    }
}

/// Copies `B[pc..pc+kc, jc..jc+nc]` (row stride `ldb`) into `NR`-column panels, each
/// `kc × NR` row-major and zero-padded on the right.
///
/// Row by row of B, as it lies in memory, each row's whole panels as fixed-size copies:
/// gathered panel by panel instead (`kc` rows `ldb` words apart for each panel, one
/// `memcpy` call per `NR` words), packing took more time than the products it served.
fn pack_b<const NR: usize>(
    b: &[u64],
    ldb: usize,
    (pc, kc): (usize, usize),
    (jc, nc): (usize, usize),
    out: &mut [u64],
) {
    let panels = nc.div_ceil(NR);
    let whole = nc / NR;
    for p in 0..kc {
        let row = &b[(pc + p) * ldb + jc..][..nc];
        let (full, rest) = row.split_at(whole * NR);
        for (q, src) in full.chunks_exact(NR).enumerate() {
            // Both lengths are the constant NR: a copy of fixed size, not a call.
            out[(q * kc + p) * NR..][..NR].copy_from_slice(&src[..NR]);
        }
        if whole < panels {
            let dst = &mut out[(whole * kc + p) * NR..][..NR];
            dst[..rest.len()].copy_from_slice(rest);
            dst[rest.len()..].fill(0);
        }
    }
}
