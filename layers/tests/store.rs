//! Share stores: the Shakespeare GPT-2 and the tiny BERT shared among three simulated
//! parties, each party's shares saved to its store and read back; the model rebuilt from
//! the stores computes bit for bit what the directly shared one computes, within the
//! fixtures' bounds of the plaintext model. Stores of another party, model, architecture
//! or fixed-point format, corrupt, truncated, foreign or too open files are refused with
//! the variant that names the culprit.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use puma_core::{FixedPoint, PartyId, Shares, sim::Sim};
use puma_layers::bert::secure::{
    BatchShape, BertHeads, Outputs, SharedBert, encoded_tensors, plan as bert_plan, run,
};
use puma_layers::bert::{BertConfig, PlainBert};
use puma_layers::gpt2::plain::PlainGpt2;
use puma_layers::nn::{
    DecoderArch, PlanError, SecureSettings, SharedDecoder, SharedTensors, TensorPlan,
    forward_logits,
};
use puma_layers::store::{
    self, ComponentSeeds, Expect, ModelHash, ModelHasher, Section, StoreError, StoreHeader,
};
use puma_layers::{Gpt2Config, load_gpt2};

use crate::common::{Reference, model_dir};

const CLIENT: PartyId = PartyId::P0;
const OWNER: PartyId = PartyId::P1;
/// The fixture README's secure bound for the Shakespeare GPT-2's logits.
const GPT2_LOGIT_BOUND: f64 = 2e-2;

/// No component kept as a seed: shares the parties made among themselves.
fn none() -> ComponentSeeds {
    ComponentSeeds::none()
}

