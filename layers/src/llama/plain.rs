//! The plaintext `f64` LLaMA forward pass (the reference every secure result is compared
//! against), with a KV cache and greedy generation.

use std::sync::Arc;

use ndarray::{Array1, Array2, ArrayView1, ArrayView2, Axis, s};

use super::config::LlamaConfig;
use super::rope;
use super::weights::{LlamaLoadError, LlamaWeights};
use crate::gpt2::config::InputError;
use crate::gpt2::plain::{head_product, product};
use crate::nn::NormKind;
use crate::nn::range::ActivationPeaks;

/// RMSNorm of each row: `x / sqrt(mean(x²) + eps) · w`.
pub fn rms_norm(x: ArrayView2<'_, f64>, w: &Array1<f64>, eps: f64) -> Array2<f64> {
    let mut out = x.to_owned();
    for mut row in out.rows_mut() {
        let ms = row.iter().map(|v| v * v).sum::<f64>() / row.len().max(1) as f64;
        let r = 1.0 / (ms + eps).sqrt();
        row.zip_mut_with(w, |v, &g| *v = *v * r * g);
    }
    out
}

/// SiLU, `x · σ(x)`.
pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// Keys and values of all positions so far, per layer (`T × KV·hd`, RoPE applied to keys).
#[derive(Debug, Clone, Default)]
pub struct LlamaKvCache {
    keys: Vec<Array2<f64>>,
    values: Vec<Array2<f64>>,
    len: usize,
}

impl LlamaKvCache {
    /// Positions cached.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A plaintext LLaMA-style model.
#[derive(Debug, Clone)]
pub struct PlainLlama {
    cfg: LlamaConfig,
    // Shared, so that the owner can run its plaintext model (for the range check) on the
    // weights it is about to share without a second copy.
    w: Arc<LlamaWeights>,
}

impl PlainLlama {
    /// Wraps checked weights.
    ///
    /// # Errors
    /// [`LlamaLoadError::Shape`] if the weights do not match the configuration.
    pub fn new(
        cfg: LlamaConfig,
        w: impl Into<Arc<LlamaWeights>>,
    ) -> Result<PlainLlama, LlamaLoadError> {
        let w = w.into();
        w.check_shapes(&cfg)?;
        Ok(PlainLlama { cfg, w })
    }

    /// The configuration.
    pub fn config(&self) -> &LlamaConfig {
        &self.cfg
    }

    /// The weights.
    pub fn weights(&self) -> &LlamaWeights {
        &self.w
    }

    /// An empty cache for this model.
    pub fn new_cache(&self) -> LlamaKvCache {
        let kv = self.cfg.kv_dim();
        LlamaKvCache {
            keys: vec![Array2::zeros((0, kv)); self.cfg.num_hidden_layers],
            values: vec![Array2::zeros((0, kv)); self.cfg.num_hidden_layers],
            len: 0,
        }
    }

    /// Runs `ids` at positions `cache.len()..` and returns the final hidden states after the
    /// last RMSNorm (`rows × d`), extending the cache.
    ///
    /// # Errors
    /// [`InputError`] for an empty input, ids outside the vocabulary, too many positions or
    /// a cache of another model.
    pub fn hidden_with_cache(
        &self,
        ids: &[u32],
        cache: &mut LlamaKvCache,
    ) -> Result<Array2<f64>, InputError> {
        self.run(ids, cache, None)
    }

    /// The largest values the protocols' ranges apply to, over a forward pass of `ids`
    /// (RMSNorm inputs, attention scores, SiLU inputs, logits).
    ///
    /// # Errors
    /// As [`PlainLlama::hidden_with_cache`].
    pub fn activation_peaks(&self, ids: &[u32]) -> Result<ActivationPeaks, InputError> {
        let mut peaks = ActivationPeaks::default();
        let mut cache = self.new_cache();
        let hidden = self.run(ids, &mut cache, Some(&mut peaks))?;
        let logits = head_product(hidden.view(), self.w.lm_head());
        ActivationPeaks::raise(&mut peaks.logits, logits.iter().copied());
        Ok(peaks)
    }

