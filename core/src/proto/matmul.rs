use alloc::vec;
use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::share::{Component, Shares, Summands};

use super::{reshare, reshare_trunc};

/// Matrix product `X·Y` of an `m×k` and a `k×n` shared matrix (row-major), over Z_2^64.
///
/// Party i computes `Z_i = X_i·(Y_i + Y_{i+1}) + X_{i+1}·Y_i` with two local products and
/// reshares the `m×n` result: communication is proportional to the output, independent of
/// `k`. Exact.
///
/// Rounds: 1. Bytes: 8·m·n per party.
///
/// # Errors
/// `Misuse` if the lengths do not match the dimensions; `Protocol` if a message is
/// malformed.
pub async fn matmul(
    ctx: &mut Ctx,
    x: &Shares,
    y: &Shares,
    m: usize,
    k: usize,
    n: usize,
) -> Result<Shares, Error> {
    matmul_batch(ctx, x, y, 1, (m, k, n)).await
}

/// Fixed-point matrix product: [`matmul`] and a truncation by the session's fractional
/// bits fused into the reshare (see [`super::mul_fixed`]).
///
/// Rounds: 2. Bits per output element, summed over the parties: 264 at f = 18 (a reshare
/// and a separate truncation: 328).
///
/// # Errors
/// As [`matmul`] and [`trunc`](super::trunc()).
pub async fn matmul_fixed(
    ctx: &mut Ctx,
    x: &Shares,
    y: &Shares,
    m: usize,
    k: usize,
    n: usize,
) -> Result<Shares, Error> {
    matmul_batch_fixed(ctx, x, y, 1, (m, k, n)).await
}

/// [`matmul_batch`] with the truncation by the session's fractional bits fused into the
/// reshare, as [`matmul_fixed`].
///
/// Rounds: 2. Bits per output element: those of [`matmul_fixed`].
///
/// # Errors
/// As [`matmul_batch`].
pub async fn matmul_batch_fixed(
    ctx: &mut Ctx,
    x: &Shares,
    y: &Shares,
    batch: usize,
    dims: (usize, usize, usize),
) -> Result<Shares, Error> {
    let f = ctx.fixed().frac_bits();
    matmul_batch_trunc(ctx, x, y, batch, dims, f).await
}

/// [`matmul_batch`] truncated by `d` bits in its reshare, for operands whose fractional
/// bits add up to f + `d` (the softmax's unnormalised rows at f + 4 bits times V).
///
/// Rounds: 2. Bits per output element: 128 + 64 + 4·`d` in total.
///
/// # Errors
/// As [`matmul_batch`], and `Misuse` unless 1 ≤ `d` ≤ 62.
pub(crate) async fn matmul_batch_trunc(
    ctx: &mut Ctx,
    x: &Shares,
    y: &Shares,
    batch: usize,
    dims: (usize, usize, usize),
    d: u32,
) -> Result<Shares, Error> {
    let z = batch_terms(ctx, x, y, batch, dims).await?;
    reshare_trunc(ctx, z, d).await
}

/// A batch of independent matrix products `X_b·Y_b` (b < `batch`), each `m×k` by `k×n`,
/// stored back to back: all outputs are reshared together, so attention heads (or any
/// other batch) cost one round together.
///
/// Rounds: 1. Bytes: 8·batch·m·n per party.
///
/// # Errors
/// `Misuse` if the lengths do not match the dimensions; `Protocol` if a message is
/// malformed.
pub async fn matmul_batch(
    ctx: &mut Ctx,
    x: &Shares,
    y: &Shares,
    batch: usize,
    (m, k, n): (usize, usize, usize),
) -> Result<Shares, Error> {
    let z = batch_terms(ctx, x, y, batch, (m, k, n)).await?;
    let mut ctx = ctx.fork();
    reshare(&mut ctx, z).await
}

