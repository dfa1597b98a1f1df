//! Secure GPT-2 greedy generation among three parties on three threads in one process.
//!
//! Roles (docs/ARCHITECTURE.md, Parties and roles): P0 is the **client**, which holds the
//! prompt and alone learns the output; P1 is the **model owner**, which holds the weights;
//! P2 is a helper that holds shares only. [`run_secure`] runs the generic decoder run
//! ([`crate::decoder::run_decoder`]) on a GPT-2 checkpoint, collects the report and
//! optionally compares with the plaintext `f64` model [`PlainGpt2`]; the `gpt2` binary and
//! the integration tests both call it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use puma_core::Stats;
use puma_layers::gpt2::config::InputError;
use puma_layers::gpt2::plain::{PlainGpt2, argmax_with_margin};
use puma_layers::nn::{Finish, LayerCosts, Observer, OutputMode};
use puma_layers::{Gpt2Config, Gpt2Weights, LoadError, load_gpt2};

pub use crate::decoder::{CLIENT, OWNER, RunOptions, check_prompt};
use crate::decoder::{RunError, run_decoder};

/// The default model: `gpt2-shakespeare`, shipped in the repository (`models/`), so that
/// the binary works offline from a fresh clone.
pub const DEFAULT_MODEL_DIR: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../models/gpt2-shakespeare");

/// The tiny random test model shipped in the repository (2 layers, width 64).
pub const TINY_MODEL_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/gpt2-tiny-random");

/// Why a secure generation could not run or failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Gpt2Error {
    /// The model directory does not exist or is not a directory.
    NoModelDir(PathBuf),
    /// The checkpoint could not be loaded.
    Load(LoadError),
    /// The prompt does not fit the model (empty, too long, ids outside the vocabulary).
    Input(InputError),
    /// The three-party run failed (a party's typed error, or a missing output).
    Run(RunError),
}

impl fmt::Display for Gpt2Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gpt2Error::NoModelDir(dir) => write!(
                f,
                "model directory {} does not exist (expected config.json and model.safetensors in it)",
                dir.display()
            ),
            Gpt2Error::Load(e) => write!(f, "cannot load the model: {e}"),
            Gpt2Error::Input(e) => write!(f, "bad prompt: {e}"),
            Gpt2Error::Run(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Gpt2Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Gpt2Error::Load(e) => Some(e),
            Gpt2Error::Input(e) => Some(e),
            Gpt2Error::Run(e) => Some(e),
            Gpt2Error::NoModelDir(_) => None,
        }
    }
}

impl From<LoadError> for Gpt2Error {
    fn from(e: LoadError) -> Self {
        Gpt2Error::Load(e)
    }
}

impl From<RunError> for Gpt2Error {
    fn from(e: RunError) -> Self {
        match e {
            RunError::Input(e) => Gpt2Error::Input(e),
            e => Gpt2Error::Run(e),
        }
    }
}

impl From<InputError> for Gpt2Error {
    fn from(e: InputError) -> Self {
        Gpt2Error::Input(e)
    }
}

/// A loaded checkpoint: the public configuration and the owner's weights.
#[derive(Debug, Clone)]
pub struct LoadedModel {
    /// The directory it came from.
    pub dir: PathBuf,
    /// The public architecture.
    pub config: Gpt2Config,
    /// The weights (the model owner's secret).
    pub weights: Gpt2Weights,
}

/// Loads `dir/config.json` and `dir/model.safetensors` (any Hugging Face GPT-2 checkpoint).
///
/// # Errors
/// [`Gpt2Error::NoModelDir`] if `dir` is not a directory, [`Gpt2Error::Load`] for a
/// missing or malformed file, tensor, shape or dtype.
pub fn load_model(dir: &Path) -> Result<LoadedModel, Gpt2Error> {
    if !dir.is_dir() {
        return Err(Gpt2Error::NoModelDir(dir.to_path_buf()));
    }
    let (config, weights) = load_gpt2(dir)?;
    Ok(LoadedModel {
        dir: dir.to_path_buf(),
        config,
        weights,
    })
}

