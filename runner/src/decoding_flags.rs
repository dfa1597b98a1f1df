//! The command-line flags of the generation programs (`gpt2`, `llama`) that choose how
//! tokens are picked and when generation ends, in one place: [`DecodingFlags`], flattened
//! into each program's arguments.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use puma_core::proto::SamplingParams;
use puma_layers::Tokenizer;
use puma_layers::nn::{CorpusIndex, Drafter, OutputMode};
use puma_layers::stopping::{EosError, eos_ids};

use crate::decoder::RunOptions;
use crate::streaming::stop_on_strings;

/// What the client learns at each step (`--output-mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeFlag {
    /// The last position's logits are revealed to the client, which picks the token.
    #[default]
    RevealLogits,
    /// The parties pick the token on shares; the client learns only its id.
    SecureArgmax,
    /// Generated ids stay secret-shared (embedded by a secure one-hot) until the end.
    Private,
}

impl ModeFlag {
    /// The output mode it names.
    pub fn output_mode(self) -> OutputMode {
        match self {
            ModeFlag::RevealLogits => OutputMode::RevealLogits,
            ModeFlag::SecureArgmax => OutputMode::SecureArgmax,
            ModeFlag::Private => OutputMode::Private,
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ModeFlag::RevealLogits => "reveal-logits",
            ModeFlag::SecureArgmax => "secure-argmax",
            ModeFlag::Private => "private",
        }
    }
}

/// How tokens are picked and when generation ends.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct DecodingFlags {
    /// What the client learns at each step.
    #[arg(long, value_enum, default_value_t = ModeFlag::RevealLogits)]
    pub output_mode: ModeFlag,
    /// End generation once the generated text contains TEXT (repeatable; kept in the output).
    #[arg(long = "stop", value_name = "TEXT", value_parser = non_empty)]
    pub stop: Vec<String>,
    /// Generate all --max-new-tokens even past the model's end-of-sequence token.
    #[arg(long)]
    pub ignore_eos: bool,
    /// Draw tokens at random at temperature T (> 0) instead of the most likely one; the
    /// parties draw on shares, from randomness none of them knows alone.
    #[arg(long, value_name = "T")]
    pub temperature: Option<f64>,
    /// Draw only among the K most likely tokens (implies sampling, T = 1 by default).
    #[arg(long, value_name = "K")]
    pub top_k: Option<usize>,
    /// Draw only among the most likely tokens that together reach probability P (0 < P ≤ 1).
    #[arg(long, value_name = "P")]
    pub top_p: Option<f64>,
    /// Draw only among tokens at least MIN_P times as likely as the most likely (0 ≤ MIN_P < 1).
    #[arg(long, value_name = "MIN_P")]
    pub min_p: Option<f64>,
    /// Speculative verification: the client drafts K tokens per step from the prompt and
    /// the text so far, the parties check them in one pass and the client keeps those the
    /// model would have picked (same output, fewer rounds when the text repeats; the
    /// parties learn how many were kept). Needs --output-mode secure-argmax, greedy.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..=16))]
    pub speculate: Option<u64>,
    /// Draft from FILE, a public UTF-8 text of the kind the model writes (for a model
    /// trained on public text, that text), instead of from the prompt: each draft is the
    /// corpus's most frequent continuation of the text so far. Needs --speculate.
    #[arg(long, value_name = "FILE", requires = "speculate")]
    pub draft_corpus: Option<PathBuf>,
}

impl DecodingFlags {
    /// The sampling asked for: none (greedy) unless a temperature or a filter is given.
    pub fn sampling(&self) -> Option<SamplingParams> {
        let any = self.temperature.is_some()
            || self.top_k.is_some()
            || self.top_p.is_some()
            || self.min_p.is_some();
        any.then(|| SamplingParams {
            top_k: self.top_k,
            top_p: self.top_p,
            min_p: self.min_p,
            ..SamplingParams::with_temperature(self.temperature.unwrap_or(1.0))
        })
    }

    /// Sets `opts`' output mode, end-of-sequence ids (from the checkpoint at `model`,
    /// unless --ignore-eos), stop test, sampling and drafts; checks the sampling against
    /// `vocab`.
    ///
    /// # Errors
    /// A message naming the flag or the checkpoint file at fault.
    pub fn apply(
        &self,
        opts: &mut RunOptions,
        model: &Path,
        tok: &Arc<Tokenizer>,
        vocab: usize,
    ) -> Result<(), String> {
        opts.mode = self.output_mode.output_mode();
        if !self.ignore_eos {
            opts.eos = eos_ids(model).map_err(|e: EosError| e.to_string())?;
        }
        opts.stop = stop_on_strings(Arc::clone(tok), self.stop.clone());
        opts.sampling = self.sampling();
        if let Some(p) = &opts.sampling {
            p.validate(vocab)
                .map_err(|e| format!("bad sampling flags: {e}"))?;
        }
        if let Some(k) = self.speculate {
            if opts.mode != OutputMode::SecureArgmax || opts.sampling.is_some() {
                return Err(
                    "--speculate needs --output-mode secure-argmax and greedy decoding \
                     (no --temperature, --top-k, --top-p or --min-p)"
                        .into(),
                );
            }
            opts.drafts = usize::try_from(k).map_err(|_| "--speculate is too large")?;
        }
        if let Some(path) = &self.draft_corpus {
            let start = Instant::now();
            let corpus = load_corpus(path, tok)?;
            eprintln!(
                "draft corpus {}: {} tokens indexed in {:.1} s",
                path.display(),
                corpus.len(),
                start.elapsed().as_secs_f64()
            );
            opts.drafter = Drafter::Corpus(Arc::new(corpus));
        }
        Ok(())
    }
}

/// Reads the public text at `path`, splits it with the model's tokenizer and indexes it
/// for drafting ([`CorpusIndex`]).
///
/// # Errors
/// A message naming the file: unreadable, not UTF-8, refused by the tokenizer, or empty.
pub fn load_corpus(path: &Path, tok: &Tokenizer) -> Result<CorpusIndex, String> {
    let at = path.display();
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the draft corpus {at}: {e}"))?;
    let ids = tok
        .encode(&text)
        .map_err(|e| format!("cannot tokenize the draft corpus {at}: {e}"))?;
    CorpusIndex::new(ids).map_err(|e| format!("{e}: {at}"))
}

/// A --stop value: any text but the empty one.
fn non_empty(s: &str) -> Result<String, String> {
    if s.is_empty() {
        Err("a stop string must not be empty".to_owned())
    } else {
        Ok(s.to_owned())
    }
}
