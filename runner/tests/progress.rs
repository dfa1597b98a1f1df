//! Progress events of the runners, counted (no timing): while the model is shared, the
//! client hears after every streamed chunk how many parameters are through, in order, up
//! to all of them (GPT-2 on the Shakespeare model, LLaMA and BERT on the tiny fixtures);
//! the BERT encoder reports each of its layers once, in order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::path::Path;
use std::sync::{Arc, Mutex};

use puma_layers::bert::BertBatch;
use puma_layers::bert::secure::Outputs;
use puma_layers::nn::{
    DecoderArch, Observer, Progress, SHARE_CHUNK_WORDS, SecureSettings, ShareObserver,
    ShareProgress,
};

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// An observer that records the sharing events, and the record.
fn recorder() -> (ShareObserver, Arc<Mutex<Vec<ShareProgress>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    let obs: ShareObserver = Arc::new(move |p| s.lock().unwrap().push(p));
    (obs, seen)
}

/// The events of a model of `params` parameters: one per chunk of `SHARE_CHUNK_WORDS`,
/// each a whole chunk further, the last at all of them.
fn expect_chunks(seen: &[ShareProgress], params: usize) {
    let chunks = params.div_ceil(SHARE_CHUNK_WORDS).max(1);
    let want: Vec<ShareProgress> = (1..=chunks)
        .map(|k| ShareProgress {
            shared: (k * SHARE_CHUNK_WORDS).min(params),
            total: params,
        })
        .collect();
    assert_eq!(seen, want);
}

/// The parameters of a decoder, from its public plan.
fn decoder_params<A: DecoderArch>(a: &A) -> usize {
    a.spec()
        .unwrap()
        .tensors()
        .unwrap()
        .iter()
        .map(|(_, n)| n)
        .sum()
}

#[test]
fn gpt2_sharing_reports_every_chunk_up_to_all_parameters() {
    use puma_runner::gpt2::{load_model, run_secure};
    let model = load_model(&repo().join("models/gpt2-shakespeare")).unwrap();
    let params = decoder_params(&model.config);
    // The Shakespeare model spans several chunks (vocabulary 50257 × width 256, ...).
    assert!(params > 3 * SHARE_CHUNK_WORDS, "{params}");
    let (obs, seen) = recorder();
    let mut opts = puma_runner::decoder::RunOptions {
        max_new_tokens: 1,
        ..Default::default()
    };
    opts.share_observer = Some(obs);
    run_secure(model, &[33676, 4720, 25], &opts, None).unwrap();
    expect_chunks(&seen.lock().unwrap(), params);
}

#[test]
fn llama_sharing_reports_every_chunk_up_to_all_parameters() {
    use puma_runner::llama::{RunOptions, TINY_MODEL_DIR, load_model, run_secure};
    let model = load_model(&repo().join(TINY_MODEL_DIR)).unwrap();
    let params = decoder_params(&model.config);
    let (obs, seen) = recorder();
    let mut opts = RunOptions {
        max_new_tokens: 1,
        ..Default::default()
    };
    opts.share_observer = Some(obs);
    run_secure(model, &[vec![19556, 905, 42]], &opts, None).unwrap();
    expect_chunks(&seen.lock().unwrap(), params);
}

#[test]
fn bert_reports_sharing_and_each_encoder_layer() {
    use puma_runner::bert::{load_model, run_secure_observed};
    let model = load_model(&repo().join("models/bert-tiny-random")).unwrap();
    let params: usize = {
        let c = &model.config;
        let (d, inner, l) = (c.hidden_size, c.intermediate_size, c.num_hidden_layers);
        let emb = (c.vocab_size + c.max_position_embeddings + c.type_vocab_size) * d + 2 * d;
        let layer = 4 * d * d + 4 * d + 2 * d + d * inner + inner + inner * d + d + 2 * d;
        let pooler = model.weights.pooler.as_ref().map_or(0, |_| d * d + d);
        let labels = model.weights.classifier.as_ref().map_or(0, |c| c.b.len());
        emb + l * layer + pooler + labels * d + labels
    };
    let (obs, seen) = recorder();
    let layers_seen = Arc::new(Mutex::new(Vec::new()));
    let ls = Arc::clone(&layers_seen);
    let layer_obs: Observer = Arc::new(move |ev: Progress| {
        if let Progress::Layer { step, layer } = ev {
            ls.lock().unwrap().push((step, layer));
        }
    });
    let batch = BertBatch {
        batch: 1,
        seq_len: 3,
        input_ids: vec![5, 6, 7],
        token_type_ids: vec![0; 3],
        attention_mask: vec![true; 3],
    };
    let outputs = Outputs {
        embeddings: true,
        ..Outputs::default()
    };
    run_secure_observed(
        &model,
        &batch,
        outputs,
        SecureSettings::default(),
        7,
        Some(obs),
        Some(layer_obs),
    )
    .unwrap();
    expect_chunks(&seen.lock().unwrap(), params);
    let want: Vec<(usize, usize)> = (0..model.config.num_hidden_layers)
        .map(|l| (0, l))
        .collect();
    assert_eq!(*layers_seen.lock().unwrap(), want);
}