/// This party's summand of the matrix product `X·Y` (`m×k` by `k×n`), before any
/// message: for a caller that maps the product linearly (public coefficients, a
/// selection of columns) before finishing it with
/// [`reshare_trunc_summands`](super::reshare_trunc_summands). Local; the work is that of
/// [`matmul`], spent against the session's budget in blocks.
///
/// Rounds: 0. Bytes: 0.
///
/// # Errors
/// `Misuse` if the lengths do not match the dimensions.
pub async fn matmul_summands(
    ctx: &Ctx,
    x: &Shares,
    y: &Shares,
    m: usize,
    k: usize,
    n: usize,
) -> Result<Summands, Error> {
    matmul_batch_summands(ctx, x, y, 1, (m, k, n)).await
}

/// This party's summands of a batch of matrix products `X_b·Y_b`, as [`matmul_batch`]
/// lays them out, before any message: for a caller that finishes them in a ring of its
/// choice with [`reshare_trunc_summands`](super::reshare_trunc_summands) (attention's
/// scores, which the softmax reads in a narrow ring only). Local.
///
/// Rounds: 0. Bytes: 0.
///
/// # Errors
/// `Misuse` if the lengths do not match the dimensions.
pub async fn matmul_batch_summands(
    ctx: &Ctx,
    x: &Shares,
    y: &Shares,
    batch: usize,
    dims: (usize, usize, usize),
) -> Result<Summands, Error> {
    let z = batch_terms(ctx, x, y, batch, dims).await?;
    Ok(Summands::new(ctx.me(), z))
}

