//! The cache blocking the SIMD kernels share: B cut into `KC × NC` blocks, packed into
//! `NR`-column panels when several row tiles read them, and C visited tile by tile.

use alloc::vec::Vec;

/// A kernel's tile and cache-block sizes.
pub(super) struct Plan {
    /// Rows of the register tile.
    pub(super) mr: usize,
    /// Columns of the register tile (and of a packed panel).
    pub(super) nr: usize,
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
/// row stride `ldb`, `c` `m×n` at row stride `ldc`), block by block. B is packed into
/// zero-padded `plan.nr`-column panels when `pack`, and read in place otherwise (the
/// tile must then mask the columns past `nr`).
#[allow(clippy::too_many_arguments)]
pub(super) fn for_each_tile(
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
        packed.resize(
            plan.kc.min(k) * plan.nc.min(n.div_ceil(plan.nr) * plan.nr),
            0,
        );
    }
    let mut jc = 0;
    while jc < n {
        let nc = plan.nc.min(n - jc);
        let mut pc = 0;
        while pc < k {
            let kc = plan.kc.min(k - pc);
            if pack {
                pack_b(plan.nr, b, ldb, (pc, kc), (jc, nc), &mut packed);
            }
            let mut jr = 0;
            while jr < nc {
                let nr = plan.nr.min(nc - jr);
                let (panel, ld_panel): (&[u64], usize) = if pack {
                    (&packed[jr * kc..], plan.nr)
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

/// Copies `B[pc..pc+kc, jc..jc+nc]` (row stride `ldb`) into `nr`-column panels, each
/// `kc × nr` row-major and zero-padded on the right.
fn pack_b(
    nr: usize,
    b: &[u64],
    ldb: usize,
    (pc, kc): (usize, usize),
    (jc, nc): (usize, usize),
    out: &mut [u64],
) {
    for (panel_idx, panel) in out
        .chunks_exact_mut(kc * nr)
        .take(nc.div_ceil(nr))
        .enumerate()
    {
        let j0 = jc + panel_idx * nr;
        let w = nr.min(jc + nc - j0);
        for (p, dst) in panel.chunks_exact_mut(nr).enumerate() {
            let src = &b[(pc + p) * ldb + j0..][..w];
            dst[..w].copy_from_slice(src);
            dst[w..].fill(0);
        }
    }
}
