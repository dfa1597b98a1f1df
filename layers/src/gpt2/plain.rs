//! The plaintext GPT-2: an `f64` forward pass of a loaded checkpoint, the reference that
//! every secure result is compared against.
//!
//! The computation is GPT-2's as in `transformers` (`GPT2LMHeadModel`, eager attention,
//! eval mode), in `f64`:
//!
//! ```text
//! x   = wte[ids] + wpe[positions]
//! per block:  x = x + c_proj(attn(ln_1(x)))          attn: causal, softmax(q kᵀ / sqrt(head_dim)) v
//!             x = x + mlp_c_proj(act(c_fc(ln_2(x))))
//! h   = ln_f(x)                                      (last_hidden_state)
//! logits = h · lm_headᵀ                              (lm_head = wte when tied)
//! ```
//!
//! LayerNorm uses the biased variance with epsilon inside the square root; `Conv1D` weights
//! are `[in, out]`. A [`KvCache`] keeps every block's keys and values, so that feeding one
//! more token costs one row of work; [`PlainGpt2::generate_greedy`] uses it.

use std::sync::Arc;

use ndarray::{Array1, Array2, ArrayView1, ArrayView2, Axis, s};

use crate::gpt2::config::{Activation, Gpt2Config, InputError};
use crate::gpt2::weights::{Gpt2Block, Gpt2Weights, LayerNormWeights, LoadError, load_gpt2};
use crate::nn::NormKind;
use crate::nn::range::ActivationPeaks;

/// GeLU, tanh form (`gelu_new`): `0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³)))`.
pub fn gelu_tanh(x: f64) -> f64 {
    const SQRT_2_OVER_PI: f64 = 0.797_884_560_802_865_4;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)).tanh())
}

/// GeLU, exact form (`gelu`): `0.5 x (1 + erf(x / sqrt(2)))`.
pub fn gelu_erf(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x * std::f64::consts::FRAC_1_SQRT_2))
}

/// Applies `activation` to one value.
pub fn activate(activation: Activation, x: f64) -> f64 {
    match activation {
        Activation::GeluTanh => gelu_tanh(x),
        Activation::GeluErf => gelu_erf(x),
    }
}

/// LayerNorm of every row of `x`: `(x − mean) / sqrt(var + eps) · gamma + beta`, with the
/// biased variance (divided by the row length).
///
/// `x` must have as many columns as `w.gamma` and `w.beta` have elements (the model checks
/// this when it is built); extra or missing columns are not read.
pub fn layer_norm(x: ArrayView2<'_, f64>, w: &LayerNormWeights, eps: f64) -> Array2<f64> {
    let mut out = x.to_owned();
    let d = x.ncols() as f64;
    for mut row in out.rows_mut() {
        let mean = row.sum() / d;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / d;
        let inv = 1.0 / (var + eps).sqrt();
        for ((v, g), b) in row.iter_mut().zip(w.gamma.iter()).zip(w.beta.iter()) {
            *v = (*v - mean) * inv * g + b;
        }
    }
    out
}

/// `x · w + b` for `x` of `n × in`, `w` of `in × out` (a `Conv1D`).
fn linear(x: ArrayView2<'_, f64>, w: &Array2<f64>, b: &Array1<f64>) -> Array2<f64> {
    product(x, w) + b
}

/// `x · w` for `x` of `n × in` and `w` of `in × out`: the plaintext references' linear
/// layers (GPT-2, LLaMA and BERT).
///
/// For a few rows (the KV-cached steps) this accumulates rows of `w` scaled by the
/// entries of `x`, reading `w` once in memory order; a general matrix product would first
/// copy (pack) all of `w`, which costs more than the product itself for one row.
pub(crate) fn product(x: ArrayView2<'_, f64>, w: &Array2<f64>) -> Array2<f64> {
    if x.nrows() > 4 {
        return x.dot(w);
    }
    let mut out = Array2::zeros((x.nrows(), w.ncols()));
    for (x_row, mut out_row) in x.rows().into_iter().zip(out.rows_mut()) {
        for (&xi, w_row) in x_row.iter().zip(w.rows()) {
            out_row.scaled_add(xi, &w_row);
        }
    }
    out
}