/// This party's 3-of-3 parts of a batch of matrix products.
///
/// Each product is computed in blocks that fit the session's work budget (see
/// [`block_shape`]), with [`Ctx::spend`] before each block; the sums are the same for any
/// blocking (ring addition is exact).
async fn batch_terms(
    ctx: &Ctx,
    x: &Shares,
    y: &Shares,
    batch: usize,
    (m, k, n): (usize, usize, usize),
) -> Result<Vec<u64>, Error> {
    let dims = (
        m.checked_mul(k).and_then(|v| v.checked_mul(batch)),
        k.checked_mul(n).and_then(|v| v.checked_mul(batch)),
        m.checked_mul(n),
    );
    let (xl, yl, mn) = match dims {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => return Err(Error::misuse("matrix dimensions overflow")),
    };
    if x.len() != xl || y.len() != yl {
        return Err(Error::misuse(
            "matrix lengths do not match their dimensions",
        ));
    }
    let mut z = vec![0u64; mn * batch];
    let (mk, kn) = (m * k, k * n);
    let budget = usize::try_from(ctx.work_budget()).unwrap_or(usize::MAX);
    let (rows, cols) = block_shape(budget, (m, k, n));
    let depth = depth_block(budget, (m, k, n), rows);
    for b in 0..batch {
        let xa = x
            .a()
            .get(b * mk..(b + 1) * mk)
            .ok_or(Error::bug("batch out of range"))?;
        let xb = x
            .b()
            .get(b * mk..(b + 1) * mk)
            .ok_or(Error::bug("batch out of range"))?;
        let ya = y
            .a()
            .get(b * kn..(b + 1) * kn)
            .ok_or(Error::bug("batch out of range"))?;
        let yb = y
            .b()
            .get(b * kn..(b + 1) * kn)
            .ok_or(Error::bug("batch out of range"))?;
        let zb = z
            .get_mut(b * mn..(b + 1) * mn)
            .ok_or(Error::bug("batch out of range"))?;
        if let Some(depth) = depth {
            let zeros = (x.zero_component(), y.zero_component());
            depth_blocks(ctx, (xa, xb), (ya, yb), zeros, zb, (m, k, n), depth).await?;
            continue;
        }
        // x_a·y_a + x_a·y_b + x_b·y_a with one sum of halves: of the smaller operand, so
        // that a weight matrix (e.g. the 50257-row embedding) is never copied.
        let sum_x = mk <= kn;
        let y_sum: Vec<u64> = if sum_x {
            Vec::new()
        } else {
            ctx.spend(kn as u64).await;
            ya.iter().zip(yb).map(|(a, b)| a.wrapping_add(*b)).collect()
        };
        let mut x_sum: Vec<u64> = Vec::new();
        let mut band: Vec<u64> = Vec::new();
        for r0 in (0..m).step_by(rows) {
            let h = rows.min(m - r0);
            let xr = r0 * k..(r0 + h) * k;
            let (Some(xa), Some(xb), Some(zr)) = (
                xa.get(xr.clone()),
                xb.get(xr),
                zb.get_mut(r0 * n..(r0 + h) * n),
            ) else {
                return Err(Error::bug("row block out of range"));
            };
            if sum_x {
                ctx.spend((h * k) as u64).await;
                x_sum.clear();
                x_sum.extend(xa.iter().zip(xb).map(|(a, b)| a.wrapping_add(*b)));
            }
            // The two products: (x_a + x_b)·y_a + x_a·y_b, or x_a·(y_a + y_b) + x_b·y_a;
            // one when a component is zero by construction (an input's third: x_a·y_a +
            // x_a·y_b + x_b·y_a loses its terms in it).
            let terms: &[(&[u64], &[u64])] = match (x.zero_component(), y.zero_component()) {
                (Some(Component::A), _) => &[(xb, ya)],
                (Some(Component::B), _) if !sum_x => &[(xa, &y_sum)],
                (_, Some(Component::A)) => &[(xa, yb)],
                (_, Some(Component::B)) if sum_x => &[(&x_sum, ya)],
                _ if sum_x => &[(&x_sum, ya), (xa, yb)],
                _ => &[(xa, &y_sum), (xb, ya)],
            };
            for c0 in (0..n).step_by(cols) {
                let w = cols.min(n - c0);
                ctx.spend(2 * (h * k * w) as u64).await;
                let kernel = ctx.kernel();
                if w == n {
                    for &(a, bm) in terms {
                        kernel.matmul_acc(a, bm, zr, h, k, n);
                    }
                } else {
                    // A column band: the kernels read it from B in place, into a buffer
                    // added into Z's rows.
                    band.clear();
                    band.resize(h * w, 0);
                    for &(a, bm) in terms {
                        kernel.matmul_acc_cols(a, bm, &mut band, h, k, n, c0..c0 + w);
                    }
                    for (z_row, band_row) in zr.chunks_exact_mut(n).zip(band.chunks_exact(w)) {
                        for (zv, bv) in z_row.iter_mut().skip(c0).zip(band_row) {
                            *zv = zv.wrapping_add(*bv);
                        }
                    }
                }
            }
        }
    }
    Ok(z)
}