    /// [`PlainLlama::hidden_with_cache`], raising `peaks` if given.
    fn run(
        &self,
        ids: &[u32],
        cache: &mut LlamaKvCache,
        mut peaks: Option<&mut ActivationPeaks>,
    ) -> Result<Array2<f64>, InputError> {
        let cfg = &self.cfg;
        let rms = NormKind::RmsNorm {
            eps: cfg.rms_norm_eps,
        };
        if ids.is_empty() {
            return Err(InputError::Empty);
        }
        if cache.keys.len() != cfg.num_hidden_layers || cache.values.len() != cfg.num_hidden_layers
        {
            return Err(InputError::CacheMismatch("wrong number of layers".into()));
        }
        cfg.check_ids(ids, cache.len)?;
        let (d, h, kvh, hd) = (
            cfg.hidden_size,
            cfg.num_attention_heads,
            cfg.num_key_value_heads,
            cfg.head_dim,
        );
        let group = cfg.group_size();
        let rows = ids.len();
        let past = cache.len;
        let total = past + rows;
        let mut x = Array2::zeros((rows, d));
        for (mut row, &id) in x.rows_mut().into_iter().zip(ids) {
            row.assign(&self.w.embed.row(id as usize));
        }
        let angles: Vec<(Vec<f64>, Vec<f64>)> = (past..total)
            .map(|p| rope::cos_sin(p, hd, cfg.rope_theta))
            .collect();
        let scale = 1.0 / (hd as f64).sqrt();
        for (l, layer) in self.w.layers.iter().enumerate() {
            if let Some(p) = peaks.as_deref_mut() {
                p.raise_norm_input(rms, x.view());
            }
            let a = rms_norm(x.view(), &layer.attn_norm, cfg.rms_norm_eps);
            let mut q = product(a.view(), &layer.wq);
            let mut k = product(a.view(), &layer.wk);
            let v = product(a.view(), &layer.wv);
            for (i, (c, s)) in angles.iter().enumerate() {
                if let Some(qrow) = q.row_mut(i).as_slice_mut() {
                    for head in qrow.chunks_exact_mut(hd) {
                        rope::apply(head, c, s);
                    }
                }
                if let Some(krow) = k.row_mut(i).as_slice_mut() {
                    for head in krow.chunks_exact_mut(hd) {
                        rope::apply(head, c, s);
                    }
                }
            }
            if let Some(p) = peaks.as_deref_mut() {
                ActivationPeaks::raise(&mut p.rotated, q.iter().chain(k.iter()).copied());
            }
            let (keys, values) = match (cache.keys.get_mut(l), cache.values.get_mut(l)) {
                (Some(k), Some(v)) => (k, v),
                _ => return Err(InputError::CacheMismatch("wrong number of layers".into())),
            };
            if keys.nrows() != past || keys.ncols() != kvh * hd {
                return Err(InputError::CacheMismatch("wrong shape".into()));
            }
            *keys = ndarray::concatenate(Axis(0), &[keys.view(), k.view()])
                .map_err(|_| InputError::CacheMismatch("wrong shape".into()))?;
            *values = ndarray::concatenate(Axis(0), &[values.view(), v.view()])
                .map_err(|_| InputError::CacheMismatch("wrong shape".into()))?;
            let mut attn = Array2::zeros((rows, h * hd));
            for head in 0..h {
                let kv = head / group;
                let qh = q.slice(s![.., head * hd..(head + 1) * hd]);
                let kh = keys.slice(s![.., kv * hd..(kv + 1) * hd]);
                let vh = values.slice(s![.., kv * hd..(kv + 1) * hd]);
                let mut scores = qh.dot(&kh.t()) * scale;
                for (i, mut row) in scores.rows_mut().into_iter().enumerate() {
                    let visible = past + i + 1;
                    if let Some(p) = peaks.as_deref_mut() {
                        ActivationPeaks::raise(&mut p.scores, row.iter().take(visible).copied());
                    }
                    let m = row
                        .slice(s![..visible])
                        .fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                    let mut sum = 0.0;
                    for (j, v) in row.iter_mut().enumerate() {
                        *v = if j < visible { (*v - m).exp() } else { 0.0 };
                        sum += *v;
                    }
                    row.mapv_inplace(|v| v / sum);
                }
                attn.slice_mut(s![.., head * hd..(head + 1) * hd])
                    .assign(&scores.dot(&vh));
            }
            x = x + product(attn.view(), &layer.wo);
            if let Some(p) = peaks.as_deref_mut() {
                p.raise_norm_input(rms, x.view());
            }
            let a2 = rms_norm(x.view(), &layer.mlp_norm, cfg.rms_norm_eps);
            let gate = product(a2.view(), &layer.w_gate);
            if let Some(p) = peaks.as_deref_mut() {
                ActivationPeaks::raise(&mut p.activation, gate.iter().copied());
            }
            let up = product(a2.view(), &layer.w_up);
            let act = ndarray::Zip::from(&gate)
                .and(&up)
                .map_collect(|&g, &u| silu(g) * u);
            let down = product(act.view(), &layer.w_down);
            if let Some(p) = peaks.as_deref_mut() {
                // Both products are summed in the MLP's narrow ring.
                ActivationPeaks::raise(&mut p.mlp_products, act.iter().copied());
                ActivationPeaks::raise(&mut p.mlp_products, down.iter().copied());
            }
            x = x + down;
        }
        cache.len = total;
        if let Some(p) = peaks {
            p.raise_norm_input(rms, x.view());
        }
        Ok(rms_norm(x.view(), &self.w.norm, cfg.rms_norm_eps))
    }

