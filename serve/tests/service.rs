//! Three servers on 127.0.0.1 (TCP+TLS, one connection per pair) hold the Shakespeare
//! GPT-2's shares, shared once; outside clients deal their prompts and get the reference
//! greedy ids, several requests at once; the servers learn no id. An owner deals a BERT
//! encoder the same way, and outside clients get its outputs.

use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use puma_core::dealing;
use puma_core::dealing::Component;
use puma_core::{Config, FixedPoint, PartyId};
use puma_layers::bert::plain::mean_pool_normalized;
use puma_layers::bert::secure::{Outputs, input_columns};
use puma_layers::bert::{BertBatch, PlainBert, load_bert};
use puma_layers::gpt2::weights::load_gpt2;
use puma_layers::nn::client::{OutsideTokens, deal_hot, deal_prompts};
use puma_layers::nn::{Decoding, Delivered, Delivery, OutputMode, SharedDecoder};
use puma_layers::store::{ModelHash, StoreError};
use puma_layers::upload::{
    DealtTensor, assemble_decoder, assemble_encoder, deal_decoder, deal_encoder, spec_json,
};
use puma_serve::cancel::Cancel;
use puma_serve::model::DECODER_ARCH;
use puma_serve::{EncodeRequest, GenerateRequest, ServeError, ServeOptions, Server};
use puma_transports::loopback::{LocalNet, Network};
use puma_transports::mem;
use puma_transports::mux::MuxOptions;

const SHAKESPEARE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/gpt2-shakespeare");
const REFERENCE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../layers/tests/fixtures/gpt2-shakespeare/reference.safetensors"
);
const MODEL: &str = "shakespeare";

/// A deadline no test reaches.
fn far() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(3600)
}

/// The fixture prompts and their reference greedy continuations.
fn fixture_prompts() -> Vec<(Vec<u32>, Vec<u32>)> {
    let bytes = std::fs::read(REFERENCE).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let ids = |name: &str| ints(&st, name);
    ["p1", "p2", "p3", "p4"]
        .iter()
        .map(|p| {
            (
                ids(&format!("{p}.input_ids")),
                ids(&format!("{p}.greedy_new_ids")),
            )
        })
        .collect()
}

/// An int64 tensor of a reference file, as ids.
fn ints(st: &safetensors::SafeTensors<'_>, name: &str) -> Vec<u32> {
    st.tensor(name)
        .unwrap()
        .data()
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as u32)
        .collect()
}

/// Each party's shares of the model, as its owner shares it once (here in-process).
fn share_model() -> (Vec<SharedDecoder>, usize) {
    let (cfg, w) = load_gpt2(Path::new(SHAKESPEARE)).unwrap();
    let vocab = cfg.vocab_size;
    let model = Arc::new((cfg, w));
    let shared = mem::run3(Config::new(1), 11, |me| {
        let model = model.clone();
        move |mut ctx| async move {
            let (cfg, w) = &*model;
            SharedDecoder::share(&mut ctx, PartyId::P1, cfg, (me == PartyId::P1).then_some(w)).await
        }
    })
    .into_results()
    .unwrap();
    (shared.into(), vocab)
}

