//! Secure greedy generation with any decoder (GPT-2, LLaMA) among three parties on three
//! threads in one process: P0 the **client** (prompts, output), P1 the **model owner**
//! (weights), P2 a helper. The owner shares the model once; then each prompt runs
//! [`puma_layers::nn::generate()`] with a secret-shared KV cache over the in-memory transport
//! ([`puma_transports::mem::run3`]). [`run_decoder`] is the one orchestration the
//! architectures' runners ([`crate::gpt2`], [`crate::llama`]) build their reports on.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use puma_core::proto::SamplingParams;
use puma_core::{Config, PartyId, Stats};
use puma_layers::InputError;
use puma_layers::nn::{
    DecoderArch, Decoding, Drafter, Finish, Generation, Observer, OutputMode, Progress, RangeError,
    SecureSettings, ShareObserver, SharedDecoder, StopCheck, decoder_range_check, generate_batch,
};
use puma_transports::{TransportError, mem};

/// The client: holds the prompt and learns the output.
pub const CLIENT: PartyId = PartyId::P0;

/// The model owner: holds the weights.
pub const OWNER: PartyId = PartyId::P1;

/// The settings of a secure generation.
#[derive(Clone)]
pub struct RunOptions {
    /// The most tokens to generate after each prompt.
    pub max_new_tokens: usize,
    /// What the client learns at each step.
    pub mode: OutputMode,
    /// End-of-sequence ids: a prompt's generation ends after one of them (see
    /// [`puma_layers::nn::Decoding::eos`]).
    pub eos: Vec<u32>,
    /// The client's stop test (stop strings), if any.
    pub stop: Option<StopCheck>,
    /// Draw tokens at random on shares instead of the argmax (see
    /// [`puma_layers::nn::Decoding::sampling`]).
    pub sampling: Option<SamplingParams>,
    /// Tokens the client drafts per step for speculative verification (0: none).
    pub drafts: usize,
    /// How the client drafts them (prompt lookup unless a public corpus is given).
    pub drafter: Drafter,
    /// Generate for all prompts at once, as one batch sharing every round, instead of one
    /// prompt after another.
    pub batch: bool,
    /// A simulated network between the parties (bandwidth and latency); `None`: as fast
    /// as the in-memory channels go.
    pub network: Option<mem::Shape>,
    /// Approximation settings of the secure evaluation.
    pub settings: SecureSettings,
    /// Also run the plaintext `f64` model and compare.
    pub compare_plaintext: bool,
    /// Session id and seed of the parties' entropy (demos and tests only).
    pub seed: u64,
    /// Receives the **client's** progress while the model is shared, if given.
    pub share_observer: Option<ShareObserver>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            max_new_tokens: 8,
            mode: OutputMode::RevealLogits,
            eos: Vec::new(),
            stop: None,
            sampling: None,
            drafts: 0,
            drafter: Drafter::PromptLookup,
            batch: false,
            network: None,
            settings: SecureSettings::default(),
            compare_plaintext: false,
            seed: 2024,
            share_observer: None,
        }
    }
}

impl fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunOptions")
            .field("max_new_tokens", &self.max_new_tokens)
            .field("mode", &self.mode)
            .field("eos", &self.eos)
            .field("stop", &self.stop.as_ref().map(|_| "client stop test"))
            .field("sampling", &self.sampling)
            .field("drafts", &self.drafts)
            .field("drafter", &self.drafter)
            .field("batch", &self.batch)
            .field("network", &self.network)
            .field("settings", &self.settings)
            .field("compare_plaintext", &self.compare_plaintext)
            .field("seed", &self.seed)
            .field(
                "share_observer",
                &self.share_observer.as_ref().map(|_| "observer"),
            )
            .finish()
    }
}

impl RunOptions {
    /// The public decoding rules every party runs with.
    pub fn decoding(&self) -> Decoding {
        let mut d = Decoding::new(self.max_new_tokens, self.mode);
        d.eos = self.eos.clone();
        d.client_stops = self.stop.is_some();
        d.sampling = self.sampling;
        d.drafts = self.drafts;
        d.drafter = self.drafter.clone();
        d
    }
}

