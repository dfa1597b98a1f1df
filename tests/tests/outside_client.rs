//! A client outside the three parties (the thin client of a service): it deals its prompt,
//! the parties generate on the Shakespeare GPT-2 (cut to a small vocabulary:
//! [`crate::small_vocab`]) and deliver their shares of each token, and the client
//! reconstructs the ids a client among the parties gets. No party learns a token.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::sync::{Arc, Mutex, OnceLock};

use puma_core::dealing;
use puma_core::sim::{Outcome, Sim};
use puma_core::{PartyId, Shares};
use puma_layers::nn::client::{OutsideTokens, deal_prompts};
use puma_layers::nn::{
    ClientAt, Decoding, Delivered, Delivery, Generation, OutputMode, SecureSettings, SharedDecoder,
    generate_batch,
};

use crate::small_vocab::SmallVocab;

/// "ROMEO:" and "JULIET:" (full-model ids); the second is longer.
const FULL_PROMPTS: [&[u32]; 2] = [&[33676, 4720, 25], &[41, 6239, 2767, 25]];

/// The model, and the prompts in its ids.
fn model() -> Arc<(SmallVocab, Vec<Vec<u32>>)> {
    static MODEL: OnceLock<Arc<(SmallVocab, Vec<Vec<u32>>)>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            let m = SmallVocab::new(&FULL_PROMPTS, 6);
            let prompts = FULL_PROMPTS.iter().map(|p| m.ids(p)).collect();
            Arc::new((m, prompts))
        })
        .clone()
}

fn vocab() -> usize {
    model().0.config.vocab_size
}

type Deliveries = Arc<Mutex<Vec<(Delivered, Vec<u64>, Vec<u64>)>>>;

/// Every party's generations of `lens`-long prompts under `decoding`: the owner `P1`
/// shares the model, and `client_of(p)` says where the client is for party `p` and which
/// prompts `p` passes.
fn run_parties(
    decoding: &Decoding,
    lens: &[usize],
    mut client_of: impl FnMut(PartyId) -> (ClientAt, Option<Vec<Vec<u32>>>),
) -> Outcome<Vec<Generation>> {
    let (model, decoding, lens) = (model(), Arc::new(decoding.clone()), lens.to_vec());
    Sim::new(3).run(move |me| {
        let (model, decoding, lens) = (model.clone(), decoding.clone(), lens.clone());
        let (client, prompts) = client_of(me);
        move |mut ctx| async move {
            let (cfg, w) = (&model.0.config, &model.0.weights);
            let m =
                SharedDecoder::share(&mut ctx, PartyId::P1, cfg, (me == PartyId::P1).then_some(w))
                    .await?;
            generate_batch(
                &mut ctx,
                &m,
                client,
                prompts.as_deref(),
                &lens,
                &decoding,
                &SecureSettings::default(),
                None,
                None,
            )
            .await
        }
    })
}

fn prompts() -> Vec<Vec<u32>> {
    model().1.clone()
}

fn lens() -> Vec<usize> {
    prompts().iter().map(Vec::len).collect()
}

/// The parties' generations with the client at `P0` (as today), for reference.
fn with_party_client(decoding: &Decoding) -> Vec<Generation> {
    let out = run_parties(decoding, &lens(), |me| {
        (
            ClientAt::Party(PartyId::P0),
            (me == PartyId::P0).then(prompts),
        )
    });
    let [client, _, _] = out.into_results().unwrap();
    client
}

/// Runs the parties with an outside client: returns what each party delivered, and the
/// parties' own generations.
fn with_outside_client(decoding: &Decoding) -> ([Deliveries; 3], [Vec<Generation>; 3]) {
    let vocab = vocab();
    let dealt = deal_prompts(&prompts(), vocab, &[[7; 32], [9; 32]], 0).unwrap();
    let total: usize = lens().iter().sum();
    let delivered: [Deliveries; 3] = Default::default();
    let mut hot: Vec<Option<Shares>> = dealt
        .into_iter()
        .zip(PartyId::ALL)
        .map(|(d, p)| {
            Some(
                d.into_shares(p, total * vocab, dealing::Span::whole(0))
                    .unwrap(),
            )
        })
        .collect();
    let sinks = delivered.clone();
    let out = run_parties(decoding, &lens(), |me| {
        let sink = sinks[me.index()].clone();
        let client = ClientAt::Outside {
            prompt_hot: hot[me.index()].take().unwrap(),
            deliver: Arc::new(move |d: Delivery| {
                let (a, b) = d.shares.components();
                sink.lock().unwrap().push((d.what, a.to_vec(), b.to_vec()));
            }),
        };
        (client, None)
    });
    (delivered, out.into_results().unwrap())
}

