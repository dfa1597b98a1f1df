//! The client's input as shared one-hot rows, and the embedding lookup as their product
//! with a shared table (exact: the one-hot rows are integral, so no truncation).

use puma_core::{Ctx, Error, PartyId, Shares, proto};

/// Shares the client's one-hot rows: `rows` rows of `width` columns, row r holding a one at
/// each of the `per_row` columns `hot[r·per_row..(r + 1)·per_row]` (for example a token id
/// and, offset by the vocabulary, its token type). The client passes `Some(hot)`, the others
/// `None`; `rows`, `per_row` and `width` are public.
///
/// Rounds: 1. Bytes: 8·rows·width from the client.
///
/// # Errors
/// `Misuse` at the client if `hot` has the wrong length or a column is not below `width`
/// (no value is named), or if the client passes nothing; `Protocol` on a malformed
/// message.
pub async fn share_one_hot(
    ctx: &mut Ctx,
    client: PartyId,
    hot: Option<&[u32]>,
    rows: usize,
    per_row: usize,
    width: usize,
) -> Result<Shares, Error> {
    let values = match (ctx.me() == client, hot) {
        (true, Some(cols)) => Some(one_hot_rows(cols, rows, per_row, width)?),
        (true, None) => return Err(Error::misuse("the client must pass its input ids")),
        (false, _) => None,
    };
    let total = rows
        .checked_mul(width)
        .ok_or(Error::misuse("one-hot input size overflows"))?;
    proto::share_input(ctx, client, values.as_deref(), total).await
}

/// The plaintext one-hot rows that [`share_one_hot`] shares (integers 0 and 1, `rows ×
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
