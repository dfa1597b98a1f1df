//! `SecretTensor`: one party's shares of a row-major tensor, with its (public) shape.

use std::fmt;

use puma_core::{Ctx, PartyId, Shares, proto};

use crate::error::LayerError;

/// One party's replicated shares of a tensor, stored flat in row-major order.
///
/// The shape is public; the values are not. Like [`Shares`], the `Debug` output shows the
/// party and shape only.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretTensor {
    shape: Vec<usize>,
    shares: Shares,
}

impl fmt::Debug for SecretTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SecretTensor {{ party: {}, shape: {:?} }}",
            self.shares.party(),
            self.shape
        )
    }
}

/// The number of elements of `shape`, or a shape error on overflow.
fn numel(shape: &[usize]) -> Result<usize, LayerError> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| LayerError::Shape(format!("shape {shape:?} has too many elements")))
}

impl SecretTensor {
    /// A tensor of shape `shape` over `shares` (row-major).
    ///
    /// # Errors
    /// [`LayerError::Shape`] unless the shape's product equals `shares.len()`.
    pub fn new(shape: impl Into<Vec<usize>>, shares: Shares) -> Result<SecretTensor, LayerError> {
        let shape = shape.into();
        let n = numel(&shape)?;
        if n != shares.len() {
            return Err(LayerError::Shape(format!(
                "shape {shape:?} needs {n} elements, the shares hold {}",
                shares.len()
            )));
        }
        Ok(SecretTensor { shape, shares })
    }

    /// A sharing of public ring elements (no communication).
    ///
    /// # Errors
    /// [`LayerError::Shape`] unless the shape's product equals `values.len()`.
    pub fn from_public(
        party: PartyId,
        shape: impl Into<Vec<usize>>,
        values: &[u64],
    ) -> Result<SecretTensor, LayerError> {
        SecretTensor::new(shape, Shares::from_public(party, values))
    }

    /// Secret-shares a tensor that `owner` holds (row-major ring elements, `Some` at the
    /// owner only) among the three parties; see [`proto::share_input`].
    ///
    /// Rounds: 1. Bytes: 8 per element from the owner.
    ///
    /// # Errors
    /// [`LayerError::Shape`] if the shape overflows; [`LayerError::Core`] as
    /// [`proto::share_input`] (e.g. the owner's values do not match the shape).
    pub async fn share_input(
        ctx: &mut Ctx,
        owner: PartyId,
        values: Option<&[u64]>,
        shape: impl Into<Vec<usize>>,
    ) -> Result<SecretTensor, LayerError> {
        let shape = shape.into();
        let n = numel(&shape)?;
        let shares = proto::share_input(ctx, owner, values, n).await?;
        SecretTensor::new(shape, shares)
    }

    /// Opens the tensor to `to` only (row-major); `None` at the other parties.
    ///
    /// # Errors
    /// As [`proto::reveal_to`].
    pub async fn reveal_to(
        &self,
        ctx: &mut Ctx,
        to: PartyId,
    ) -> Result<Option<Vec<u64>>, LayerError> {
        Ok(proto::reveal_to(ctx, &self.shares, to).await?)
    }

    /// Opens the tensor to all three parties (row-major).
    ///
    /// # Errors
    /// As [`proto::reveal_all`].
    pub async fn reveal_all(&self, ctx: &mut Ctx) -> Result<Vec<u64>, LayerError> {
        Ok(proto::reveal_all(ctx, &self.shares).await?)
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of dimensions.
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.shares.len()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.shares.is_empty()
    }

    /// The party these shares belong to.
    pub fn party(&self) -> PartyId {
        self.shares.party()
    }

    /// The flat shares, row-major.
    pub fn shares(&self) -> &Shares {
        &self.shares
    }

    /// The flat shares, by value.
    pub fn into_shares(self) -> Shares {
        self.shares
    }

    /// The same elements under a new shape (row-major order is kept; no data moves).
    ///
    /// # Errors
    /// [`LayerError::Shape`] unless the new shape has the same number of elements.
    pub fn reshape(self, shape: impl Into<Vec<usize>>) -> Result<SecretTensor, LayerError> {
        SecretTensor::new(shape, self.shares)
    }

    /// The rows and columns of a 2-D tensor.
    ///
    /// # Errors
    /// [`LayerError::Shape`] unless the tensor is 2-D.
    pub fn dims2(&self) -> Result<(usize, usize), LayerError> {
        match self.shape[..] {
            [r, c] => Ok((r, c)),
            _ => Err(LayerError::Shape(format!(
                "expected a 2-D tensor, got shape {:?}",
                self.shape
            ))),
        }
    }

