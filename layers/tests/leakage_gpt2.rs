//! Leakage of one secure GPT-2 block: the helper's view does not depend on the prompt or
//! the weights.
//!
//! A one-block GPT-2 cut from `models/gpt2-tiny-random` (block 0, LayerNorms and the first
//! 16 vocabulary rows and 8 positions of the embeddings) is shared by the owner P1 and run
//! on a three-token prompt of the client P0; the logits are revealed to P0 only. The
//! helper P2 keeps its seeds fixed; the two series differ in both secrets: the prompt and
//! the weights (embedding rows reversed, MLP input weights negated). Method and thresholds
//! as in `core/tests/leakage.rs` (shared module).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

#[path = "../../core/tests/leakage_stats/mod.rs"]
mod leakage_stats;

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;

use leakage_stats::{assert_masked, assert_no_leak, check, replay};
use ndarray::{Axis, s};
use puma_core::{Ctx, Error, PartyId};
use puma_layers::nn::{SecureSettings, SharedDecoder, forward_logits};
use puma_layers::{Gpt2Config, Gpt2Weights, load_gpt2};

type Proto = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// The one-block model and its variant with other weights.
fn models() -> (Gpt2Config, [Arc<Gpt2Weights>; 2]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/gpt2-tiny-random");
    let (mut cfg, w) = load_gpt2(&dir).unwrap();
    cfg.n_layer = 1;
    cfg.vocab_size = 16;
    cfg.n_positions = 8;
    let small = Gpt2Weights {
        wte: w.wte.slice(s![..16, ..]).to_owned(),
        wpe: w.wpe.slice(s![..8, ..]).to_owned(),
        blocks: w.blocks[..1].to_vec(),
        ln_f: w.ln_f.clone(),
        lm_head: None,
    };
    small.check_shapes(&cfg).unwrap();
    let mut other = small.clone();
    other.wte.invert_axis(Axis(0));
    other.blocks[0].fc_w.mapv_inplace(|v| -v);
    (cfg, [Arc::new(small), Arc::new(other)])
}

/// The one-block model of `weights` run on `ids`: P1 shares it, P0's prompt, logits to P0.
fn block_run(
    cfg: &Gpt2Config,
    weights: &Arc<Gpt2Weights>,
    ids: [u32; 3],
) -> impl Fn(PartyId) -> Box<dyn FnOnce(Ctx) -> Proto + Send> + use<> {
    let (cfg, w) = (cfg.clone(), weights.clone());
    move |me: PartyId| -> Box<dyn FnOnce(Ctx) -> Proto + Send> {
        let (cfg, w) = (cfg.clone(), w.clone());
        Box::new(move |mut ctx: Ctx| -> Proto {
            Box::pin(async move {
                let owner = PartyId::P1;
                let model =
                    SharedDecoder::share(&mut ctx, owner, &cfg, (me == owner).then_some(&*w))
                        .await?;
                let client = PartyId::P0;
                let ids = (me == client).then_some(&ids[..]);
                forward_logits(&mut ctx, &model, client, ids, 3, &SecureSettings::default())
                    .await
                    .map(drop)
            })
        })
    }
}

const PROMPTS: [[u32; 3]; 2] = [[1, 2, 3], [15, 4, 9]];

#[test]
fn a_gpt2_block_view_does_not_depend_on_prompt_or_weights() {
    let (cfg, weights) = models();
    let observer = PartyId::P2;
    let make = |series: usize| block_run(&cfg, &weights[series], PROMPTS[series]);
    assert_no_leak("GPT-2 block", observer, check(observer, 100, make));
    assert_masked("GPT-2 block", observer, &replay(observer, make));
}

/// Key replay at the owner: the prompt changes, the weights do not; the logits go to the
/// client only, so nothing the owner receives may depend on the prompt.
#[test]
fn the_owner_view_of_a_gpt2_block_does_not_depend_on_the_prompt() {
    let (cfg, weights) = models();
    let owner = PartyId::P1;
    let make = |series: usize| block_run(&cfg, &weights[0], PROMPTS[series]);
    assert_masked("GPT-2 block at the owner", owner, &replay(owner, make));
}