fn store_path(dir: &Path, me: PartyId) -> PathBuf {
    dir.join(format!("{me}.store"))
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The owner's hash of a decoder: its config text and every encoded tensor in plan order.
fn decoder_hash<A: DecoderArch>(arch: &A, weights: &A::Weights, config_json: &str) -> ModelHash {
    let mut h = ModelHasher::new(config_json);
    for (t, _) in arch.spec().unwrap().tensors().unwrap() {
        h.tensor(
            &t.name(),
            &arch.encode(weights, t, FixedPoint::default()).unwrap(),
        );
    }
    h.finish().unwrap()
}

#[test]
fn shakespeare_gpt2_from_three_stores_computes_what_the_shared_model_computes() {
    let dir = model_dir("gpt2-shakespeare");
    let config_json = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let (cfg, w) = load_gpt2(&dir).unwrap();
    let hash = decoder_hash(&cfg, &w, &config_json);
    let ids = Reference::load("gpt2-shakespeare").ids("p1.input_ids");
    let len = ids.len();
    let tmp = tempfile::tempdir().unwrap();
    let stores = tmp.path().to_path_buf();
    let (cfg, w, ids) = (Arc::new(cfg), Arc::new(w), Arc::new(ids));
    let settings = SecureSettings::default();

    // Shared by the owner, saved by every party, then one forward pass.
    let (c, wa, i, s, text) = (
        cfg.clone(),
        w.clone(),
        ids.clone(),
        stores.clone(),
        config_json.clone(),
    );
    let direct = Sim::new(3).run(move |me| {
        let (cfg, w, ids, stores, text) =
            (c.clone(), wa.clone(), i.clone(), s.clone(), text.clone());
        move |mut ctx| async move {
            // The sharing runs on a fork, so that the forward pass below draws the same
            // randomness as the one from the stores.
            let model =
                SharedDecoder::share(&mut ctx.fork(), OWNER, &*cfg, (me == OWNER).then_some(&*w))
                    .await?;
            let header = StoreHeader {
                party: me,
                frac_bits: ctx.fixed().frac_bits(),
                arch: "gpt2".into(),
                config_json: text,
                model_hash: hash,
            };
            store::write(
                &store_path(&stores, me),
                &header,
                &model.tensors()?,
                &none(),
            )
            .unwrap();
            let prompt = (me == CLIENT).then_some(&ids[..]);
            forward_logits(&mut ctx, &model, CLIENT, prompt, len, &settings).await
        }
    });
    let direct = direct.into_results().unwrap()[0].clone().unwrap();

    for me in PartyId::ALL {
        let path = store_path(&stores, me);
        assert_eq!(mode(&path), 0o600, "{}", path.display());
        let (header, table) = store::read_header(&path).unwrap();
        assert_eq!((header.party, header.model_hash), (me, hash));
        assert_eq!(
            table,
            cfg.spec().unwrap().plan().unwrap(),
            "the table lists the plan"
        );
    }
    // No temporary file is left beside the stores.
    assert_eq!(std::fs::read_dir(&stores).unwrap().count(), 3);

    // Every party restores its model from its store alone (the owner's weights unused).
    let (i, s) = (ids.clone(), stores.clone());
    let restored = Sim::new(3).run(move |me| {
        let (ids, stores) = (i.clone(), s.clone());
        move |mut ctx| async move {
            let _ = ctx.fork();
            let expect = Expect::party(me, ctx.fixed()).model(hash).arch("gpt2");
            let (header, tensors) = store::read(&store_path(&stores, me), &expect).unwrap();
            let cfg = Gpt2Config::from_json_str(&header.config_json).unwrap();
            let model = SharedDecoder::from_tensors(cfg.spec()?, tensors)?;
            let prompt = (me == CLIENT).then_some(&ids[..]);
            forward_logits(&mut ctx, &model, CLIENT, prompt, len, &settings).await
        }
    });
    let restored = restored.into_results().unwrap()[0].clone().unwrap();
    assert_eq!(restored.len(), len * cfg.vocab_size);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(
        bits(&restored) == bits(&direct),
        "the restored model's logits differ from the shared model's"
    );

    let plain = PlainGpt2::new((*cfg).clone(), w.clone())
        .unwrap()
        .forward(&ids)
        .unwrap();
    let err = restored
        .iter()
        .zip(plain.iter())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    println!("Shakespeare GPT-2 from its stores: {len} positions, max |logit err| {err:.2e}");
    assert!(err <= GPT2_LOGIT_BOUND, "logits off by {err}");

    // The stores are refused by the wrong party, or for another model, before any share
    // is read.
    let fx = FixedPoint::default();
    match store::read(
        &store_path(&stores, PartyId::P1),
        &Expect::party(PartyId::P0, fx),
    ) {
        Err(StoreError::Party {
            found: PartyId::P1,
            expected: PartyId::P0,
            ..
        }) => {}
        other => panic!("read as another party: {:?}", other.map(|_| ())),
    }
    let other = ModelHash([7; 32]);
    match store::read(
        &store_path(&stores, PartyId::P2),
        &Expect::party(PartyId::P2, fx).model(other),
    ) {
        Err(
            e @ StoreError::Model {
                found, expected, ..
            },
        ) => {
            assert_eq!((found, expected), (hash, other));
            let text = e.to_string();
            assert!(
                text.contains(&hash.short()) && text.contains("0707070707070707"),
                "{text}"
            );
        }
        other => panic!("read for another model: {:?}", other.map(|_| ())),
    }
}

/// The bert-tiny-random model's config text for a store: its `config.json` and its heads.
fn bert_config_text(dir: &Path, heads: BertHeads) -> String {
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    serde_json::json!({ "config": config, "heads": heads }).to_string()
}

#[test]
fn tiny_bert_round_trips_through_its_stores() {
    let dir = model_dir("bert-tiny-random");
    let model = PlainBert::load(&dir).unwrap();
    let heads = BertHeads::of(model.weights());
    let text = bert_config_text(&dir, heads);
    let fx = FixedPoint::default();
    let mut hasher = ModelHasher::new(&text);
    let plan = bert_plan(model.config(), heads);
    let encoded = encoded_tensors(model.config(), model.weights(), fx).unwrap();
    for ((name, _), words) in plan.tensors().iter().zip(encoded) {
        hasher.tensor(name, &words.unwrap());
    }
    let hash = hasher.finish().unwrap();
    let batch = crate::bert_common::Reference::load("bert-tiny-random").batch("batch");
    let shape = BatchShape::of(&batch);
    let outputs = Outputs {
        logits: true,
        embeddings: true,
        ..Outputs::default()
    };
    let tmp = tempfile::tempdir().unwrap();
    let stores = tmp.path().to_path_buf();
    let (cfg, w, b) = (
        model.config().clone(),
        Arc::new(model.weights().clone()),
        Arc::new(batch.clone()),
    );
    let settings = SecureSettings::default();

    let (c, sh, bb, s, t) = (
        cfg.clone(),
        shape.clone(),
        b.clone(),
        stores.clone(),
        text.clone(),
    );
    let direct = Sim::new(9).run(move |me| {
        let (cfg, shape, batch, stores, text, w) = (
            c.clone(),
            sh.clone(),
            bb.clone(),
            s.clone(),
            t.clone(),
            w.clone(),
        );
        move |mut ctx| async move {
            let shared = SharedBert::share(
                &mut ctx.fork(),
                OWNER,
                &cfg,
                heads,
                (me == OWNER).then_some(&*w),
            )
            .await?;
            let header = StoreHeader {
                party: me,
                frac_bits: ctx.fixed().frac_bits(),
                arch: "bert".into(),
                config_json: text,
                model_hash: hash,
            };
            store::write(
                &store_path(&stores, me),
                &header,
                &shared.tensors()?,
                &none(),
            )
            .unwrap();
            let batch = (me == CLIENT).then_some(&*batch);
            run(&mut ctx, &shared, CLIENT, batch, &shape, outputs, &settings).await
        }
    });
    let direct = direct.into_results().unwrap()[0].clone();

    let (sh, bb, s) = (shape.clone(), b.clone(), stores.clone());
    let restored = Sim::new(9).run(move |me| {
        let (shape, batch, stores) = (sh.clone(), bb.clone(), s.clone());
        move |mut ctx| async move {
            let _ = ctx.fork();
            let expect = Expect::party(me, ctx.fixed()).model(hash).arch("bert");
            let (header, tensors) = store::read(&store_path(&stores, me), &expect).unwrap();
            let v: serde_json::Value = serde_json::from_str(&header.config_json).unwrap();
            let cfg = BertConfig::from_json_str(&v["config"].to_string()).unwrap();
            let heads: BertHeads = serde_json::from_value(v["heads"].clone()).unwrap();
            let shared = SharedBert::from_tensors(cfg, heads, tensors)?;
            let batch = (me == CLIENT).then_some(&*batch);
            run(&mut ctx, &shared, CLIENT, batch, &shape, outputs, &settings).await
        }
    });
    let restored = restored.into_results().unwrap()[0].clone();
    let bits = |v: &Option<Vec<f64>>| {
        v.as_ref()
            .unwrap()
            .iter()
            .map(|x| x.to_bits())
            .collect::<Vec<_>>()
    };
    assert!(bits(&restored.logits) == bits(&direct.logits));
    assert!(bits(&restored.embeddings) == bits(&direct.embeddings));

    let plain = model.forward(&batch).unwrap();
    let err = restored
        .logits
        .as_ref()
        .unwrap()
        .iter()
        .zip(plain.logits.as_ref().unwrap().iter())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);
    println!("tiny BERT from its stores: max |logit err| {err:.2e}");
    // bert_secure's bound for this model's logits.
    assert!(err <= 5e-4, "logits off by {err}");
}