/// `z += x·y` (`m×k` by `k×n`, this party's 3-of-3 part from the components `(x_a, x_b)`
/// and `(y_a, y_b)`) in blocks of `depth` rows of Y (see [`depth_block`]): each block's
/// columns of X are copied out, and the sum of halves is taken of the block only, so
/// that a zero component of X (the one-hot rows' third) leaves one product per block.
async fn depth_blocks(
    ctx: &Ctx,
    (xa, xb): (&[u64], &[u64]),
    (ya, yb): (&[u64], &[u64]),
    (x_zero, y_zero): (Option<Component>, Option<Component>),
    z: &mut [u64],
    (m, k, n): (usize, usize, usize),
    depth: usize,
) -> Result<(), Error> {
    let (mut xa_c, mut xb_c, mut sum) = (Vec::new(), Vec::new(), Vec::new());
    let sum_x = m <= n;
    let kernel = ctx.kernel();
    for p0 in (0..k).step_by(depth.max(1)) {
        let kd = depth.min(k - p0);
        let (Some(ya), Some(yb)) = (ya.get(p0 * n..(p0 + kd) * n), yb.get(p0 * n..(p0 + kd) * n))
        else {
            return Err(Error::bug("depth block out of range"));
        };
        ctx.spend((2 * m * kd + kd * n) as u64).await;
        for (dst, src) in [(&mut xa_c, xa), (&mut xb_c, xb)] {
            dst.clear();
            for row in src.chunks_exact(k).take(m) {
                let cols = row.get(p0..p0 + kd);
                dst.extend_from_slice(cols.ok_or(Error::bug("depth block out of range"))?);
            }
        }
        let halves = |u: &[u64], v: &[u64], out: &mut Vec<u64>| {
            out.clear();
            out.extend(u.iter().zip(v).map(|(a, b)| a.wrapping_add(*b)));
        };
        // As in `batch_terms`, a zero component leaves one product (Y's first: a zero
        // component of the model's shares is never read); here a sum of Y's halves is
        // only a block long, so a zero X_b takes it rather than a second product.
        let terms: &[(&[u64], &[u64])] = match (x_zero, y_zero) {
            (Some(Component::A), _) => &[(&xb_c, ya)],
            (_, Some(Component::A)) => &[(&xa_c, yb)],
            (_, Some(Component::B)) => {
                halves(&xa_c, &xb_c, &mut sum);
                &[(&sum, ya)]
            }
            (Some(Component::B), _) => {
                halves(ya, yb, &mut sum);
                &[(&xa_c, &sum)]
            }
            _ if sum_x => {
                halves(&xa_c, &xb_c, &mut sum);
                &[(&sum, ya), (&xa_c, yb)]
            }
            _ => {
                halves(ya, yb, &mut sum);
                &[(&xa_c, &sum), (&xb_c, ya)]
            }
        };
        ctx.spend((2 * m * kd * n) as u64).await;
        for &(a, b) in terms {
            kernel.matmul_acc(a, b, z, m, kd, n);
        }
    }
    Ok(())
}

/// Depth of a block in rows of Y least worth cutting a product into (each depth block
/// reads and writes all of Z once more).
const MIN_DEPTH: usize = 64;

/// The depth of the blocks (rows of Y) for an `m×k` by `k×n` product whose blocks of
/// [`block_shape`] would cut its rows (`rows < m`), if X is the smaller operand (`m ≤ n`)
/// and depth blocks of all rows and all columns fit the budget at `MIN_DEPTH` or deeper;
/// `None` keeps [`block_shape`]'s.
///
/// Why: cut into row blocks, a product with a deep Y (the one-hot rows times the
/// embedding table, `k` the vocabulary) packs all of Y again for each block of rows, 8 at
/// a time; cut in depth, every element of Y is read once and every block serves all rows.
/// Each depth block copies its columns of X, which costs little only while X is the
/// smaller operand (not for the head as `wte · h`, 50,257 rows by one column).
fn depth_block(budget: usize, (m, k, n): (usize, usize, usize), rows: usize) -> Option<usize> {
    if rows >= m || m > n {
        return None;
    }
    let per_row_of_y = m.saturating_mul(n).saturating_mul(2).max(1);
    let depth = budget / per_row_of_y;
    (depth >= MIN_DEPTH).then_some(depth.min(k))
}

/// Rows of a block at the least when not all rows fit, and the multiple row counts are
/// rounded to (whole register tiles of the SIMD kernels).
const MIN_BLOCK_ROWS: usize = 8;

/// Columns of a column band at the least, and the multiple band widths are rounded to
/// (whole SIMD tiles).
const BAND_COLS: usize = 64;

