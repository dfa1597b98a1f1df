//! Secure BERT / RoBERTa evaluation among three parties on three threads in one process:
//! sentence embeddings (mean-pooled, L2-normalised, as sentence-transformers computes
//! them) and sequence classification.
//!
//! Roles as in [`crate::gpt2`]: P0 is the **client** (token ids, learns the output), P1 the
//! **model owner** (weights), P2 a helper. The owner shares the weights, the client shares
//! the one-hot rows of its ids and token types, and the parties run
//! [`puma_layers::bert::secure::run`] over the in-memory transport. The batch's shape and
//! attention mask (the sentence lengths) are public.
//!
//! [`run_secure`] is the whole orchestration; the `bert` binary and the integration tests
//! call it. [`synthetic_model`] builds random weights of a given shape (for cost
//! measurements of shapes such as Bert-Base without downloading them); [`BERT_BASE`] and
//! [`BERT_LARGE`] are the published shapes and [`synthetic_ids`] a fixed input.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ndarray::Array2;
use puma_core::{Config, PartyId, Stats};
use puma_layers::bert::plain::{cosine_matrix, mean_pool_normalized};
use puma_layers::bert::secure::{
    BatchShape, BertHeads, Outputs, Revealed, SharedBert, run_observed,
};
use puma_layers::bert::weights::Linear;
use puma_layers::bert::{
    BertBatch, BertConfig, BertError, BertFlavor, BertLayer, BertWeights, PlainBert,
};
use puma_layers::gpt2::config::Activation;
use puma_layers::gpt2::weights::LayerNormWeights;
use puma_layers::nn::{LayerCosts, Observer, SecureSettings, ShareObserver};
use puma_transports::{TransportError, mem};

/// The client: holds the sentences and learns the output.
pub const CLIENT: PartyId = PartyId::P0;
/// The model owner: holds the weights.
pub const OWNER: PartyId = PartyId::P1;

/// Where `scripts/fetch-minilm.sh` puts all-MiniLM-L6-v2 (the binary's default model).
pub const MINILM_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/models/minilm-l6");
/// The tiny random BERT with a classification head, shipped in the repository.
pub const TINY_MODEL_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/bert-tiny-random");

/// Why a secure BERT run could not run or failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BertRunError {
    /// The model directory does not exist.
    #[error(
        "model directory {} does not exist (all-MiniLM-L6-v2: run `bash scripts/fetch-minilm.sh`; or pass --model DIR)",
        .0.display()
    )]
    NoModelDir(PathBuf),
    /// Loading or an input check failed.
    #[error(transparent)]
    Bert(#[from] BertError),
    /// A party's run failed.
    #[error("{party} failed: {error}")]
    Party {
        /// The party.
        party: PartyId,
        /// Its error.
        #[source]
        error: TransportError,
    },
    /// The client ended without an output it asked for (a defect).
    #[error("the client got no {0}")]
    MissingOutput(&'static str),
}

/// A loaded model.
#[derive(Debug, Clone)]
pub struct LoadedBert {
    /// The public configuration.
    pub config: BertConfig,
    /// The owner's weights.
    pub weights: BertWeights,
}

/// Loads a Hugging Face BERT / RoBERTa directory.
///
/// # Errors
/// [`BertRunError::NoModelDir`] for a missing directory, [`BertRunError::Bert`] otherwise.
pub fn load_model(dir: &Path) -> Result<LoadedBert, BertRunError> {
    if !dir.is_dir() {
        return Err(BertRunError::NoModelDir(dir.to_path_buf()));
    }
    let (config, weights) = puma_layers::bert::load_bert(dir)?;
    Ok(LoadedBert { config, weights })
}

/// A published BERT shape (uncased WordPiece vocabulary of 30522, 512 positions, 2 token
/// types, erf GeLU), for synthetic models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BertShape {
    /// Name, e.g. `bert-base`.
    pub name: &'static str,
    /// Encoder layers.
    pub layers: usize,
    /// Width of the residual stream.
    pub width: usize,
    /// Attention heads.
    pub heads: usize,
    /// Width of the MLP's inner layer.
    pub intermediate: usize,
}

