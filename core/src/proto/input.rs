use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::party::PartyId;
use crate::ring::Width;
use crate::share::Shares;

/// Secret-shares `n` values held by `owner` (a computing party).
///
/// Component `o+1` is `F_{o+1}(t)` (known to `owner` and its next party), component `o+2`
/// is 0, and the owner sends component `o = v − F_{o+1}(t)` to its previous party. Each
/// non-owner sees one uniformly masked or one pseudorandom vector. (PROTOCOLS.md §2.)
///
/// Rounds: 1. Bytes: 8·n from the owner, 0 from the others.
///
/// # Errors
/// `Misuse` if the owner passes no values or a wrong length, or another party passes
/// values; `Protocol` if the owner's message is malformed.
pub async fn share_input(
    ctx: &mut Ctx,
    owner: PartyId,
    values: Option<&[u64]>,
    n: usize,
) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let me = ctx.me();
    let mask = ctx.pair_random(owner.next(), n)?;
    match (me == owner, values) {
        (true, Some(v)) if v.len() == n => {
            let f = mask.ok_or(Error::bug("owner lacks its input mask"))?;
            let c: Vec<u64> = v.iter().zip(&f).map(|(v, f)| v.wrapping_sub(*f)).collect();
            ctx.send(me.prev(), &c, Width::W64)?;
            Ok(Shares::from_parts(me, c, f))
        }
        (true, _) => Err(Error::misuse("the input owner must pass exactly n values")),
        (false, Some(_)) => Err(Error::misuse("only the input owner passes values")),
        (false, None) if me == owner.next() => {
            let f = mask.ok_or(Error::bug("next party lacks the input mask"))?;
            Ok(Shares::from_parts(me, f, alloc::vec![0; n]))
        }
        (false, None) => {
            let c = ctx.recv(owner, n, Width::W64).await?;
            Ok(Shares::from_parts(me, alloc::vec![0; n], c))
        }
    }
}