/// Why a three-party run could not run or failed.
#[derive(Debug)]
pub enum RunError {
    /// The prompt does not fit the model (empty, too long, ids outside the vocabulary).
    Input(InputError),
    /// The model's configuration is not a valid decoder.
    Model(puma_core::Error),
    /// A weight leaves the range the secure protocols support (the owner's check).
    Range(RangeError),
    /// A party's run failed.
    Party {
        /// The party.
        party: PartyId,
        /// Its error.
        error: TransportError,
    },
    /// The client finished without the expected output (a defect, not an input error).
    MissingOutput(&'static str),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Input(e) => write!(f, "{e}"),
            RunError::Model(e) => write!(f, "invalid model configuration: {e}"),
            RunError::Range(e) => write!(f, "the model cannot be computed securely: {e}"),
            RunError::Party { party, error } => write!(f, "{party} failed: {error}"),
            RunError::MissingOutput(what) => write!(f, "the client got no {what}"),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Input(e) => Some(e),
            RunError::Range(e) => Some(e),
            RunError::Party { error, .. } => Some(error),
            RunError::Model(_) | RunError::MissingOutput(_) => None,
        }
    }
}

/// Checks that `prompt` and `max_new` fit the decoder `config` as generation needs them
/// ([`puma_layers::nn::DecoderSpec::check_prompt`]).
///
/// # Errors
/// [`RunError::Input`] naming the problem, [`RunError::Model`] for an invalid config.
pub fn check_prompt<A: DecoderArch>(
    config: &A,
    prompt: &[u32],
    max_new: usize,
) -> Result<(), RunError> {
    config
        .spec()
        .map_err(RunError::Model)?
        .check_prompt(prompt, max_new)
        .map_err(RunError::Input)
}

/// One prompt's generation at one party.
#[derive(Clone, Debug)]
pub struct PromptRun {
    /// What the generation produced at this party (ids and logits at the client only).
    pub generation: Generation,
    /// Wall time of this prompt's generation (of its whole batch when batched).
    pub time: Duration,
    /// Wall time of each step (the prompt step first).
    pub step_times: Vec<Duration>,
}

/// What one party did in a run.
#[derive(Clone, Debug)]
pub struct PartyRun {
    /// Payload bytes this party sent while the model was shared, and the epochs it took.
    pub share_model: (u64, u32),
    /// Wall time of sharing the model.
    pub share_time: Duration,
    /// Per prompt, in order.
    pub prompts: Vec<PromptRun>,
}

/// A whole three-party run.
#[derive(Clone, Debug)]
pub struct DecoderRun {
    /// Each party's run, by index.
    pub parties: [PartyRun; 3],
    /// Each party's transport counters, by index.
    pub stats: [Stats; 3],
    /// Wall time of the whole run (threads, sharing and generation).
    pub elapsed: Duration,
}

