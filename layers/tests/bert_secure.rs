//! The secure BERT (three simulated parties) against the fixtures' references and the
//! plaintext f64 model: bert-tiny-random's padded batch (hidden states, pooler, logits,
//! sentence embeddings) and the real all-MiniLM-L6-v2 on the 24 sentences.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::bert_common;

use std::sync::Arc;

use bert_common::{
    Reference, discordant, max_diff_rows, minilm_dir, minilm_tags, model_dir, pair_ranking,
};
use ndarray::Array2;
use puma_core::{PartyId, sim::Sim};
use puma_layers::bert::plain::{cosine_matrix, mean_pool_normalized};
use puma_layers::bert::secure::{BatchShape, BertHeads, Outputs, Revealed, SharedBert, run};
use puma_layers::bert::{BertBatch, PlainBert};
use puma_layers::nn::SecureSettings;

const OWNER: PartyId = PartyId::P1;
const CLIENT: PartyId = PartyId::P0;

/// Runs the secure model on `batch`; returns the client's result and the rounds and bytes
/// per party of the whole run (sharing included).
fn secure_run(model: &PlainBert, batch: &BertBatch, outputs: Outputs) -> (Revealed, u32, [u64; 3]) {
    let cfg = model.config().clone();
    let heads = BertHeads::of(model.weights());
    let weights = Arc::new(model.weights().clone());
    let batch = Arc::new(batch.clone());
    let shape = BatchShape::of(&batch);
    let outcome = Sim::new(7).run(move |me| {
        let (cfg, shape) = (cfg.clone(), shape.clone());
        let w = (me == OWNER).then(|| Arc::clone(&weights));
        let b = (me == CLIENT).then(|| Arc::clone(&batch));
        move |mut ctx| async move {
            let shared = SharedBert::share(&mut ctx, OWNER, &cfg, heads, w.as_deref()).await?;
            run(
                &mut ctx,
                &shared,
                CLIENT,
                b.as_deref(),
                &shape,
                outputs,
                &SecureSettings::default(),
            )
            .await
        }
    });
    let rounds = outcome.rounds();
    let bytes = outcome.payload_bytes();
    let [client, other, _] = outcome.into_results().unwrap();
    assert!(other.hidden.is_none() && other.logits.is_none() && other.embeddings.is_none());
    (client, rounds, bytes)
}

fn to_matrix(v: &[f64], cols: usize) -> Array2<f64> {
    Array2::from_shape_vec((v.len() / cols, cols), v.to_vec()).unwrap()
}

