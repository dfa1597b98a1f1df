use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::party::PartyId;
use crate::ring::Width;
use crate::share::Shares;

/// Opens `x` to party `to` only: `to` lacks component `to+2`, which `to+1` sends it.
/// Returns the values at `to` and `None` elsewhere. Use only for a designated output.
///
/// Rounds: 1. Bytes: 8·n from `to+1`, 0 from the others.
///
/// # Errors
/// `Protocol` if the message is malformed.
pub async fn reveal_to(ctx: &mut Ctx, x: &Shares, to: PartyId) -> Result<Option<Vec<u64>>, Error> {
    let mut ctx = ctx.fork();
    let me = ctx.me();
    if me == to.next() {
        ctx.send(to, x.b(), Width::W64)?;
        Ok(None)
    } else if me == to {
        let missing = ctx.recv(to.next(), x.len(), Width::W64).await?;
        Ok(Some(sum3(x, &missing)))
    } else {
        Ok(None)
    }
}

/// Opens `x` to all three parties: each sends its second component to its previous party.
///
/// Rounds: 1. Bytes: 8·n per party.
///
/// # Errors
/// `Protocol` if a message is malformed.
pub async fn reveal_all(ctx: &mut Ctx, x: &Shares) -> Result<Vec<u64>, Error> {
    let mut ctx = ctx.fork();
    let me = ctx.me();
    let missing = ctx
        .exchange(me.prev(), x.b(), me.next(), x.len(), Width::W64)
        .await?;
    Ok(sum3(x, &missing))
}

fn sum3(x: &Shares, missing: &[u64]) -> Vec<u64> {
    x.a()
        .iter()
        .zip(x.b())
        .zip(missing)
        .map(|((a, b), c)| a.wrapping_add(*b).wrapping_add(*c))
        .collect()
}