/// Shares `weights` (the owner's) once and generates up to `opts.max_new_tokens` tokens
/// greedily after each prompt in turn (fewer where `opts.eos` or `opts.stop` end it), three parties on three threads. `observer`, if any, receives
/// the **client's** progress events.
///
/// # Errors
/// [`RunError::Input`] or [`RunError::Model`] if a prompt does not fit ([`check_prompt`]);
/// [`RunError::Party`] with the first failed party's typed error;
/// [`RunError::MissingOutput`] if the client ends without all its ids (or logits, in
/// `RevealLogits` mode).
pub fn run_decoder<A>(
    config: &A,
    weights: &Arc<A::Weights>,
    prompts: &[Vec<u32>],
    opts: &RunOptions,
    observer: Option<Observer>,
) -> Result<DecoderRun, RunError>
where
    A: DecoderArch + Clone + Send + Sync + 'static,
    A::Weights: Send + Sync + 'static,
{
    for p in prompts {
        check_prompt(config, p, opts.max_new_tokens)?;
    }
    // The owner refuses weights the protocols would turn into garbage, naming the tensor.
    if let Some(e) = decoder_range_check(
        config,
        weights,
        &opts.settings,
        Config::new(opts.seed).fixed,
    )
    .map_err(RunError::Model)?
    {
        return Err(RunError::Range(e));
    }
    let prompts_arc: Arc<Vec<Vec<u32>>> = Arc::new(prompts.to_vec());
    let (max_new, mode, settings, batch) =
        (opts.max_new_tokens, opts.mode, opts.settings, opts.batch);
    let decoding = Arc::new(opts.decoding());
    let start = Instant::now();
    let outcome = mem::run3_shaped(
        Config::new(opts.seed),
        opts.seed,
        puma_transports::DEFAULT_TIMEOUT,
        opts.network,
        |me| {
            let cfg = config.clone();
            let w = (me == OWNER).then(|| Arc::clone(weights));
            let ps = Arc::clone(&prompts_arc);
            let user_observer = if me == CLIENT { observer.clone() } else { None };
            let share_observer = if me == CLIENT {
                opts.share_observer.clone()
            } else {
                None
            };
            let decoding = Arc::clone(&decoding);
            let stop = if me == CLIENT {
                opts.stop.clone()
            } else {
                None
            };
            move |mut ctx| async move {
                let t0 = Instant::now();
                let m0 = ctx.meter();
                let shared = SharedDecoder::share_observed(
                    &mut ctx,
                    OWNER,
                    &cfg,
                    w.as_deref(),
                    share_observer.as_ref(),
                )
                .await?;
                // The owner's plaintext is not needed any more.
                drop(w);
                let m1 = ctx.meter();
                let share_time = t0.elapsed();
                // One batch of all prompts, or one batch per prompt in turn.
                let batches: Vec<&[Vec<u32>]> = if batch {
                    vec![&ps[..]]
                } else {
                    ps.chunks(1).collect()
                };
                let mut runs = Vec::with_capacity(ps.len());
                for group in batches {
                    let step_ends = Arc::new(Mutex::new(Vec::with_capacity(max_new)));
                    let timing: Observer = {
                        let ends = Arc::clone(&step_ends);
                        let user = user_observer.clone();
                        Arc::new(move |ev: Progress| {
                            if let Progress::Step { .. } = ev
                                && let Ok(mut e) = ends.lock()
                            {
                                e.push(Instant::now());
                            }
                            if let Some(obs) = user.as_ref() {
                                obs(ev);
                            }
                        })
                    };
                    let t = Instant::now();
                    let lens: Vec<usize> = group.iter().map(Vec::len).collect();
                    let generations = generate_batch(
                        &mut ctx,
                        &shared,
                        CLIENT,
                        (me == CLIENT).then_some(group),
                        &lens,
                        &decoding,
                        &settings,
                        Some(timing),
                        stop.as_ref(),
                    )
                    .await?;
                    let ends = step_ends.lock().map(|e| e.clone()).unwrap_or_default();
                    let mut prev = t;
                    let step_times: Vec<Duration> = ends
                        .iter()
                        .map(|&e| {
                            let d = e.saturating_duration_since(prev);
                            prev = e;
                            d
                        })
                        .collect();
                    let time = t.elapsed();
                    runs.extend(generations.into_iter().map(|generation| PromptRun {
                        generation,
                        time,
                        step_times: step_times.clone(),
                    }));
                }
                Ok(PartyRun {
                    share_model: (
                        m1.payload_bytes_sent - m0.payload_bytes_sent,
                        m1.epoch - m0.epoch,
                    ),
                    share_time,
                    prompts: runs,
                })
            }
        },
    );
    let elapsed = start.elapsed();
    let stats = outcome.stats.clone();
    let mut outs = Vec::with_capacity(3);
    for (party, r) in PartyId::ALL.into_iter().zip(outcome.results) {
        match r {
            Ok(o) => outs.push(o),
            Err(error) => return Err(RunError::Party { party, error }),
        }
    }
    let parties: [PartyRun; 3] = outs
        .try_into()
        .map_err(|_| RunError::MissingOutput("result of every party"))?;
    for p in &parties[0].prompts {
        let g = &p.generation;
        // Fewer ids only when a rule ended the generation early.
        let n = g.ids.len();
        if n > max_new || n == 0 || (n < max_new && g.finish == Finish::Length) {
            return Err(RunError::MissingOutput("generated ids"));
        }
        if mode == OutputMode::RevealLogits && g.logits.len() != n {
            return Err(RunError::MissingOutput("logits"));
        }
    }
    Ok(DecoderRun {
        parties,
        stats,
        elapsed,
    })
}
