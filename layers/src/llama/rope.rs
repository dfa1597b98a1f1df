//! Rotary position embeddings (Su et al. 2021) in Hugging Face's `rotate_half` layout: in
//! each head, dimension `i < head_dim/2` is paired with `i + head_dim/2` and the pair is
//! rotated by the angle `position · θ^(−2i/head_dim)`.
//!
//! The angles depend only on public positions, so the cosines and sines are computed in
//! plaintext; under secure computation they are public coefficients of a local linear map
//! on the shares (see [`crate::llama::secure`]).

/// `(cos, sin)` of the angles of `position`, one per pair (`head_dim / 2` each).
pub fn cos_sin(position: usize, head_dim: usize, theta: f64) -> (Vec<f64>, Vec<f64>) {
    let half = head_dim / 2;
    let mut cos = Vec::with_capacity(half);
    let mut sin = Vec::with_capacity(half);
    for i in 0..half {
        // transformers computes inv_freq in float32; the angle then in float32 too. Keep
        // inv_freq's float32 rounding (it shifts angles at long positions by up to 1e-7·pos)
        // but evaluate the rotation in f64.
        let inv_freq = f64::from((1.0 / theta.powf(2.0 * i as f64 / head_dim as f64)) as f32);
        let angle = position as f64 * inv_freq;
        cos.push(angle.cos());
        sin.push(angle.sin());
    }
    (cos, sin)
}

/// Rotates one head vector `x` (length `head_dim`) in place for `position`.
pub fn apply(x: &mut [f64], cos: &[f64], sin: &[f64]) {
    let half = x.len() / 2;
    let (lo, hi) = x.split_at_mut(half);
    for (((a, b), &c), &s) in lo.iter_mut().zip(hi.iter_mut()).zip(cos).zip(sin) {
        let (x1, x2) = (*a, *b);
        *a = x1 * c - x2 * s;
        *b = x2 * c + x1 * s;
    }
}