/// Bert-Base (110 M parameters).
pub const BERT_BASE: BertShape = BertShape {
    name: "bert-base",
    layers: 12,
    width: 768,
    heads: 12,
    intermediate: 3072,
};

/// Bert-Large (340 M parameters).
pub const BERT_LARGE: BertShape = BertShape {
    name: "bert-large",
    layers: 24,
    width: 1024,
    heads: 16,
    intermediate: 4096,
};

impl BertShape {
    /// The published shapes.
    pub const ALL: [BertShape; 2] = [BERT_BASE, BERT_LARGE];

    /// The shape called `name` (`bert-base` or `bert-large`).
    pub fn by_name(name: &str) -> Option<BertShape> {
        Self::ALL.into_iter().find(|s| s.name == name)
    }

    /// The configuration of this shape with its first `layers` layers.
    pub fn config(&self, layers: usize) -> BertConfig {
        BertConfig {
            flavor: BertFlavor::Bert,
            vocab_size: 30522,
            hidden_size: self.width,
            num_hidden_layers: layers,
            num_attention_heads: self.heads,
            intermediate_size: self.intermediate,
            activation: Activation::GeluErf,
            max_position_embeddings: 512,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            pad_token_id: 0,
        }
    }
}

/// Token ids of one synthetic sequence of `tokens` tokens: `[CLS] w w … [SEP]` in the
/// uncased BERT vocabulary (the values do not change the costs).
pub fn synthetic_ids(tokens: usize) -> Vec<u32> {
    (0..tokens)
        .map(|i| match i {
            0 => 101,
            i if i + 1 == tokens => 102,
            i => 1000 + (i % 29_000) as u32,
        })
        .collect()
}

/// Random weights of the shape `config` says (normal-ish values of scale 0.05, LayerNorm
/// γ = 1, β = 0), with a pooler and `labels` classification labels (0: none). For cost
/// measurements only: costs do not depend on the values.
pub fn synthetic_model(config: BertConfig, labels: usize, seed: u64) -> LoadedBert {
    let mut state = seed | 1;
    let (d, inner) = (config.hidden_size, config.intermediate_size);
    let ln = || LayerNormWeights {
        gamma: ndarray::Array1::ones(d),
        beta: ndarray::Array1::zeros(d),
    };
    let mut lin = |i: usize, o: usize| Linear {
        w: random_matrix(&mut state, i, o),
        b: ndarray::Array1::zeros(o),
    };
    let layers = (0..config.num_hidden_layers)
        .map(|_| BertLayer {
            query: lin(d, d),
            key: lin(d, d),
            value: lin(d, d),
            attn_out: lin(d, d),
            attn_ln: ln(),
            inter: lin(d, inner),
            out: lin(inner, d),
            out_ln: ln(),
        })
        .collect();
    let pooler = Some(lin(d, d));
    let classifier = (labels > 0).then(|| lin(d, labels));
    let weights = BertWeights {
        word: random_matrix(&mut state, config.vocab_size, d),
        position: random_matrix(&mut state, config.max_position_embeddings, d),
        token_type: random_matrix(&mut state, config.type_vocab_size, d),
        emb_ln: ln(),
        layers,
        pooler,
        classifier,
    };
    LoadedBert { config, weights }
}

