//! Generation with a shared decoder: the loop of steps over a secret-shared KV cache, how
//! each token is chosen (argmax, or drawn on shares) and how the client learns it
//! ([`OutputMode`]), and when generation ends ([`Decoding`]: the model's end-of-sequence
//! ids, the client's own stop test, the token limit).
//!
//! What ending early reveals (docs/ARCHITECTURE.md, The model layer): the number of
//! generated tokens becomes known to every party, in every mode. In `RevealLogits` and
//! `SecureArgmax` mode the client already knows each token and tells the other parties one
//! bit per step (continue or end); in `Private` mode the parties open only the bit "this
//! step's token is an end-of-sequence id", never the token.

use std::sync::Arc;

use puma_core::proto::SamplingParams;
use puma_core::{BoxedProtocol, Ctx, Error, PartyId, Shares, Width, proto};

use super::attention::{KvCache, starts};
use super::client::{ClientAt, Delivered};
use super::cost::LayerKind;
use super::decoder::SharedDecoder;
use super::draft::Drafter;
use super::settings::SecureSettings;
use crate::nn::LayerCosts;
use puma_core::proto::share_one_hot;

/// How the client learns the result of each generation step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutputMode {
    /// The last position's logits are revealed to the client, which picks the next id and
    /// shares its one-hot for the next step.
    RevealLogits,
    /// The parties compute the argmax securely and reveal only the id to the client.
    SecureArgmax,
    /// Generated ids stay shared (the argmax one-hot embeds the next token) and are revealed
    /// to the client only at the end.
    Private,
}

/// The public rules of one generation; every party passes the same.
#[derive(Clone, Debug, PartialEq)]
pub struct Decoding {
    /// The most tokens to generate.
    pub max_new: usize,
    /// What the client learns at each step.
    pub mode: OutputMode,
    /// End-of-sequence ids: generation ends after the step that produces one of them (the
    /// id is kept as the last of the output). Empty: only the other rules end it.
    pub eos: Vec<u32>,
    /// Whether the client has a stop test of its own ([`StopCheck`], for stop strings).
    /// In `SecureArgmax` mode its verdict costs one round per token; in `Private` mode the
    /// client applies it to the ids it learns at the end (the parties generate on).
    pub client_stops: bool,
    /// Draw each token at random ([`proto::sample_rows`]: temperature, top-k, top-p,
    /// min-p, from randomness no single party knows) instead of taking the argmax. The
    /// parties draw it in every mode; in `RevealLogits` mode the client still learns the
    /// logits beside the drawn id.
    pub sampling: Option<SamplingParams>,
    /// Speculative verification: tokens the client drafts per step (0: none). Needs
    /// `SecureArgmax` mode and greedy picks; see [`generate_batch`].
    pub drafts: usize,
    /// How the client drafts them (prompt lookup by default). Only the client uses it:
    /// the other parties see the drafts as shares.
    pub drafter: Drafter,
}

impl Decoding {
    /// `max_new` tokens in `mode`, with no rule that ends generation earlier.
    pub fn new(max_new: usize, mode: OutputMode) -> Self {
        Decoding {
            max_new,
            mode,
            eos: Vec::new(),
            client_stops: false,
            sampling: None,
            drafts: 0,
            drafter: Drafter::PromptLookup,
        }
    }

    /// Whether the client picks each token from the revealed logits (greedy
    /// `RevealLogits`); otherwise the parties pick it on shares.
    fn client_picks(&self) -> bool {
        self.mode == OutputMode::RevealLogits && self.sampling.is_none()
    }

    /// Whether the client tells the other parties after every step if generation goes on.
    fn client_ends(&self) -> bool {
        if self.client_picks() {
            self.client_stops || !self.eos.is_empty()
        } else {
            // With drafts the client sees several tokens per step, any of which may end.
            self.mode != OutputMode::Private
                && (self.client_stops || (self.drafts > 0 && !self.eos.is_empty()))
        }
    }

    /// Whether the parties open each step's bit "the pick is an end-of-sequence id".
    fn opens_eos(&self) -> bool {
        let client_decides =
            self.mode != OutputMode::Private && (self.client_stops || self.drafts > 0);
        !(self.client_picks() || self.eos.is_empty() || client_decides)
    }
}

/// The client's own test of whether to end generation after the last id it was given (all
/// generated ids so far): stop strings, typically.
pub type StopCheck = Arc<dyn Fn(&[u32]) -> bool + Send + Sync>;

