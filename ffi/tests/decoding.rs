//! Decoding rules through the C API (`puma_session_start_generate_with`) on the embedded
//! Shakespeare GPT-2, with the three parties on three threads (one session each) that
//! exchange frames through channels, as asynchronous hosts do: sampling (top-k = 1 is the
//! argmax; a temperature draws other tokens, the same ones again from the same entropies),
//! the end at an end-of-sequence id and at a stop string (the client's callback, with the
//! checkpoint's tokenizer), the tokens streamed to the client's callback, the finish
//! reason at every party, and bad options refused at every party.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unsafe_code
)]

use std::ffi::{CStr, CString, c_void};
use std::path::Path;
use std::ptr;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use puma_ffi::puma_event_kind::{
    PUMA_EVENT_CLOSED, PUMA_EVENT_DONE, PUMA_EVENT_PENDING, PUMA_EVENT_TRANSMIT, PUMA_EVENT_YIELDED,
};
use puma_ffi::puma_status::*;
use puma_ffi::*;
use puma_layers::Tokenizer;

const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/gpt2-shakespeare");
/// "ROMEO:", whose greedy continuation is "\nI'll be a" (five different ids).
const PROMPT: [u32; 3] = [33676, 4720, 25];
const CLIENT: usize = 0;
const OWNER: u32 = 1;
/// GPT-2's end-of-text id, the checkpoint's end-of-sequence id.
const EOT: u32 = 50256;

fn last_error() -> String {
    // SAFETY: puma_last_error returns a NUL-terminated string valid until the next call.
    unsafe { CStr::from_ptr(puma_last_error()) }
        .to_string_lossy()
        .into_owned()
}

#[track_caller]
fn ok(st: puma_status) {
    assert_eq!(st, PUMA_OK, "{}", last_error());
}

type Frame = (u32, Vec<u8>);

/// One party's host: its session, its inbox and the links to its peers.
struct Host {
    me: usize,
    s: *mut puma_session,
    inbox: Receiver<Frame>,
    peers: Vec<Sender<Frame>>,
    buf: Vec<u8>,
}

impl Host {
    /// Polls, sends and hands in frames until the session reports `until`; its status.
    fn run(&mut self, until: puma_event_kind) -> puma_status {
        loop {
            let mut ev = puma_event {
                kind: PUMA_EVENT_DONE,
                peer: 0,
                frame_len: 0,
            };
            // SAFETY: live session, buffer of buf.len() bytes, valid event.
            let st = unsafe {
                puma_session_poll(self.s, self.buf.as_mut_ptr(), self.buf.len(), &mut ev)
            };
            match ev.kind {
                PUMA_EVENT_TRANSMIT => {
                    ok(st);
                    let frame = self.buf[..ev.frame_len].to_vec();
                    // A peer that has closed and left drops the frame, as a closed
                    // session would.
                    let _ = self.peers[ev.peer as usize].send((self.me as u32, frame));
                }
                PUMA_EVENT_YIELDED => ok(st),
                PUMA_EVENT_PENDING => {
                    ok(st);
                    let (from, bytes) = self
                        .inbox
                        .recv_timeout(Duration::from_secs(120))
                        .unwrap_or_else(|_| panic!("P{}: no frame for 120 s", self.me));
                    // SAFETY: live session, `bytes` of bytes.len() bytes.
                    ok(unsafe {
                        puma_session_handle_frame(self.s, from, bytes.as_ptr(), bytes.len())
                    });
                }
                kind if kind == until => return st,
                other => panic!("P{}: {other:?} ({st:?}: {})", self.me, last_error()),
            }
        }
    }