/// What the client reconstructs from the three parties' deliveries.
fn client_view(delivered: &[Deliveries; 3], decoding: &Decoding) -> OutsideTokens {
    let vocab = vocab();
    let mut view = OutsideTokens::new(FULL_PROMPTS.len(), decoding, vocab);
    let parts: Vec<_> = delivered
        .iter()
        .map(|d| d.lock().unwrap().clone())
        .collect();
    assert_eq!(parts[0].len(), parts[1].len());
    assert_eq!(parts[0].len(), parts[2].len());
    for i in 0..parts[0].len() {
        let what = parts[0][i].0;
        assert!(parts.iter().all(|p| p[i].0 == what), "deliveries in step");
        let ids = dealing::reconstruct([
            (&parts[0][i].1, &parts[0][i].2),
            (&parts[1][i].1, &parts[1][i].2),
            (&parts[2][i].1, &parts[2][i].2),
        ])
        .unwrap();
        match what {
            Delivered::StepIds { .. } => {
                view.step(&ids).unwrap();
            }
            Delivered::FinalIds => view.finish(&ids).unwrap(),
            Delivered::Encoded => panic!("a decoder delivered an encoder's outputs"),
        }
    }
    assert!(view.done());
    view
}

#[test]
fn an_outside_client_gets_the_party_clients_tokens_in_both_modes() {
    for mode in [OutputMode::SecureArgmax, OutputMode::Private] {
        let decoding = Decoding::new(6, mode);
        let want: Vec<Vec<u32>> = with_party_client(&decoding)
            .into_iter()
            .map(|g| g.ids)
            .collect();
        assert_eq!(want[0].len(), 6);
        let (delivered, gens) = with_outside_client(&decoding);
        let view = client_view(&delivered, &decoding);
        assert_eq!(view.ids(), want, "{mode:?}");
        // No party learned an id.
        for g in gens.iter().flatten() {
            assert!(g.ids.is_empty(), "{mode:?}");
        }
        let steps = delivered[0].lock().unwrap().len();
        assert_eq!(
            steps,
            if mode == OutputMode::Private { 1 } else { 6 },
            "{mode:?}"
        );
    }
}

#[test]
fn an_end_of_sequence_id_ends_each_outside_sequence_on_its_own() {
    let full = with_party_client(&Decoding::new(5, OutputMode::SecureArgmax));
    // End the first sequence at its third token; the second goes on unless it meets it.
    let eos = full[0].ids[2];
    for mode in [OutputMode::SecureArgmax, OutputMode::Private] {
        let decoding = Decoding {
            eos: vec![eos],
            ..Decoding::new(5, mode)
        };
        let want: Vec<Vec<u32>> = with_party_client(&decoding)
            .into_iter()
            .map(|g| g.ids)
            .collect();
        assert_eq!(want[0], full[0].ids[..3], "{mode:?}");
        let (delivered, _) = with_outside_client(&decoding);
        assert_eq!(client_view(&delivered, &decoding).ids(), want, "{mode:?}");
    }
}

#[test]
fn rules_an_outside_client_cannot_take_are_refused() {
    for decoding in [
        Decoding::new(3, OutputMode::RevealLogits),
        Decoding {
            client_stops: true,
            ..Decoding::new(3, OutputMode::SecureArgmax)
        },
        Decoding {
            drafts: 2,
            ..Decoding::new(3, OutputMode::SecureArgmax)
        },
    ] {
        let v = vocab();
        let out = run_parties(&decoding, &[3], |me| {
            let client = ClientAt::Outside {
                prompt_hot: Shares::zeros(me, 3 * v),
                deliver: Arc::new(|_| {}),
            };
            (client, None)
        });
        // Each party refuses on its own (whichever refusal reaches a peer first ends it).
        let refused = out
            .results
            .iter()
            .filter(|r| {
                r.as_ref()
                    .is_err_and(|e| e.to_string().contains("outside the parties"))
            })
            .count();
        assert!(
            refused >= 1,
            "{:?}",
            out.results
                .iter()
                .map(|r| r.as_ref().err())
                .collect::<Vec<_>>()
        );
        assert!(out.results.iter().all(Result::is_err));
    }
}