/// The plaintext `f64` model's view of the same run.
#[derive(Clone, Debug, PartialEq)]
pub struct PlainComparison {
    /// The plaintext greedy ids (its own trajectory).
    pub ids: Vec<u32>,
    /// Per step, the plaintext top-2 margin of the logits on the **secure** trajectory
    /// (prompt plus the secure ids so far): a step whose margin is below the secure logit
    /// error may legitimately pick another token.
    pub margins: Vec<f64>,
    /// Per step, the plaintext logits on the secure trajectory (empty unless the secure
    /// logits were revealed).
    pub logits: Vec<Vec<f64>>,
    /// Largest |secure logit − plaintext logit| over all steps and ids, when the logits
    /// were revealed (`RevealLogits`).
    pub max_logit_error: Option<f64>,
}

impl PlainComparison {
    /// The first step at which the secure and the plaintext ids differ, if any.
    pub fn first_mismatch(&self, secure: &[u32]) -> Option<usize> {
        self.ids
            .iter()
            .zip(secure)
            .position(|(a, b)| a != b)
            .or_else(|| (self.ids.len() != secure.len()).then(|| self.ids.len().min(secure.len())))
    }
}

/// One party's costs of a run, from its own meters.
#[derive(Clone, Debug, Default)]
pub struct PartyCosts {
    /// Payload bytes this party sent while the model was shared, and the epochs it took.
    pub share_model: (u64, u32),
    /// Payload bytes and epochs per layer kind during generation.
    pub layers: LayerCosts,
    /// Payload bytes and epochs of the prompt step (index 0) and of each further token.
    pub steps: Vec<(u64, u32)>,
}

/// What one secure generation produced and cost.
#[derive(Clone, Debug)]
pub struct Gpt2Report {
    /// The model's public configuration.
    pub config: Gpt2Config,
    /// The prompt ids.
    pub prompt_ids: Vec<u32>,
    /// The output mode used.
    pub mode: OutputMode,
    /// The generated ids the client learnt.
    pub secure_ids: Vec<u32>,
    /// Why generation ended.
    pub finish: Finish,
    /// The last-position logits the client learnt at each step (`RevealLogits` only).
    pub secure_logits: Vec<Vec<f64>>,
    /// The plaintext comparison, when asked for.
    pub plaintext: Option<PlainComparison>,
    /// Wall time of the three-party run (threads, sharing and generation).
    pub elapsed: Duration,
    /// The client's wall time of sharing the model.
    pub share_time: Duration,
    /// The client's wall time of each generation step (prompt step first).
    pub step_times: Vec<Duration>,
    /// Each party's transport counters, by index.
    pub stats: [Stats; 3],
    /// Each party's metered costs, by index.
    pub costs: [PartyCosts; 3],
}

impl Gpt2Report {
    /// Critical-path rounds: the maximum over the parties.
    pub fn rounds(&self) -> u32 {
        self.stats.iter().map(|s| s.rounds).max().unwrap_or(0)
    }
}

/// Runs secure greedy generation of up to `opts.max_new_tokens` tokens after `prompt` with three
/// parties on three threads, and (with `opts.compare_plaintext`) the plaintext model on
/// the same ids. `observer`, if any, receives the **client's** progress events.
///
/// # Errors
/// [`Gpt2Error::Input`] if the prompt does not fit the model, [`Gpt2Error::Run`] with the
/// first failed party's typed error or a missing output.
pub fn run_secure(
    model: LoadedModel,
    prompt: &[u32],
    opts: &RunOptions,
    observer: Option<Observer>,
) -> Result<Gpt2Report, Gpt2Error> {
    run_secure_batch(model, &[prompt.to_vec()], opts, observer)?
        .pop()
        .ok_or(Gpt2Error::Run(RunError::MissingOutput("generation")))
}