/// `hidden · headᵀ` for `hidden` of `n × d` and a head (or tied embedding) of `V × d`: the
/// logits of every row.
///
/// For a few rows this takes each logit as the dot product of a row of `head` with a row of
/// `hidden`, reading `head` once in memory order, instead of packing all of its transpose
/// as a general matrix product does.
pub(crate) fn head_product(hidden: ArrayView2<'_, f64>, head: &Array2<f64>) -> Array2<f64> {
    if hidden.nrows() > 4 {
        return hidden.dot(&head.t());
    }
    let mut out = Array2::zeros((hidden.nrows(), head.nrows()));
    for (h_row, mut out_row) in hidden.rows().into_iter().zip(out.rows_mut()) {
        out_row.assign(&head.dot(&h_row));
    }
    out
}

/// The index of the largest value (ties: the lowest index) and its margin over the
/// second-largest value (`+∞` for a single element). NaNs are skipped; `None` if there is
/// no non-NaN value.
pub fn argmax_with_margin(row: ArrayView1<'_, f64>) -> Option<(usize, f64)> {
    let mut best: Option<(usize, f64)> = None;
    let mut second = f64::NEG_INFINITY;
    for (i, &v) in row.iter().enumerate() {
        if v.is_nan() {
            continue;
        }
        match best {
            Some((_, b)) if v <= b => second = second.max(v),
            Some((_, b)) => {
                second = b;
                best = Some((i, v));
            }
            None => best = Some((i, v)),
        }
    }
    best.map(|(i, b)| (i, b - second))
}

/// One block's intermediate values for a sequence (each `L × width`), recorded by
/// [`PlainGpt2::forward_trace`] for layer-by-layer comparisons.
#[derive(Debug, Clone, PartialEq)]
pub struct BlockTrace {
    /// Block input (the residual stream).
    pub input: Array2<f64>,
    /// `ln_1(input)`, `L × d`.
    pub ln_1: Array2<f64>,
    /// `c_attn` output `[q | k | v]`, `L × 3d`.
    pub qkv: Array2<f64>,
    /// Attention probabilities per head (`n_head` matrices, `L × L`, zero above the
    /// diagonal).
    pub attn_probs: Vec<Array2<f64>>,
    /// Heads concatenated, before `c_proj`, `L × d`.
    pub attn_heads: Array2<f64>,
    /// `c_proj` output (the attention's contribution to the residual), `L × d`.
    pub attn_out: Array2<f64>,
    /// `input + attn_out`, `L × d`.
    pub residual: Array2<f64>,
    /// `ln_2(residual)`, `L × d`.
    pub ln_2: Array2<f64>,
    /// `c_fc` output (activation input), `L × inner`.
    pub fc: Array2<f64>,
    /// Activation output, `L × inner`.
    pub act: Array2<f64>,
    /// MLP `c_proj` output, `L × d`.
    pub mlp_out: Array2<f64>,
    /// `residual + mlp_out`: the block output, `L × d`.
    pub output: Array2<f64>,
}

/// Every intermediate value of one forward pass over a whole sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2Trace {
    /// `wte[ids] + wpe[0..L]` (input of block 0), `L × d`.
    pub embeddings: Array2<f64>,
    /// One entry per block.
    pub blocks: Vec<BlockTrace>,
    /// `ln_f` of the last block's output, `L × d`.
    pub last_hidden_state: Array2<f64>,
    /// `last_hidden_state · lm_headᵀ`, `L × vocab_size`.
    pub logits: Array2<f64>,
}

/// Keys and values of every block for the tokens fed so far. Make one with
/// [`PlainGpt2::new_cache`]; feed tokens with [`PlainGpt2::forward_with_cache`].
#[derive(Debug, Clone, PartialEq)]
pub struct KvCache {
    /// Per block: keys and values, `len × n_embd` each (heads side by side).
    layers: Vec<(Array2<f64>, Array2<f64>)>,
}

impl KvCache {
    /// Number of tokens cached (the position of the next token).
    pub fn len(&self) -> usize {
        self.layers.first().map_or(0, |(k, _)| k.nrows())
    }