    /// Shares the Shakespeare model (owner P1; the others name its config.json).
    fn share_model(&mut self) -> *mut puma_model {
        let path = if self.me as u32 == OWNER {
            MODEL.to_owned()
        } else {
            format!("{MODEL}/config.json")
        };
        let path = CString::new(path).unwrap();
        // SAFETY: live session, NUL-terminated path.
        ok(unsafe { puma_session_start_model_share(self.s, OWNER, path.as_ptr()) });
        ok(self.run(PUMA_EVENT_DONE));
        let mut m = ptr::null_mut();
        // SAFETY: live session, valid out pointer.
        ok(unsafe { puma_session_take_model(self.s, &mut m) });
        m
    }

    /// Runs one generation under `o` (the client's callbacks get `client`); the ids
    /// this party learned and its finish reason.
    fn generate(
        &mut self,
        m: *mut puma_model,
        mut o: puma_generate_options,
        client: &Client,
    ) -> (Vec<u32>, u32) {
        o.on_token = Some(on_token);
        o.user_data = ptr::from_ref(client).cast_mut().cast();
        let prompt = if self.me == CLIENT {
            PROMPT.as_ptr()
        } else {
            ptr::null()
        };
        // SAFETY: live session and model; prompt null or PROMPT.len() ids; valid options
        // whose user_data outlives the operation.
        ok(unsafe {
            puma_session_start_generate_with(self.s, m, CLIENT as u32, prompt, PROMPT.len(), &o)
        });
        ok(self.run(PUMA_EVENT_DONE));
        let mut finish = u32::MAX;
        // SAFETY: live session, valid out pointer.
        ok(unsafe { puma_session_result_finish(self.s, &mut finish) });
        let mut ids = vec![0u32; o.max_new];
        let mut written = usize::MAX;
        // SAFETY: live session, max_new ids, valid out pointer.
        ok(unsafe { puma_session_take_ids(self.s, ids.as_mut_ptr(), ids.len(), &mut written) });
        ids.truncate(written);
        (ids, finish)
    }
}

/// The client's side of its callbacks: the streamed ids, and the stop string.
struct Client {
    streamed: Mutex<Vec<(usize, u32)>>,
    stop: Option<(Tokenizer, String)>,
}

impl Client {
    fn new(stop: Option<&str>) -> Client {
        Client {
            streamed: Mutex::new(Vec::new()),
            stop: stop.map(|s| (tokenizer(), s.to_owned())),
        }
    }

    fn streamed(&self) -> Vec<(usize, u32)> {
        self.streamed.lock().unwrap().clone()
    }
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_dir(Path::new(MODEL)).unwrap()
}

unsafe extern "C" fn on_token(user_data: *mut c_void, step: usize, id: u32) {
    // SAFETY: the tests pass a `Client` that outlives the generation.
    let c = unsafe { &*user_data.cast::<Client>() };
    c.streamed.lock().unwrap().push((step, id));
}

/// Ends generation once the text generated so far contains the client's stop string.
unsafe extern "C" fn stop_on_string(user_data: *mut c_void, ids: *const u32, len: usize) -> i32 {
    // SAFETY: the tests pass a `Client` that outlives the generation; `ids` holds `len`
    // ids during the call.
    let (c, ids) = unsafe {
        (
            &*user_data.cast::<Client>(),
            std::slice::from_raw_parts(ids, len),
        )
    };
    let (tok, stop) = c.stop.as_ref().expect("a stop string");
    i32::from(tok.decode(ids).unwrap().contains(stop.as_str()))
}

