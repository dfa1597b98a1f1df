//! A protocol the test programs share.

use puma_core::{Ctx, Error, FixedPoint, PartyId, proto};

/// P0 shares `xs` (in the default fixed point), the parties square them and reveal the
/// squares to all. Only P0's `xs` are used; the others need just as many.
pub async fn squares(mut ctx: Ctx, me: PartyId, xs: Vec<f64>) -> Result<Vec<u64>, Error> {
    let fx = FixedPoint::default();
    let n = xs.len();
    let xs = fx.encode_slice(&xs)?;
    let x = proto::share_input(
        &mut ctx,
        PartyId::P0,
        (me == PartyId::P0).then_some(&xs[..]),
        n,
    )
    .await?;
    let y = proto::mul_fixed(&mut ctx, &x, &x).await?;
    proto::reveal_all(&mut ctx, &y).await
}