    /// True before any token was fed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Block `layer`'s cached keys and values (`len × n_embd` each; head `h` is columns
    /// `h · head_dim .. (h + 1) · head_dim`), or `None` past the last block.
    pub fn layer(&self, layer: usize) -> Option<(ArrayView2<'_, f64>, ArrayView2<'_, f64>)> {
        self.layers.get(layer).map(|(k, v)| (k.view(), v.view()))
    }
}

/// A GPT-2 language model evaluated in `f64`.
#[derive(Debug, Clone)]
pub struct PlainGpt2 {
    config: Gpt2Config,
    // Shared, so that the owner can run its plaintext model (for the range check) on the
    // weights it is about to share without a second copy.
    weights: Arc<Gpt2Weights>,
}

impl PlainGpt2 {
    /// A model from a configuration and matching weights.
    ///
    /// # Errors
    /// [`LoadError::Config`] for an invalid configuration, [`LoadError::Shape`] if a weight
    /// does not have the shape the configuration implies.
    pub fn new(
        config: Gpt2Config,
        weights: impl Into<Arc<Gpt2Weights>>,
    ) -> Result<PlainGpt2, LoadError> {
        let weights = weights.into();
        weights.check_shapes(&config)?;
        Ok(PlainGpt2 { config, weights })
    }

    /// Loads `dir/config.json` and `dir/model.safetensors` (see
    /// [`crate::gpt2::weights::load_gpt2`]).
    ///
    /// # Errors
    /// As [`crate::gpt2::weights::load_gpt2`].
    pub fn load(dir: &std::path::Path) -> Result<PlainGpt2, LoadError> {
        let (config, weights) = load_gpt2(dir)?;
        PlainGpt2::new(config, weights)
    }

    /// The configuration.
    pub fn config(&self) -> &Gpt2Config {
        &self.config
    }

    /// The weights.
    pub fn weights(&self) -> &Gpt2Weights {
        &self.weights
    }

    /// An empty KV cache for this model.
    pub fn new_cache(&self) -> KvCache {
        let d = self.config.n_embd;
        KvCache {
            layers: (0..self.config.n_layer)
                .map(|_| (Array2::zeros((0, d)), Array2::zeros((0, d))))
                .collect(),
        }
    }

    /// The logits of every position of `ids` (`L × vocab_size`; row `t` predicts token
    /// `t + 1`). An empty `ids` gives an empty (`0 × vocab_size`) result.
    ///
    /// # Errors
    /// [`InputError::TooLong`] or [`InputError::TokenOutOfRange`].
    pub fn forward(&self, ids: &[u32]) -> Result<Array2<f64>, InputError> {
        let mut cache = self.new_cache();
        self.forward_with_cache(ids, &mut cache)
    }

    /// Like [`PlainGpt2::forward`], recording every intermediate value.
    ///
    /// # Errors
    /// As [`PlainGpt2::forward`].
    pub fn forward_trace(&self, ids: &[u32]) -> Result<Gpt2Trace, InputError> {
        let mut cache = self.new_cache();
        let mut blocks = Vec::with_capacity(self.config.n_layer);
        let (embeddings, hidden) = self.run(ids, &mut cache, Some(&mut blocks))?;
        let logits = self.logits(hidden.view());
        Ok(Gpt2Trace {
            embeddings,
            blocks,
            last_hidden_state: hidden,
            logits,
        })
    }