    /// The transpose of a 2-D tensor (a local gather, no communication).
    ///
    /// # Errors
    /// [`LayerError::Shape`] unless the tensor is 2-D.
    pub fn transpose2d(&self) -> Result<SecretTensor, LayerError> {
        let (r, c) = self.dims2()?;
        let indices: Vec<usize> = (0..c)
            .flat_map(|j| (0..r).map(move |i| i * c + j))
            .collect();
        SecretTensor::new(vec![c, r], self.shares.gather(&indices)?)
    }

    /// Elementwise `self + other` (local).
    ///
    /// # Errors
    /// [`LayerError::Shape`] unless the shapes are equal; [`LayerError::Core`] if the
    /// shares belong to different parties.
    pub fn add(&self, other: &SecretTensor) -> Result<SecretTensor, LayerError> {
        if self.shape != other.shape {
            return Err(LayerError::Shape(format!(
                "cannot add shapes {:?} and {:?}",
                self.shape, other.shape
            )));
        }
        SecretTensor::new(self.shape.clone(), self.shares.add(&other.shares)?)
    }
}

/// Checks that `a` (m×k) and `b` (k×n) can be multiplied; returns (m, k, n).
fn matmul_dims(a: &SecretTensor, b: &SecretTensor) -> Result<(usize, usize, usize), LayerError> {
    let (m, k) = a.dims2()?;
    let (k2, n) = b.dims2()?;
    if k != k2 {
        return Err(LayerError::Shape(format!(
            "cannot multiply shapes {:?} and {:?}",
            a.shape, b.shape
        )));
    }
    Ok((m, k, n))
}

/// Ring matrix product `a·b` of 2-D tensors (m×k times k×n), exact over Z_2^64; see
/// [`proto::matmul`].
///
/// Rounds: 1. Bytes: 8·m·n per party.
///
/// # Errors
/// [`LayerError::Shape`] unless both are 2-D with matching inner dimensions;
/// [`LayerError::Core`] as [`proto::matmul`].
pub async fn matmul(
    ctx: &mut Ctx,
    a: &SecretTensor,
    b: &SecretTensor,
) -> Result<SecretTensor, LayerError> {
    let (m, k, n) = matmul_dims(a, b)?;
    let z = proto::matmul(ctx, &a.shares, &b.shares, m, k, n).await?;
    SecretTensor::new(vec![m, n], z)
}

/// Fixed-point matrix product `a·b` of 2-D tensors (m×k times k×n), truncated by the
/// session's fractional bits; see [`proto::matmul_fixed`]. Each output element is within
/// one ulp of the exact product of the encoded inputs (while it stays in range).
///
/// Rounds: 2. Bytes: as [`proto::matmul_fixed`].
///
/// # Errors
/// [`LayerError::Shape`] unless both are 2-D with matching inner dimensions;
/// [`LayerError::Core`] as [`proto::matmul_fixed`].
pub async fn matmul_fixed(
    ctx: &mut Ctx,
    a: &SecretTensor,
    b: &SecretTensor,
) -> Result<SecretTensor, LayerError> {
    let (m, k, n) = matmul_dims(a, b)?;
    let z = proto::matmul_fixed(ctx, &a.shares, &b.shares, m, k, n).await?;
    SecretTensor::new(vec![m, n], z)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn shape_checks_are_errors_not_panics() {
        let s = Shares::from_public(PartyId::P1, &[1, 2, 3, 4, 5, 6]);
        assert!(matches!(
            SecretTensor::new(vec![4, 2], s.clone()),
            Err(LayerError::Shape(_))
        ));
        assert!(matches!(
            SecretTensor::new(vec![usize::MAX, 3], s.clone()),
            Err(LayerError::Shape(_))
        ));
        let t = SecretTensor::new(vec![2, 3], s).unwrap();
        assert_eq!(t.shape(), &[2, 3]);
        assert_eq!(t.dims2().unwrap(), (2, 3));
        let t3 = t.clone().reshape(vec![1, 2, 3]).unwrap();
        assert_eq!(t3.ndim(), 3);
        assert!(t3.transpose2d().is_err());
        assert!(t.clone().reshape(vec![5]).is_err());
        assert!(t.add(&t.transpose2d().unwrap()).is_err());
        assert_eq!(
            format!("{t:?}"),
            "SecretTensor { party: P1, shape: [2, 3] }"
        );
    }

    #[test]
    fn transpose_of_public_tensor() {
        // Public sharing at P0 carries the values in its first component, so equal shares
        // mean equal values: [[1,2,3],[4,5,6]]ᵀ = [[1,4],[2,5],[3,6]].
        let t = SecretTensor::from_public(PartyId::P0, vec![2, 3], &[1, 2, 3, 4, 5, 6]).unwrap();
        let tt = t.transpose2d().unwrap();
        assert_eq!(tt.shape(), &[3, 2]);
        let expected =
            SecretTensor::from_public(PartyId::P0, vec![3, 2], &[1, 4, 2, 5, 3, 6]).unwrap();
        assert_eq!(tt, expected);
        assert_eq!(tt.transpose2d().unwrap(), t);
    }
}
