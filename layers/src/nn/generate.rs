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
use puma_core::{Ctx, Error, PartyId, Shares, Width, proto};

use super::attention::KvCache;
use super::cost::LayerKind;
use super::decoder::SharedDecoder;
use super::embedding::share_one_hot;
use super::settings::SecureSettings;
use crate::nn::LayerCosts;

/// How the client learns the result of each generation step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
        }
    }

    /// Whether the client picks each token from the revealed logits (greedy
    /// `RevealLogits`); otherwise the parties pick it on shares.
    fn client_picks(&self) -> bool {
        self.mode == OutputMode::RevealLogits && self.sampling.is_none()
    }

    /// Whether the client tells the other parties after every step if generation goes on.
    fn client_signals(&self) -> bool {
        if self.client_picks() {
            self.client_stops || !self.eos.is_empty()
        } else {
            self.client_stops && self.mode != OutputMode::Private
        }
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
    /// The client learned the token of a step (client only; not in `Private` mode).
    Token {
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

/// The client's one bit "generation ends here" to both other parties, in the current
/// epoch: the client passes its verdict, the others learn only [`Finish::Ended`] or not.
///
/// Rounds: 1 (0 when it joins a round the client sends in anyway). Bytes: 2 from the
/// client (one bit to each peer).
async fn signal_end(
    ctx: &mut Ctx,
    client: PartyId,
    verdict: Option<Finish>,
) -> Result<Option<Finish>, Error> {
    if ctx.me() == client {
        let v = verdict.ok_or(Error::misuse("the client has no verdict to send"))?;
        let end = u64::from(v != Finish::Length);
        for peer in [client.next(), client.prev()] {
            ctx.send(peer, &[end], Width::BIT)?;
        }
        Ok((v != Finish::Length).then_some(v))
    } else {
        let bit = ctx.recv(client, 1, Width::BIT).await?;
        Ok((bit.first().copied().unwrap_or(0) != 0).then_some(Finish::Ended))
    }
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
///
/// # Errors
/// `Misuse` for an empty or too long prompt, ids outside the vocabulary or a client
/// without its stop test; `Protocol` on a malformed message.
#[allow(clippy::too_many_arguments)]
pub async fn generate(
    ctx: &mut Ctx,
    model: &SharedDecoder,
    client: PartyId,
    prompt: Option<&[u32]>,
    prompt_len: usize,
    decoding: &Decoding,
    settings: &SecureSettings,
    observer: Option<Observer>,
    stop: Option<&StopCheck>,
) -> Result<Generation, Error> {
    let spec = model.spec();
    let (d, v) = (spec.d, spec.vocab);
    let (max_new, mode) = (decoding.max_new, decoding.mode);
    if prompt_len == 0 || prompt_len.saturating_add(max_new) > spec.max_positions {
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
    let is_client = ctx.me() == client;
    if is_client && decoding.client_stops && stop.is_none() {
        return Err(Error::misuse(
            "the client must pass its stop test when the decoding says it has one",
        ));
    }
    let fx = ctx.fixed();
    let mut out = Generation::default();
    let mut cache = KvCache::default();
    let mut generated_shared: Vec<Shares> = Vec::new();
    // The first step's one-hot comes from the client; a step's costs include its input.
    let mut step_begin = ctx.meter();
    let mut one_hot = share_one_hot(ctx, client, prompt, prompt_len, 1, v).await?;
    out.costs.add(LayerKind::Input, step_begin, ctx.meter());
    let mut rows = prompt_len;
    let emit = |ev| {
        if let Some(obs) = observer.as_ref() {
            obs(ev);
        }
    };
    for step in 0..max_new {
        let last_step = step + 1 == max_new;
        let start = ctx.meter();
        let mut next_input_begin = None;
        let x = model.embed_rows(ctx, &one_hot, rows, cache.len()).await?;
        out.costs.add(LayerKind::Embedding, start, ctx.meter());
        let hidden = model
            .blocks_forward(
                ctx,
                x,
                rows,
                &mut cache,
                settings,
                &mut out.costs,
                step,
                observer.as_ref(),
            )
            .await?;
        // Only the last position is needed for the next token.
        let m0 = ctx.meter();
        let last = hidden.slice((rows - 1) * d..rows * d)?;
        let last = model
            .final_norm
            .forward(ctx, &last, 1, d, settings.residual_bound)
            .await?;
        let m1 = ctx.meter();
        out.costs.add(model.final_norm.kind(), m0, m1);
        // head · lastᵀ: a `d`-vector is the same in both layouts.
        let logits = proto::matmul_fixed(ctx, model.head(), &last, v, d, 1).await?;
        let m2 = ctx.meter();
        out.costs.add(LayerKind::LmHead, m1, m2);
        // The client's verdict on the token it learned (client only).
        let mut verdict = None;
        let mut ended = None;
        if decoding.client_picks() {
            let next = match proto::reveal_to(ctx, &logits, client).await? {
                Some(raw) => {
                    let vals = fx.decode_slice(&raw);
                    let id = argmax_lowest(&vals) as u32;
                    out.ids.push(id);
                    out.logits.push(vals);
                    emit(Progress::Token { step, id });
                    verdict = Some(client_verdict(decoding, stop, &out.ids, id));
                    Some([id])
                }
                None => None,
            };
            out.costs.add(LayerKind::Output, m2, ctx.meter());
            if !last_step {
                let m3 = ctx.meter();
                next_input_begin = Some(m3);
                // The verdict goes in the same epoch as the next one-hot: no round.
                if decoding.client_signals() {
                    ended = signal_end(ctx, client, verdict).await?;
                }
                if ended.is_none() {
                    one_hot =
                        share_one_hot(ctx, client, next.as_ref().map(|n| &n[..]), 1, 1, v).await?;
                }
                out.costs.add(LayerKind::Input, m3, ctx.meter());
            }
        } else {
            // The parties pick the token; in RevealLogits mode the client also learns
            // the logits, in the same rounds.
            let (mut c_pick, mut c_logits) = (ctx.fork(), ctx.fork());
            let ((hot, id_share), revealed) = puma_core::try_join(
                pick_token(&mut c_pick, &logits, v, decoding, settings),
                async {
                    if mode == OutputMode::RevealLogits {
                        proto::reveal_to(&mut c_logits, &logits, client).await
                    } else {
                        Ok(None)
                    }
                },
            )
            .await?;
            if let Some(raw) = revealed {
                out.logits.push(fx.decode_slice(&raw));
            }
            // [token ∈ eos] is the sum of the one-hot's entries at the eos ids (local).
            // Not when the client's own verdict (which includes it) ends the step.
            let client_decides = mode != OutputMode::Private && decoding.client_stops;
            let open_eos = !(decoding.eos.is_empty() || last_step || client_decides);
            let eos_bit = if open_eos {
                let mut picks: Vec<usize> = decoding.eos.iter().map(|&e| e as usize).collect();
                // Each id once, so that the sum is a bit.
                picks.sort_unstable();
                picks.dedup();
                Some(hot.gather(&picks)?.sum_chunks(picks.len())?)
            } else {
                None
            };
            let id_to_client = mode != OutputMode::Private;
            let (mut c_id, mut c_eos) = (ctx.fork(), ctx.fork());
            let (id, eos_open) = puma_core::try_join(
                async {
                    if id_to_client {
                        proto::reveal_to(&mut c_id, &id_share, client).await
                    } else {
                        Ok(None)
                    }
                },
                async {
                    match &eos_bit {
                        Some(b) => proto::reveal_all(&mut c_eos, b).await.map(Some),
                        None => Ok(None),
                    }
                },
            )
            .await?;
            if let Some(raw) = id {
                let id = raw.first().copied().unwrap_or(0) as u32;
                out.ids.push(id);
                emit(Progress::Token { step, id });
                verdict = Some(client_verdict(decoding, stop, &out.ids, id));
            }
            if let Some(open) = eos_open {
                match open.first().copied() {
                    Some(0) => {}
                    Some(1) => ended = Some(Finish::Eos),
                    _ => return Err(Error::bug("an opened end-of-sequence bit is not a bit")),
                }
            }
            if decoding.client_signals() && !last_step {
                ended = signal_end(ctx, client, verdict).await?;
            }
            if mode == OutputMode::Private {
                generated_shared.push(id_share);
            }
            out.costs.add(LayerKind::Output, m2, ctx.meter());
            one_hot = hot;
        }
        rows = 1;
        let end = next_input_begin.unwrap_or_else(|| ctx.meter());
        out.step_costs.push((
            end.payload_bytes_sent - step_begin.payload_bytes_sent,
            end.epoch - step_begin.epoch,
        ));
        step_begin = end;
        emit(Progress::Step { step });
        if let Some(v) = verdict.filter(|&v| v != Finish::Length) {
            // The client's own reason (also on the last step, where nothing is signalled).
            out.finish = v;
        }
        if let Some(e) = ended {
            if !is_client || out.finish == Finish::Length {
                out.finish = e;
            }
            break;
        }
    }
    if mode == OutputMode::Private && !generated_shared.is_empty() {
        let all = Shares::concat(&generated_shared.iter().collect::<Vec<_>>())?;
        if let Some(raw) = proto::reveal_to(ctx, &all, client).await? {
            out.ids = raw.iter().map(|&x| x as u32).collect();
            // The parties generated on; the client cuts the output where its rules end it.
            if let Some(k) = out.ids.iter().position(|i| decoding.eos.contains(i)) {
                out.ids.truncate(k + 1);
                out.finish = Finish::Eos;
            }
            if decoding.client_stops
                && let Some(s) = stop
                && let Some(k) = (0..out.ids.len()).find(|&k| s(out.ids.get(..=k).unwrap_or(&[])))
            {
                out.ids.truncate(k + 1);
                out.finish = Finish::Stop;
            }
        }
    }
    Ok(out)
}

/// The next token on shares: its one-hot (0/1 integers) and its id, by the argmax or by
/// drawing it ([`Decoding::sampling`]).
async fn pick_token(
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