/// A small store of party P0: tensors `a` (1,000 words) and `b` (3,000 words).
fn small_store(dir: &Path) -> (PathBuf, StoreHeader, [Shares; 2]) {
    let words = |n: u64, k: u64| {
        (0..n)
            .map(|i| i.wrapping_mul(k) ^ 0x5555)
            .collect::<Vec<_>>()
    };
    let a = Shares::from_components(PartyId::P0, words(1000, 3), words(1000, 5)).unwrap();
    let b = Shares::from_components(PartyId::P0, words(3000, 7), words(3000, 11)).unwrap();
    let header = StoreHeader {
        party: PartyId::P0,
        frac_bits: 18,
        arch: "test".into(),
        config_json: r#"{"n": 2}"#.into(),
        model_hash: ModelHash([1; 32]),
    };
    let path = dir.join("small.store");
    store::write(
        &path,
        &header,
        &[("a".into(), &a), ("b".into(), &b)],
        &none(),
    )
    .unwrap();
    (path, header, [a, b])
}

fn small_plan() -> TensorPlan {
    let mut plan = TensorPlan::new();
    plan.push("a", 1000);
    plan.push("b", 3000);
    plan
}

/// Applies `edit` to a copy of the store's bytes, written to a new file of mode 0600.
fn edited(path: &Path, name: &str, edit: impl FnOnce(&mut Vec<u8>)) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let mut bytes = std::fs::read(path).unwrap();
    edit(&mut bytes);
    let out = path.with_file_name(name);
    std::fs::write(&out, &bytes).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o600)).unwrap();
    out
}

