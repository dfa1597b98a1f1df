//! The plaintext f64 BERT against the fixtures' float32 references (bounds from the
//! fixtures' README: f64 re-implementation column).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::bert_common;

use bert_common::{Reference, discordant, max_diff_rows, minilm_dir, minilm_tags, model_dir};
use ndarray::Array2;
use puma_layers::bert::plain::{cosine_matrix, mean_pool_normalized};
use puma_layers::bert::{BertBatch, BertError, BertFlavor, PlainBert};

#[test]
fn tiny_random_bert_matches_reference() {
    let model = PlainBert::load(&model_dir("bert-tiny-random")).unwrap();
    assert_eq!(model.config().flavor, BertFlavor::Bert);
    assert_eq!(model.weights().num_labels(), 2);
    let r = Reference::load("bert-tiny-random");
    for tag in ["s1", "s2", "s3", "s4"] {
        let batch = r.batch(tag);
        let out = model.forward(&batch).unwrap();
        let e = max_diff_rows(
            &out.embeddings,
            &r.matrix(&format!("{tag}.embeddings")),
            None,
        );
        let h = max_diff_rows(
            &out.last_hidden_state,
            &r.matrix(&format!("{tag}.last_hidden_state")),
            None,
        );
        let p = max_diff_rows(
            out.pooled.as_ref().unwrap(),
            &r.matrix(&format!("{tag}.pooler_output")),
            None,
        );
        let l = max_diff_rows(
            out.logits.as_ref().unwrap(),
            &r.matrix(&format!("{tag}.logits")),
            None,
        );
        eprintln!("{tag}: embeddings {e:.2e} hidden {h:.2e} pooler {p:.2e} logits {l:.2e}");
        assert!(e <= 1e-5 && h <= 1e-5 && p <= 1e-5, "{tag}: {e} {h} {p}");
        assert!(l <= 1e-6, "{tag}: logits {l}");
    }
    // s4 is a sentence pair: token types 0/1 matter.
    assert!(r.batch("s4").token_type_ids.contains(&1));
}

#[test]
fn tiny_random_bert_padded_batch_matches_reference_on_real_tokens() {
    let model = PlainBert::load(&model_dir("bert-tiny-random")).unwrap();
    let r = Reference::load("bert-tiny-random");
    let batch = r.batch("batch");
    assert_eq!((batch.batch, batch.seq_len), (4, 17));
    assert!(batch.attention_mask.contains(&false));
    let out = model.forward(&batch).unwrap();
    let mask = batch.attention_mask.clone();
    let h = max_diff_rows(
        &out.last_hidden_state,
        &r.matrix("batch.last_hidden_state"),
        Some(&mask),
    );
    let p = max_diff_rows(
        out.pooled.as_ref().unwrap(),
        &r.matrix("batch.pooler_output"),
        None,
    );
    let l = max_diff_rows(
        out.logits.as_ref().unwrap(),
        &r.matrix("batch.logits"),
        None,
    );
    eprintln!("batch: hidden {h:.2e} pooler {p:.2e} logits {l:.2e}");
    assert!(h <= 1e-5 && p <= 1e-5 && l <= 1e-6, "{h} {p} {l}");
    // The same batch built from the single inputs by BertBatch::padded.
    let seqs: Vec<(Vec<u32>, Vec<u32>)> = ["s1", "s2", "s3", "s4"]
        .iter()
        .map(|t| {
            let b = r.batch(t);
            (b.input_ids, b.token_type_ids)
        })
        .collect();
    assert_eq!(BertBatch::padded(&seqs, 0).unwrap(), batch);
}

#[test]
fn bad_inputs_are_typed_errors() {
    let model = PlainBert::load(&model_dir("bert-tiny-random")).unwrap();
    let too_big = BertBatch::single(&[101, 30522, 102]);
    assert!(matches!(model.forward(&too_big), Err(BertError::Input(_))));
    assert!(matches!(
        model.forward(&BertBatch::single(&[])),
        Err(BertError::Input(_))
    ));
    let mut b = BertBatch::single(&[101, 102]);
    b.token_type_ids = vec![0, 2];
    assert!(matches!(model.forward(&b), Err(BertError::Input(_))));
    b.token_type_ids = vec![0, 0];
    b.attention_mask = vec![false, false];
    assert!(matches!(model.forward(&b), Err(BertError::Input(_))));
    let long = BertBatch::single(&vec![101; 513]);
    assert!(matches!(model.forward(&long), Err(BertError::Input(_))));
    assert!(BertBatch::padded(&[], 0).is_err());
}