/// Why a generation ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Finish {
    /// It generated the most tokens it was allowed.
    #[default]
    Length,
    /// The last id is an end-of-sequence id.
    Eos,
    /// The client's stop test ended it.
    Stop,
    /// The client ended it, for a reason only the client knows (what the other parties
    /// learn when the client signals the end).
    Ended,
}

impl Finish {
    /// A short name for reports: `length`, `eos`, `stop` or `ended`.
    pub fn name(self) -> &'static str {
        match self {
            Finish::Length => "length",
            Finish::Eos => "eos",
            Finish::Stop => "stop",
            Finish::Ended => "ended",
        }
    }

    /// What ended the generation, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Finish::Length => "the token limit",
            Finish::Eos => "the model's end-of-sequence token",
            Finish::Stop => "a stop string",
            Finish::Ended => "the client",
        }
    }
}

/// Events for a progress display.
#[derive(Clone, Copy, Debug)]
pub enum Progress {
    /// Block `layer` of the current step finished.
    Layer {
        /// The generation step (0 = the prompt).
        step: usize,
        /// The block index.
        layer: usize,
    },
    /// The client learned a token (client only; not in `Private` mode). With speculative
    /// verification a step gives several.
    Token {
        /// The sequence in the batch (0 for a single prompt).
        seq: usize,
        /// The generation step (0 = the prompt).
        step: usize,
        /// The token id.
        id: u32,
    },
    /// A generation step finished.
    Step {
        /// The generation step (0 = the prompt).
        step: usize,
    },
}

/// A progress observer (called by every party; a display usually listens to one).
pub type Observer = std::sync::Arc<dyn Fn(Progress) + Send + Sync>;

/// What one secure generation produced at one party.
#[derive(Clone, Debug, Default)]
pub struct Generation {
    /// The generated ids, at the client only (empty elsewhere).
    pub ids: Vec<u32>,
    /// The revealed last-position logits of each step (client only, `RevealLogits` mode).
    pub logits: Vec<Vec<f64>>,
    /// Why generation ended, as far as this party knows.
    pub finish: Finish,
    /// Communication per layer kind at this party.
    pub costs: LayerCosts,
    /// Payload bytes and epochs of the prompt step and of each further step.
    pub step_costs: Vec<(u64, u32)>,
}

/// What the client decides after learning the id of a step.
fn client_verdict(decoding: &Decoding, stop: Option<&StopCheck>, ids: &[u32], id: u32) -> Finish {
    if decoding.eos.contains(&id) {
        Finish::Eos
    } else if decoding.client_stops && stop.is_some_and(|s| s(ids)) {
        Finish::Stop
    } else {
        Finish::Length
    }
}

/// The client's bits "generation ends here", one per sequence, to both other parties, in
/// the current epoch: the client passes its verdicts, the others learn only
/// [`Finish::Ended`] or not for each of the `n` sequences.
///
/// Rounds: 1 (0 when it joins a round the client sends in anyway). Bytes: 2·⌈n/8⌉ from
/// the client.
async fn signal_end(
    ctx: &mut Ctx,
    client: PartyId,
    verdicts: &[Finish],
    n: usize,
) -> Result<Vec<Option<Finish>>, Error> {
    if ctx.me() == client {
        if verdicts.len() != n {
            return Err(Error::misuse("the client has no verdict to send"));
        }
        let bits: Vec<u64> = verdicts
            .iter()
            .map(|&v| u64::from(v != Finish::Length))
            .collect();
        for peer in [client.next(), client.prev()] {
            ctx.send(peer, &bits, Width::BIT)?;
        }
        Ok(verdicts
            .iter()
            .map(|&v| (v != Finish::Length).then_some(v))
            .collect())
    } else {
        let bits = ctx.recv(client, n, Width::BIT).await?;
        Ok(bits
            .iter()
            .map(|&b| (b != 0).then_some(Finish::Ended))
            .collect())
    }
}

/// One sequence of a batch during generation.
struct Sequence {
    cache: KvCache,
    /// One-hot rows of the tokens not yet in the cache: the prompt, then the last pick.
    pending: Shares,
    pending_rows: usize,
    /// Tokens produced so far; public (every party counts them).
    produced: usize,
    /// The prompt and the output so far, for drafting (client only).
    context: Vec<u32>,
    /// The generated ids in `Private` mode, still shared.
    shared_ids: Vec<Shares>,
    out: Generation,
    active: bool,
}

/// What a step produced for one sequence.
#[derive(Default)]
struct StepResult {
    /// Drafts accepted (public).
    accepted: usize,
    /// The opened end-of-sequence bit, if it was opened.
    eos: Option<bool>,
    /// The client's tokens of the step: accepted drafts, then the pick (client only).
    tokens: Vec<u32>,
}