fn refusal(path: &Path, expect: &Expect) -> StoreError {
    match store::read(path, expect) {
        Err(e) => e,
        Ok(_) => panic!("{} was accepted", path.display()),
    }
}

#[test]
fn a_store_reads_back_what_was_written() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, header, [a, b]) = small_store(tmp.path());
    assert_eq!(mode(&path), 0o600);
    let expect = Expect::party(PartyId::P0, FixedPoint::default())
        .model(header.model_hash)
        .arch("test");
    let (got, mut tensors) = store::read(&path, &expect).unwrap();
    assert_eq!(got, header);
    tensors.check(&small_plan()).unwrap();
    let (ta, tb) = (tensors.take("a").unwrap(), tensors.take("b").unwrap());
    assert_eq!(ta.components(), a.components());
    assert_eq!(tb.components(), b.components());
    // 12 + header (1 + 4 + 2+4 + 4+8 + 32 + flags 1 + 4) + table (2×(2+1+8)) + digest
    // 32, then the components and a digest per tensor.
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(len, 12 + 60 + 22 + 32 + (16_000 + 32) + (48_000 + 32));
    // Writing again replaces the store whole.
    let (a2, b2) = (a.neg(), b.neg());
    store::write(
        &path,
        &header,
        &[("a".into(), &a2), ("b".into(), &b2)],
        &none(),
    )
    .unwrap();
    let (_, mut tensors) = store::read(&path, &expect).unwrap();
    assert_eq!(tensors.take("a").unwrap().components(), a2.components());
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
}

#[test]
fn stores_that_do_not_fit_are_refused_naming_the_culprit() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, header, _) = small_store(tmp.path());
    let fx = FixedPoint::default();
    let ok = Expect::party(PartyId::P0, fx);
    let len = std::fs::read(&path).unwrap().len();

    match refusal(&path, &Expect::party(PartyId::P2, fx)) {
        StoreError::Party {
            found, expected, ..
        } => {
            assert_eq!((found, expected), (PartyId::P0, PartyId::P2));
        }
        e => panic!("another party: {e}"),
    }
    match refusal(&path, &ok.clone().model(ModelHash([2; 32]))) {
        StoreError::Model { found, .. } => assert_eq!(found, header.model_hash),
        e => panic!("another model: {e}"),
    }
    match refusal(&path, &ok.clone().arch("llama")) {
        StoreError::Arch {
            found, expected, ..
        } => {
            assert_eq!((found.as_str(), expected.as_str()), ("test", "llama"));
        }
        e => panic!("another architecture: {e}"),
    }
    match refusal(
        &path,
        &Expect::party(PartyId::P0, FixedPoint::new(16).unwrap()),
    ) {
        StoreError::FixedPoint {
            found, expected, ..
        } => assert_eq!((found, expected), (18, 16)),
        e => panic!("another format: {e}"),
    }

    // A flipped byte in the middle of the file lies in tensor b's components.
    let flipped = edited(&path, "flipped.store", |b| b[len / 2] ^= 1);
    match refusal(&flipped, &ok) {
        StoreError::Corrupt { section, .. } => assert_eq!(section, Section::Tensor("b".into())),
        e => panic!("flipped data: {e}"),
    }
    // In tensor a's digest (the chain names the first section that disagrees).
    let digest_a = 12 + 60 + 22 + 32 + 16_000;
    let flipped = edited(&path, "digest.store", |b| b[digest_a] ^= 0x80);
    match refusal(&flipped, &ok) {
        StoreError::Corrupt { section, .. } => assert_eq!(section, Section::Tensor("a".into())),
        e => panic!("flipped digest: {e}"),
    }
    // In the config text: the header's digest, before any field is believed.
    let flipped = edited(&path, "header.store", |b| b[12 + 15] ^= 1);
    match refusal(&flipped, &ok) {
        StoreError::Corrupt { section, .. } => assert_eq!(section, Section::Header),
        e => panic!("flipped header: {e}"),
    }
    // In the party byte: refused as corrupt, not as another party's store.
    let flipped = edited(&path, "party.store", |b| b[12] = 1);
    match refusal(&flipped, &ok) {
        StoreError::Corrupt { section, .. } => assert_eq!(section, Section::Header),
        e => panic!("flipped party: {e}"),
    }

    let cut = edited(&path, "cut.store", |b| b.truncate(len - 100));
    match refusal(&cut, &ok) {
        StoreError::Truncated {
            found, expected, ..
        } => assert_eq!((found, expected), (len as u64 - 100, Some(len as u64))),
        e => panic!("truncated: {e}"),
    }
    let cut = edited(&path, "cut-header.store", |b| b.truncate(40));
    match refusal(&cut, &ok) {
        StoreError::Truncated {
            found, expected, ..
        } => assert_eq!((found, expected), (40, None)),
        e => panic!("truncated header: {e}"),
    }
    let long = edited(&path, "long.store", |b| b.push(0));
    assert!(matches!(refusal(&long, &ok), StoreError::Malformed { .. }));

    let magic = edited(&path, "magic.store", |b| b[0] = b'X');
    assert!(matches!(refusal(&magic, &ok), StoreError::NotAStore { .. }));
    let empty = edited(&path, "empty.store", Vec::clear);
    assert!(matches!(refusal(&empty, &ok), StoreError::NotAStore { .. }));
    let version = edited(&path, "version.store", |b| b[8] = 3);
    match refusal(&version, &ok) {
        StoreError::Version {
            found, supported, ..
        } => assert_eq!((found, supported), (3, 2)),
        e => panic!("version: {e}"),
    }

    // A table claiming more parameters than the limit is refused before any allocation.
    let huge = edited(&path, "huge.store", |b| {
        let at = 12 + 60 + 3;
        b[at..at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    });
    match refusal(&huge, &ok) {
        StoreError::Limit { source, .. } => assert_eq!(source.field, "parameters"),
        e => panic!("huge: {e}"),
    }

    let missing = tmp.path().join("none.store");
    match refusal(&missing, &ok) {
        e @ StoreError::Io { .. } => assert!(e.to_string().contains("none.store"), "{e}"),
        e => panic!("missing: {e}"),
    }
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    }
    match refusal(&path, &ok) {
        StoreError::Permissions { mode, .. } => assert_eq!(mode, 0o640),
        e => panic!("open file: {e}"),
    }
}