/// Three servers connected to each other on 127.0.0.1, without models.
fn connect(opts: &ServeOptions) -> [Arc<Server>; 3] {
    let mut net = LocalNet::new(Network::Tcp).unwrap();
    let parties = PartyId::ALL.map(|p| net.party(p));
    let muxes: Vec<_> = thread::scope(|s| {
        let hs: Vec<_> = parties
            .into_iter()
            .map(|pn| s.spawn(move || pn.connect_mux(MuxOptions::default()).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let servers: Vec<Arc<Server>> = muxes
        .into_iter()
        .map(|mux| Arc::new(Server::new(mux, opts.clone())))
        .collect();
    servers.try_into().unwrap()
}

/// Three servers with the model shared once by its owner.
fn servers(opts: ServeOptions) -> ([Arc<Server>; 3], usize) {
    let (shared, vocab) = share_model();
    let servers = connect(&opts);
    for (s, m) in servers.iter().zip(shared) {
        s.add_model(MODEL, m).unwrap();
    }
    (servers, vocab)
}

/// One delivery as the client receives it from one server: what, and the two components.
type Delivered3 = (Delivered, Vec<u64>, Vec<u64>);

fn part(x: &Delivered3) -> (&[u64], &[u64]) {
    (&x.1, &x.2)
}

/// One client request through the three servers: what the client reconstructs.
fn request(
    servers: &[Arc<Server>; 3],
    vocab: usize,
    id: u64,
    prompts: &[Vec<u32>],
    decoding: &Decoding,
) -> Result<Vec<Vec<u32>>, ServeError> {
    request_arriving(servers, vocab, id, prompts, decoding, [Duration::ZERO; 3])
}

/// [`request`], its part reaching server `i` after `delays[i]`.
fn request_arriving(
    servers: &[Arc<Server>; 3],
    vocab: usize,
    id: u64,
    prompts: &[Vec<u32>],
    decoding: &Decoding,
    delays: [Duration; 3],
) -> Result<Vec<Vec<u32>>, ServeError> {
    let seeds = [[id as u8; 32], [(id as u8).wrapping_add(77); 32]];
    let dealt = deal_prompts(prompts, vocab, &seeds, 0).unwrap();
    let lens: Vec<usize> = prompts.iter().map(Vec::len).collect();
    let (tx, rx) = mpsc::channel::<(usize, Delivered, Vec<u64>, Vec<u64>)>();
    let results: Vec<Result<_, ServeError>> = thread::scope(|s| {
        let hs: Vec<_> = servers
            .iter()
            .zip(dealt)
            .enumerate()
            .map(|(p, (server, prompt))| {
                let tx = Mutex::new(tx.clone());
                let req = GenerateRequest {
                    session_id: id,
                    model: MODEL.into(),
                    lens: lens.clone(),
                    decoding: decoding.clone(),
                    prompt,
                };
                let delay = delays[p];
                s.spawn(move || {
                    thread::sleep(delay);
                    let deliver = Arc::new(move |d: Delivery| {
                        let (a, b) = d.shares.components();
                        let _ = tx.lock().unwrap().send((p, d.what, a.to_vec(), b.to_vec()));
                    });
                    server.generate(req, deliver, &Cancel::until(far()))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    drop(tx);
    for r in results {
        // The servers learn no id.
        assert!(r?.0.iter().all(|g| g.ids.is_empty()));
    }
    let mut by_party: [Vec<Delivered3>; 3] = Default::default();
    for (p, what, a, b) in rx {
        by_party[p].push((what, a, b));
    }
    let [d0, d1, d2] = &by_party;
    assert!(d1.len() == d0.len() && d2.len() == d0.len());
    let mut view = OutsideTokens::new(prompts.len(), decoding, vocab);
    for ((x0, x1), x2) in d0.iter().zip(d1).zip(d2) {
        let ids = dealing::reconstruct([part(x0), part(x1), part(x2)]).unwrap();
        match x0.0 {
            Delivered::StepIds { .. } => {
                view.step(&ids).unwrap();
            }
            Delivered::FinalIds => view.finish(&ids).unwrap(),
            Delivered::Encoded => panic!("a decoder delivered an encoder's outputs"),
        }
    }
    assert!(view.done());
    Ok(view.ids())
}

#[test]
fn concurrent_requests_of_outside_clients_get_the_reference_greedy_ids() {
    let (servers, vocab) = servers(ServeOptions::default());
    let fixtures = fixture_prompts();
    let tokens = 8;
    // Eight requests, four at a time: each fixture prompt in secure-argmax and private
    // mode.
    let jobs: Vec<(u64, usize, OutputMode)> = (0..8)
        .map(|k| {
            let mode = if k < 4 {
                OutputMode::SecureArgmax
            } else {
                OutputMode::Private
            };
            (1000 + k as u64, k % 4, mode)
        })
        .collect();
    for wave in jobs.chunks(4) {
        thread::scope(|s| {
            for &(id, p, mode) in wave {
                let (servers, fixtures) = (&servers, &fixtures);
                s.spawn(move || {
                    let (prompt, want) = &fixtures[p];
                    let got = request(
                        servers,
                        vocab,
                        id,
                        std::slice::from_ref(prompt),
                        &Decoding::new(tokens, mode),
                    )
                    .unwrap();
                    assert_eq!(
                        got,
                        [want[..tokens].to_vec()],
                        "request {id}: p{} {mode:?}",
                        p + 1
                    );
                });
            }
        });
    }
    for s in &servers {
        let st = s.status();
        assert_eq!((st.served, st.failed), (8, 0), "{st:?}");
        assert_eq!((st.running, st.queued), (0, 0));
        let names: Vec<&str> = st.models.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, [MODEL]);
        assert_eq!(st.models[0].vocab, 50257);
        assert!(st.rounds > 0 && st.bytes_sent > 0);
    }
}

#[test]
fn requests_reaching_the_servers_in_different_orders_all_run() {
    // One request at a time, a peer timeout shorter than a request. A reaches the leader
    // (P0) first and the other two late; B reaches the other two first and the leader
    // late. Had each server admitted on its own, the leader would run A while the others
    // ran B, each side waiting for the other until the peer timeout failed both. The
    // leader orders them: the others start both and wait for its first frame of each.
    let opts = ServeOptions {
        max_running: 1,
        max_queued: 4,
        peer_timeout: Duration::from_secs(2),
        ..ServeOptions::default()
    };
    let (servers, vocab) = servers(opts);
    let cases = fixture_prompts();
    let decoding = Decoding::new(8, OutputMode::SecureArgmax);
    let late = Duration::from_millis(600);
    let started = std::time::Instant::now();
    let (a, b) = thread::scope(|s| {
        let a = s.spawn(|| {
            let delays = [Duration::ZERO, late, late];
            request_arriving(
                &servers,
                vocab,
                61,
                &[cases[0].0.clone()],
                &decoding,
                delays,
            )
        });
        let b = s.spawn(|| {
            let delays = [late, Duration::ZERO, Duration::ZERO];
            request_arriving(
                &servers,
                vocab,
                62,
                &[cases[1].0.clone()],
                &decoding,
                delays,
            )
        });
        (a.join().unwrap(), b.join().unwrap())
    });
    eprintln!(
        "two requests in opposite orders, one at a time: {:.1?} (peer timeout 2 s)",
        started.elapsed()
    );
    assert_eq!(a.unwrap(), [cases[0].1[..8].to_vec()]);
    assert_eq!(b.unwrap(), [cases[1].1[..8].to_vec()]);
    assert_eq!(servers[0].status().failed, 0);
}

#[test]
fn bad_requests_are_refused_before_any_peer_is_involved() {
    let (servers, vocab) = servers(ServeOptions::default());
    let prompts = vec![vec![1u32, 2, 3]];
    let dealt = deal_prompts(&prompts, vocab, &[[1; 32], [2; 32]], 0).unwrap();
    let [d0, d1, _] = dealt;
    let err = servers[0]
        .generate(
            GenerateRequest {
                session_id: 5,
                model: "nope".into(),
                lens: vec![3],
                decoding: Decoding::new(2, OutputMode::SecureArgmax),
                prompt: d0,
            },
            Arc::new(|_| {}),
            &Cancel::until(far()),
        )
        .unwrap_err();
    assert!(
        matches!(err, ServeError::UnknownModel(ref m) if m == "nope"),
        "{err}"
    );
    // Prompt lengths that do not match the dealt rows.
    let err = servers[1]
        .generate(
            GenerateRequest {
                session_id: 6,
                model: MODEL.into(),
                lens: vec![4],
                decoding: Decoding::new(2, OutputMode::SecureArgmax),
                prompt: d1,
            },
            Arc::new(|_| {}),
            &Cancel::until(far()),
        )
        .unwrap_err();
    assert!(matches!(err, ServeError::BadRequest(_)), "{err}");
    assert_eq!(servers[1].status().served, 0);
}

#[test]
fn servers_restart_from_their_share_stores_without_the_owner() {
    let dir = tempfile::tempdir().unwrap();
    let path = |p: usize| dir.path().join(format!("shakespeare.p{p}.store"));
    // The owner's content hash of the model, as it announces it with the upload.
    let hash = ModelHash([0x5a; 32]);
    let vocab = {
        let (servers, vocab) = servers(ServeOptions::default());
        for (p, s) in servers.iter().enumerate() {
            s.save_model(MODEL, &path(p), hash).unwrap();
        }
        vocab
        // The servers (and the owner's process state) are gone here.
    };
    let servers = connect(&ServeOptions::default());
    // A store of another party, or of another model, is refused naming the file.
    let err = servers[0].load_store(MODEL, &path(1), None).unwrap_err();
    assert!(
        matches!(err, ServeError::Store(StoreError::Party { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("p1.store"), "{err}");
    let err = servers[0]
        .load_store(MODEL, &path(0), Some(ModelHash([1; 32])))
        .unwrap_err();
    assert!(
        matches!(err, ServeError::Store(StoreError::Model { .. })),
        "{err}"
    );
    for (p, s) in servers.iter().enumerate() {
        let header = s.load_store(MODEL, &path(p), Some(hash)).unwrap();
        assert_eq!(header.model_hash, hash);
    }
    let (prompt, want) = &fixture_prompts()[2];
    let got = request(
        &servers,
        vocab,
        77,
        std::slice::from_ref(prompt),
        &Decoding::new(8, OutputMode::SecureArgmax),
    )
    .unwrap();
    assert_eq!(got, [want[..8].to_vec()]);
}

#[test]
fn an_owner_deals_its_checkpoint_once_and_the_servers_serve_it() {
    let (cfg, w) = load_gpt2(Path::new(SHAKESPEARE)).unwrap();
    let vocab = cfg.vocab_size;
    let fx = FixedPoint::default();
    let mut parts: [Vec<DealtTensor>; 3] = Default::default();
    let (spec, hash) = deal_decoder(&cfg, &w, fx, &[[3; 32], [4; 32]], |three| {
        for (p, t) in three.into_iter().enumerate() {
            parts[p].push(t);
        }
        Ok(())
    })
    .unwrap();
    // The hash is the model's, whatever the seeds.
    let (_, again) = deal_decoder(&cfg, &w, fx, &[[9; 32], [8; 32]], |_| Ok(())).unwrap();
    assert_eq!(hash, again);
    // P0 receives seeds only; P1 and P2 one correction vector each, of every parameter.
    let values = |p: usize| -> usize {
        parts[p]
            .iter()
            .map(|t| {
                [&t.dealt.first, &t.dealt.second]
                    .iter()
                    .map(|c| match c {
                        Component::Values(v) => v.len(),
                        Component::Seed(_) => 0,
                    })
                    .sum::<usize>()
            })
            .sum()
    };
    let params = spec.parameters().unwrap();
    assert_eq!([values(0), values(1), values(2)], [0, params, params]);
    drop(w); // the owner is gone
    let servers = connect(&ServeOptions::default());
    // Parts dealt to P1 do not make a model at P0.
    let [t0, t1, t2] = parts;
    assert!(assemble_decoder(PartyId::P0, spec.clone(), t1.iter().map(copy)).is_err());
    // Each server installs its parts as the daemon does: the model, and its share store.
    let stores = tempfile::tempdir().unwrap();
    let json = spec_json(&spec).unwrap();
    let mut lens = Vec::new();
    for (s, t) in servers.iter().zip([t0, t1, t2]) {
        let path = stores.path().join(format!("{}.pumastore", s.me()));
        s.install_upload(MODEL, DECODER_ARCH, &json, hash, t, &path)
            .unwrap();
        lens.push(std::fs::metadata(&path).unwrap().len());
    }
    // The dealt seeds stay seeds in the stores: P0's holds two seeds and no words, P1's
    // and P2's one seed and the correction vector, of every parameter.
    assert_eq!(lens[1], lens[2]);
    assert_eq!(lens[1] - lens[0], 8 * params as u64 - 32);
    assert!(lens[0] < 100_000, "P0's store has {} bytes", lens[0]);
    let (prompt, want) = &fixture_prompts()[1];
    let got = request(
        &servers,
        vocab,
        91,
        std::slice::from_ref(prompt),
        &Decoding::new(8, OutputMode::SecureArgmax),
    )
    .unwrap();
    assert_eq!(got, [want[..8].to_vec()]);
}

fn copy(t: &DealtTensor) -> DealtTensor {
    DealtTensor {
        name: t.name.clone(),
        len: t.len,
        dealt: t.dealt.clone(),
    }
}

const TINY_BERT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/bert-tiny-random");
const ENCODER: &str = "tiny-bert";

/// The reference file's padded batch of bert-tiny-random as each sequence's real ids and
/// token types, and the reference's hidden states (real tokens only, in batch order),
/// pooled output and logits.
type EncoderCase = (Vec<(Vec<u32>, Vec<u32>)>, Vec<f64>, Vec<f64>, Vec<f64>);

fn encoder_case() -> EncoderCase {
    let bytes = std::fs::read(format!("{TINY_BERT}/reference.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let floats = |name: &str| -> Vec<f64> {
        st.tensor(name)
            .unwrap()
            .data()
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
            .collect()
    };
    let (ids, types, mask) = (
        ints(&st, "batch.input_ids"),
        ints(&st, "batch.token_type_ids"),
        ints(&st, "batch.attention_mask"),
    );
    let hidden = floats("batch.last_hidden_state");
    let (seq_len, d) = (17, 64);
    let mut seqs = Vec::new();
    let mut real_hidden = Vec::new();
    for b in 0..4 {
        let row = b * seq_len..(b + 1) * seq_len;
        let len = mask[row.clone()].iter().filter(|&&m| m == 1).count();
        // Right padding: the real tokens come first.
        assert!(mask[row.start..row.start + len].iter().all(|&m| m == 1));
        seqs.push((
            ids[row.start..row.start + len].to_vec(),
            types[row.start..row.start + len].to_vec(),
        ));
        real_hidden.extend_from_slice(&hidden[row.start * d..(row.start + len) * d]);
    }
    (
        seqs,
        real_hidden,
        floats("batch.pooler_output"),
        floats("batch.logits"),
    )
}

/// One encode request through the three servers: the values the client reconstructs.
fn encode_request(
    servers: &[Arc<Server>; 3],
    id: u64,
    seqs: &[(Vec<u32>, Vec<u32>)],
    outputs: Outputs,
) -> Vec<f64> {
    let (vocab, types) = (30522, 2);
    let batch = BertBatch::padded(seqs, 0).unwrap();
    let cols = input_columns(&batch, vocab, types).unwrap();
    let seeds = [[id as u8; 32], [(id as u8).wrapping_add(5); 32]];
    let dealt = deal_hot(&cols, cols.len() / 2, 2, vocab + types, &seeds, 0).unwrap();
    let lens: Vec<usize> = seqs.iter().map(|(ids, _)| ids.len()).collect();
    let got: Vec<(Delivered, Vec<u64>, Vec<u64>)> = thread::scope(|s| {
        let hs: Vec<_> = servers
            .iter()
            .zip(dealt)
            .map(|(server, input)| {
                let req = EncodeRequest {
                    session_id: id,
                    model: ENCODER.into(),
                    lens: lens.clone(),
                    outputs,
                    input,
                };
                s.spawn(move || {
                    let (tx, rx) = mpsc::channel();
                    let tx = Mutex::new(tx);
                    let deliver = Arc::new(move |d: Delivery| {
                        let (a, b) = d.shares.components();
                        let _ = tx.lock().unwrap().send((d.what, a.to_vec(), b.to_vec()));
                    });
                    let cost = server.encode(req, deliver, &Cancel::until(far())).unwrap();
                    assert!(cost.rounds > 0);
                    let one: Vec<_> = rx.try_iter().collect();
                    assert_eq!(one.len(), 1, "one delivery per request");
                    one.into_iter().next().unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(got.iter().all(|g| g.0 == Delivered::Encoded));
    let values = dealing::reconstruct([part(&got[0]), part(&got[1]), part(&got[2])]).unwrap();
    FixedPoint::default().decode_slice(&values)
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

#[test]
fn an_owner_deals_an_encoder_and_the_servers_run_it_and_restart_from_their_stores() {
    let (cfg, w) = load_bert(Path::new(TINY_BERT)).unwrap();
    let plain = PlainBert::new(cfg.clone(), w.clone());
    let mut parts: [Vec<DealtTensor>; 3] = Default::default();
    let (spec, hash) = deal_encoder(&cfg, &w, FixedPoint::default(), &[[1; 32], [2; 32]], |t| {
        for (p, t) in t.into_iter().enumerate() {
            parts[p].push(t);
        }
        Ok(())
    })
    .unwrap();
    drop(w); // the owner is gone
    let servers = connect(&ServeOptions::default());
    for ((s, t), p) in servers.iter().zip(parts).zip(PartyId::ALL) {
        s.add_model(ENCODER, assemble_encoder(p, spec.clone(), t).unwrap())
            .unwrap();
    }
    let (seqs, hidden, pooled, logits) = encoder_case();
    let all = Outputs {
        hidden: true,
        pooled: true,
        logits: true,
        embeddings: true,
    };
    let got = encode_request(&servers, 31, &seqs, all);
    let (h, rest) = got.split_at(hidden.len());
    let (p, rest) = rest.split_at(pooled.len());
    let (l, e) = rest.split_at(logits.len());
    let batch = BertBatch::padded(&seqs, 0).unwrap();
    let want_e = mean_pool_normalized(
        plain.forward(&batch).unwrap().last_hidden_state.view(),
        &batch,
    );
    let want_e: Vec<f64> = want_e.iter().copied().collect();
    let (dh, dp, dl, de) = (
        max_diff(h, &hidden),
        max_diff(p, &pooled),
        max_diff(l, &logits),
        max_diff(e, &want_e),
    );
    eprintln!(
        "tiny bert through the servers: hidden {dh:.2e} pooled {dp:.2e} logits {dl:.2e} embeddings {de:.2e}"
    );
    // The bounds of the in-process secure run against the same reference (puma-layers'
    // bert_secure tests).
    assert!(dh <= 5e-3 && dp <= 5e-3 && dl <= 5e-4 && de <= 5e-3);
    // A decoder request to an encoder is refused before any session.
    let err = servers[0]
        .generate(
            GenerateRequest {
                session_id: 5,
                model: ENCODER.into(),
                lens: vec![2],
                decoding: Decoding::new(1, OutputMode::SecureArgmax),
                prompt: deal_prompts(&[vec![1, 2]], 30522, &[[0; 32], [1; 32]], 0).unwrap()[0]
                    .clone(),
            },
            Arc::new(|_| {}),
            &Cancel::until(far()),
        )
        .unwrap_err();
    assert!(err.to_string().contains("encoder"), "{err}");

    // The servers save their shares and restart from them, the owner long gone.
    let dir = tempfile::tempdir().unwrap();
    let path = |p: usize| dir.path().join(format!("tiny-bert.p{p}.store"));
    for (p, s) in servers.iter().enumerate() {
        s.save_model(ENCODER, &path(p), hash).unwrap();
    }
    drop(servers);
    let servers = connect(&ServeOptions::default());
    for (p, s) in servers.iter().enumerate() {
        assert_eq!(
            s.load_store(ENCODER, &path(p), Some(hash)).unwrap().arch,
            "bert"
        );
    }
    let info = &servers[2].model_infos()[0];
    assert_eq!((info.vocab, info.encoder.unwrap().labels), (30522, 2));
    let embeddings = Outputs {
        embeddings: true,
        ..Outputs::default()
    };
    let e = encode_request(&servers, 32, &seqs, embeddings);
    assert!(max_diff(&e, &want_e) <= 5e-3);
}