/// Secure generation of at most `decoding.max_new` tokens, greedy or drawn
/// ([`Decoding::sampling`]), with the secret KV cache. The client passes its prompt ids (`Some` at the client only) and, if
/// `decoding.client_stops`, its stop test; every party passes the prompt length, which is
/// public. Ties in the argmax go to the lowest id. Generation ends early at an
/// end-of-sequence id or when the client's stop test says so (see the module docs for what
/// that reveals).
///
/// Rounds: an end-of-sequence rule or a stop test adds none in `RevealLogits` mode (the
/// client's bit travels with the next token's one-hot); in `SecureArgmax` mode the
/// end-of-sequence bit is opened with the id (no round) and a stop test costs one round
/// per token; in `Private` mode opening the end-of-sequence bit costs one round per token.
/// With speculative verification ([`Decoding::drafts`]) see [`generate_batch`].
///
/// # Errors
/// `Misuse` for an empty or too long prompt, ids outside the vocabulary, a client
/// without its stop test or rules that do not go together; `Protocol` on a malformed
/// message.
#[allow(clippy::too_many_arguments)]
pub fn generate<'a>(
    ctx: &'a mut Ctx,
    model: &'a SharedDecoder,
    client: impl Into<ClientAt>,
    prompt: Option<&'a [u32]>,
    prompt_len: usize,
    decoding: &'a Decoding,
    settings: &'a SecureSettings,
    observer: Option<Observer>,
    stop: Option<&'a StopCheck>,
) -> BoxedProtocol<'a, Generation> {
    generate_at(
        ctx,
        model,
        client.into(),
        prompt,
        prompt_len,
        decoding,
        settings,
        observer,
        stop,
    )
}

/// [`generate`] with the client's place converted. Without type parameters, its boxed
/// body is compiled once, here, whatever type the caller passes as the client.
#[allow(clippy::too_many_arguments)]
fn generate_at<'a>(
    ctx: &'a mut Ctx,
    model: &'a SharedDecoder,
    client: ClientAt,
    prompt: Option<&'a [u32]>,
    prompt_len: usize,
    decoding: &'a Decoding,
    settings: &'a SecureSettings,
    observer: Option<Observer>,
    stop: Option<&'a StopCheck>,
) -> BoxedProtocol<'a, Generation> {
    Box::pin(async move {
        let prompts = prompt.map(|p| vec![p.to_vec()]);
        let mut outs = generate_batch_at(
            ctx,
            model,
            client,
            prompts.as_deref(),
            &[prompt_len],
            decoding,
            settings,
            observer,
            stop,
        )
        .await?;
        outs.pop()
            .ok_or(Error::bug("a batch of one produced no generation"))
    })
}

/// [`generate`] for a batch of prompts of public lengths `lens` (ragged), which share
/// every round: a step costs the rounds of one sequence (up to the extra rounds of the
/// longest sequence's softmax), and its bytes are the sum of theirs. The client passes
/// the prompts (`Some`, one per length). Every sequence follows the same `decoding` rules
/// and ends on its own; the others go on. Returns one [`Generation`] per prompt, in order,
/// each with the costs of the whole batch.
///
/// **Speculative verification** ([`Decoding::drafts`] = k > 0, `SecureArgmax` mode,
/// greedy): at each step the client drafts k tokens that continue its sequence by prompt
/// lookup ([`super::draft::prompt_lookup`], a public method over the prompt and the
/// output so far), shares them as one-hot rows, and the parties evaluate them with the
/// pending token in one KV-cached pass; [`proto::accept_drafts`] finds on shares how many
/// drafts equal the model's greedy picks and the pick after them. The client learns the
/// accepted drafts and that pick: the output is exactly greedy decoding's. Every party
/// learns how many drafts were accepted at each step (it trims the KV cache to them):
/// that is the schedule of the output's length, never a token. k is public and cut near
/// the token limit. Costs per step: one round for the drafts (joined with the client's
/// end bits), the forward pass over k + 1 rows, 2 + ⌈log2 k⌉ rounds to verify, and the
/// opening of the count (with the id).
///
/// # Errors
/// As [`generate`]; `Misuse` also for no prompts or prompts that do not match `lens`.
#[allow(clippy::too_many_arguments)]
pub fn generate_batch<'a>(
    ctx: &'a mut Ctx,
    model: &'a SharedDecoder,
    client: impl Into<ClientAt>,
    prompts: Option<&'a [Vec<u32>]>,
    lens: &'a [usize],
    decoding: &'a Decoding,
    settings: &'a SecureSettings,
    observer: Option<Observer>,
    stop: Option<&'a StopCheck>,
) -> BoxedProtocol<'a, Vec<Generation>> {
    generate_batch_at(
        ctx,
        model,
        client.into(),
        prompts,
        lens,
        decoding,
        settings,
        observer,
        stop,
    )
}