#[test]
fn writing_refuses_tensors_that_do_not_form_a_store() {
    let tmp = tempfile::tempdir().unwrap();
    let (path, header, [a, b]) = small_store(tmp.path());
    let other = Shares::from_components(PartyId::P1, vec![1; 3], vec![2; 3]).unwrap();
    let out = tmp.path().join("bad.store");
    assert!(matches!(
        store::write(
            &out,
            &header,
            &[("a".into(), &a), ("o".into(), &other)],
            &none()
        ),
        Err(StoreError::Malformed { .. })
    ));
    match store::write(
        &out,
        &header,
        &[("a".into(), &a), ("a".into(), &b)],
        &none(),
    ) {
        Err(StoreError::Table {
            source: PlanError::Duplicate { name },
            ..
        }) => assert_eq!(name, "a"),
        other => panic!("duplicate: {other:?}"),
    }
    let long = StoreHeader {
        arch: "x".repeat(65),
        ..header
    };
    assert!(matches!(
        store::write(&out, &long, &[("a".into(), &a)], &none()),
        Err(StoreError::Limit { .. })
    ));
    // Nothing was left behind, and the good store is untouched.
    let names: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [path.file_name().unwrap()]);
}

#[test]
fn a_bag_of_shares_is_checked_against_the_plan() {
    let s = |n: usize| Shares::from_components(PartyId::P2, vec![0; n], vec![0; n]).unwrap();
    let plan = small_plan();
    let bag = |items: Vec<(&str, Shares)>| {
        SharedTensors::from_named(&plan, items.into_iter().map(|(n, s)| (n.to_string(), s)))
    };
    assert!(bag(vec![("a", s(1000)), ("b", s(3000))]).is_ok());
    assert_eq!(
        bag(vec![("a", s(1000))]).unwrap_err(),
        PlanError::Missing { name: "b".into() }
    );
    assert_eq!(
        bag(vec![("a", s(1000)), ("b", s(3000)), ("c", s(1))]).unwrap_err(),
        PlanError::Unexpected { name: "c".into() }
    );
    assert_eq!(
        bag(vec![("a", s(1000)), ("b", s(2999))]).unwrap_err(),
        PlanError::Length {
            name: "b".into(),
            expected: 3000,
            found: 2999
        }
    );
    assert_eq!(
        bag(vec![("a", s(1000)), ("a", s(1000))]).unwrap_err(),
        PlanError::Duplicate { name: "a".into() }
    );
    let p1 = Shares::from_components(PartyId::P1, vec![0; 3000], vec![0; 3000]).unwrap();
    assert_eq!(
        bag(vec![("a", s(1000)), ("b", p1)]).unwrap_err(),
        PlanError::Party {
            name: "b".into(),
            expected: PartyId::P2,
            found: PartyId::P1
        }
    );
    // A model refuses a bag that is not its plan's.
    let tiny = BertConfig::from_json_str(
        &std::fs::read_to_string(model_dir("bert-tiny-random").join("config.json")).unwrap(),
    )
    .unwrap();
    let heads = BertHeads {
        pooler: false,
        labels: 0,
    };
    let wrong = bag(vec![("a", s(1000)), ("b", s(3000))]).unwrap();
    assert!(SharedBert::from_tensors(tiny, heads, wrong).is_err());
}