#[test]
fn tiny_random_bert_secure_padded_batch_within_bounds() {
    let model = PlainBert::load(&model_dir("bert-tiny-random")).unwrap();
    let r = Reference::load("bert-tiny-random");
    let batch = r.batch("batch");
    let all = Outputs {
        hidden: true,
        pooled: true,
        logits: true,
        embeddings: true,
    };
    let (out, rounds, bytes) = secure_run(&model, &batch, all);
    let hidden = to_matrix(out.hidden.as_ref().unwrap(), 64);
    let pooled = to_matrix(out.pooled.as_ref().unwrap(), 64);
    let logits = to_matrix(out.logits.as_ref().unwrap(), 2);
    let emb = to_matrix(out.embeddings.as_ref().unwrap(), 64);
    let mask = batch.attention_mask.clone();
    let dh = max_diff_rows(&hidden, &r.matrix("batch.last_hidden_state"), Some(&mask));
    let dp = max_diff_rows(&pooled, &r.matrix("batch.pooler_output"), None);
    let dl = max_diff_rows(&logits, &r.matrix("batch.logits"), None);
    let plain = model.forward(&batch).unwrap();
    let de = max_diff_rows(
        &emb,
        &mean_pool_normalized(plain.last_hidden_state.view(), &batch),
        None,
    );
    eprintln!(
        "tiny secure batch 4x17: hidden {dh:.2e} pooler {dp:.2e} logits {dl:.2e} embedding {de:.2e}; {rounds} rounds, bytes {bytes:?}"
    );
    assert!(dh <= 5e-3, "hidden {dh}");
    assert!(dp <= 5e-3, "pooler {dp}");
    assert!(dl <= 5e-4, "logits {dl}");
    assert!(de <= 5e-3, "embedding {de}");
    // Costs are deterministic (shapes only): pinned. The owner's bytes include 8 per
    // parameter (2,057,666: 16.5 MB); the client's its one-hot rows (47 real tokens ×
    // 30,524 × 8 bytes: 11.5 MB). Attention computes the real rows only, with the
    // truncation fused into the products, and the pooler's tanh uses the minimax negExp
    // (were 285 rounds and [16_998_878, 22_006_178, 5_521_141] bytes; then 277 rounds and
    // [16_889_960, 21_896_413, 5_411_944] before GeLU by `gelu_chebyshev`, then
    // [16_546_034, 21_552_531, 5_068_036] before the 320-bit B2A, then
    // [16_417_778, 21_424_219, 4_939_604] before the 64 + 4d truncation and 256-bit B2A;
    // 275 rounds and [15_924_912, 20_933_555, 4_447_022] before the normalisations compared
    // in three rounds by `lt_thresholds`; 233 rounds and [15_960_025, 20_968_956,
    // 4_486_803] before the product by V moved beside the softmax's reciprocal; 229 and
    // [15_968_869, 20_977_750, 4_495_645] before the row maxima compared cut keys in three
    // rounds; 223 and [15_929_223, 20_938_184, 4_456_015] before rsqrt and the reciprocal
    // became negative powers by segments: 3 rounds fewer per normalisation, at about
    // 1 MB per party more on these rows of 17 tokens; 195 and [16_963_753, 21_971_188,
    // 5_494_099] before the GeLU's join moved to Z_2^33 with a lift: a round more per
    // layer, 279 bits less per GeLU element; [16_823_895, 21_831_330, 5_354_241] before
    // negExp's cut-off compared x cut to 4 fractional bits, 196 bits less per entry;
    // [16_779_626, 21_787_131, 5_310_042] before negExp's polynomial ran at 25 fractional
    // bits instead of 30, 180 bits less per entry; [16_738_976, 21_746_523, 5_269_420]
    // before the softmax summed its exponentials at f + 4 bits, which costs the reciprocal
    // and the product by V a few bits more; 197 rounds before the model was shared in
    // chunks of 2^20 words instead of 2^22: one round more for this model's 2.1 M;
    // [16_744_440, 21_751_815, 5_274_856] before the LayerNorms summed their squares by
    // limbs, two words per row instead of a truncated square per element;
    // [16_602_910, 21_610_285, 5_133_326] before the softmax's maxima compared keys cut to
    // 4 fractional bits instead of 8; [16_503_130, 21_510_505, 5_033_546] before GeLU
    // made its powers in Z_2^61, summed its final products in Z_2^43 and lifted its result
    // into the MLP's Z_2^56, the output projection summing there; [16_455_514, 21_462_887,
    // 4_985_932] before negExp made its minimax chain in Z_2^53; [16_418_354, 21_425_715,
    // 4_948_746] before the intermediate projection was truncated into the GeLU's Z_2^46;
    // [16_391_276, 21_398_637, 4_921_668] before the scores were truncated into the
    // softmax's Z_2^49; [16_375_134, 21_382_515, 4_905_546] before negExp cut its last
    // square and joined in Z_2^31 with a truncating lift; 198 rounds and [16_320_201,
    // 21_327_566, 4_850_597] before the intermediate projection was cut locally into
    // Z_2^46, in one round; [16_302_155, 21_309_516, 4_832_547] before the client dealt
    // its rows as point-function keys; [4_877_771, 21_309_516, 4_832_547] before the
    // comparisons drew their OT pads as the generate bits' components, GeLU's and negExp's
    // took the two-round first layer and GeLU's breakpoints shared y's input; [4_797_018,
    // 21_228_869, 4_751_880] before GeLU compared in Z_2^17 and joined in Z_2^32;
    // [4_753_890, 21_185_733, 4_708_744] before the queries and keys were truncated into
    // the scores' Z_2^50; 196 rounds and [4_724_846, 21_156_669, 4_679_684] before the
    // softmax truncated its valid scores itself and cut its maxima's keys from their
    // products, a round earlier; [4_739_164, 21_170_989, 4_694_004] before GeLU's T_2
    // was made in Z_2^44, without strings).
    assert_eq!(rounds, 194);
    assert_eq!(bytes, [4_713_590, 21_145_413, 4_668_428]);
}

