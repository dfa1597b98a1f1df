//! The plaintext BERT / RoBERTa encoder in `f64`: the reference every secure result is
//! compared against, and the definition of the inputs ([`BertBatch`]) both share.

use ndarray::{Array2, ArrayView2, Axis, s};

use super::config::BertConfig;
use super::error::BertError;
use super::weights::{BertWeights, Linear, load_bert};
use crate::gpt2::plain::{activate, layer_norm};

/// A right- or arbitrarily-padded batch of token sequences of one length `seq_len`.
///
/// `input_ids` and `token_type_ids` are the client's (private in the secure setting);
/// `attention_mask` says which positions are real tokens. In the secure evaluation the
/// mask (hence every sequence's length) is public, like the shape.
#[derive(Clone, PartialEq, Eq)]
pub struct BertBatch {
    /// Number of sequences.
    pub batch: usize,
    /// Length of every (padded) sequence.
    pub seq_len: usize,
    /// `batch × seq_len` token ids, row-major.
    pub input_ids: Vec<u32>,
    /// `batch × seq_len` token types (segment A = 0, B = 1).
    pub token_type_ids: Vec<u32>,
    /// `batch × seq_len`: true for a real token, false for padding.
    pub attention_mask: Vec<bool>,
}

impl std::fmt::Debug for BertBatch {
    // Token ids are the client's secret: never print them.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "BertBatch {{ batch: {}, seq_len: {} }}",
            self.batch, self.seq_len
        )
    }
}

impl BertBatch {
    /// One unpadded sequence with token types all 0.
    pub fn single(ids: &[u32]) -> BertBatch {
        BertBatch {
            batch: 1,
            seq_len: ids.len(),
            input_ids: ids.to_vec(),
            token_type_ids: vec![0; ids.len()],
            attention_mask: vec![true; ids.len()],
        }
    }

    /// Right-pads sequences of `(ids, token_type_ids)` with `pad_id` to the longest one
    /// (mask false on the padding).
    ///
    /// # Errors
    /// [`BertError::Input`] for no sequences, an empty sequence, or ids and types of
    /// different lengths.
    pub fn padded(seqs: &[(Vec<u32>, Vec<u32>)], pad_id: u32) -> Result<BertBatch, BertError> {
        let seq_len = seqs.iter().map(|(i, _)| i.len()).max().unwrap_or(0);
        if seqs.is_empty() || seqs.iter().any(|(i, t)| i.is_empty() || i.len() != t.len()) {
            return Err(BertError::Input(
                "need non-empty sequences with as many token types as ids".into(),
            ));
        }
        let mut out = BertBatch {
            batch: seqs.len(),
            seq_len,
            input_ids: Vec::with_capacity(seqs.len() * seq_len),
            token_type_ids: Vec::with_capacity(seqs.len() * seq_len),
            attention_mask: Vec::with_capacity(seqs.len() * seq_len),
        };
        for (ids, types) in seqs {
            let pad = seq_len - ids.len();
            out.input_ids
                .extend(ids.iter().copied().chain(std::iter::repeat_n(pad_id, pad)));
            out.token_type_ids
                .extend(types.iter().copied().chain(std::iter::repeat_n(0, pad)));
            out.attention_mask.extend(
                std::iter::repeat_n(true, ids.len()).chain(std::iter::repeat_n(false, pad)),
            );
        }
        Ok(out)
    }

    /// The mask of sequence `b` (empty if out of range).
    pub fn mask_row(&self, b: usize) -> &[bool] {
        self.attention_mask
            .get(b * self.seq_len..(b + 1) * self.seq_len)
            .unwrap_or(&[])
    }

    /// Checks the shape only (what every party knows): lengths, `seq_len` within the
    /// model's positions, at least one real token per sequence.
    ///
    /// # Errors
    /// [`BertError::Input`] naming the violated constraint.
    pub fn check_shape(&self, cfg: &BertConfig) -> Result<(), BertError> {
        let n = self
            .batch
            .checked_mul(self.seq_len)
            .ok_or_else(|| BertError::Input("batch · seq_len overflows".into()))?;
        if self.batch == 0 || self.seq_len == 0 {
            return Err(BertError::Input("empty batch".into()));
        }
        if self.attention_mask.len() != n {
            return Err(BertError::Input(
                "attention_mask is not batch × seq_len".into(),
            ));
        }
        if self.seq_len > cfg.max_len() {
            return Err(BertError::Input(format!(
                "sequence length {} exceeds the model's {}",
                self.seq_len,
                cfg.max_len()
            )));
        }
        if (0..self.batch).any(|b| !self.mask_row(b).iter().any(|&m| m)) {
            return Err(BertError::Input("a sequence has no real token".into()));
        }
        Ok(())
    }

