use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::share::BitShares;

/// Bitwise AND of boolean shares (ABY3 §2 over GF(2)^w):
/// `z_i = x_i∧y_i ⊕ x_i∧y_{i+1} ⊕ x_{i+1}∧y_i ⊕ β_i`, then reshare.
///
/// Rounds: 1. Bytes: ⌈w·n/8⌉ per party for n values of w bits.
///
/// # Errors
/// `Misuse` for mismatched shapes; `Protocol` if a message is malformed.
pub async fn and(ctx: &mut Ctx, x: &BitShares, y: &BitShares) -> Result<BitShares, Error> {
    if x.len() != y.len() || x.width() != y.width() || x.party() != y.party() {
        return Err(Error::misuse("and of bit shares of different shapes"));
    }
    let mut ctx = ctx.fork();
    let beta = ctx.zero_share_xor(x.len());
    let z: Vec<u64> = x
        .a()
        .iter()
        .zip(x.b())
        .zip(y.a().iter().zip(y.b()))
        .zip(&beta)
        .map(|(((xa, xb), (ya, yb)), bt)| (xa & ya) ^ (xa & yb) ^ (xb & ya) ^ bt)
        .collect();
    let me = ctx.me();
    let width = x.width();
    let z_next = ctx
        .exchange(me.prev(), &z, me.next(), z.len(), width)
        .await?;
    Ok(BitShares::from_parts(me, width, z, z_next))
}