#[test]
fn tiny_random_bert_classification_makes_first_tokens_only_in_the_last_layer() {
    // Only the pooler reads the last layer, so its queries, attention output, MLP and
    // norms run on each sequence's first token only (4 rows of the 47): the same bounds
    // as the whole run above. Rounds 11 fewer than it, which also makes the mean-pooled
    // embeddings; [4_693_582, 21_099_762, 4_648_800] bytes while the last layer made
    // every row.
    let model = PlainBert::load(&model_dir("bert-tiny-random")).unwrap();
    let r = Reference::load("bert-tiny-random");
    let batch = r.batch("batch");
    let heads_only = Outputs {
        hidden: false,
        pooled: true,
        logits: true,
        embeddings: false,
    };
    let (out, rounds, bytes) = secure_run(&model, &batch, heads_only);
    assert!(out.hidden.is_none() && out.embeddings.is_none());
    let pooled = to_matrix(out.pooled.as_ref().unwrap(), 64);
    let logits = to_matrix(out.logits.as_ref().unwrap(), 2);
    let dp = max_diff_rows(&pooled, &r.matrix("batch.pooler_output"), None);
    let dl = max_diff_rows(&logits, &r.matrix("batch.logits"), None);
    eprintln!(
        "tiny secure batch 4x17, heads only: pooler {dp:.2e} logits {dl:.2e}; {rounds} rounds, bytes {bytes:?}"
    );
    assert!(dp <= 5e-3, "pooler {dp}");
    assert!(dl <= 5e-4, "logits {dl}");
    assert_eq!(rounds, 183);
    assert_eq!(bytes, [2_859_666, 19_262_668, 2_809_654]);
}

