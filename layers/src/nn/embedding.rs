//! The client's one-hot rows in plaintext, and the embedding lookup as their shared product
//! with a shared table (exact: the one-hot rows are integral, so no truncation).

use puma_core::{Ctx, Error, Shares, proto};

/// The plaintext one-hot rows that [`proto::share_one_hot`] shares (integers 0 and 1, `rows ×
/// width`), for a client that deals them itself ([`super::client`]).
///
/// # Errors
/// `Misuse` if `hot` has the wrong length, a column is not below `width` (no value is
/// named) or the size overflows.
pub fn one_hot_rows(
    hot: &[u32],
    rows: usize,
    per_row: usize,
    width: usize,
) -> Result<Vec<u64>, Error> {
    let total = rows
        .checked_mul(width)
        .ok_or(Error::misuse("one-hot input size overflows"))?;
    if Some(hot.len()) != rows.checked_mul(per_row) || hot.iter().any(|&c| c as usize >= width) {
        return Err(Error::misuse(
            "input ids must be one per row and below the vocabulary size",
        ));
    }
    let mut v = vec![0u64; total];
    for (i, &c) in hot.iter().enumerate() {
        if let Some(x) = v.get_mut((i / per_row.max(1)) * width + c as usize) {
            *x = 1;
        }
    }
    Ok(v)
}

/// The embeddings (`rows × d`) of shared one-hot rows (`rows × vocab`) in a shared
/// `vocab × d` table.
///
/// Rounds: 1. Bytes: 8·rows·d per party.
///
/// # Errors
/// `Misuse` for mismatched lengths; `Protocol` on a malformed message.
pub async fn embed(
    ctx: &mut Ctx,
    one_hot: &Shares,
    table: &Shares,
    rows: usize,
    vocab: usize,
    d: usize,
) -> Result<Shares, Error> {
    proto::matmul(ctx, one_hot, table, rows, vocab, d).await
}