#[test]
fn loader_errors_are_typed() {
    let dir = model_dir("bert-tiny-random");
    let cfg = puma_layers::bert::BertConfig::from_file(&dir.join("config.json")).unwrap();
    let err = puma_layers::bert::BertWeights::from_safetensors_bytes(b"garbage", &cfg);
    assert!(matches!(err, Err(BertError::BadFile { .. })));
    let mut wrong = cfg.clone();
    wrong.hidden_size = 32;
    wrong.num_attention_heads = 4;
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    assert!(matches!(
        puma_layers::bert::BertWeights::from_safetensors_bytes(&bytes, &wrong),
        Err(BertError::Shape { .. })
    ));
    for bad in [
        r#"{"model_type":"gpt2","vocab_size":1,"hidden_size":4,"num_hidden_layers":1,"num_attention_heads":1,"intermediate_size":4}"#,
        r#"{"model_type":"bert","vocab_size":1,"hidden_size":4,"num_hidden_layers":1,"num_attention_heads":3,"intermediate_size":4}"#,
        r#"{"model_type":"bert","vocab_size":1,"hidden_size":4,"num_hidden_layers":1,"num_attention_heads":1,"intermediate_size":4,"position_embedding_type":"relative_key"}"#,
        r#"{"model_type":"bert","vocab_size":1,"hidden_size":4,"num_hidden_layers":1,"num_attention_heads":1,"intermediate_size":4,"hidden_act":"relu"}"#,
        r#"{"model_type":"bert"}"#,
    ] {
        assert!(
            puma_layers::bert::BertConfig::from_json_str(bad).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn roberta_positions_skip_padding() {
    let cfg = puma_layers::bert::BertConfig::from_json_str(
        r#"{"model_type":"roberta","vocab_size":10,"hidden_size":4,"num_hidden_layers":1,"num_attention_heads":1,"intermediate_size":4,"max_position_embeddings":10,"pad_token_id":1}"#,
    )
    .unwrap();
    assert_eq!(cfg.flavor, BertFlavor::Roberta);
    assert_eq!(cfg.position_ids(&[true, true, false]), vec![2, 3, 1]);
    assert_eq!(cfg.max_len(), 8);
}

#[test]
fn minilm_matches_reference_embeddings() {
    let Some(dir) = minilm_dir() else { return };
    let model = PlainBert::load(&dir).unwrap();
    let r = Reference::load("minilm-l6");
    let tags = minilm_tags();
    let mut embs = Array2::zeros((24, 384));
    let (mut worst_h, mut worst_e) = (0.0f64, 0.0f64);
    for (i, tag) in tags.iter().enumerate() {
        let batch = r.batch(tag);
        let out = model.forward(&batch).unwrap();
        let h = max_diff_rows(
            &out.last_hidden_state,
            &r.matrix(&format!("{tag}.last_hidden_state")),
            None,
        );
        let e = mean_pool_normalized(out.last_hidden_state.view(), &batch);
        let de = max_diff_rows(&e, &r.matrix(&format!("{tag}.embedding")), None);
        worst_h = worst_h.max(h);
        worst_e = worst_e.max(de);
        embs.row_mut(i).assign(&e.row(0));
    }
    let cos = cosine_matrix(embs.view());
    let dc = max_diff_rows(&cos, &r.matrix("cosine"), None);
    eprintln!("minilm plaintext: hidden {worst_h:.2e} embedding {worst_e:.2e} cosine {dc:.2e}");
    assert!(worst_h <= 1e-4 && worst_e <= 1e-6 && dc <= 1e-6);
    // The f64 ranking of the 276 sentence pairs is the reference's (its smallest gap,
    // 3.9e-7, is just above the reference's float32 rounding of 3.6e-7).
    let bad = discordant(&cos, &r.matrix("cosine"));
    let worst_gap = bad.iter().map(|b| b.2).fold(0.0, f64::max);
    eprintln!(
        "minilm plaintext ranking: {} discordant pairs of pairs, largest reference gap {worst_gap:.2e}",
        bad.len()
    );
    assert!(bad.is_empty() && worst_gap == 0.0);
    // The padded batch gives the same embeddings.
    let batch = r.batch("batch");
    let be = model.sentence_embeddings(&batch).unwrap();
    let db = max_diff_rows(&be, &r.matrix("embeddings"), None);
    eprintln!("minilm padded batch: embedding {db:.2e}");
    assert!(db <= 1e-6);
}

/// bert-tiny-random rewritten as a RoBERTa checkpoint (`roberta.` prefix, positions offset
/// by pad_token_id + 1 = 2, the pooler and classifier as RoBERTa's `classifier.dense` /
/// `classifier.out_proj`): the RoBERTa model must compute exactly what the BERT one does.
#[test]
fn roberta_layout_computes_the_same_as_bert() {
    use safetensors::{Dtype, SafeTensors, tensor::TensorView};
    let dir = model_dir("bert-tiny-random");
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut owned: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, view) in st.tensors() {
        assert_eq!(view.dtype(), Dtype::F32);
        let (new_name, shape, data) = match name.as_str() {
            "bert.embeddings.position_embeddings.weight" => {
                // Two leading rows (padding_idx 1 and the unused 0), then BERT's rows.
                let mut data = vec![0u8; 2 * 64 * 4];
                data.extend_from_slice(view.data());
                (name.replace("bert.", "roberta."), vec![514, 64], data)
            }
            n if n.starts_with("bert.pooler.dense.") => (
                n.replace("bert.pooler.dense.", "classifier.dense."),
                view.shape().to_vec(),
                view.data().to_vec(),
            ),
            n if n.starts_with("classifier.") => (
                n.replace("classifier.", "classifier.out_proj."),
                view.shape().to_vec(),
                view.data().to_vec(),
            ),
            n => (
                n.replacen("bert.", "roberta.", 1),
                view.shape().to_vec(),
                view.data().to_vec(),
            ),
        };
        owned.push((new_name, shape, data));
    }
    let views: Vec<(String, TensorView<'_>)> = owned
        .iter()
        .map(|(n, s, d)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), d).unwrap(),
            )
        })
        .collect();
    let roberta_bytes = safetensors::serialize(views, None).unwrap();
    let config = std::fs::read_to_string(dir.join("config.json"))
        .unwrap()
        .replace("\"model_type\": \"bert\"", "\"model_type\": \"roberta\"")
        .replace(
            "\"max_position_embeddings\": 512",
            "\"max_position_embeddings\": 514",
        )
        .replace("\"pad_token_id\": 0", "\"pad_token_id\": 1");
    let cfg = puma_layers::bert::BertConfig::from_json_str(&config).unwrap();
    assert_eq!(cfg.flavor, BertFlavor::Roberta);
    let w = puma_layers::bert::BertWeights::from_safetensors_bytes(&roberta_bytes, &cfg).unwrap();
    assert_eq!(w.num_labels(), 2);
    let roberta = PlainBert::new(cfg, w);
    let bert = PlainBert::load(&dir).unwrap();
    let r = Reference::load("bert-tiny-random");
    let batch = r.batch("batch");
    let (a, b) = (
        bert.forward(&batch).unwrap(),
        roberta.forward(&batch).unwrap(),
    );
    let mask = batch.attention_mask.clone();
    assert!(max_diff_rows(&a.last_hidden_state, &b.last_hidden_state, Some(&mask)) < 1e-12);
    assert!(max_diff_rows(a.logits.as_ref().unwrap(), b.logits.as_ref().unwrap(), None) < 1e-12);
    // And against the reference logits.
    let l = max_diff_rows(b.logits.as_ref().unwrap(), &r.matrix("batch.logits"), None);
    assert!(l <= 1e-6, "{l}");
}
