//! Verification of drafted tokens for speculative decoding (docs/PROTOCOLS.md, Speculative
//! verification): given the model's pick at each of `k + 1` positions and `k` drafted
//! tokens, all as shared one-hot rows, find how many drafts the model accepts (the length
//! of the prefix on which every draft equals the model's pick at the position before it)
//! and the model's pick right after that prefix, without opening anything.

use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::share::Shares;

use super::{matmul, matmul_batch, mul};

/// The result of [`accept_drafts`], all shared.
#[derive(Debug)]
pub struct Accepted {
    /// How many drafts were accepted, `0..=k` (one integer).
    pub count: Shares,
    /// The model's pick after the accepted drafts, as a one-hot row of the vocabulary
    /// (0/1 integers).
    pub next: Shares,
    /// The id of [`Accepted::next`] (one integer).
    pub next_id: Shares,
}

/// Checks `k` drafted tokens against the model's picks: `picked` holds `k + 1` one-hot rows
/// of width `v` (0/1 integers; row j is the model's choice after the input row j, which
/// is the last verified token for j = 0 and draft j otherwise), `picked_ids` their `k + 1`
/// ids, `drafts` the `k` one-hot rows of the drafted tokens. Draft j (1-based) is accepted
/// if it and every draft before it equal the pick of the row before it. Returns the count
/// of accepted drafts `n` and the pick of row `n`: the output equals greedy decoding's
/// next `n + 1` tokens.
///
/// Rounds: 2 + ⌈log2 k⌉ (k ≥ 1): one for the k matches (inner products of one-hot rows),
/// ⌈log2 k⌉ for their prefix products, one to select row n. Bytes per party:
/// 8·(k + k·⌈log2 k⌉ − (2^⌈log2 k⌉ − 1) + v + 1), at most 8·(k·(1 + ⌈log2 k⌉) + v + 1).
///
/// # Errors
/// `Misuse` for `k = 0` or lengths that do not match `k` and `v`; `Protocol` on a
/// malformed message.
pub async fn accept_drafts(
    ctx: &mut Ctx,
    picked: &Shares,
    picked_ids: &Shares,
    drafts: &Shares,
    k: usize,
    v: usize,
) -> Result<Accepted, Error> {
    let rows = k
        .checked_add(1)
        .and_then(|r| r.checked_mul(v))
        .ok_or(Error::misuse("draft check size overflows"))?;
    if k == 0 || picked.len() != rows || picked_ids.len() != k + 1 || drafts.len() != k * v {
        return Err(Error::misuse(
            "draft check needs k + 1 picked rows and ids and k drafted rows",
        ));
    }
    // matches[j−1] = ⟨picked row j−1, draft j⟩ ∈ {0, 1}: k inner products in one batch,
    // each a 1 × v by v × 1 product (a one-hot column is the same vector as its row).
    let before = picked.slice(0..k * v)?;
    let mut accepted = matmul_batch(ctx, &before, drafts, k, (1, v, 1)).await?;
    // Prefix products (Hillis–Steele): after the pass with stride s, entry j is the
    // product of entries j − 2s + 1 ..= j.
    let mut stride = 1;
    while stride < k {
        let high = accepted.slice(stride..k)?;
        let low = accepted.slice(0..k - stride)?;
        let prod = mul(ctx, &high, &low).await?;
        accepted = Shares::concat(&[&accepted.slice(0..stride)?, &prod])?;
        stride *= 2;
    }
    let count = accepted.sum_chunks(k)?;
    // select[j] = [exactly j drafts accepted] = a_j − a_{j+1}, with a_0 = 1, a_{k+1} = 0.
    let me = ctx.me();
    let mut prefix: Vec<Shares> = Vec::with_capacity(k + 2);
    prefix.push(Shares::from_public(me, &[1]));
    for j in 0..k {
        prefix.push(accepted.slice(j..j + 1)?);
    }
    prefix.push(Shares::zeros(me, 1));
    let select = Shares::concat(
        &prefix
            .windows(2)
            .map(|w| match w {
                [a, b] => a.sub(b),
                _ => Err(Error::bug("windows of two")),
            })
            .collect::<Result<Vec<_>, _>>()?
            .iter()
            .collect::<Vec<_>>(),
    )?;
    // One product picks row n of [picked | ids] (k + 1 rows of v + 1).
    let mut rows_with_ids = Vec::with_capacity(k + 1);
    for j in 0..=k {
        rows_with_ids.push(picked.slice(j * v..(j + 1) * v)?);
        rows_with_ids.push(picked_ids.slice(j..j + 1)?);
    }
    let table = Shares::concat(&rows_with_ids.iter().collect::<Vec<_>>())?;
    let chosen = matmul(ctx, &select, &table, 1, k + 1, v + 1).await?;
    let (next, next_id) = chosen.split_at(v)?;
    Ok(Accepted {
        count,
        next,
        next_id,
    })
}