#[test]
fn minilm_secure_embeddings_match_reference() {
    let Some(dir) = minilm_dir() else { return };
    let model = PlainBert::load(&dir).unwrap();
    let r = Reference::load("minilm-l6");
    // All 24 sentences in one padded batch (the reference's own padded batch).
    let batch = r.batch("batch");
    assert_eq!((batch.batch, batch.seq_len), (24, 20));
    let outputs = Outputs {
        embeddings: true,
        ..Outputs::default()
    };
    let start = std::time::Instant::now();
    let (out, rounds, bytes) = secure_run(&model, &batch, outputs);
    let emb = to_matrix(out.embeddings.as_ref().unwrap(), 384);
    let reference = r.matrix("embeddings");
    let mut worst_cos: f64 = 1.0;
    for (a, b) in emb.rows().into_iter().zip(reference.rows()) {
        let cos = a.dot(&b) / (a.dot(&a).sqrt() * b.dot(&b).sqrt());
        worst_cos = worst_cos.min(cos);
    }
    let de = max_diff_rows(&emb, &reference, None);
    let cos = cosine_matrix(emb.view());
    let ref_cos = r.matrix("cosine");
    let dc = max_diff_rows(&cos, &ref_cos, None);
    // Ranking of all 276 sentence pairs by similarity. The reference itself has 4 adjacent
    // pairs closer than 1e-5 and 25 closer than 1e-4, while 18 fractional bits alone cost
    // 1.6e-5 on this matrix (the fixtures' fixed-point floor): pairs of pairs that close
    // are ties at this precision. Every pair of pairs further apart than 2e-4 — twice the
    // bound asserted on the matrix below — must keep its order; the others are counted.
    let bad = discordant(&cos, &ref_cos);
    let worst_gap = bad.iter().map(|b| b.2).fold(0.0, f64::max);
    let identical = pair_ranking(&cos) == pair_ranking(&ref_cos);
    eprintln!(
        "minilm secure 24x20 in {:.1?}: min cosine to reference {worst_cos:.7}, max |emb diff| {de:.2e}, max |cosine matrix diff| {dc:.2e}; ranking identical: {identical}, {} discordant pairs of pairs (37,950 in all), largest reference gap among them {worst_gap:.2e}; {rounds} rounds, bytes {bytes:?}",
        start.elapsed(),
        bad.len(),
    );
    assert!(worst_cos >= 0.9999, "cosine {worst_cos}");
    assert!(dc <= 1e-4, "cosine matrix {dc}");
    assert!(worst_gap < 2e-4, "ranking flipped a gap of {worst_gap}");
    // The model (22.7 M parameters) is shared streamed in 6 chunks of 2^22 words: 5 rounds
    // more than one record, in exchange for bounded message buffers. Inference bytes fell
    // with the fused attention truncation over the real rows only (were [793_047_259,
    // 893_987_658, 712_208_891] with 636 rounds); GeLU by `gelu_chebyshev` took a round
    // per layer and 686 bits per element off (were 641 rounds and [783_169_441,
    // 884_109_840, 702_331_073]); the 320-bit B2A took 18.9 MB per party off (were
    // [695_976_097, 796_916_496, 615_137_729]); the 64 + 4d truncation and the 256-bit
    // B2A took 58.4 MB per party off (were [677_026_745, 777_967_040, 596_188_273]); the
    // normalisations' three-round comparisons (`lt_thresholds`) took 94 rounds off for
    // 2.0 MB more per party (were 635 rounds and [618_584_331, 719_528_448, 537_749_629]);
    // the product by V beside the softmax's reciprocal took 12 rounds off for 5.0 MB more
    // per party (short sentences: 20 × 20 weights against 20 × 32 outputs per head; were
    // 541 rounds and [620_586_481, 721_513_087, 539_751_675]); the row maxima compared on
    // keys cut to 8 fractional bits in three rounds took 18 rounds and 2.9 MB per party off
    // (were 529 and [625_554_529, 726_481_135, 544_719_723]); rsqrt and the reciprocal as
    // negative powers by segments took 60 rounds off for 23.4 MB more per party (were 511
    // and [622_701_529, 723_628_135, 541_866_723]); the GeLU's join in Z_2^33 with a lift
    // took 35.5 MB per party off for 6 rounds more (were 451 and [646_143_059,
    // 747_059_629, 565_303_794]); negExp's cut-off on x cut to 4 fractional bits took
    // 2.9 MB per party off (were [610_681_043, 711_597_613, 529_841_778]); the row maxima
    // of this bulk call (5760 rows of up to 20 per layer, over the budget of 2^16
    // comparisons) halve their all-pairs groups down to 8 and negExp's polynomial runs at
    // 25 fractional bits: 10.2 MB per party off for 4 rounds more per layer (were 457 and
    // [607_825_127, 708_741_697, 526_985_862]); the softmax's exponentials summed at f + 4
    // bits and the keys selected in their narrow ring over the tournament levels, then
    // lifted for the last: 0.6 MB per party more on these short rows (were
    // [597_635_213, 698_551_783, 516_795_948]); 481 rounds before the model was shared
    // in chunks of 2^20 words instead of 2^22 (22 chunks of its 22.7 M parameters, not 6);
    // the LayerNorms' sums of squares by limbs, two words per row instead of a truncated
    // square per element: 15.9 MB per party off (were [598_250_699, 699_167_269,
    // 517_411_434]); the row maxima's keys cut to 4 fractional bits instead of 8: 5.9 MB
    // per party off (were [582_348_644, 683_265_201, 501_509_366]); GeLU's powers in
    // Z_2^61, its final sum in Z_2^43 and its result lifted into the MLP's Z_2^56 only, the
    // output projection summed there: 12.6 MB per party off (were [576_494_420,
    // 677_410_977, 495_655_142]); negExp's minimax chain in Z_2^53: 2.4 MB per party off
    // (were [563_911_124, 664_827_681, 483_071_846]); the intermediate projection
    // truncated into the GeLU's Z_2^46 only: 6.9 MB per party off (were [561_507_044,
    // 662_423_601, 480_667_766]); the scores truncated into the softmax's Z_2^49: 1.1 MB
    // per party off (were [554_643_428, 655_559_985, 473_804_150]); negExp's last square
    // cut and its join in Z_2^31, lifted with a truncation: 3.5 MB per party off (were
    // [553_550_648, 654_467_205, 472_711_370]); the intermediate projection cut locally
    // into Z_2^46 in one round: 4.6 MB per party off and 6 rounds (were 497 and
    // [550_024_502, 650_941_059, 469_185_224]); the client's rows dealt as point-function
    // keys: 80.5 MB off at the client (were [545_448_758, 646_365_315, 464_609_480]); the
    // comparisons' OT pads drawn as the generate bits' components, GeLU's and negExp's
    // two-round first layer and GeLU's breakpoints sharing y's input: 16.7 MB per party
    // off, rounds unchanged (were [464_991_926, 646_365_315, 464_609_480]); GeLU compared
    // in Z_2^17 with both two-round forms and joined in Z_2^32: 10.9 MB per party off (were
    // [448_246_694, 629_620_083, 447_864_248]); the queries and keys truncated into the
    // scores' Z_2^50: 4.0 MB per party off (were [437_315_750, 618_689_139, 436_933_304]);
    // the softmax's maxima comparing keys cut from the scores' products, a round earlier:
    // 6 rounds off, 1.1 MB per party more, the keys' reshare (57 bits per score) against
    // the scores' truncation from the narrower Z_2^51 (2 bits fewer) (were 491 and
    // [433_275_098, 614_648_487, 432_892_652]); GeLU's T_2 made in Z_2^44, where its
    // truncation sends no strings: 6.5 MB per party off (were [434_394_254, 615_767_643,
    // 434_011_808]).
    assert_eq!(rounds, 485);
    assert_eq!(bytes, [427_911_950, 609_285_339, 427_529_504]);
    // The paraphrase pairs are the 8 most similar, in the reference's order.
    assert_eq!(pair_ranking(&cos)[..8], pair_ranking(&ref_cos)[..8]);
    // The sentences' tags and the batch rows are the same inputs.
    for (i, tag) in minilm_tags().iter().enumerate() {
        let single = r.batch(tag);
        let row = &batch.input_ids[i * 20..i * 20 + single.seq_len];
        assert_eq!(row, &single.input_ids[..]);
    }
}
