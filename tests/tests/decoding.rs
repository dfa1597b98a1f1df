//! Decoding rules of the generation loop on the Shakespeare GPT-2 (cut to a small
//! vocabulary: [`crate::small_vocab`]): ending early at an end-of-sequence id and at the
//! client's own stop test, in every output mode (the ids of the full run as the
//! reference, the rounds each rule costs pinned against a run of as many tokens without
//! it), and tokens drawn on shares (top-k = 1 must be the argmax).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use puma_core::proto::SamplingParams;
use puma_core::sim::{Outcome, Sim};
use puma_core::{ErrorKind, PartyId};
use puma_layers::nn::{
    Decoding, Finish, Generation, OutputMode, SecureSettings, SharedDecoder, StopCheck, generate,
};

use crate::small_vocab::{SmallVocab, VOCAB};

/// "ROMEO:" (full-model ids), whose greedy continuation "\nI'll be" has five different
/// ids.
const ROMEO: [u32; 3] = [33676, 4720, 25];
const MODES: [OutputMode; 3] = [
    OutputMode::RevealLogits,
    OutputMode::SecureArgmax,
    OutputMode::Private,
];

/// The model, and the prompt in its ids.
fn model() -> Arc<(SmallVocab, Vec<u32>)> {
    static MODEL: OnceLock<Arc<(SmallVocab, Vec<u32>)>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let m = SmallVocab::new(&[&ROMEO], 6);
            let prompt = m.ids(&ROMEO);
            Arc::new((m, prompt))
        })
        .clone()
}

/// Every party's generation under `decoding` (the client has `stop` if given).
fn try_run(decoding: Decoding, stop: Option<StopCheck>) -> Outcome<Generation> {
    let model = model();
    let decoding = Arc::new(decoding);
    Sim::new(3).run(move |me| {
        let (model, decoding) = (model.clone(), decoding.clone());
        let stop = if me == PartyId::P0 {
            stop.clone()
        } else {
            None
        };
        move |mut ctx| async move {
            let (small, prompt) = &*model;
            let (cfg, w) = (&small.config, &small.weights);
            let m =
                SharedDecoder::share(&mut ctx, PartyId::P1, cfg, (me == PartyId::P1).then_some(w))
                    .await?;
            generate(
                &mut ctx,
                &m,
                PartyId::P0,
                (me == PartyId::P0).then_some(&prompt[..]),
                prompt.len(),
                &decoding,
                &SecureSettings::default(),
                None,
                stop.as_ref(),
            )
            .await
        }
    })
}

/// The generations and the run's rounds.
fn run(decoding: Decoding, stop: Option<StopCheck>) -> ([Generation; 3], u32) {
    let out = try_run(decoding, stop);
    let rounds = out.rounds();
    (out.into_results().unwrap(), rounds)
}

/// [`run`] of `max_new` tokens in `mode` with no rule that ends generation earlier: the
/// tests' common reference, run once per shape (the simulator's fixed entropy makes every
/// run of it the same).
fn reference(max_new: usize, mode: OutputMode) -> ([Generation; 3], u32) {
    type Runs = Mutex<HashMap<(usize, OutputMode), ([Generation; 3], u32)>>;
    static RUNS: OnceLock<Runs> = OnceLock::new();
    let runs = RUNS.get_or_init(Runs::default);
    let known = runs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&(max_new, mode))
        .cloned();
    known.unwrap_or_else(|| {
        let r = run(Decoding::new(max_new, mode), None);
        runs.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((max_new, mode), r.clone());
        r
    })
}

#[test]
fn an_end_of_sequence_id_ends_generation_in_every_mode() {
    for mode in MODES {
        let (full, _) = reference(5, mode);
        let ids = full[0].ids.clone();
        assert_eq!(ids.len(), 5);
        // Take the fourth token as end-of-sequence (listed twice: counted once).
        let eos = ids[3];
        let n = ids.iter().position(|&i| i == eos).unwrap() + 1;
        assert_eq!(n, 4, "the reference continuation has distinct ids: {ids:?}");
        let (g, rounds) = run(
            Decoding {
                eos: vec![eos, eos],
                ..Decoding::new(5, mode)
            },
            None,
        );
        assert_eq!(g[0].ids, ids[..n], "{mode:?}");
        assert_eq!(g[0].finish, Finish::Eos, "{mode:?}");
        for other in &g[1..] {
            assert!(other.ids.is_empty());
            assert_eq!(
                other.step_costs.len(),
                n,
                "{mode:?}: every party ends at once"
            );
        }
        // Against n tokens with no rule: the client's final bit costs one round when it
        // shares the tokens; the opened bit is free beside the revealed id; in Private
        // mode each opened bit is a round.
        let (_, plain_rounds) = reference(n, mode);
        let extra = match mode {
            OutputMode::RevealLogits => 1,
            OutputMode::SecureArgmax => 0,
            OutputMode::Private => n as u32,
        };
        assert_eq!(rounds, plain_rounds + extra, "{mode:?}");
    }
}

