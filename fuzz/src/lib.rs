//! Shared pieces of the fuzz targets: the protocol the `session` target attacks, an honest
//! three-party run that records every frame one party receives, the parser that tells
//! a frame's structural bytes (headers) from its payload bytes, and the checks of what a
//! party without the weights derives from an accepted configuration.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::VecDeque;
use std::sync::OnceLock;

use puma_core::wire::{CHUNK_HEADER_LEN, FRAME_HEADER_LEN};
use puma_core::{Config, Ctx, Error, FixedPoint, Input, Output, PartyId, Session, Width, proto};
use puma_layers::bert::BertConfig;
use puma_layers::limits::{self, MAX_PARAMETERS};
use puma_layers::nn::{DecoderArch, TensorPlan};

/// Session id of every fuzzed run.
pub const SESSION_ID: u64 = 0x9e37_79b9;

/// What a party ends with: the revealed product and comparison bits.
pub type Revealed = (Vec<u64>, Vec<u64>);

/// P0 shares x, P1 shares y; all learn x·y (fixed point) and [x < y]. Touches input
/// sharing, multiplication, truncation, the comparison (OT rounds), B2A and reveal.
pub fn protocol(
    me: PartyId,
) -> impl FnOnce(Ctx) -> std::pin::Pin<Box<dyn Future<Output = Result<Revealed, Error>> + Send>>
+ Send
+ 'static {
    move |mut ctx: Ctx| {
        Box::pin(async move {
            let fx = FixedPoint::default();
            let xs: Vec<u64> = [1.5, -2.0, 0.25]
                .iter()
                .map(|v| fx.encode(*v).unwrap())
                .collect();
            let ys: Vec<u64> = [-0.5, 3.0, 0.25]
                .iter()
                .map(|v| fx.encode(*v).unwrap())
                .collect();
            let x = proto::share_input(
                &mut ctx,
                PartyId::P0,
                (me == PartyId::P0).then_some(&xs[..]),
                3,
            )
            .await?;
            let y = proto::share_input(
                &mut ctx,
                PartyId::P1,
                (me == PartyId::P1).then_some(&ys[..]),
                3,
            )
            .await?;
            let z = proto::mul_fixed(&mut ctx, &x, &y).await?;
            let c = proto::lt(&mut ctx, &x, &y, Width::W64).await?;
            let c = proto::b2a(&mut ctx, &c).await?;
            let z = proto::reveal_all(&mut ctx, &z).await?;
            let c = proto::reveal_all(&mut ctx, &c).await?;
            Ok((z, c))
        })
    }
}

/// Fixed entropy of party `p` (the fuzzed party must replay the honest run exactly).
pub fn entropy(p: PartyId) -> [u8; 32] {
    [p.index() as u8 + 1; 32]
}

/// A new session of `p` running [`protocol`].
pub fn session(p: PartyId) -> Session<Revealed> {
    Session::new(Config::new(SESSION_ID), p, entropy(p), protocol(p)).unwrap()
}

/// The honest run as `target` sees it.
pub struct Transcript {
    /// Frames `target` receives, by sender index, in link order.
    pub frames: [Vec<Vec<u8>>; 3],
    /// What `target` outputs.
    pub expected: Revealed,
}

fn honest_run(target: PartyId) -> Transcript {
    let mut sessions: Vec<Session<Revealed>> = PartyId::ALL.iter().map(|&p| session(p)).collect();
    let mut results: [Option<Result<Revealed, Error>>; 3] = [None, None, None];
    let mut links: [[VecDeque<Vec<u8>>; 3]; 3] = Default::default();
    let mut frames: [Vec<Vec<u8>>; 3] = Default::default();
    loop {
        for (i, s) in sessions.iter_mut().enumerate() {
            while results[i].is_none() {
                match s.poll_output() {
                    Output::Transmit(t) => {
                        let bytes = t.frame.into_bytes();
                        if t.to == target {
                            frames[i].push(bytes.clone());
                        }
                        links[i][t.to.index()].push_back(bytes);
                    }
                    Output::Yielded => {}
                    Output::Pending { .. } => break,
                    Output::Done(r) => results[i] = Some(r),
                }
            }
        }
        let mut moved = false;
        for f in 0..3 {
            for t in 0..3 {
                while let Some(b) = links[f][t].pop_front() {
                    moved = true;
                    if results[t].is_none() {
                        let _ = sessions[t].handle_input(Input::Frame {
                            from: PartyId::from_index(f),
                            bytes: &b,
                        });
                    }
                }
            }
        }
        if !moved {
            break;
        }
    }
    let [_, _, _] = &results;
    let expected = results[target.index()].take().unwrap().unwrap();
    Transcript { frames, expected }
}

/// The honest transcript of `target`, computed once.
pub fn transcript(target: PartyId) -> &'static Transcript {
    static T: [OnceLock<Transcript>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    T[target.index()].get_or_init(|| honest_run(target))
}

/// Whether byte `pos` of a well-formed frame is payload (a setup seed, an abort code or
/// record data) rather than a header field. Payload bytes are not integrity-protected by
/// the core (that is the authenticated link's job), so flipping them may change a result.
pub fn is_payload(frame: &[u8], pos: usize) -> bool {
    if pos < FRAME_HEADER_LEN {
        return false;
    }
    if frame.get(3) != Some(&1) {
        // Setup seed or abort code.
        return true;
    }
    let mut at = FRAME_HEADER_LEN;
    while at + CHUNK_HEADER_LEN <= frame.len() {
        if pos < at + CHUNK_HEADER_LEN {
            return false;
        }
        let mut len = [0u8; 4];
        len.copy_from_slice(&frame[at + 24..at + 28]);
        let end = at + CHUNK_HEADER_LEN + u32::from_le_bytes(len) as usize;
        if pos < end {
            return true;
        }
        at = end;
    }
    false
}

/// What a party without the weights does with an accepted decoder configuration before
/// the owner sends anything: its spec is valid and within the model size limits, and the
/// plan of the tensors it will hold adds up to at most [`MAX_PARAMETERS`] (built here
/// as the sharing builds it; the shares themselves are not allocated, a model within the
/// limits may exceed the fuzzer's memory).
pub fn check_decoder<A: DecoderArch>(config: &A) {
    let spec = config.spec().expect("an accepted config has a valid spec");
    spec.validate().unwrap();
    spec.check_limits().unwrap();
    let mut plan = TensorPlan::new();
    for (t, n) in spec.tensors().unwrap() {
        plan.push(t.name(), n);
    }
    let total = plan.total().unwrap();
    assert!(total as u64 <= MAX_PARAMETERS);
    assert_eq!(Some(total), spec.parameters().ok());
}

/// [`check_decoder`] for an encoder: every size of an accepted BERT configuration is
/// within its limit (the parameter count is checked by `validate`, and again by the
/// sharing with the owner's announced heads).
pub fn check_bert(config: &BertConfig) {
    limits::check(&[
        (
            "num_hidden_layers",
            config.num_hidden_layers,
            limits::MAX_LAYERS,
        ),
        ("vocab_size", config.vocab_size, limits::MAX_VOCAB),
        ("type_vocab_size", config.type_vocab_size, limits::MAX_VOCAB),
        ("hidden_size", config.hidden_size, limits::MAX_WIDTH),
        (
            "intermediate_size",
            config.intermediate_size,
            limits::MAX_WIDTH,
        ),
        (
            "max_position_embeddings",
            config.max_position_embeddings,
            limits::MAX_POSITIONS,
        ),
    ])
    .unwrap();
    config.validate().unwrap();
}
