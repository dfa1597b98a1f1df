//! Linear layers on shares: `x·W + b` with the product's truncation fused into its reshare.

use puma_core::{Ctx, Error, Shares, Summands, Width, proto};

/// A shared linear layer: weight `k × n` (input rows) and an optional bias of `n`.
pub struct Linear {
    w: Shares,
    b: Option<Shares>,
    k: usize,
    n: usize,
}

impl std::fmt::Debug for Linear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Linear {{ {} × {}, bias: {} }}",
            self.k,
            self.n,
            self.b.is_some()
        )
    }
}

impl Linear {
    /// A layer of `k` inputs and `n` outputs.
    ///
    /// # Errors
    /// `Misuse` if the weight is not `k·n` long or the bias not `n`.
    pub fn new(w: Shares, b: Option<Shares>, k: usize, n: usize) -> Result<Linear, Error> {
        if Some(w.len()) != k.checked_mul(n) || b.as_ref().is_some_and(|b| b.len() != n) {
            return Err(Error::misuse("linear layer shapes do not match"));
        }
        Ok(Linear { w, b, k, n })
    }

    /// The weight's shares (`k × n`, input rows).
    pub fn weight(&self) -> &Shares {
        &self.w
    }

    /// The bias's shares (`n`), if any.
    pub fn bias(&self) -> Option<&Shares> {
        self.b.as_ref()
    }

    /// `x·W + b` for `rows` input rows (`rows × k`): one fixed-point product (2 rounds, 264
    /// bits per output element over the parties); the bias is added locally.
    ///
    /// # Errors
    /// `Misuse` for an input of the wrong length; `Protocol` on a malformed message.
    pub async fn forward(&self, ctx: &mut Ctx, x: &Shares, rows: usize) -> Result<Shares, Error> {
        let y = proto::matmul_fixed(ctx, x, &self.w, rows, self.k, self.n).await?;
        match &self.b {
            Some(b) => add_rows(&y, b, rows),
            None => Ok(y),
        }
    }

    /// [`Linear::forward`] for an input known only mod 2^k, k = `ring` (an activation
    /// lifted into that ring only): the product is summed in Z_2^k and truncated into
    /// Z_2^64, 2 rounds and 2k + 64 + 4·(64 − k + f) bits per output element (280 for
    /// k = 56 at f = 18, against 264 from Z_2^64). Every output's product x·W must stay
    /// within ±2^(k − 2 − 2f) (docs/PROTOCOLS.md, Narrow truncation and lift).
    ///
    /// # Errors
    /// As [`Linear::forward`].
    pub async fn forward_from(
        &self,
        ctx: &mut Ctx,
        x: &Shares,
        rows: usize,
        ring: Width,
    ) -> Result<Shares, Error> {
        let f = ctx.fixed().frac_bits();
        let s = proto::matmul_summands(ctx, x, &self.w, rows, self.k, self.n).await?;
        let y = proto::reshare_trunc_summands(ctx, s, ring, f, Width::W64).await?;
        match &self.b {
            Some(b) => add_rows(&y, b, rows),
            None => Ok(y),
        }
    }

    /// [`Linear::forward`] for a consumer that reads the output mod 2^k only, k = `ring`
    /// (an activation that reads its input there, [`super::activation::Activation::input_ring`]).
    /// When k ≤ 64 − f (the GeLU's Z_2^46 at f = 18) the product is cut locally by f
    /// ([`proto::reshare_cut_summands`]): 1 round and 3k bits per output element (138
    /// against 264 into Z_2^64), within (−2, 1] ulps of x·W + b, −½ on average, an error
    /// the GeLU's own 1.2e-4 dwarfs. Otherwise it is truncated into Z_2^k: 2 rounds and
    /// 128 + k + 4·max(0, k − 64 + f) bits. The output is x·W + b as a signed value mod
    /// 2^k.
    ///
    /// # Errors
    /// As [`Linear::forward`].
    pub async fn forward_into(
        &self,
        ctx: &mut Ctx,
        x: &Shares,
        rows: usize,
        ring: Width,
    ) -> Result<Shares, Error> {
        let f = ctx.fixed().frac_bits();
        let s = self.summands(ctx, x, rows).await?;
        if ring.bits() + f <= 64 {
            proto::reshare_cut_summands(ctx, s, Width::W64, f, ring).await
        } else {
            proto::reshare_trunc_summands(ctx, s, Width::W64, f, ring).await
        }
    }

    /// The summands of `x·W + b` at 2f fractional bits, before the reshare and truncation
    /// that finish it ([`proto::reshare_trunc_summands`]): for a caller that maps the
    /// output linearly first (rotary embeddings) or finishes parts of it in different
    /// rings (a gated MLP's halves). Local.
    ///
    /// # Errors
    /// `Misuse` for an input of the wrong length.
    pub async fn summands(&self, ctx: &Ctx, x: &Shares, rows: usize) -> Result<Summands, Error> {
        let s = proto::matmul_summands(ctx, x, &self.w, rows, self.k, self.n).await?;
        match &self.b {
            Some(b) => s.add_shares(&tile_rows(b, rows)?, 1u64 << ctx.fixed().frac_bits()),
            None => Ok(s),
        }
    }
}

/// Adds the shared vector `v` (length `n`) to every row of the `rows × n` matrix `x`.
///
/// # Errors
/// `Misuse` if the lengths do not match.
pub fn add_rows(x: &Shares, v: &Shares, rows: usize) -> Result<Shares, Error> {
    x.add(&tile_rows(v, rows)?)
}

/// The shared vector `v` repeated as each of `rows` rows (local).
fn tile_rows(v: &Shares, rows: usize) -> Result<Shares, Error> {
    let n = v.len();
    let idx: Vec<usize> = (0..rows * n).map(|i| i % n.max(1)).collect();
    v.gather(&idx)
}