/// [`run_secure`] for several prompts generated as one batch that shares every round
/// (ragged lengths; `opts.batch` is implied). Returns one report per prompt, in order;
/// the costs, counters and times in each are those of the whole run.
///
/// # Errors
/// As [`run_secure`], for any of the prompts.
pub fn run_secure_batch(
    model: LoadedModel,
    prompts: &[Vec<u32>],
    opts: &RunOptions,
    observer: Option<Observer>,
) -> Result<Vec<Gpt2Report>, Gpt2Error> {
    let LoadedModel {
        config, weights, ..
    } = model;
    let weights = Arc::new(weights);
    let opts = RunOptions {
        batch: true,
        ..opts.clone()
    };
    let run = run_decoder(&config, &weights, prompts, &opts, observer)?;
    let costs = run.parties.clone().map(|p| {
        let g = p.prompts.into_iter().next();
        PartyCosts {
            share_model: p.share_model,
            layers: g
                .as_ref()
                .map(|g| g.generation.costs.clone())
                .unwrap_or_default(),
            steps: g.map(|g| g.generation.step_costs).unwrap_or_default(),
        }
    });
    let [client, ..] = run.parties;
    let share_time = client.share_time;
    if client.prompts.len() != prompts.len() {
        return Err(Gpt2Error::Run(RunError::MissingOutput("generation")));
    }
    let plain = if opts.compare_plaintext {
        // All parties have finished, so this is the only reference left.
        let weights = Arc::try_unwrap(weights).unwrap_or_else(|w| (*w).clone());
        Some(PlainGpt2::new(config.clone(), weights)?)
    } else {
        None
    };
    let mut reports = Vec::with_capacity(prompts.len());
    for (prompt, run_of) in prompts.iter().zip(client.prompts) {
        let g = run_of.generation;
        let plaintext = match &plain {
            Some(plain) => Some(compare_plain(plain, prompt, &g.ids, &g.logits)?),
            None => None,
        };
        reports.push(Gpt2Report {
            config: config.clone(),
            prompt_ids: prompt.clone(),
            mode: opts.mode,
            secure_ids: g.ids,
            finish: g.finish,
            secure_logits: g.logits,
            plaintext,
            elapsed: run.elapsed,
            share_time,
            step_times: run_of.step_times,
            stats: run.stats.clone(),
            costs: costs.clone(),
        });
    }
    Ok(reports)
}

/// The plaintext greedy ids, and the plaintext logits and margins along the secure
/// trajectory (teacher-forced with the secure ids, so that the logits compare the same
/// inputs even after a flip).
///
/// # Errors
/// The plaintext model's [`InputError`]s (none for a prompt that passed [`check_prompt`]).
pub fn compare_plain(
    plain: &PlainGpt2,
    prompt: &[u32],
    secure_ids: &[u32],
    secure_logits: &[Vec<f64>],
) -> Result<PlainComparison, Gpt2Error> {
    let n = secure_ids.len();
    let ids = plain.generate_greedy(prompt, n)?;
    let mut margins = Vec::with_capacity(n);
    let mut logits = Vec::new();
    if n > 0 {
        let mut seq = prompt.to_vec();
        seq.extend_from_slice(secure_ids.get(..n - 1).unwrap_or_default());
        let all = plain.forward(&seq)?;
        // Row t predicts token t + 1: step k is predicted by the row of position L − 1 + k.
        for row in all
            .outer_iter()
            .skip(prompt.len().saturating_sub(1))
            .take(n)
        {
            margins.push(argmax_with_margin(row).map_or(f64::NAN, |(_, m)| m));
            if !secure_logits.is_empty() {
                logits.push(row.to_vec());
            }
        }
    }
    // A NaN error (a broken secure logit) must not be hidden by `f64::max`.
    let max_logit_error = (!secure_logits.is_empty()).then(|| {
        secure_logits
            .iter()
            .zip(&logits)
            .flat_map(|(s, p)| s.iter().zip(p).map(|(a, b)| (a - b).abs()))
            .fold(
                0.0,
                |acc: f64, e| if e.is_nan() || e > acc { e } else { acc },
            )
    });
    Ok(PlainComparison {
        ids,
        margins,
        logits,
        max_logit_error,
    })
}