/// [`generate_batch`] with the client's place converted. Without type parameters, its boxed
/// body is compiled once, here, whatever type the caller passes as the client.
#[allow(clippy::too_many_arguments)]
fn generate_batch_at<'a>(
    ctx: &'a mut Ctx,
    model: &'a SharedDecoder,
    client: ClientAt,
    prompts: Option<&'a [Vec<u32>]>,
    lens: &'a [usize],
    decoding: &'a Decoding,
    settings: &'a SecureSettings,
    observer: Option<Observer>,
    stop: Option<&'a StopCheck>,
) -> BoxedProtocol<'a, Vec<Generation>> {
    Box::pin(async move {
        let spec = model.spec();
        let v = spec.vocab;
        let (max_new, mode) = (decoding.max_new, decoding.mode);
        if lens.is_empty() {
            return Err(Error::misuse("a batch needs at least one prompt"));
        }
        if lens
            .iter()
            .any(|&l| l == 0 || l.saturating_add(max_new) > spec.max_positions)
        {
            return Err(Error::misuse(
                "prompt length plus new tokens must be in 1..=the model's maximum positions",
            ));
        }
        if decoding.eos.iter().any(|&e| e as usize >= v) {
            return Err(Error::misuse(
                "end-of-sequence ids must be below the vocabulary size",
            ));
        }
        if let Some(p) = &decoding.sampling {
            p.validate(v)?;
        }
        if decoding.drafts > 0 && (mode != OutputMode::SecureArgmax || decoding.sampling.is_some())
        {
            return Err(Error::misuse(
                "speculative verification needs the secure-argmax output mode and greedy picks",
            ));
        }
        if client.party().is_none()
            && (mode == OutputMode::RevealLogits || decoding.client_stops || decoding.drafts > 0)
        {
            return Err(Error::misuse(
                "a client outside the parties takes the secure-argmax or private output mode, \
                 without stop strings or drafts",
            ));
        }
        let is_client = client.party() == Some(ctx.me());
        if is_client && decoding.client_stops && stop.is_none() {
            return Err(Error::misuse(
                "the client must pass its stop test when the decoding says it has one",
            ));
        }
        let contexts: Vec<Vec<u32>> = match (is_client, prompts) {
            (true, Some(p))
                if p.len() == lens.len() && p.iter().zip(lens).all(|(p, &l)| p.len() == l) =>
            {
                p.to_vec()
            }
            (true, _) => {
                return Err(Error::misuse(
                    "the client must pass one prompt of each public length",
                ));
            }
            (false, _) => vec![Vec::new(); lens.len()],
        };
        let fx = ctx.fixed();
        let emit = |ev| {
            if let Some(obs) = observer.as_ref() {
                obs(ev);
            }
        };
        let mut costs = LayerCosts::default();
        let mut step_costs = Vec::new();
        // The first step's one-hot rows come from the client; a step's costs include its input.
        let mut step_begin = ctx.meter();
        let all_prompts: Option<Vec<u32>> = is_client.then(|| contexts.concat());
        let total: usize = lens.iter().sum();
        let (client, prompt_hot) = match client {
            ClientAt::Party(p) => {
                let hot = share_one_hot(ctx, p, all_prompts.as_deref(), total, 1, v).await?;
                (ClientAt::Party(p), hot)
            }
            ClientAt::Outside {
                prompt_hot,
                deliver,
            } => {
                if prompt_hot.len() != total.saturating_mul(v) {
                    return Err(Error::misuse(
                        "the outside client's prompt rows do not match the prompt lengths",
                    ));
                }
                let rest = ClientAt::Outside {
                    prompt_hot: Shares::zeros(ctx.me(), 0),
                    deliver,
                };
                (rest, prompt_hot)
            }
        };
        costs.add(LayerKind::Input, step_begin, ctx.meter());
        let mut seqs = Vec::with_capacity(lens.len());
        let mut first = 0;
        for (&len, context) in lens.iter().zip(contexts) {
            seqs.push(Sequence {
                cache: KvCache::default(),
                pending: prompt_hot.slice(first * v..(first + len) * v)?,
                pending_rows: len,
                produced: 0,
                context,
                shared_ids: Vec::new(),
                out: Generation::default(),
                active: max_new > 0,
            });
            first += len;
        }
        for step in 0.. {
            let active: Vec<usize> = (0..seqs.len()).filter(|&i| seqs[i].active).collect();
            if active.is_empty() {
                break;
            }
            // Drafts: a public count per sequence, kept below the token limit; the client's
            // end bits of the last step travel in the same epoch.
            let k: Vec<usize> = active
                .iter()
                .map(|&i| {
                    let remaining = max_new.saturating_sub(seqs[i].produced);
                    decoding.drafts.min(remaining.saturating_sub(1))
                })
                .collect();
            let drafted: usize = k.iter().sum();
            // The client's drafts of each sequence (empty elsewhere).
            let drafts: Vec<Vec<u32>> = active
                .iter()
                .zip(&k)
                .map(|(&i, &kk)| {
                    if is_client {
                        decoding.drafter.padded(&seqs[i].context, kk)
                    } else {
                        Vec::new()
                    }
                })
                .collect();
            let draft_hot = if drafted > 0 {
                let m = ctx.meter();
                let ids: Option<Vec<u32>> = is_client.then(|| drafts.concat());
                let from = client.party_for("drafts from an outside client")?;
                let hot = share_one_hot(ctx, from, ids.as_deref(), drafted, 1, v).await?;
                costs.add(LayerKind::Input, m, ctx.meter());
                Some(hot)
            } else {
                None
            };
            // The step's rows: per sequence its pending rows, then its drafts.
            let mut parts = Vec::with_capacity(2 * active.len());
            let mut seq_rows = Vec::with_capacity(active.len());
            let mut positions = Vec::new();
            let mut drafts_at = 0;
            for (&i, &kk) in active.iter().zip(&k) {
                let s = &seqs[i];
                parts.push(s.pending.clone());
                if let (true, Some(h)) = (kk > 0, &draft_hot) {
                    parts.push(h.slice(drafts_at * v..(drafts_at + kk) * v)?);
                    drafts_at += kk;
                }
                let r = s.pending_rows + kk;
                positions.extend(s.cache.len()..s.cache.len() + r);
                seq_rows.push(r);
            }
            let input = Shares::concat(&parts.iter().collect::<Vec<_>>())?;
            let start = ctx.meter();
            let x = model.embed_rows(ctx, &input, &positions).await?;
            costs.add(LayerKind::Embedding, start, ctx.meter());
            let cached_before: Vec<usize> = active.iter().map(|&i| seqs[i].cache.len()).collect();
            // Only each sequence's last 1 + k positions are read: the pick after the pending
            // token and after each draft (the blocks return those rows only).
            let picked_per: Vec<usize> = k.iter().map(|kk| kk + 1).collect();
            let picked_rows: usize = picked_per.iter().sum();
            let hidden = {
                let mut caches: Vec<&mut KvCache> = seqs
                    .iter_mut()
                    .filter(|s| s.active)
                    .map(|s| &mut s.cache)
                    .collect();
                model
                    .blocks_forward(
                        ctx,
                        x,
                        &mut caches,
                        (&seq_rows, &picked_per),
                        settings,
                        &mut costs,
                        step,
                        observer.as_ref(),
                    )
                    .await?
            };
            let logits = model
                .logits(ctx, &hidden, picked_rows, settings, &mut costs)
                .await?;
            let m2 = ctx.meter();
            let mut results: Vec<StepResult> =
                active.iter().map(|_| StepResult::default()).collect();
            // The one-hot rows of each sequence's next pending token (parties' picks).
            let mut next_hot: Vec<Option<Shares>> = vec![None; active.len()];
            let mut next_input_begin = None;
            let lasts: Vec<bool> = active
                .iter()
                .map(|&i| seqs[i].produced + 1 >= max_new)
                .collect();
            if decoding.client_picks() {
                let to = client.party_for("logits to an outside client")?;
                if let Some(raw) = proto::reveal_to(ctx, &logits, to).await? {
                    let vals = fx.decode_slice(&raw);
                    for ((res, &i), chunk) in results.iter_mut().zip(&active).zip(vals.chunks(v)) {
                        let id = argmax_lowest(chunk) as u32;
                        seqs[i].out.logits.push(chunk.to_vec());
                        res.tokens.push(id);
                    }
                }
            } else {
                // The parties pick the tokens; in RevealLogits mode the client also learns
                // the logits, in the same rounds.
                let (mut c_pick, mut c_logits) = (ctx.fork(), ctx.fork());
                let ((hot, id_share), revealed) = puma_core::try_join(
                    pick_token(&mut c_pick, &logits, picked_rows, v, decoding, settings),
                    async {
                        if mode == OutputMode::RevealLogits {
                            let to = client.party_for("logits to an outside client")?;
                            proto::reveal_to(&mut c_logits, &logits, to).await
                        } else {
                            Ok(None)
                        }
                    },
                )
                .await?;
                if let Some(raw) = revealed {
                    let vals = fx.decode_slice(&raw);
                    for (&i, chunk) in active.iter().zip(vals.chunks(v)) {
                        seqs[i].out.logits.push(chunk.to_vec());
                    }
                }
                // Per sequence: the pick of its single row, or the verified drafts' outcome.
                let row_at = starts(&picked_per);
                let draft_rows_at = starts(&k);
                let spec_seqs: Vec<usize> = (0..active.len()).filter(|&j| k[j] > 0).collect();
                let mut forks: Vec<Ctx> = spec_seqs.iter().map(|_| ctx.fork()).collect();
                let mut checks = Vec::with_capacity(spec_seqs.len());
                for &j in &spec_seqs {
                    let (r, kk) = (row_at[j], k[j]);
                    let drafts = draft_hot
                        .as_ref()
                        .ok_or(Error::bug("drafted rows missing"))?
                        .slice(draft_rows_at[j] * v..(draft_rows_at[j] + kk) * v)?;
                    checks.push((
                        hot.slice(r * v..(r + kk + 1) * v)?,
                        id_share.slice(r..r + kk + 1)?,
                        drafts,
                        kk,
                    ));
                }
                let verified = puma_core::try_join_all(
                    forks
                        .iter_mut()
                        .zip(&checks)
                        .map(|(c, (h, ids, dr, kk))| proto::accept_drafts(c, h, ids, dr, *kk, v))
                        .collect(),
                )
                .await?;
                let mut next_ids = Vec::with_capacity(active.len());
                let mut verified = verified.into_iter();
                let mut counts = Vec::with_capacity(spec_seqs.len());
                for (j, &r) in row_at.iter().enumerate() {
                    if k[j] > 0 {
                        let acc = verified
                            .next()
                            .ok_or(Error::bug("a verified sequence is missing"))?;
                        next_hot[j] = Some(acc.next);
                        next_ids.push(acc.next_id);
                        counts.push(acc.count);
                    } else {
                        next_hot[j] = Some(hot.slice(r * v..(r + 1) * v)?);
                        next_ids.push(id_share.slice(r..r + 1)?);
                    }
                }
                // [token ∈ eos] is the sum of the one-hot's entries at the eos ids (local).
                let mut eos_picks: Vec<usize> = decoding.eos.iter().map(|&e| e as usize).collect();
                // Each id once, so that the sum is a bit.
                eos_picks.sort_unstable();
                eos_picks.dedup();
                let mut eos_of = Vec::new();
                let mut eos_bits = Vec::new();
                if decoding.opens_eos() {
                    for (j, hot_j) in next_hot.iter().enumerate() {
                        if !lasts[j] {
                            let h = hot_j.as_ref().ok_or(Error::bug("a pick is missing"))?;
                            eos_bits.push(h.gather(&eos_picks)?.sum_chunks(eos_picks.len())?);
                            eos_of.push(j);
                        }
                    }
                }
                let me = ctx.me();
                let all_ids = concat_or_empty(me, &next_ids)?;
                let all_counts = concat_or_empty(me, &counts)?;
                let all_eos = concat_or_empty(me, &eos_bits)?;
                // The ids to the client, the counts and end bits to all: one round.
                let (mut c_id, mut c_open) = (ctx.fork(), ctx.fork());
                let (ids_open, public) = puma_core::try_join(
                    async {
                        if mode == OutputMode::Private {
                            Ok(None)
                        } else {
                            let what = Delivered::StepIds { step };
                            client.give(&mut c_id, all_ids.clone(), what).await
                        }
                    },
                    async {
                        let both = Shares::concat(&[&all_counts, &all_eos])?;
                        if both.is_empty() {
                            Ok(Vec::new())
                        } else {
                            proto::reveal_all(&mut c_open, &both).await
                        }
                    },
                )
                .await?;
                let (count_vals, eos_vals) = public.split_at(counts.len().min(public.len()));
                for (&j, &c) in spec_seqs.iter().zip(count_vals) {
                    if c > k[j] as u64 {
                        return Err(Error::bug("an opened draft count exceeds the drafts"));
                    }
                    if let Some(res) = results.get_mut(j) {
                        res.accepted = c as usize;
                    }
                }
                for (&j, &b) in eos_of.iter().zip(eos_vals) {
                    if b > 1 {
                        return Err(Error::bug("an opened end-of-sequence bit is not a bit"));
                    }
                    if let Some(res) = results.get_mut(j) {
                        res.eos = Some(b == 1);
                    }
                }
                if let Some(raw) = ids_open {
                    for ((res, mine), &id) in results.iter_mut().zip(&drafts).zip(&raw) {
                        // The accepted drafts are the first ones the client drafted.
                        res.tokens.extend(mine.iter().take(res.accepted));
                        res.tokens.push(id as u32);
                    }
                }
                if mode == OutputMode::Private {
                    for (&i, id) in active.iter().zip(next_ids) {
                        seqs[i].shared_ids.push(id);
                    }
                }
            }
            // The client's view: each token in order, until a rule ends the sequence.
            let mut verdicts = vec![Finish::Length; active.len()];
            for (j, (&i, res)) in active.iter().zip(&results).enumerate() {
                let s = &mut seqs[i];
                s.produced += res.accepted + 1;
                for &id in &res.tokens {
                    s.out.ids.push(id);
                    s.context.push(id);
                    emit(Progress::Token { seq: i, step, id });
                    let verdict = client_verdict(decoding, stop, &s.out.ids, id);
                    if verdict != Finish::Length {
                        verdicts[j] = verdict;
                        s.out.finish = verdict;
                        break;
                    }
                }
                if let Some(true) = res.eos {
                    s.out.finish = Finish::Eos;
                }
            }
            costs.add(LayerKind::Output, m2, ctx.meter());
            // Who goes on: a sequence ends at the token limit, at an opened end bit, or when
            // the client says so (one bit per sequence that could go on).
            // The limit counts the accepted drafts (public): a step that confirms drafts up
            // to it is the last even though it did not start as the last.
            let mut goes_on: Vec<bool> = results
                .iter()
                .zip(&active)
                .map(|(r, &i)| seqs[i].produced < max_new && r.eos != Some(true))
                .collect();
            let m3 = ctx.meter();
            let askers: Vec<usize> = (0..active.len()).filter(|&j| goes_on[j]).collect();
            if decoding.client_ends() && !askers.is_empty() {
                if decoding.client_picks() {
                    next_input_begin = Some(m3);
                }
                let mine: Vec<Finish> = if is_client {
                    askers.iter().map(|&j| verdicts[j]).collect()
                } else {
                    Vec::new()
                };
                let from = client.party_for("end bits from an outside client")?;
                let ended = signal_end(ctx, from, &mine, askers.len()).await?;
                if !decoding.client_picks() {
                    costs.add(LayerKind::Output, m3, ctx.meter());
                }
                for (&j, e) in askers.iter().zip(ended) {
                    if let Some(e) = e {
                        goes_on[j] = false;
                        let s = &mut seqs[active[j]];
                        if !is_client || s.out.finish == Finish::Length {
                            s.out.finish = e;
                        }
                    }
                }
            }
            // The next pending token of each sequence that goes on.
            if decoding.client_picks() {
                let cont: Vec<usize> = (0..active.len()).filter(|&j| goes_on[j]).collect();
                if !cont.is_empty() {
                    next_input_begin.get_or_insert(m3);
                    let ids: Option<Vec<u32>> = is_client.then(|| {
                        cont.iter()
                            .filter_map(|&j| results[j].tokens.last().copied())
                            .collect()
                    });
                    let from = client.party_for("picks from an outside client")?;
                    let hot = share_one_hot(ctx, from, ids.as_deref(), cont.len(), 1, v).await?;
                    for (n, &j) in cont.iter().enumerate() {
                        next_hot[j] = Some(hot.slice(n * v..(n + 1) * v)?);
                    }
                }
                // The client's bits and the next one-hot rows: one epoch.
                costs.add(LayerKind::Input, m3, ctx.meter());
            }
            for (j, &i) in active.iter().enumerate() {
                let s = &mut seqs[i];
                // Keep the pending rows and the accepted drafts; drop the rejected ones.
                s.cache
                    .truncate(cached_before[j] + s.pending_rows + results[j].accepted)?;
                s.active = goes_on[j];
                if goes_on[j] {
                    s.pending = next_hot[j]
                        .take()
                        .ok_or(Error::bug("the next token of a going sequence is missing"))?;
                    s.pending_rows = 1;
                }
            }
            let end = next_input_begin.unwrap_or_else(|| ctx.meter());
            step_costs.push((
                end.payload_bytes_sent - step_begin.payload_bytes_sent,
                end.epoch - step_begin.epoch,
            ));
            step_begin = end;
            emit(Progress::Step { step });
        }
        if mode == OutputMode::Private {
            let shared: Vec<&Shares> = seqs.iter().flat_map(|s| s.shared_ids.iter()).collect();
            if !shared.is_empty() {
                let all = Shares::concat(&shared)?;
                let opened = client.give(ctx, all, Delivered::FinalIds).await?;
                if let Some(raw) = opened {
                    let mut at = 0;
                    for s in &mut seqs {
                        let n = s.shared_ids.len();
                        s.out.ids = raw
                            .get(at..at + n)
                            .ok_or(Error::bug("revealed ids are short"))?
                            .iter()
                            .map(|&x| x as u32)
                            .collect();
                        at += n;
                        s.client_cut(decoding, stop);
                    }
                }
            }
        }
        Ok(seqs
            .into_iter()
            .map(|s| Generation {
                costs: costs.clone(),
                step_costs: step_costs.clone(),
                ..s.out
            })
            .collect())
    })
}