#[test]
fn the_clients_stop_test_ends_generation_in_every_mode() {
    for mode in MODES {
        let (full, _) = reference(4, mode);
        let stop: StopCheck = Arc::new(|ids: &[u32]| ids.len() >= 2);
        let (g, rounds) = run(
            Decoding {
                client_stops: true,
                ..Decoding::new(4, mode)
            },
            Some(stop),
        );
        assert_eq!(g[0].ids, full[0].ids[..2], "{mode:?}");
        assert_eq!(g[0].finish, Finish::Stop, "{mode:?}");
        let (_, two_rounds) = reference(2, mode);
        let (_, four_rounds) = reference(4, mode);
        match mode {
            // The parties generate on; the client cuts the output at the end.
            OutputMode::Private => {
                assert_eq!(g[1].finish, Finish::Length);
                assert_eq!(rounds, four_rounds);
            }
            _ => {
                // The others learn only that the client ended it, after the second token.
                assert_eq!(g[1].finish, Finish::Ended, "{mode:?}");
                assert_eq!(g[2].step_costs.len(), 2, "{mode:?}");
                // The final bit costs a round; in SecureArgmax mode every bit does.
                let extra = if mode == OutputMode::SecureArgmax {
                    2
                } else {
                    1
                };
                assert_eq!(rounds, two_rounds + extra, "{mode:?}");
            }
        }
    }
}

#[test]
fn bad_rules_are_refused() {
    // The party that finds the misuse fails with it (the others may see its abort first).
    let misuse = |out: Outcome<Generation>| {
        out.results
            .iter()
            .any(|r| r.as_ref().is_err_and(|e| e.kind() == ErrorKind::Misuse))
    };
    let outside = Decoding {
        eos: vec![VOCAB as u32],
        ..Decoding::new(2, OutputMode::RevealLogits)
    };
    assert!(
        misuse(try_run(outside, None)),
        "an id outside the vocabulary"
    );
    let no_test = Decoding {
        client_stops: true,
        ..Decoding::new(2, OutputMode::RevealLogits)
    };
    assert!(
        misuse(try_run(no_test, None)),
        "a client without its stop test"
    );
}

#[test]
fn drawing_from_the_top_one_is_greedy_in_every_mode() {
    for mode in MODES {
        let (greedy, _) = reference(3, mode);
        let top1 = SamplingParams {
            top_k: Some(1),
            ..SamplingParams::with_temperature(0.7)
        };
        let (drawn, _) = run(
            Decoding {
                sampling: Some(top1),
                ..Decoding::new(3, mode)
            },
            None,
        );
        assert_eq!(drawn[0].ids, greedy[0].ids, "{mode:?}");
        // In RevealLogits mode the client still learns the logits beside the drawn id.
        let logits = if mode == OutputMode::RevealLogits {
            3
        } else {
            0
        };
        assert_eq!(drawn[0].logits.len(), logits, "{mode:?}");
        // The same logits up to the truncations' randomness (other PRSS streams).
        for (a, b) in drawn[0].logits.iter().zip(&greedy[0].logits) {
            let err = a
                .iter()
                .zip(b)
                .map(|(x, y)| (x - y).abs())
                .fold(0.0, f64::max);
            assert!(err < 1e-3, "{mode:?}: logits differ by {err}");
        }
    }
}

#[test]
fn drawn_tokens_follow_the_distribution_not_the_argmax() {
    // At T = 3 the most likely token has a small probability at each step: six drawn
    // tokens are valid ids but not the greedy continuation (the run is deterministic: the
    // simulator's fixed entropy fixes the PRSS draws).
    let hot = SamplingParams::with_temperature(3.0);
    let (greedy, _) = run(Decoding::new(6, OutputMode::SecureArgmax), None);
    let (a, _) = run(
        Decoding {
            sampling: Some(hot),
            ..Decoding::new(6, OutputMode::SecureArgmax)
        },
        None,
    );
    assert_eq!(a[0].ids.len(), 6);
    assert!(a[0].ids.iter().all(|&id| (id as usize) < VOCAB));
    assert_ne!(a[0].ids, greedy[0].ids);
}
