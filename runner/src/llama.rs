//! Secure greedy generation with LLaMA-style decoders among three parties on three threads
//! in one process: P0 is the **client** (prompt, output), P1 the **model owner** (weights),
//! P2 a helper. The owner shares the weights once; then each prompt runs the generic
//! decoder run ([`crate::decoder::run_decoder`]).
//!
//! Models: a Hugging Face `LlamaForCausalLM` directory (`config.json` +
//! `model.safetensors`) or a LLaMA GGUF file (F32/F16/Q4_1/Q8_0 tensors), see
//! [`load_model`]. The `llama` binary and the integration tests both call [`run_secure`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use puma_core::Stats;
use puma_layers::gpt2::config::InputError;
use puma_layers::gpt2::plain::argmax_with_margin;
use puma_layers::llama::plain::PlainLlama;
use puma_layers::llama::{LlamaConfig, LlamaLoadError, LlamaWeights, load_gguf, load_hf};
use puma_layers::nn::{Finish, LayerCosts, Observer};

pub use crate::decoder::{CLIENT, OWNER, RunOptions, check_prompt};
use crate::decoder::{RunError, run_decoder};

/// The tiny random LLaMA shipped in the repository (2 layers, width 64, GQA 4/2).
pub const TINY_MODEL_DIR: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../models/llama-tiny-random");

/// Where `scripts/fetch-smollm2.sh` puts SmolLM2-135M-Instruct (Q4_1 GGUF).
pub const SMOLLM2_GGUF: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../target/models/smollm2-135m/SmolLM2-135M-Instruct.Q4_1.gguf"
);

/// Why a secure LLaMA run could not run or failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum LlamaError {
    /// The model could not be loaded.
    Load(LlamaLoadError),
    /// A prompt does not fit the model.
    Input(InputError),
    /// The three-party run failed (a party's typed error, or a missing output).
    Run(RunError),
}

impl fmt::Display for LlamaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LlamaError::Load(e) => write!(f, "cannot load the model: {e}"),
            LlamaError::Input(e) => write!(f, "bad prompt: {e}"),
            LlamaError::Run(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for LlamaError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LlamaError::Load(e) => Some(e),
            LlamaError::Input(e) => Some(e),
            LlamaError::Run(e) => Some(e),
        }
    }
}

impl From<LlamaLoadError> for LlamaError {
    fn from(e: LlamaLoadError) -> Self {
        LlamaError::Load(e)
    }
}

impl From<RunError> for LlamaError {
    fn from(e: RunError) -> Self {
        match e {
            RunError::Input(e) => LlamaError::Input(e),
            e => LlamaError::Run(e),
        }
    }
}

impl From<InputError> for LlamaError {
    fn from(e: InputError) -> Self {
        LlamaError::Input(e)
    }
}

/// A loaded model: public configuration and the owner's weights.
#[derive(Debug, Clone)]
pub struct LoadedLlama {
    /// Where it came from.
    pub path: PathBuf,
    /// The public architecture.
    pub config: LlamaConfig,
    /// The weights (the owner's secret).
    pub weights: LlamaWeights,
}

/// Loads a model: a path ending in `.gguf` is read as GGUF, anything else as a Hugging Face
/// directory.
///
/// # Errors
/// [`LlamaError::Load`] for a missing or malformed file.
pub fn load_model(path: &Path) -> Result<LoadedLlama, LlamaError> {
    let (config, weights) = if path.extension().is_some_and(|e| e == "gguf") {
        load_gguf(path)?
    } else {
        load_hf(path)?
    };
    Ok(LoadedLlama {
        path: path.to_path_buf(),
        config,
        weights,
    })
}

/// The plaintext view of one prompt's run.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaPlainComparison {
    /// The plaintext greedy ids.
    pub ids: Vec<u32>,
    /// Per step, the plaintext top-2 margin on the secure trajectory.
    pub margins: Vec<f64>,
    /// Largest |secure − plaintext logit| over all steps (when logits were revealed).
    pub max_logit_error: Option<f64>,
}

/// One prompt's result.
#[derive(Clone, Debug)]
pub struct PromptResult {
    /// The prompt ids.
    pub prompt_ids: Vec<u32>,
    /// The generated ids the client learnt.
    pub secure_ids: Vec<u32>,
    /// Why generation ended.
    pub finish: Finish,
    /// The last-position logits of each step (`RevealLogits` only).
    pub secure_logits: Vec<Vec<f64>>,
    /// The client's payload bytes and epochs per step (prompt step first).
    pub step_costs: Vec<(u64, u32)>,
    /// The client's wall time of this prompt's generation.
    pub time: Duration,
    /// The plaintext comparison, when asked for.
    pub plaintext: Option<LlamaPlainComparison>,
}