    /// [`BertBatch::check_shape`] and the private part: ids below `vocab_size`, types below
    /// `type_vocab_size`.
    ///
    /// Only the holder of the ids (the client) runs this check, so its error, which names
    /// the offending id and where it is, stays with the one who already knows the ids.
    ///
    /// # Errors
    /// [`BertError::Input`] naming the violated constraint, the offending value and its
    /// sequence and position.
    pub fn check(&self, cfg: &BertConfig) -> Result<(), BertError> {
        self.check_shape(cfg)?;
        let n = self.batch * self.seq_len;
        if self.input_ids.len() != n || self.token_type_ids.len() != n {
            return Err(BertError::Input(
                "input_ids / token_type_ids are not batch × seq_len".into(),
            ));
        }
        let at = |i: usize| (i / self.seq_len.max(1), i % self.seq_len.max(1));
        if let Some((i, &id)) =
            (self.input_ids.iter().enumerate()).find(|&(_, &id)| id as usize >= cfg.vocab_size)
        {
            let (b, pos) = at(i);
            return Err(BertError::Input(format!(
                "token id {id} (sequence {b}, position {pos}) is outside the vocabulary of {}",
                cfg.vocab_size
            )));
        }
        if let Some((i, &t)) = (self.token_type_ids.iter().enumerate())
            .find(|&(_, &t)| t as usize >= cfg.type_vocab_size)
        {
            let (b, pos) = at(i);
            return Err(BertError::Input(format!(
                "token type {t} (sequence {b}, position {pos}) is not below type_vocab_size {}",
                cfg.type_vocab_size
            )));
        }
        Ok(())
    }

    /// The position ids of every token (row-major), per the model's flavour.
    pub fn position_ids(&self, cfg: &BertConfig) -> Vec<usize> {
        (0..self.batch)
            .flat_map(|b| cfg.position_ids(self.mask_row(b)))
            .collect()
    }
}

/// What the plaintext encoder computes for a batch.
#[derive(Debug, Clone)]
pub struct BertOutput {
    /// The embedding LayerNorm's output (input of layer 0), `batch·seq_len × d`.
    pub embeddings: Array2<f64>,
    /// Each layer's output, `batch·seq_len × d`.
    pub layer_outputs: Vec<Array2<f64>>,
    /// The encoder output, `batch·seq_len × d` (padded positions included: they attend to
    /// the real tokens, as in `transformers`).
    pub last_hidden_state: Array2<f64>,
    /// `tanh(pooler(h[first token]))`, `batch × d`, when the model has a pooler.
    pub pooled: Option<Array2<f64>>,
    /// Classification logits, `batch × labels`, when the model has a head.
    pub logits: Option<Array2<f64>>,
}

/// sentence-transformers' sentence embedding: the mean of `hidden` (`batch·seq_len × d`)
/// over each sequence's real tokens, L2-normalised. Returns `batch × d`.
pub fn mean_pool_normalized(hidden: ArrayView2<'_, f64>, batch: &BertBatch) -> Array2<f64> {
    let d = hidden.ncols();
    let mut out = Array2::zeros((batch.batch, d));
    for (b, mut row) in out.rows_mut().into_iter().enumerate() {
        let mut n = 0.0;
        for (t, &m) in batch.mask_row(b).iter().enumerate() {
            if m {
                row += &hidden.row(b * batch.seq_len + t);
                n += 1.0;
            }
        }
        row /= f64::max(n, 1.0);
        let norm = row.dot(&row).sqrt();
        if norm > 0.0 {
            row /= norm;
        }
    }
    out
}

/// The matrix of pairwise dot products `e · eᵀ` (cosines for normalised rows).
pub fn cosine_matrix(e: ArrayView2<'_, f64>) -> Array2<f64> {
    e.dot(&e.t())
}

fn linear(x: ArrayView2<'_, f64>, l: &Linear) -> Array2<f64> {
    crate::gpt2::plain::product(x, &l.w) + &l.b
}

/// A loaded BERT / RoBERTa encoder evaluated in `f64`.
#[derive(Debug, Clone)]
pub struct PlainBert {
    config: BertConfig,
    weights: BertWeights,
}