/// Runs `script` at the three parties, on three threads, in sessions made from entropy
/// `seed`; each session is then closed cleanly. The scripts' results by party.
fn three_parties<R: Send>(seed: u8, script: impl Fn(&mut Host) -> R + Sync) -> Vec<R> {
    let (senders, inboxes): (Vec<Sender<Frame>>, Vec<Receiver<Frame>>) =
        (0..3).map(|_| channel()).unzip();
    std::thread::scope(|scope| {
        let handles: Vec<_> = inboxes
            .into_iter()
            .enumerate()
            .map(|(me, inbox)| {
                let peers = senders.clone();
                let script = &script;
                scope.spawn(move || {
                    let entropy = [seed.wrapping_mul(7).wrapping_add(me as u8); 32];
                    let mut s = ptr::null_mut();
                    // SAFETY: valid entropy and out pointer.
                    ok(unsafe { puma_session_new(me as u32, 77, entropy.as_ptr(), 32, &mut s) });
                    let mut host = Host {
                        me,
                        s,
                        inbox,
                        peers,
                        buf: vec![0; PUMA_MAX_FRAME_LEN],
                    };
                    let r = script(&mut host);
                    // SAFETY: live session.
                    ok(unsafe { puma_session_close(host.s) });
                    ok(host.run(PUMA_EVENT_CLOSED));
                    // SAFETY: freed once.
                    ok(unsafe { puma_session_free(host.s) });
                    r
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn options(max_new: usize, mode: u32) -> puma_generate_options {
    let mut o = puma_generate_options {
        max_new: 1,
        mode: 99,
        flags: 99,
        temperature: -1.0,
        top_k: 99,
        top_p: -1.0,
        min_p: -1.0,
        eos_ids: ptr::null(),
        eos_len: 0,
        stop: None,
        on_token: None,
        user_data: ptr::null_mut(),
    };
    // SAFETY: valid out pointer.
    ok(unsafe { puma_generate_options_init(&mut o) });
    o.max_new = max_new;
    o.mode = mode;
    o
}

/// The plaintext model's greedy ids after [`PROMPT`].
fn greedy(max_new: usize) -> Vec<u32> {
    let plain = puma_layers::gpt2::plain::PlainGpt2::load(Path::new(MODEL)).unwrap();
    plain.generate_greedy(&PROMPT, max_new).unwrap()
}

fn free_model(m: *mut puma_model) {
    // SAFETY: freed once.
    ok(unsafe { puma_model_free(m) });
}

/// Greedy, top-k = 1 (in every mode), an end-of-sequence id (the host's, and the model's
/// own), a stop string, and bad options, in one session per party.
#[test]
fn sampling_and_stop_rules_through_the_c_api() {
    let want = greedy(5);
    let tok = tokenizer();
    assert_eq!(tok.decode(&want).unwrap(), "\nI'll be a");
    // The stop string "I'll" is complete after the third id ("\n", "I", "'ll").
    let stop_at = (1..=want.len())
        .find(|&k| tok.decode(&want[..k]).unwrap().contains("I'll"))
        .unwrap();
    assert!(stop_at < want.len());

    let runs = three_parties(1, |h| {
        let m = h.share_model();
        let mut model_eos = vec![0u32; 4];
        let mut n = 0;
        // SAFETY: live model, 4 ids, valid out pointer.
        ok(unsafe { puma_model_eos_ids(m, model_eos.as_mut_ptr(), 4, &mut n) });
        model_eos.truncate(n);
        let mut out = Vec::new();
        let mut streams = Vec::new();
        // Greedy with the model's end-of-sequence id (which the greedy text never reaches).
        let mut o = options(5, PUMA_OUTPUT_SECURE_ARGMAX);
        o.flags = PUMA_GENERATE_MODEL_EOS;
        let c = Client::new(None);
        out.push(h.generate(m, o, &c));
        streams.push(c.streamed());
        // top-k = 1 at T = 1 picks the argmax, in every mode.
        for mode in [
            PUMA_OUTPUT_REVEAL_LOGITS,
            PUMA_OUTPUT_SECURE_ARGMAX,
            PUMA_OUTPUT_PRIVATE,
        ] {
            let mut o = options(3, mode);
            o.temperature = 1.0;
            o.top_k = 1;
            let c = Client::new(None);
            out.push(h.generate(m, o, &c));
            streams.push(c.streamed());
        }
        // The host's end-of-sequence id: the third greedy id, in two modes.
        let eos = [want[2], EOT];
        for mode in [PUMA_OUTPUT_SECURE_ARGMAX, PUMA_OUTPUT_PRIVATE] {
            let mut o = options(5, mode);
            o.eos_ids = eos.as_ptr();
            o.eos_len = eos.len();
            out.push(h.generate(m, o, &Client::new(None)));
        }
        // The stop string "I'll" (the client's test), in two modes.
        for mode in [PUMA_OUTPUT_REVEAL_LOGITS, PUMA_OUTPUT_SECURE_ARGMAX] {
            let mut o = options(5, mode);
            o.flags = PUMA_GENERATE_CLIENT_STOPS;
            o.stop = Some(stop_on_string);
            let c = Client::new(Some("I'll"));
            out.push(h.generate(m, o, &c));
            streams.push(c.streamed());
        }
        // Bad options, refused before anything starts (the session stays usable).
        let bad_eos = [50257u32];
        let mut bad = Vec::new();
        for (what, o) in [
            ("top_p 0", {
                let mut o = options(2, PUMA_OUTPUT_SECURE_ARGMAX);
                o.temperature = 1.0;
                o.top_p = 0.0;
                o
            }),
            ("temperature < 0", {
                let mut o = options(2, PUMA_OUTPUT_SECURE_ARGMAX);
                o.temperature = -0.5;
                o
            }),
            ("temperature NaN", {
                let mut o = options(2, PUMA_OUTPUT_SECURE_ARGMAX);
                o.temperature = f64::NAN;
                o
            }),
            ("eos id = vocab", {
                let mut o = options(2, PUMA_OUTPUT_SECURE_ARGMAX);
                o.eos_ids = bad_eos.as_ptr();
                o.eos_len = 1;
                o
            }),
            ("top_k > vocab", {
                let mut o = options(2, PUMA_OUTPUT_SECURE_ARGMAX);
                o.temperature = 1.0;
                o.top_k = 50258;
                o
            }),
            ("min_p 1", {
                let mut o = options(2, PUMA_OUTPUT_SECURE_ARGMAX);
                o.temperature = 1.0;
                o.min_p = 1.0;
                o
            }),
            ("a filter at temperature 0", {
                let mut o = options(2, PUMA_OUTPUT_SECURE_ARGMAX);
                o.top_k = 1;
                o
            }),
            ("unknown flag", {
                let mut o = options(2, PUMA_OUTPUT_SECURE_ARGMAX);
                o.flags = 4;
                o
            }),
        ] {
            let prompt = if h.me == CLIENT {
                PROMPT.as_ptr()
            } else {
                ptr::null()
            };
            // SAFETY: live session and model, valid prompt and options.
            let st =
                unsafe { puma_session_start_generate_with(h.s, m, CLIENT as u32, prompt, 3, &o) };
            bad.push((what, st));
        }
        let prompt = if h.me == CLIENT {
            PROMPT.as_ptr()
        } else {
            ptr::null()
        };
        // The client must bring its stop test when the options say it has one (a check at
        // the client alone: the others would start, so only the client tries).
        if h.me == CLIENT {
            let mut o = options(2, PUMA_OUTPUT_SECURE_ARGMAX);
            o.flags = PUMA_GENERATE_CLIENT_STOPS;
            // SAFETY: live session and model, valid prompt and options.
            let st =
                unsafe { puma_session_start_generate_with(h.s, m, CLIENT as u32, prompt, 3, &o) };
            bad.push(("no stop test", st));
        }
        // SAFETY: null options are reported.
        let st = unsafe {
            puma_session_start_generate_with(h.s, m, CLIENT as u32, prompt, 3, ptr::null())
        };
        bad.push(("null options", st));
        // After the refusals, a greedy generation runs as before.
        out.push(h.generate(m, options(2, PUMA_OUTPUT_SECURE_ARGMAX), &Client::new(None)));
        free_model(m);
        (model_eos, out, streams, bad)
    });

    let streamed = |ids: &[u32]| -> Vec<(usize, u32)> { ids.iter().copied().enumerate().collect() };
    for (i, (model_eos, out, streams, bad)) in runs.iter().enumerate() {
        let client = i == CLIENT;
        let ids = |k: usize| if client { out[k].0.clone() } else { Vec::new() };
        let finish = |k: usize| out[k].1;
        assert_eq!(model_eos, &[EOT], "P{i}");
        // Greedy, with the model's eos: all five, streamed one by one.
        assert_eq!(
            (ids(0), finish(0)),
            (
                if client { want.clone() } else { vec![] },
                PUMA_FINISH_LENGTH
            )
        );
        // top-k = 1 in the three modes.
        for k in 1..=3 {
            let w = if client { want[..3].to_vec() } else { vec![] };
            assert_eq!(
                (ids(k), finish(k)),
                (w, PUMA_FINISH_LENGTH),
                "P{i} top-k=1 run {k}"
            );
        }
        // The host's eos: three ids, every party learns why it ended.
        for k in 4..=5 {
            let w = if client { want[..3].to_vec() } else { vec![] };
            assert_eq!(
                (ids(k), finish(k)),
                (w, PUMA_FINISH_EOS),
                "P{i} eos run {k}"
            );
        }
        // The stop string: the client knows it was its stop test, the others only that it
        // ended.
        for k in 6..=7 {
            let (w, f) = if client {
                (want[..stop_at].to_vec(), PUMA_FINISH_STOP)
            } else {
                (vec![], PUMA_FINISH_ENDED)
            };
            assert_eq!((ids(k), finish(k)), (w, f), "P{i} stop run {k}");
        }
        assert_eq!(ids(8), if client { want[..2].to_vec() } else { vec![] });
        for (what, st) in bad {
            let want_st = if *what == "null options" {
                PUMA_ERR_NULL_POINTER
            } else {
                PUMA_ERR_INVALID_ARGUMENT
            };
            assert_eq!(*st, want_st, "P{i}: {what}");
        }
        assert_eq!(bad.len(), if client { 10 } else { 9 });
        // The client's token callback saw each id as it came, in order; never at the
        // other parties (and never in private mode, where ids come at the end).
        let want_streams: Vec<Vec<(usize, u32)>> = if client {
            vec![
                streamed(&want),
                streamed(&want[..3]),
                streamed(&want[..3]),
                vec![],
                streamed(&want[..stop_at]),
                streamed(&want[..stop_at]),
            ]
        } else {
            vec![vec![]; 6]
        };
        assert_eq!(streams, &want_streams, "P{i}");
    }
}

/// Tokens drawn at temperature 3 (top-p 0.95) in `mode`, in fresh sessions made from
/// entropy `seed`: the client's ids and each party's finish reason.
fn drawn(seed: u8, mode: u32) -> (Vec<u32>, Vec<u32>) {
    let runs = three_parties(seed, |h| {
        let m = h.share_model();
        let mut o = options(4, mode);
        o.temperature = 3.0;
        o.top_p = 0.95;
        let r = h.generate(m, o, &Client::new(None));
        free_model(m);
        r
    });
    (runs[CLIENT].0.clone(), runs.iter().map(|r| r.1).collect())
}

/// Temperature sampling draws from the session's keys: the same entropies draw the same
/// tokens again (here not the greedy ones), in the modes where the parties draw.
#[test]
fn drawn_tokens_repeat_with_the_same_entropy_and_differ_from_greedy() {
    let want = greedy(4);
    for mode in [PUMA_OUTPUT_SECURE_ARGMAX, PUMA_OUTPUT_REVEAL_LOGITS] {
        let (first, finish) = drawn(2, mode);
        assert_eq!(finish, vec![PUMA_FINISH_LENGTH; 3]);
        assert_eq!(first.len(), 4);
        assert!(first.iter().all(|&id| id < 50257));
        assert_ne!(first, want, "mode {mode}: T = 3 drew the greedy ids");
        let (again, _) = drawn(2, mode);
        assert_eq!(
            again, first,
            "mode {mode}: the same entropy drew other tokens"
        );
        println!("mode {mode}: drawn {first:?}, greedy {want:?}");
    }
}