/// The concatenation of `parts`, which may be none.
fn concat_or_empty(me: PartyId, parts: &[Shares]) -> Result<Shares, Error> {
    if parts.is_empty() {
        Ok(Shares::zeros(me, 0))
    } else {
        Shares::concat(&parts.iter().collect::<Vec<_>>())
    }
}

impl Sequence {
    /// In `Private` mode the parties generated on; the client cuts the output where its
    /// rules end it.
    fn client_cut(&mut self, decoding: &Decoding, stop: Option<&StopCheck>) {
        let ids = &mut self.out.ids;
        if let Some(k) = ids.iter().position(|i| decoding.eos.contains(i)) {
            ids.truncate(k + 1);
            self.out.finish = Finish::Eos;
        }
        if decoding.client_stops
            && let Some(s) = stop
            && let Some(k) = (0..ids.len()).find(|&k| s(ids.get(..=k).unwrap_or(&[])))
        {
            ids.truncate(k + 1);
            self.out.finish = Finish::Stop;
        }
    }
}

/// The next token of each of `rows` logit rows on shares: its one-hot (0/1 integers) and
/// its id, by the argmax or by drawing it ([`Decoding::sampling`]). Each row is its own
/// call, joined with the others: a row's rounds do not depend on how many rows there are
/// (a single call would spread one comparison budget over all rows, adding tournament
/// levels).
async fn pick_token(
    ctx: &mut Ctx,
    logits: &Shares,
    rows: usize,
    v: usize,
    decoding: &Decoding,
    settings: &SecureSettings,
) -> Result<(Shares, Shares), Error> {
    let mut forks: Vec<Ctx> = (0..rows).map(|_| ctx.fork()).collect();
    let row_logits = (0..rows)
        .map(|r| logits.slice(r * v..(r + 1) * v))
        .collect::<Result<Vec<_>, _>>()?;
    let picks = puma_core::try_join_all(
        forks
            .iter_mut()
            .zip(&row_logits)
            .map(|(c, x)| pick_one(c, x, v, decoding, settings))
            .collect(),
    )
    .await?;
    let hot: Vec<&Shares> = picks.iter().map(|(h, _)| h).collect();
    let ids: Vec<&Shares> = picks.iter().map(|(_, i)| i).collect();
    Ok((Shares::concat(&hot)?, Shares::concat(&ids)?))
}

/// [`pick_token`] of one row.
async fn pick_one(
    ctx: &mut Ctx,
    logits: &Shares,
    v: usize,
    decoding: &Decoding,
    settings: &SecureSettings,
) -> Result<(Shares, Shares), Error> {
    match &decoding.sampling {
        Some(p) => proto::sample_rows(ctx, logits, 1, v, p).await,
        None => {
            let (_, hot) =
                proto::argmax_rows(ctx, logits, 1, v, settings.logit_compare_width).await?;
            let iota: Vec<u64> = (0..v as u64).collect();
            let id = hot.mul_public(&iota)?.sum_chunks(v)?;
            Ok((hot, id))
        }
    }
}

/// The index of the largest value; ties go to the lowest index.
pub fn argmax_lowest(vals: &[f64]) -> usize {
    let mut best = 0;
    let mut best_v = f64::NEG_INFINITY;
    for (i, &v) in vals.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best
}