impl PlainBert {
    /// Wraps a configuration and matching weights (as [`load_bert`] returns them).
    pub fn new(config: BertConfig, weights: BertWeights) -> PlainBert {
        PlainBert { config, weights }
    }

    /// Loads a model directory (`config.json` + `model.safetensors`).
    ///
    /// # Errors
    /// As [`load_bert`].
    pub fn load(dir: &std::path::Path) -> Result<PlainBert, BertError> {
        let (c, w) = load_bert(dir)?;
        Ok(PlainBert::new(c, w))
    }

    /// The configuration.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The weights.
    pub fn weights(&self) -> &BertWeights {
        &self.weights
    }

    /// Runs the encoder (and the pooler and head, when present) on a batch.
    ///
    /// # Errors
    /// [`BertError::Input`] for a batch that does not fit the model.
    pub fn forward(&self, batch: &BertBatch) -> Result<BertOutput, BertError> {
        batch.check(&self.config)?;
        let cfg = &self.config;
        let w = &self.weights;
        let (d, h, hd) = (cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim());
        let (nb, l) = (batch.batch, batch.seq_len);
        let pos = batch.position_ids(cfg);
        let mut x = Array2::zeros((nb * l, d));
        for (r, mut row) in x.rows_mut().into_iter().enumerate() {
            row += &w.word.row(batch.input_ids[r] as usize);
            row += &w.position.row(pos[r]);
            row += &w.token_type.row(batch.token_type_ids[r] as usize);
        }
        let eps = cfg.layer_norm_eps;
        let mut x = layer_norm(x.view(), &w.emb_ln, eps);
        let embeddings = x.clone();
        let scale = 1.0 / (hd as f64).sqrt();
        let mut layer_outputs = Vec::with_capacity(w.layers.len());
        for layer in &w.layers {
            let q = linear(x.view(), &layer.query);
            let k = linear(x.view(), &layer.key);
            let v = linear(x.view(), &layer.value);
            let mut ctx = Array2::zeros((nb * l, d));
            for b in 0..nb {
                let mask = batch.mask_row(b);
                let rows = s![b * l..(b + 1) * l, ..];
                for hh in 0..h {
                    let cols = s![.., hh * hd..(hh + 1) * hd];
                    let qh = q.slice(rows).slice_move(cols);
                    let kh = k.slice(rows).slice_move(cols);
                    let vh = v.slice(rows).slice_move(cols);
                    let mut scores = qh.dot(&kh.t()) * scale;
                    for mut row in scores.rows_mut() {
                        let max = row
                            .iter()
                            .zip(mask)
                            .filter(|(_, m)| **m)
                            .fold(f64::NEG_INFINITY, |a, (v, _)| a.max(*v));
                        let mut sum = 0.0;
                        for (s, &m) in row.iter_mut().zip(mask) {
                            *s = if m { (*s - max).exp() } else { 0.0 };
                            sum += *s;
                        }
                        row /= sum;
                    }
                    ctx.slice_mut(s![b * l..(b + 1) * l, hh * hd..(hh + 1) * hd])
                        .assign(&scores.dot(&vh));
                }
            }
            let a = linear(ctx.view(), &layer.attn_out) + &x;
            x = layer_norm(a.view(), &layer.attn_ln, eps);
            let mut hidden = linear(x.view(), &layer.inter);
            hidden.mapv_inplace(|v| activate(cfg.activation, v));
            let o = linear(hidden.view(), &layer.out) + &x;
            x = layer_norm(o.view(), &layer.out_ln, eps);
            layer_outputs.push(x.clone());
        }
        let pooled = w.pooler.as_ref().map(|p| {
            let first = x.select(Axis(0), &(0..nb).map(|b| b * l).collect::<Vec<_>>());
            linear(first.view(), p).mapv(f64::tanh)
        });
        let logits = match (&pooled, &w.classifier) {
            (Some(p), Some(c)) => Some(linear(p.view(), c)),
            _ => None,
        };
        Ok(BertOutput {
            embeddings,
            layer_outputs,
            last_hidden_state: x,
            pooled,
            logits,
        })
    }

    /// Mean-pooled, L2-normalised sentence embeddings (`batch × d`), as sentence-transformers
    /// computes them.
    ///
    /// # Errors
    /// As [`PlainBert::forward`].
    pub fn sentence_embeddings(&self, batch: &BertBatch) -> Result<Array2<f64>, BertError> {
        let out = self.forward(batch)?;
        Ok(mean_pool_normalized(out.last_hidden_state.view(), batch))
    }
}