    /// Logits of every position of `ids` (`len × V`), from an empty cache.
    ///
    /// # Errors
    /// As [`PlainLlama::hidden_with_cache`].
    pub fn forward(&self, ids: &[u32]) -> Result<Array2<f64>, InputError> {
        let mut cache = self.new_cache();
        let hidden = self.hidden_with_cache(ids, &mut cache)?;
        Ok(head_product(hidden.view(), self.w.lm_head()))
    }

    /// The final hidden states of every position of `ids` (after the last RMSNorm).
    ///
    /// # Errors
    /// As [`PlainLlama::hidden_with_cache`].
    pub fn last_hidden_state(&self, ids: &[u32]) -> Result<Array2<f64>, InputError> {
        let mut cache = self.new_cache();
        self.hidden_with_cache(ids, &mut cache)
    }

    /// The logits of one final hidden state.
    pub fn logits_row(&self, hidden: ArrayView1<'_, f64>) -> Array1<f64> {
        self.w.lm_head().dot(&hidden)
    }

    /// Greedy generation of `max_new` ids with the KV cache (ties: lowest id).
    ///
    /// # Errors
    /// As [`PlainLlama::hidden_with_cache`], and [`InputError::NonFinite`] for logits
    /// without an argmax.
    pub fn generate_greedy(&self, prompt: &[u32], max_new: usize) -> Result<Vec<u32>, InputError> {
        let mut cache = self.new_cache();
        let mut out = Vec::with_capacity(max_new);
        let mut input = prompt.to_vec();
        for _ in 0..max_new {
            let hidden = self.hidden_with_cache(&input, &mut cache)?;
            let last = hidden.row(hidden.nrows().saturating_sub(1));
            let logits = self.logits_row(last);
            let (id, _) = crate::gpt2::plain::argmax_with_margin(logits.view())
                .ok_or(InputError::NonFinite)?;
            out.push(id as u32);
            input = vec![id as u32];
        }
        Ok(out)
    }
}