    /// The largest values the protocols' ranges apply to, over a forward pass of `ids`
    /// (norm inputs, attention scores, GeLU inputs, logits).
    ///
    /// # Errors
    /// As [`PlainGpt2::forward`].
    pub fn activation_peaks(&self, ids: &[u32]) -> Result<ActivationPeaks, InputError> {
        let t = self.forward_trace(ids)?;
        let (d, hd) = (self.config.n_embd, self.config.head_dim());
        let scale = 1.0 / (hd as f64).sqrt();
        let mut p = ActivationPeaks::default();
        let ln = NormKind::LayerNorm {
            eps: self.config.layer_norm_epsilon,
        };
        for (b, w) in t.blocks.iter().zip(&self.weights.blocks) {
            // The output projection's products, before its bias (summed in the MLP's
            // narrow ring).
            let products = &b.mlp_out - &w.fc_proj_b;
            ActivationPeaks::raise(&mut p.mlp_products, products.iter().copied());
            for x in [&b.input, &b.residual, &b.output] {
                p.raise_norm_input(ln, x.view());
            }
            let (q, k) = (b.qkv.slice(s![.., 0..d]), b.qkv.slice(s![.., d..2 * d]));
            for h in 0..self.config.n_head {
                let cols = s![.., h * hd..(h + 1) * hd];
                let scores = q.slice(cols).dot(&k.slice(cols).t()) * scale;
                // Only the causal part enters the softmax.
                for (i, row) in scores.rows().into_iter().enumerate() {
                    ActivationPeaks::raise(&mut p.scores, row.iter().take(i + 1).copied());
                }
            }
            ActivationPeaks::raise(&mut p.activation, b.fc.iter().copied());
        }
        ActivationPeaks::raise(&mut p.logits, t.logits.iter().copied());
        Ok(p)
    }

    /// Feeds `ids` at positions `cache.len() ..`, appends their keys and values to `cache`,
    /// and returns their logits (`ids.len() × vocab_size`). Each token costs one row of
    /// work against the cached prefix.
    ///
    /// # Errors
    /// [`InputError::TooLong`] if the cache and `ids` together exceed `n_positions`,
    /// [`InputError::TokenOutOfRange`], or [`InputError::CacheMismatch`] for a cache of
    /// another model. On error the cache is unchanged.
    pub fn forward_with_cache(
        &self,
        ids: &[u32],
        cache: &mut KvCache,
    ) -> Result<Array2<f64>, InputError> {
        let hidden = self.hidden_with_cache(ids, cache)?;
        Ok(self.logits(hidden.view()))
    }

    /// Like [`PlainGpt2::forward_with_cache`], but returns the final hidden states
    /// (after `ln_f`, `ids.len() × n_embd`) instead of the logits, so a caller can compute
    /// the logits of only the rows it needs ([`PlainGpt2::logits_row`]).
    ///
    /// # Errors
    /// As [`PlainGpt2::forward_with_cache`].
    pub fn hidden_with_cache(
        &self,
        ids: &[u32],
        cache: &mut KvCache,
    ) -> Result<Array2<f64>, InputError> {
        self.run(ids, cache, None).map(|(_, h)| h)
    }

    /// The logits (`vocab_size`) of one final hidden state (`n_embd`, e.g. a row of
    /// [`PlainGpt2::hidden_with_cache`]).
    ///
    /// # Errors
    /// [`InputError::Width`] if `hidden` does not have `n_embd` elements.
    pub fn logits_row(&self, hidden: ArrayView1<'_, f64>) -> Result<Array1<f64>, InputError> {
        if hidden.len() != self.config.n_embd {
            return Err(InputError::Width {
                expected: self.config.n_embd,
                found: hidden.len(),
            });
        }
        Ok(self.weights.lm_head().dot(&hidden))
    }

    /// Greedy generation with the KV cache: `max_new` new token ids after `prompt` (the
    /// prompt itself is not returned). Each step takes the argmax of the last position's
    /// logits (ties: the lowest id); generation never stops early (`<|endoftext|>` is not
    /// special).
    ///
    /// # Errors
    /// [`InputError::Empty`] for an empty prompt (with `max_new > 0`),
    /// [`InputError::TokenOutOfRange`], and [`InputError::TooLong`] unless
    /// `prompt.len() + max_new − 1 ≤ n_positions` (the last new token is not fed back);
    /// [`InputError::NonFinite`] if the logits are all NaN (weights that overflow `f64`).
    pub fn generate_greedy(&self, prompt: &[u32], max_new: usize) -> Result<Vec<u32>, InputError> {
        self.check_generation(prompt, max_new)?;
        let mut out = Vec::with_capacity(max_new);
        if max_new == 0 {
            return Ok(out);
        }
        let mut cache = self.new_cache();
        let mut hidden = self.hidden_with_cache(prompt, &mut cache)?;
        loop {
            let next = self.greedy_next(&hidden)?;
            out.push(next);
            if out.len() == max_new {
                return Ok(out);
            }
            hidden = self.hidden_with_cache(&[next], &mut cache)?;
        }
    }