/// What a secure run produced and cost.
#[derive(Clone, Debug)]
pub struct LlamaReport {
    /// The public configuration.
    pub config: LlamaConfig,
    /// Per prompt, in order.
    pub prompts: Vec<PromptResult>,
    /// Wall time of the whole three-party run.
    pub elapsed: Duration,
    /// The client's wall time of sharing the model.
    pub share_time: Duration,
    /// Payload bytes the owner sent to share the model.
    pub share_bytes: u64,
    /// Each party's transport counters.
    pub stats: [Stats; 3],
    /// The client's bytes and epochs per layer kind, over all prompts.
    pub layer_costs: LayerCosts,
}

impl LlamaReport {
    /// Critical-path rounds: the maximum over the parties.
    pub fn rounds(&self) -> u32 {
        self.stats.iter().map(|s| s.rounds).max().unwrap_or(0)
    }
}

/// Shares the model once and runs secure greedy generation for each prompt in turn, three
/// parties on three threads; with `opts.compare_plaintext` also the plaintext model.
/// `observer`, if any, receives the **client's** progress events.
///
/// # Errors
/// [`LlamaError::Input`] for a prompt that does not fit, [`LlamaError::Run`] with the first
/// failed party's error or a missing output.
pub fn run_secure(
    model: LoadedLlama,
    prompts: &[Vec<u32>],
    opts: &RunOptions,
    observer: Option<Observer>,
) -> Result<LlamaReport, LlamaError> {
    let LoadedLlama {
        config, weights, ..
    } = model;
    let weights = Arc::new(weights);
    let run = run_decoder(&config, &weights, prompts, opts, observer)?;
    let plain = if opts.compare_plaintext {
        let w = Arc::try_unwrap(weights).unwrap_or_else(|w| (*w).clone());
        Some(PlainLlama::new(config.clone(), w)?)
    } else {
        None
    };
    let share_bytes = run.parties[1].share_model.0;
    let [client, ..] = run.parties;
    let mut layer_costs = LayerCosts::default();
    let mut results = Vec::with_capacity(prompts.len());
    for (p, r) in prompts.iter().zip(client.prompts) {
        let g = r.generation;
        layer_costs.merge(&g.costs);
        let plaintext = match &plain {
            Some(m) => Some(compare_plain(m, p, &g.ids, &g.logits)?),
            None => None,
        };
        results.push(PromptResult {
            prompt_ids: p.clone(),
            secure_ids: g.ids,
            finish: g.finish,
            secure_logits: g.logits,
            step_costs: g.step_costs,
            time: r.time,
            plaintext,
        });
    }
    Ok(LlamaReport {
        config,
        prompts: results,
        elapsed: run.elapsed,
        share_time: client.share_time,
        share_bytes,
        stats: run.stats,
        layer_costs,
    })
}

/// The plaintext greedy ids, and the plaintext logits and margins along the secure
/// trajectory (teacher-forced with the secure ids).
///
/// # Errors
/// The plaintext model's [`InputError`]s.
pub fn compare_plain(
    plain: &PlainLlama,
    prompt: &[u32],
    secure_ids: &[u32],
    secure_logits: &[Vec<f64>],
) -> Result<LlamaPlainComparison, LlamaError> {
    let n = secure_ids.len();
    let ids = plain.generate_greedy(prompt, n)?;
    let mut margins = Vec::with_capacity(n);
    let mut max_err: f64 = 0.0;
    if n > 0 {
        let mut seq = prompt.to_vec();
        seq.extend_from_slice(secure_ids.get(..n - 1).unwrap_or_default());
        let all = plain.forward(&seq)?;
        for (k, row) in all
            .outer_iter()
            .skip(prompt.len().saturating_sub(1))
            .take(n)
            .enumerate()
        {
            margins.push(argmax_with_margin(row).map_or(f64::NAN, |(_, m)| m));
            if let Some(s) = secure_logits.get(k) {
                for (a, b) in s.iter().zip(row.iter()) {
                    let e = (a - b).abs();
                    if e.is_nan() || e > max_err {
                        max_err = e;
                    }
                }
            }
        }
    }
    Ok(LlamaPlainComparison {
        ids,
        margins,
        max_logit_error: (!secure_logits.is_empty()).then_some(max_err),
    })
}