/// P0's store `fuzz/seeds/share_store/NAME`, read from a private copy.
fn read_fuzz_seed(name: &str) -> (StoreHeader, SharedTensors) {
    use std::os::unix::fs::PermissionsExt;
    let seed = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds/share_store")
        .join(name);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join(name);
    std::fs::copy(&seed, &path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    store::read(&path, &Expect::party(PartyId::P0, FixedPoint::default())).unwrap()
}

#[test]
fn a_store_written_from_the_format_description_alone_is_read() {
    // fuzz/seeds/share_store/two_tensors (format version 1, which is still read) was
    // written by a short Python script from the format table of `puma_layers::store`
    // (tensor i's words: (100·i + k)·0x9e3779b97f4a7c15).
    let (header, mut tensors) = read_fuzz_seed("two_tensors");
    let hash: [u8; 32] = std::array::from_fn(|i| i as u8);
    assert_eq!(
        header,
        StoreHeader {
            party: PartyId::P0,
            frac_bits: 18,
            arch: "gpt2".into(),
            config_json: r#"{"n_layer": 1}"#.into(),
            model_hash: ModelHash(hash),
        }
    );
    for (i, (name, len)) in [("embed", 6u64), ("final_norm.weight", 3)]
        .into_iter()
        .enumerate()
    {
        let s = tensors.take(name).unwrap();
        let word = |k: u64| (100 * i as u64 + k).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let (a, b) = s.components();
        assert_eq!(a, (0..len).map(word).collect::<Vec<_>>(), "{name}");
        assert_eq!(b, (len..2 * len).map(word).collect::<Vec<_>>(), "{name}");
    }
}

#[test]
fn dealt_components_are_kept_as_their_seeds() {
    use puma_core::dealing::{self, Span};
    use puma_layers::upload::{DealtTensor, common_seeds};

    let seeds = [[7u8; 32], [9u8; 32]];
    let values: Vec<(&str, Vec<u64>)> = vec![
        ("a", (0..1000u64).map(|i| i * 31).collect()),
        ("b", (0..3000u64).map(|i| i ^ 0xabc).collect()),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let mut stored: Vec<Vec<Shares>> = Vec::new();
    // Words each party's file holds per element: P0 none, P1 and P2 the correction.
    for (me, words_per_element, seeded) in [
        (PartyId::P0, 0u64, [true, true]),
        (PartyId::P1, 8, [true, false]),
        (PartyId::P2, 8, [false, true]),
    ] {
        let tensors: Vec<DealtTensor> = (0u64..)
            .zip(&values)
            .map(|(stream, (name, v))| DealtTensor {
                name: name.to_string(),
                len: v.len(),
                dealt: dealing::deal(v, &seeds, Span::whole(stream))[me as usize].clone(),
            })
            .collect();
        let kept = common_seeds(&tensors);
        assert_eq!([kept.first.is_some(), kept.second.is_some()], seeded);
        let shares: Vec<Shares> = (0u64..)
            .zip(tensors)
            .map(|(stream, t)| t.dealt.into_shares(me, t.len, Span::whole(stream)).unwrap())
            .collect();
        let named = [("a".to_string(), &shares[0]), ("b".to_string(), &shares[1])];
        let header = StoreHeader {
            party: me,
            frac_bits: 18,
            arch: "test".into(),
            config_json: r#"{"n": 2}"#.into(),
            model_hash: ModelHash([1; 32]),
        };
        let path = tmp.path().join(format!("{me}.store"));
        store::write(&path, &header, &named, &kept).unwrap();
        // The header grows by a seed per seeded component; the data holds the rest.
        let seeds_len = 32 * seeded.iter().filter(|s| **s).count() as u64;
        let len = std::fs::metadata(&path).unwrap().len();
        assert_eq!(
            len,
            12 + 60 + seeds_len + 22 + 32 + (1000 + 3000) * words_per_element + 2 * 32,
            "{me}"
        );
        let (got, mut bag) = store::read(&path, &Expect::party(me, FixedPoint::default())).unwrap();
        assert_eq!(got, header);
        let back = vec![bag.take("a").unwrap(), bag.take("b").unwrap()];
        for (b, s) in back.iter().zip(&shares) {
            assert_eq!(b.components(), s.components(), "{me}");
        }
        // A seed for the other slot, or the tensors in another order, is refused.
        let wrong = ComponentSeeds {
            first: kept.second,
            second: kept.first,
        };
        assert!(matches!(
            store::write(&tmp.path().join("wrong"), &header, &named, &wrong),
            Err(StoreError::Malformed { .. })
        ));
        if kept.first.is_some() {
            let swapped = [named[1].clone(), named[0].clone()];
            assert!(matches!(
                store::write(&tmp.path().join("wrong"), &header, &swapped, &kept),
                Err(StoreError::Malformed { .. })
            ));
        }
        // A flipped bit in a seed is caught by the header's digest.
        if seeded[0] {
            let flipped = edited(&path, "seed.store", |b| b[12 + 60] ^= 1);
            match refusal(&flipped, &Expect::party(me, FixedPoint::default())) {
                StoreError::Corrupt { section, .. } => assert_eq!(section, Section::Header),
                e => panic!("flipped seed: {e}"),
            }
        }
        stored.push(back);
    }
    // The three stores together hold the dealt values.
    for (t, (name, v)) in values.iter().enumerate() {
        let parts: [(&[u64], &[u64]); 3] = std::array::from_fn(|p| stored[p][t].components());
        assert_eq!(&dealing::reconstruct(parts).unwrap(), v, "{name}");
    }
    // Parts dealt as values, or under different seeds per tensor, keep no seed.
    let mixed: Vec<DealtTensor> = (0u64..)
        .zip(&values)
        .map(|(stream, (name, v))| DealtTensor {
            name: name.to_string(),
            len: v.len(),
            dealt: dealing::deal(v, &[[stream as u8; 32], seeds[1]], Span::whole(stream))[0]
                .clone(),
        })
        .collect();
    let kept = common_seeds(&mixed);
    assert_eq!((kept.first.is_some(), kept.second.is_some()), (false, true));
    assert_eq!(
        format!("{kept:?}"),
        "ComponentSeeds { first: false, second: true }"
    );
}

#[test]
fn a_seeded_store_written_from_the_format_description_alone_is_read() {
    // fuzz/seeds/share_store/first_seeded was written by a short Python script from the
    // format table of `puma_layers::store` (version 2): the first component seeded with
    // 32 bytes 0x11, the second in the file (tensor i's words: (100·i + k)·0x9e3779b97f4a7c15).
    let (header, mut tensors) = read_fuzz_seed("first_seeded");
    assert_eq!(header.config_json, r#"{"n_layer": 1}"#);
    for (i, (name, len)) in [("embed", 6u64), ("final_norm.weight", 3)]
        .into_iter()
        .enumerate()
    {
        let s = tensors.take(name).unwrap();
        let mut first = vec![0u64; len as usize];
        puma_core::dealing::expand_into(
            &[0x11; 32],
            puma_core::dealing::Span::whole(i as u64),
            &mut first,
        );
        let word = |k: u64| (100 * i as u64 + k).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let (a, b) = s.components();
        assert_eq!(a, first, "{name}");
        assert_eq!(b, (0..len).map(word).collect::<Vec<_>>(), "{name}");
    }
}