    /// Greedy generation without a cache, exactly as the reference fixtures were made:
    /// at each step the whole sequence (prompt and tokens so far) is run again. Slower than
    /// [`PlainGpt2::generate_greedy`] and meant for checking it.
    ///
    /// # Errors
    /// As [`PlainGpt2::generate_greedy`].
    pub fn generate_greedy_no_cache(
        &self,
        prompt: &[u32],
        max_new: usize,
    ) -> Result<Vec<u32>, InputError> {
        self.check_generation(prompt, max_new)?;
        let mut seq = prompt.to_vec();
        for _ in 0..max_new {
            let mut cache = self.new_cache();
            let hidden = self.hidden_with_cache(&seq, &mut cache)?;
            seq.push(self.greedy_next(&hidden)?);
        }
        Ok(seq.split_off(prompt.len()))
    }

    fn check_generation(&self, prompt: &[u32], max_new: usize) -> Result<(), InputError> {
        self.config.check_ids(prompt, 0)?;
        if max_new == 0 {
            return Ok(());
        }
        if prompt.is_empty() {
            return Err(InputError::Empty);
        }
        let len = prompt.len().saturating_add(max_new - 1);
        if len > self.config.n_positions {
            return Err(InputError::TooLong {
                len,
                n_positions: self.config.n_positions,
            });
        }
        Ok(())
    }

    /// The greedy choice after the last row of `hidden`.
    fn greedy_next(&self, hidden: &Array2<f64>) -> Result<u32, InputError> {
        let last = hidden.nrows().checked_sub(1).ok_or(InputError::Empty)?;
        let logits = self.logits_row(hidden.row(last))?;
        argmax_with_margin(logits.view())
            .and_then(|(i, _)| u32::try_from(i).ok())
            .ok_or(InputError::NonFinite)
    }

    fn logits(&self, hidden: ArrayView2<'_, f64>) -> Array2<f64> {
        head_product(hidden, self.weights.lm_head())
    }

    /// The forward pass of `ids` at positions `cache.len() ..`: returns the embeddings and
    /// the final hidden states; appends keys and values to `cache`. Every input error is
    /// detected before the cache is touched.
    fn run(
        &self,
        ids: &[u32],
        cache: &mut KvCache,
        mut trace: Option<&mut Vec<BlockTrace>>,
    ) -> Result<(Array2<f64>, Array2<f64>), InputError> {
        let c = &self.config;
        let start = cache.len();
        if cache.layers.len() != c.n_layer
            || cache.layers.iter().any(|(k, v)| {
                k.ncols() != c.n_embd
                    || v.ncols() != c.n_embd
                    || k.nrows() != start
                    || v.nrows() != start
            })
        {
            return Err(InputError::CacheMismatch(format!(
                "expected {} blocks of width {}",
                c.n_layer, c.n_embd
            )));
        }
        c.check_ids(ids, start)?;
        let w = &self.weights;
        let mut x = Array2::zeros((ids.len(), c.n_embd));
        for (i, (mut row, &id)) in x.rows_mut().into_iter().zip(ids).enumerate() {
            // In range: check_ids bounded id by vocab_size and start + i by n_positions.
            row.assign(&w.wte.row(id as usize));
            row += &w.wpe.row(start + i);
        }
        let embeddings = x.clone();
        for (block, (k_cache, v_cache)) in w.blocks.iter().zip(cache.layers.iter_mut()) {
            let (out, bt) = self.block(block, x, start, k_cache, v_cache, trace.is_some())?;
            if let (Some(t), Some(bt)) = (trace.as_deref_mut(), bt) {
                t.push(bt);
            }
            x = out;
        }
        let hidden = layer_norm(x.view(), &w.ln_f, c.layer_norm_epsilon);
        Ok((embeddings, hidden))
    }