/// The block shape `(rows, cols)` of an `m×k` by `k×n` product (two kernel calls per block,
/// `2·rows·k·cols` multiply-adds) under a budget of `budget` multiply-adds per block.
///
/// The whole product if it fits. Else column bands of all rows, narrower bands of more
/// rows being faster than wider ones of fewer (the kernels pack and reread B once per
/// block: measured 1.2–1.8× slower for full-width blocks of 14 rows than for the whole
/// 512×768×768 product, about as fast for bands of 64 columns and 170 rows); rows are cut
/// only when a band of `BAND_COLS` columns of all rows does not fit. A block is never
/// smaller than `min(m, MIN_BLOCK_ROWS)` rows by `min(n, BAND_COLS)` columns, so the
/// kernels keep their speed: a tiny budget is exceeded.
fn block_shape(budget: usize, (m, k, n): (usize, usize, usize)) -> (usize, usize) {
    let (m1, n1) = (m.max(1), n.max(1));
    let per_cell = k.saturating_mul(2).max(1);
    if per_cell.saturating_mul(m).saturating_mul(n) <= budget {
        return (m1, n1);
    }
    let band = BAND_COLS.min(n1);
    let mut rows = budget / per_cell.saturating_mul(band);
    if rows < m1 {
        rows = (rows / MIN_BLOCK_ROWS * MIN_BLOCK_ROWS).max(MIN_BLOCK_ROWS);
    }
    let rows = rows.min(m1);
    let cols = budget / per_cell.saturating_mul(rows) / BAND_COLS * BAND_COLS;
    (rows, cols.max(band).min(n1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_products_are_one_block() {
        assert_eq!(block_shape(1 << 24, (32, 768, 64)), (32, 64));
        assert_eq!(block_shape(usize::MAX, (32, 768, 50257)), (32, 50257));
    }

    #[test]
    fn short_wide_products_are_cut_into_column_bands() {
        // The LM head: 32 rows of 2·768 multiply-adds per column: 341 columns fit 2^24.
        assert_eq!(block_shape(1 << 24, (32, 768, 50257)), (32, 320));
        // The MLP's down projection at 32 rows.
        assert_eq!(block_shape(1 << 24, (32, 3072, 768)), (32, 64));
    }

    #[test]
    fn tall_products_are_cut_into_rows_and_bands() {
        // 2·768·64 multiply-adds per row of a 64-column band: 170 rows fit 2^24.
        assert_eq!(block_shape(1 << 24, (512, 768, 768)), (168, 64));
        // Narrower than a band: blocks of whole rows.
        assert_eq!(block_shape(1 << 24, (4096, 32000, 32)), (8, 32));
    }

    #[test]
    fn deep_products_of_few_rows_are_cut_in_depth() {
        // GPT-2's embedding of 32 prompt tokens: 341 rows of the table per block.
        let (rows, _) = block_shape(1 << 24, (32, 50257, 768));
        assert_eq!(rows, 8);
        assert_eq!(depth_block(1 << 24, (32, 50257, 768), rows), Some(341));
        // BERT's 128 tokens: 85 rows of the table.
        let (rows, _) = block_shape(1 << 24, (128, 30522, 768));
        assert_eq!(depth_block(1 << 24, (128, 30522, 768), rows), Some(85));
        // Row blocks stay where depth blocks would be shallow, or rows are not cut.
        let (rows, _) = block_shape(1 << 24, (512, 768, 768));
        assert_eq!(depth_block(1 << 24, (512, 768, 768), rows), None);
        let (rows, _) = block_shape(1 << 24, (32, 3072, 768));
        assert_eq!(depth_block(1 << 24, (32, 3072, 768), rows), None);
        // The head as a matrix-vector product: X is the large operand.
        let (rows, _) = block_shape(1 << 24, (50257, 768, 1));
        assert!(rows < 50257);
        assert_eq!(depth_block(1 << 24, (50257, 768, 1), rows), None);
    }

    #[test]
    fn tiny_budgets_keep_blocks_of_useful_size() {
        assert_eq!(block_shape(1, (32, 768, 2304)), (8, 64));
        assert_eq!(block_shape(1, (3, 768, 20)), (3, 20));
        assert_eq!(block_shape(1, (0, 0, 0)), (1, 1));
    }
}
