//! Plaintext helpers: `ndarray` arrays of reals to and from fixed-point ring elements.

use ndarray::Array2;
use puma_core::FixedPoint;

use crate::error::LayerError;

/// Encodes `a` in row-major order (whatever its memory layout) in format `fx`.
///
/// # Errors
/// [`LayerError::Core`] (`Misuse`) for a value that is not finite or does not fit.
pub fn encode_array2(fx: FixedPoint, a: &Array2<f64>) -> Result<Vec<u64>, LayerError> {
    a.iter()
        .map(|&x| fx.encode(x).map_err(LayerError::from))
        .collect()
}

/// Decodes `rows × cols` ring elements, row-major, into an array of reals.
///
/// # Errors
/// [`LayerError::Shape`] if `values` does not hold exactly `rows · cols` elements.
pub fn decode_array2(
    fx: FixedPoint,
    values: &[u64],
    rows: usize,
    cols: usize,
) -> Result<Array2<f64>, LayerError> {
    Array2::from_shape_vec((rows, cols), fx.decode_slice(values)).map_err(|_| {
        LayerError::Shape(format!(
            "{} values do not form a {rows}×{cols} matrix",
            values.len()
        ))
    })
}