    /// One block on the new rows `x` (positions `start ..`): appends their keys and values
    /// to the block's cache and attends over all of it; returns the block output.
    fn block(
        &self,
        b: &Gpt2Block,
        x: Array2<f64>,
        start: usize,
        k: &mut Array2<f64>,
        v: &mut Array2<f64>,
        record: bool,
    ) -> Result<(Array2<f64>, Option<BlockTrace>), InputError> {
        let c = &self.config;
        let (d, hd, n) = (c.n_embd, c.head_dim(), x.nrows());
        let eps = c.layer_norm_epsilon;

        let ln_1 = layer_norm(x.view(), &b.ln_1, eps);
        let qkv = linear(ln_1.view(), &b.attn_w, &b.attn_b);
        let q = qkv.slice(s![.., 0..d]);
        let grow = |cache: &mut Array2<f64>, new: ArrayView2<'_, f64>| {
            cache
                .append(Axis(0), new)
                .map_err(|e| InputError::CacheMismatch(e.to_string()))
        };
        grow(k, qkv.slice(s![.., d..2 * d]))?;
        grow(v, qkv.slice(s![.., 2 * d..3 * d]))?;
        let total = start + n;
        let scale = 1.0 / (hd as f64).sqrt();

        let mut heads = Array2::zeros((n, d));
        let mut probs_trace = Vec::new();
        for h in 0..c.n_head {
            let cols = s![.., h * hd..(h + 1) * hd];
            let mut scores = q.slice(cols).dot(&k.slice(cols).t()) * scale;
            for (i, mut row) in scores.rows_mut().into_iter().enumerate() {
                // Row i is position start + i: it sees keys 0 ..= start + i.
                let visible = (start + i + 1).min(total);
                softmax_prefix(row.as_slice_mut(), visible);
            }
            heads.slice_mut(cols).assign(&scores.dot(&v.slice(cols)));
            if record {
                probs_trace.push(scores);
            }
        }
        let attn_out = linear(heads.view(), &b.proj_w, &b.proj_b);
        let residual = &x + &attn_out;
        let ln_2 = layer_norm(residual.view(), &b.ln_2, eps);
        let fc = linear(ln_2.view(), &b.fc_w, &b.fc_b);
        let act = fc.mapv(|t| activate(c.activation, t));
        let mlp_out = linear(act.view(), &b.fc_proj_w, &b.fc_proj_b);
        let output = &residual + &mlp_out;
        let trace = record.then(|| BlockTrace {
            input: x,
            ln_1,
            qkv: qkv.clone(),
            attn_probs: probs_trace,
            attn_heads: heads,
            attn_out,
            residual,
            ln_2,
            fc,
            act,
            mlp_out,
            output: output.clone(),
        });
        Ok((output, trace))
    }
}

/// Softmax over the first `visible` entries of `row` (max-subtracted); the rest become 0.
/// `row` is `None` only for a non-contiguous row, which the callers never pass.
fn softmax_prefix(row: Option<&mut [f64]>, visible: usize) {
    let Some(row) = row else { return };
    let visible = visible.min(row.len());
    let (seen, masked) = row.split_at_mut(visible);
    let max = seen.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut sum = 0.0;
    for v in seen.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in seen.iter_mut() {
        *v /= sum;
    }
    masked.fill(0.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::array;

    #[test]
    fn argmax_ties_pick_lowest_and_margin() {
        assert_eq!(
            argmax_with_margin(array![1.0, 3.0, 3.0, 2.0].view()),
            Some((1, 0.0))
        );
        assert_eq!(
            argmax_with_margin(array![1.0, 4.0, 3.0].view()),
            Some((1, 1.0))
        );
        assert_eq!(
            argmax_with_margin(array![f64::NAN, 2.0].view()).map(|x| x.0),
            Some(1)
        );
        assert_eq!(argmax_with_margin(Array1::<f64>::zeros(0).view()), None);
    }

    #[test]
    fn gelu_forms() {
        // Reference values from Python's math.erf / math.tanh.
        assert!((gelu_erf(1.0) - 0.841_344_746_068_542_9).abs() < 1e-15);
        assert!((gelu_tanh(1.0) - 0.841_191_990_608_276_8).abs() < 1e-15);
        assert_eq!(gelu_tanh(0.0), 0.0);
        assert!((gelu_erf(-3.0) + 0.004_049_694_094_890_31).abs() < 1e-16);
    }
}