/// A `rows × cols` matrix of uniform values in [−0.05, 0.05) from a xorshift64* stream
/// (deterministic and dependency-free; not for anything but shapes).
fn random_matrix(state: &mut u64, rows: usize, cols: usize) -> Array2<f64> {
    Array2::from_shape_fn((rows, cols), |_| {
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        let v = state.wrapping_mul(0x2545_f491_4f6c_dd1d);
        ((v >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 0.1
    })
}

/// What a secure run produced.
#[derive(Debug, Clone)]
pub struct BertReport {
    /// The client's outputs and its per-kind costs.
    pub client: Revealed,
    /// Per-kind costs of P1 and P2.
    pub others: [LayerCosts; 2],
    /// Payload bytes each party sent while the model was shared, and the epochs.
    pub share_model: [(u64, u32); 3],
    /// Each party's counters.
    pub stats: [Stats; 3],
    /// Wall time of the whole run (sharing included).
    pub elapsed: Duration,
    /// Wall time of the model sharing at the client.
    pub share_time: Duration,
}

impl BertReport {
    /// Rounds of the run (the largest count over the parties).
    pub fn rounds(&self) -> u32 {
        self.stats.iter().map(|s| s.rounds).max().unwrap_or(0)
    }

    /// Payload bytes sent by each party.
    pub fn payload_bytes(&self) -> [u64; 3] {
        self.stats.clone().map(|s| s.payload_bytes_total())
    }
}

struct PartyOut {
    revealed: Revealed,
    share_model: (u64, u32),
    share_time: Duration,
}

/// Shares the model, runs the encoder on `batch` and reveals `outputs` to the client.
///
/// # Errors
/// [`BertRunError::Bert`] if the batch does not fit the model, [`BertRunError::Party`]
/// with the first failed party's error, [`BertRunError::MissingOutput`] on a defect.
pub fn run_secure(
    model: &LoadedBert,
    batch: &BertBatch,
    outputs: Outputs,
    settings: SecureSettings,
    seed: u64,
) -> Result<BertReport, BertRunError> {
    run_secure_observed(model, batch, outputs, settings, seed, None, None)
}

/// [`run_secure`] whose **client** tells `sharing` how far the sharing of the model has
/// come and `layers` of each finished encoder layer (`Progress::Layer`).
///
/// # Errors
/// As [`run_secure`].
pub fn run_secure_observed(
    model: &LoadedBert,
    batch: &BertBatch,
    outputs: Outputs,
    settings: SecureSettings,
    seed: u64,
    sharing: Option<ShareObserver>,
    layers: Option<Observer>,
) -> Result<BertReport, BertRunError> {
    batch.check(&model.config)?;
    if (outputs.pooled || outputs.logits) && model.weights.pooler.is_none() {
        return Err(BertError::MissingHead("pooler").into());
    }
    if outputs.logits && model.weights.classifier.is_none() {
        return Err(BertError::MissingHead("classification head").into());
    }
    let heads = BertHeads::of(&model.weights);
    let weights = Arc::new(model.weights.clone());
    let batch = Arc::new(batch.clone());
    let shape = BatchShape::of(&batch);
    let cfg = model.config.clone();
    let start = Instant::now();
    let outcome = mem::run3(Config::new(seed), seed, |me| {
        let (cfg, shape) = (cfg.clone(), shape.clone());
        let w = (me == OWNER).then(|| Arc::clone(&weights));
        let b = (me == CLIENT).then(|| Arc::clone(&batch));
        let (sharing, layers) = if me == CLIENT {
            (sharing.clone(), layers.clone())
        } else {
            (None, None)
        };
        move |mut ctx| async move {
            let t0 = Instant::now();
            let m0 = ctx.meter();
            let shared = SharedBert::share_observed(
                &mut ctx,
                OWNER,
                &cfg,
                heads,
                w.as_deref(),
                sharing.as_ref(),
            )
            .await?;
            drop(w);
            let m1 = ctx.meter();
            let share_time = t0.elapsed();
            let revealed = run_observed(
                &mut ctx,
                &shared,
                CLIENT,
                b.as_deref(),
                &shape,
                outputs,
                &settings,
                layers.as_ref(),
            )
            .await?;
            Ok(PartyOut {
                revealed,
                share_model: (
                    m1.payload_bytes_sent - m0.payload_bytes_sent,
                    m1.epoch - m0.epoch,
                ),
                share_time,
            })
        }
    });
    let elapsed = start.elapsed();
    let stats = outcome.stats.clone();
    let mut outs = Vec::with_capacity(3);
    for (party, r) in PartyId::ALL.into_iter().zip(outcome.results) {
        outs.push(r.map_err(|error| BertRunError::Party { party, error })?);
    }
    let mut it = outs.into_iter();
    let (Some(c), Some(o1), Some(o2)) = (it.next(), it.next(), it.next()) else {
        return Err(BertRunError::MissingOutput("result of every party"));
    };
    let wanted = [
        (outputs.hidden, c.revealed.hidden.is_some(), "hidden states"),
        (outputs.pooled, c.revealed.pooled.is_some(), "pooled output"),
        (outputs.logits, c.revealed.logits.is_some(), "logits"),
        (
            outputs.embeddings,
            c.revealed.embeddings.is_some(),
            "embeddings",
        ),
    ];
    if let Some((_, _, what)) = wanted.iter().find(|(want, got, _)| *want && !*got) {
        return Err(BertRunError::MissingOutput(what));
    }
    Ok(BertReport {
        share_model: [c.share_model, o1.share_model, o2.share_model],
        share_time: c.share_time,
        others: [o1.revealed.costs, o2.revealed.costs],
        client: c.revealed,
        stats,
        elapsed,
    })
}

/// The secure outputs set against the plaintext f64 model's.
#[derive(Debug, Clone)]
pub struct PlainComparison {
    /// Plaintext embeddings (`batch × d`).
    pub embeddings: Array2<f64>,
    /// Plaintext logits (`batch × labels`), if the model has a head.
    pub logits: Option<Array2<f64>>,
    /// Max |secure − plaintext| over the embeddings, if both exist.
    pub embedding_max_abs: Option<f64>,
    /// The smallest cosine between a secure and the plaintext embedding.
    pub embedding_min_cosine: Option<f64>,
    /// Max |secure − plaintext| over the logits, if both exist.
    pub logits_max_abs: Option<f64>,
    /// Max |secure − plaintext| over the pooled outputs, if both exist.
    pub pooled_max_abs: Option<f64>,
}

/// Runs the plaintext model on `batch` and compares.
///
/// # Errors
/// The plaintext model's input errors.
pub fn compare_plain(
    model: &LoadedBert,
    batch: &BertBatch,
    secure: &Revealed,
) -> Result<PlainComparison, BertError> {
    let plain = PlainBert::new(model.config.clone(), model.weights.clone());
    let out = plain.forward(batch)?;
    let embeddings = mean_pool_normalized(out.last_hidden_state.view(), batch);
    let max_abs = |a: &[f64], b: &Array2<f64>| {
        a.iter()
            .zip(b.iter())
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max)
    };
    let d = model.config.hidden_size;
    let embedding_min_cosine = secure.embeddings.as_ref().map(|e| {
        e.chunks(d)
            .zip(embeddings.rows())
            .map(|(a, b)| {
                let dot: f64 = a.iter().zip(b.iter()).map(|(x, y)| x * y).sum();
                let na = a.iter().map(|x| x * x).sum::<f64>().sqrt();
                dot / (na * b.dot(&b).sqrt())
            })
            .fold(1.0, f64::min)
    });
    Ok(PlainComparison {
        embedding_max_abs: secure.embeddings.as_ref().map(|e| max_abs(e, &embeddings)),
        embedding_min_cosine,
        logits_max_abs: match (&secure.logits, &out.logits) {
            (Some(s), Some(p)) => Some(max_abs(s, p)),
            _ => None,
        },
        pooled_max_abs: match (&secure.pooled, &out.pooled) {
            (Some(s), Some(p)) => Some(max_abs(s, p)),
            _ => None,
        },
        embeddings,
        logits: out.logits,
    })
}

/// The cosine matrix of row-major `batch × d` embeddings.
pub fn cosines(e: &[f64], d: usize) -> Array2<f64> {
    let m = Array2::from_shape_vec((e.len() / d.max(1), d), e.to_vec())
        .unwrap_or_else(|_| Array2::zeros((0, d)));
    cosine_matrix(m.view())
}
