//! The session API through its C entry points: operations against plaintext, the GPT-2
//! forward against the plaintext model, and misuse (each returns its documented status).
#![allow(
    clippy::needless_range_loop,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    missing_docs,
    unsafe_code
)]

use std::ffi::CStr;
use std::ptr;

use puma_ffi::puma_event_kind::{
    PUMA_EVENT_CLOSED, PUMA_EVENT_DONE, PUMA_EVENT_PENDING, PUMA_EVENT_TRANSMIT, PUMA_EVENT_YIELDED,
};
use puma_ffi::puma_status::{self, *};
use puma_ffi::*;

const TINY_MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/gpt2-tiny-random");

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

fn new_session(party: u32, id: u64) -> *mut puma_session {
    let entropy = [party as u8 + 1; 32];
    let mut s = ptr::null_mut();
    // SAFETY: valid entropy and out pointer.
    ok(unsafe { puma_session_new(party, id, entropy.as_ptr(), 32, &mut s) });
    s
}

fn empty_event() -> puma_event {
    puma_event {
        kind: PUMA_EVENT_DONE,
        peer: 0,
        frame_len: 0,
    }
}

type Triple<T> = [*mut T; 3];

/// Three sessions in one process; frames are delivered as soon as they are polled.
struct Parties {
    s: Triple<puma_session>,
    buf: Vec<u8>,
}

impl Parties {
    fn new(id: u64) -> Parties {
        Parties {
            s: [0, 1, 2].map(|i| new_session(i, id)),
            buf: vec![0; PUMA_MAX_FRAME_LEN],
        }
    }

    /// Drives the parties in `which` until each has finished its operation; returns
    /// each one's final status. When the others wait, a party of `which` that has
    /// finished is polled again, as the C API asks of its hosts: its peers may need frames
    /// it sends after its own result (the end of its last epoch).
    fn run_some(&mut self, which: &[usize]) -> [puma_status; 3] {
        let mut done = [true; 3];
        for &i in which {
            done[i] = false;
        }
        let mut status = [PUMA_OK; 3];
        while done.iter().any(|d| !d) {
            let mut progress = false;
            for i in 0..3 {
                while !done[i] {
                    let (st, ev) = self.poll(i);
                    match ev.kind {
                        PUMA_EVENT_TRANSMIT => progress = true,
                        PUMA_EVENT_YIELDED => ok(st),
                        PUMA_EVENT_PENDING => {
                            ok(st);
                            break;
                        }
                        PUMA_EVENT_DONE | PUMA_EVENT_CLOSED => {
                            status[i] = st;
                            done[i] = true;
                            progress = true;
                        }
                    }
                }
            }
            if !progress {
                progress = which.iter().any(|&i| done[i] && self.flush(i));
            }
            assert!(progress, "no party can make progress");
        }
        status
    }

    /// Polls party `i` once; a frame it transmits is handed in to its peer at once.
    fn poll(&mut self, i: usize) -> (puma_status, puma_event) {
        let mut ev = empty_event();
        // SAFETY: live session, buffer of buf.len() bytes, valid event.
        let st =
            unsafe { puma_session_poll(self.s[i], self.buf.as_mut_ptr(), self.buf.len(), &mut ev) };
        if ev.kind == PUMA_EVENT_TRANSMIT {
            ok(st);
            // SAFETY: live session, frame of ev.frame_len bytes. A peer that failed
            // meanwhile rejects the frame; its own poll tells.
            let _ = unsafe {
                puma_session_handle_frame(
                    self.s[ev.peer as usize],
                    i as u32,
                    self.buf.as_ptr(),
                    ev.frame_len,
                )
            };
        }
        (st, ev)
    }

    /// Polls party `i`, whose operation has ended, until it waits, and hands in the frames
    /// it sends; whether it sent any.
    fn flush(&mut self, i: usize) -> bool {
        let mut sent = false;
        loop {
            let (st, ev) = self.poll(i);
            match ev.kind {
                PUMA_EVENT_TRANSMIT => sent = true,
                PUMA_EVENT_YIELDED => ok(st),
                _ => return sent,
            }
        }
    }

    fn run(&mut self) {
        for st in self.run_some(&[0, 1, 2]) {
            ok(st);
        }
    }

    fn take(&mut self) -> Triple<puma_tensor> {
        self.s.map(|s| {
            let mut t = ptr::null_mut();
            // SAFETY: live session, valid out pointer.
            ok(unsafe { puma_session_take_tensor(s, &mut t) });
            t
        })
    }

    fn share(&mut self, owner: u32, v: &[f64], rows: usize, cols: usize) -> Triple<puma_tensor> {
        for (i, s) in self.s.iter().enumerate() {
            let p = if i as u32 == owner {
                v.as_ptr()
            } else {
                ptr::null()
            };
            // SAFETY: live session; `p` is null or points to v.len() doubles.
            ok(unsafe { puma_session_start_share(*s, owner, p, v.len(), rows, cols) });
        }
        self.run();
        self.take()
    }

    fn public(&self, v: &[f64], rows: usize, cols: usize) -> Triple<puma_tensor> {
        self.s.map(|s| {
            let mut t = ptr::null_mut();
            // SAFETY: live session, v.len() doubles, valid out pointer.
            ok(unsafe { puma_tensor_from_public(s, v.as_ptr(), v.len(), rows, cols, &mut t) });
            t
        })
    }

    /// Starts `start` at every party, runs it and takes the tensors.
    fn op(
        &mut self,
        start: impl Fn(*mut puma_session, usize) -> puma_status,
    ) -> Triple<puma_tensor> {
        for (i, s) in self.s.iter().enumerate() {
            ok(start(*s, i));
        }
        self.run();
        self.take()
    }

    /// Reveals `t` to P0 and returns the values; checks that P1 and P2 learn nothing.
    fn reveal(&mut self, t: Triple<puma_tensor>) -> Vec<f64> {
        for i in 0..3 {
            // SAFETY: live session and tensor.
            ok(unsafe { puma_session_start_reveal(self.s[i], t[i], 0) });
        }
        self.run();
        let mut out = Vec::new();
        for i in 0..3 {
            let mut n = usize::MAX;
            // SAFETY: live session, valid out pointer.
            ok(unsafe { puma_session_result_len(self.s[i], &mut n) });
            let mut v = vec![f64::NAN; n];
            let mut written = usize::MAX;
            // SAFETY: live session, v of n doubles, valid out pointer.
            ok(unsafe { puma_session_take_values(self.s[i], v.as_mut_ptr(), n, &mut written) });
            assert_eq!(written, n);
            if i == 0 {
                out = v;
            } else {
                assert_eq!(n, 0, "P{i} learned the values");
            }
        }
        out
    }

    fn stats(&self, i: usize) -> puma_stats {
        let mut st = puma_stats::default();
        // SAFETY: live session, valid out pointer.
        ok(unsafe { puma_session_stats(self.s[i], &mut st) });
        st
    }
}

impl Drop for Parties {
    fn drop(&mut self) {
        for s in self.s {
            // SAFETY: each session is freed once.
            unsafe { puma_session_free(s) };
        }
    }
}

fn free(t: Triple<puma_tensor>) {
    for t in t {
        // SAFETY: each tensor is freed once.
        ok(unsafe { puma_tensor_free(t) });
    }
}

fn max_err(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// Deterministic reals in [-lo, lo).
fn data(n: usize, seed: u64, lo: f64) -> Vec<f64> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 * lo - lo
        })
        .collect()
}

#[test]
fn operations_match_plaintext() {
    let mut p = Parties::new(11);
    let (m, k, n) = (3, 5, 4);
    let xs = data(m * k, 1, 2.0);
    let ws = data(k * n, 2, 2.0);
    let x = p.share(0, &xs, m, k);
    let w = p.share(1, &ws, k, n);
    assert_eq!(p.stats(0).operations, 2);

    // matmul: 2 rounds (product and truncation).
    let before = p.stats(0);
    // SAFETY: live sessions and tensors.
    let y = p.op(|s, i| unsafe { puma_session_start_matmul(s, x[i], w[i]) });
    let after = p.stats(0);
    assert_eq!(after.rounds - before.rounds, 2);
    assert_eq!(after.operations, 3);
    let mut y_ref = vec![0.0; m * n];
    for r in 0..m {
        for c in 0..n {
            y_ref[r * n + c] = (0..k).map(|j| xs[r * k + j] * ws[j * n + c]).sum();
        }
    }
    let (mut rows, mut cols) = (0, 0);
    // SAFETY: live tensor, valid out pointers.
    ok(unsafe { puma_tensor_shape(y[1], &mut rows, &mut cols) });
    assert_eq!((rows, cols), (m, n));

    // mul with a public constant tensor, trunc by 2 (÷4), lt against the public tensor.
    let cs = data(m * n, 3, 3.0);
    let c = p.public(&cs, m, n);
    let r0 = p.stats(0).rounds;
    // SAFETY: live sessions and tensors.
    let prod = p.op(|s, i| unsafe { puma_session_start_mul(s, y[i], c[i]) });
    assert_eq!(p.stats(0).rounds - r0, 2, "rounds of prod");
    let r0 = p.stats(0).rounds;
    // SAFETY: live sessions and tensors.
    let quarter = p.op(|s, i| unsafe { puma_session_start_trunc(s, y[i], 2) });
    assert_eq!(p.stats(0).rounds - r0, 1, "rounds of quarter");
    let r0 = p.stats(0).rounds;
    // SAFETY: live sessions and tensors.
    let less = p.op(|s, i| unsafe { puma_session_start_lt(s, y[i], c[i]) });
    assert_eq!(p.stats(0).rounds - r0, 8, "rounds of less");

    // LayerNorm of y's rows with γ, β shared by P1.
    let g: Vec<f64> = data(n, 4, 1.0).iter().map(|v| v + 1.5).collect();
    let b = data(n, 5, 0.5);
    let gamma = p.share(1, &g, 1, n);
    let beta = p.share(1, &b, 1, n);
    let eps = 1e-5;
    // SAFETY: live sessions and tensors.
    let ln = p.op(|s, i| unsafe { puma_session_start_layernorm(s, y[i], gamma[i], beta[i], eps) });

    let y_sec = p.reveal(y);
    assert!(
        max_err(&y_sec, &y_ref) < 5e-5,
        "matmul {}",
        max_err(&y_sec, &y_ref)
    );
    let prod_ref: Vec<f64> = y_ref.iter().zip(&cs).map(|(a, b)| a * b).collect();
    let prod_sec = p.reveal(prod);
    assert!(
        max_err(&prod_sec, &prod_ref) < 2e-4,
        "mul {}",
        max_err(&prod_sec, &prod_ref)
    );
    // Truncation divides the secure ring values exactly, up to one unit of 2^-18.
    let q_ref: Vec<f64> = y_sec.iter().map(|v| v / 4.0).collect();
    let q_sec = p.reveal(quarter);
    assert!(max_err(&q_sec, &q_ref) <= 1.0 / (1u64 << 18) as f64 + 1e-12);
    let lt_ref: Vec<f64> = y_ref
        .iter()
        .zip(&cs)
        .map(|(a, b)| f64::from(u8::from(a < b)))
        .collect();
    assert_eq!(p.reveal(less), lt_ref);
    let mut ln_ref = vec![0.0; m * n];
    for r in 0..m {
        let row = &y_sec[r * n..(r + 1) * n];
        let mu = row.iter().sum::<f64>() / n as f64;
        let var = row.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n as f64;
        for j in 0..n {
            ln_ref[r * n + j] = (row[j] - mu) / (var + eps).sqrt() * g[j] + b[j];
        }
    }
    let ln_sec = p.reveal(ln);
    assert!(
        max_err(&ln_sec, &ln_ref) < 1e-3,
        "layernorm {}",
        max_err(&ln_sec, &ln_ref)
    );

    // One setup round for all operations: one 64-byte seed frame (32-byte header).
    let st = p.stats(2);
    assert_eq!(st.operations, 14);
    assert_eq!(st.setup_bytes_sent, 64);
    for t in [x, w, c, gamma, beta] {
        free(t);
    }
}

#[test]
fn gpt2_forward_matches_the_plaintext_model() {
    use puma_layers::gpt2::plain::PlainGpt2;
    let mut p = Parties::new(12);
    let dir = std::ffi::CString::new(TINY_MODEL).unwrap();
    let config = std::ffi::CString::new(format!("{TINY_MODEL}/config.json")).unwrap();
    for (i, s) in p.s.iter().enumerate() {
        // The owner (P1) reads the checkpoint; the others only the public config.
        let path = if i == 1 { &dir } else { &config };
        // SAFETY: live session, NUL-terminated path.
        ok(unsafe { puma_session_start_gpt2_share(*s, 1, path.as_ptr()) });
    }
    p.run();
    let models = p.s.map(|s| {
        let mut m = ptr::null_mut();
        // SAFETY: live session, valid out pointer.
        ok(unsafe { puma_session_take_model(s, &mut m) });
        m
    });
    let mut cfg = puma_gpt2_config::default();
    // SAFETY: live model, valid out pointer.
    ok(unsafe { puma_model_config(models[2], &mut cfg) });
    let ids: Vec<u32> = vec![5, 17, 3, 99, 42];
    for (i, s) in p.s.iter().enumerate() {
        let idp = if i == 0 { ids.as_ptr() } else { ptr::null() };
        // SAFETY: live session and model; ids null or ids.len() values.
        ok(unsafe { puma_session_start_gpt2_forward(*s, models[i], 0, idp, ids.len()) });
    }
    // The operation holds its own reference: the models can go now.
    for m in models {
        // SAFETY: each model freed once.
        ok(unsafe { puma_model_free(m) });
    }
    p.run();
    let mut logits = Vec::new();
    for i in 0..3 {
        let mut n = 0;
        // SAFETY: live session, valid out pointer.
        ok(unsafe { puma_session_result_len(p.s[i], &mut n) });
        let mut v = vec![0.0; n];
        let mut written = 0;
        // SAFETY: live session, n doubles, valid out pointer.
        ok(unsafe { puma_session_take_values(p.s[i], v.as_mut_ptr(), n, &mut written) });
        if i == 0 {
            logits = v;
        } else {
            assert_eq!(written, 0);
        }
    }
    let plain = PlainGpt2::load(std::path::Path::new(TINY_MODEL)).unwrap();
    assert_eq!(cfg.vocab_size, plain.config().vocab_size);
    assert_eq!(cfg.n_layer, plain.config().n_layer);
    let reference = plain.forward(&ids).unwrap();
    assert_eq!(logits.len(), ids.len() * cfg.vocab_size);
    let reference: Vec<f64> = reference.iter().copied().collect();
    let err = max_err(&logits, &reference);
    println!("GPT-2 forward through the C API: max |logit error| {err:.3e}");
    // The bound of the secure GPT-2's own tests on this model (measured 1.9e-4..2.3e-4).
    assert!(err <= 5e-4, "max logit error {err}");
}

#[test]
fn frames_of_the_next_operation_wait_for_it() {
    let mut p = Parties::new(13);
    let v = [1.25, -2.5];
    // P0 and P1 start sharing; P2 has not started yet, so their frames for it are held.
    for i in [0usize, 1] {
        let vp = if i == 0 { v.as_ptr() } else { ptr::null() };
        // SAFETY: live session; vp null or 2 doubles.
        ok(unsafe { puma_session_start_share(p.s[i], 0, vp, 2, 1, 2) });
    }
    let mut ev = empty_event();
    let buf = &mut p.buf;
    // SAFETY: live session, buffer, event.
    ok(unsafe { puma_session_poll(p.s[0], buf.as_mut_ptr(), buf.len(), &mut ev) });
    assert_eq!(ev.kind, PUMA_EVENT_TRANSMIT);
    assert_eq!(ev.peer, 2); // P0's seed goes to its previous party, P2.
    // SAFETY: live session, frame in buf.
    ok(unsafe { puma_session_handle_frame(p.s[2], 0, buf.as_ptr(), ev.frame_len) });
    // SAFETY: live session.
    ok(unsafe { puma_session_start_share(p.s[2], 0, ptr::null(), 2, 1, 2) });
    p.run();
    let t = p.take();
    assert_eq!(p.reveal(t), v.to_vec());
    free(t);
}

#[test]
fn misuse_returns_the_documented_status() {
    let mut p = Parties::new(14);
    let s0 = p.s[0];
    let mut ev = empty_event();
    let mut t = ptr::null_mut();
    let mut n = 0usize;

    // Null handles and null out-pointers.
    // SAFETY (all calls below): the pointers are null, live, or deliberately invalid
    // handles, which the API must detect without dereferencing.
    unsafe {
        assert_eq!(
            puma_session_poll(ptr::null_mut(), ptr::null_mut(), 0, &mut ev),
            PUMA_ERR_NULL_POINTER
        );
        assert!(last_error().contains("null"), "{}", last_error());
        assert_eq!(
            puma_session_poll(s0, ptr::null_mut(), 0, ptr::null_mut()),
            PUMA_ERR_NULL_POINTER
        );
        assert_eq!(
            puma_session_take_tensor(s0, ptr::null_mut()),
            PUMA_ERR_NULL_POINTER
        );
        assert_eq!(
            puma_session_start_mul(s0, ptr::null(), ptr::null()),
            PUMA_ERR_NULL_POINTER
        );
        assert_eq!(
            puma_session_handle_frame(s0, 1, ptr::null(), 10),
            PUMA_ERR_NULL_POINTER
        );
        assert_eq!(
            puma_session_stats(ptr::null(), &mut puma_stats::default()),
            PUMA_ERR_NULL_POINTER
        );
        assert_eq!(
            puma_tensor_shape(ptr::null(), &mut n, &mut n.clone()),
            PUMA_ERR_NULL_POINTER
        );
        assert_eq!(puma_session_free(ptr::null_mut()), PUMA_OK);
        assert_eq!(last_error(), "");

        // Bad arguments at creation.
        let e = [0u8; 32];
        let mut s = ptr::null_mut();
        assert_eq!(
            puma_session_new(3, 1, e.as_ptr(), 32, &mut s),
            PUMA_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            puma_session_new(0, 1, e.as_ptr(), 31, &mut s),
            PUMA_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            puma_session_new(0, 1, ptr::null(), 32, &mut s),
            PUMA_ERR_NULL_POINTER
        );
        assert!(s.is_null(), "no session on failure");

        // Misaligned and foreign pointers.
        let misaligned = s0.cast::<u8>().add(1).cast::<puma_session>();
        assert_eq!(
            puma_session_poll(misaligned, ptr::null_mut(), 0, &mut ev),
            PUMA_ERR_MISALIGNED_POINTER
        );
        let mut not_a_handle = [0u64; 8];
        let fake = not_a_handle.as_mut_ptr().cast::<puma_session>();
        assert_eq!(
            puma_session_poll(fake, ptr::null_mut(), 0, &mut ev),
            PUMA_ERR_INVALID_HANDLE
        );
        let misaligned_out = (&mut n as *mut usize).cast::<u8>().add(1).cast::<usize>();
        assert_eq!(
            puma_session_result_len(s0, misaligned_out),
            PUMA_ERR_MISALIGNED_POINTER
        );

        // Wrong state: no result waits (a poll is fine with nothing running: it would
        // return the setup frame).
        assert_eq!(puma_session_take_tensor(s0, &mut t), PUMA_ERR_WRONG_STATE);
        assert_eq!(puma_session_handle_timeout(s0), PUMA_ERR_WRONG_STATE);
        assert_eq!(puma_session_result_len(s0, &mut n), PUMA_ERR_WRONG_STATE);
    }

    // A tensor: type confusion, another party's session, shapes.
    let a = p.public(&[1.0, 2.0, 3.0, 4.0], 2, 2);
    let b = p.public(&[1.0, 2.0, 3.0], 1, 3);
    // SAFETY: as above.
    unsafe {
        assert_eq!(
            puma_session_poll(a[0].cast(), ptr::null_mut(), 0, &mut ev),
            PUMA_ERR_INVALID_HANDLE
        );
        assert!(last_error().contains("tensor"), "{}", last_error());
        assert_eq!(
            puma_session_start_mul(s0, a[1], a[1]),
            PUMA_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            puma_session_start_mul(s0, a[0], b[0]),
            PUMA_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            puma_session_start_matmul(s0, a[0], b[0]),
            PUMA_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            puma_session_start_trunc(s0, a[0], 0),
            PUMA_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            puma_session_start_gelu(s0, a[0], 99),
            PUMA_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            puma_session_start_reveal(s0, a[0], 3),
            PUMA_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            puma_session_start_layernorm(s0, a[0], b[0], b[0], 1e-5),
            PUMA_ERR_INVALID_ARGUMENT
        );
        let v = [1.0, f64::NAN];
        assert_eq!(
            puma_session_start_share(s0, 0, v.as_ptr(), 2, 1, 2),
            PUMA_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            puma_session_start_share(s0, 0, v.as_ptr(), 3, 1, 2),
            PUMA_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            puma_session_start_share(s0, 1, v.as_ptr(), 2, 1, 2),
            PUMA_ERR_INVALID_ARGUMENT
        );
        // No values at the owner is an argument error (the header says so), not a null
        // pointer: NULL is what the other parties pass.
        assert_eq!(
            puma_session_start_share(s0, 0, ptr::null(), 2, 1, 2),
            PUMA_ERR_INVALID_ARGUMENT
        );
        assert!(last_error().contains("owner must pass"), "{}", last_error());
        let mut u = ptr::null_mut();
        assert_eq!(
            puma_tensor_from_public(s0, v.as_ptr(), 1, 0, 1, &mut u),
            PUMA_ERR_INVALID_ARGUMENT
        );
        let missing = c"/nonexistent/puma-model";
        assert_eq!(
            puma_session_start_gpt2_share(s0, 0, missing.as_ptr()),
            PUMA_ERR_IO
        );
        assert_eq!(
            puma_session_start_gpt2_share(s0, 0, ptr::null()),
            PUMA_ERR_NULL_POINTER
        );
        assert_eq!(puma_model_free(a[0].cast()), PUMA_ERR_INVALID_HANDLE);
    }

    // Short buffers: the frame stays until a buffer is large enough.
    // SAFETY: live sessions and tensors.
    unsafe {
        for i in 0..3 {
            ok(puma_session_start_mul(p.s[i], a[i], a[i]));
        }
        assert_eq!(puma_session_start_mul(s0, a[0], a[0]), PUMA_ERR_WRONG_STATE);
        let mut small = [0u8; 8];
        assert_eq!(
            puma_session_poll(s0, small.as_mut_ptr(), small.len(), &mut ev),
            PUMA_ERR_INSUFFICIENT_SIZE
        );
        assert_eq!(ev.kind, PUMA_EVENT_TRANSMIT);
        let needed = ev.frame_len;
        assert_eq!(
            needed, 64,
            "the setup frame: 32-byte header and 32-byte seed"
        );
        assert_eq!(
            puma_session_poll(s0, ptr::null_mut(), 16, &mut ev),
            PUMA_ERR_NULL_POINTER
        );
        let mut exact = vec![0u8; needed];
        ok(puma_session_poll(s0, exact.as_mut_ptr(), needed, &mut ev));
        assert_eq!(
            (ev.kind, ev.frame_len, ev.peer),
            (PUMA_EVENT_TRANSMIT, needed, 2)
        );
        ok(puma_session_handle_frame(p.s[2], 0, exact.as_ptr(), needed));
    }
    p.run();
    let sq = p.take();
    // SAFETY: live sessions and tensors.
    unsafe {
        for i in 0..3 {
            ok(puma_session_start_reveal(p.s[i], sq[i], 0));
        }
    }
    p.run();
    // SAFETY: live sessions, buffers as described.
    unsafe {
        assert_eq!(puma_session_take_tensor(s0, &mut t), PUMA_ERR_WRONG_STATE);
        let mut two = [0.0f64; 2];
        let mut written = 0;
        assert_eq!(
            puma_session_take_values(s0, two.as_mut_ptr(), 2, &mut written),
            PUMA_ERR_INSUFFICIENT_SIZE
        );
        assert_eq!(written, 4);
        let mut four = [0.0f64; 4];
        ok(puma_session_take_values(
            s0,
            four.as_mut_ptr(),
            4,
            &mut written,
        ));
        assert_eq!(four, [1.0, 4.0, 9.0, 16.0]);
        for s in &p.s[1..] {
            ok(puma_session_take_values(
                *s,
                ptr::null_mut(),
                0,
                &mut written,
            ));
            assert_eq!(written, 0);
        }
    }

    // Frames from the wrong party: P0's frame handed to P2 as if it came from P1. The
    // operation fails at P2, which aborts it at its peers.
    // SAFETY: live sessions and tensors.
    unsafe {
        for i in 0..3 {
            ok(puma_session_start_mul(p.s[i], a[i], a[i]));
        }
        let buf = &mut p.buf;
        // P0's first frame for P2, with every other frame delivered; P2's own frames all
        // went out before, so that its abort frames are next in line at its peers.
        'found: loop {
            for i in [1usize, 2, 0] {
                loop {
                    ok(puma_session_poll(
                        p.s[i],
                        buf.as_mut_ptr(),
                        buf.len(),
                        &mut ev,
                    ));
                    if ev.kind == PUMA_EVENT_PENDING {
                        break;
                    }
                    assert_eq!(ev.kind, PUMA_EVENT_TRANSMIT);
                    if i == 0 && ev.peer == 2 {
                        break 'found;
                    }
                    ok(puma_session_handle_frame(
                        p.s[ev.peer as usize],
                        i as u32,
                        buf.as_ptr(),
                        ev.frame_len,
                    ));
                }
            }
        }
        let len = ev.frame_len;
        let from_self = puma_session_handle_frame(p.s[2], 2, buf.as_ptr(), len);
        assert_eq!(from_self, PUMA_ERR_INVALID_ARGUMENT);
        let no_party = puma_session_handle_frame(p.s[2], 7, buf.as_ptr(), len);
        assert_eq!(no_party, PUMA_ERR_INVALID_ARGUMENT);
        let wrong = puma_session_handle_frame(p.s[2], 1, buf.as_ptr(), len);
        assert_eq!(wrong, PUMA_ERR_PROTOCOL);
        assert!(last_error().contains("sender"), "{}", last_error());
    }
    let st = p.run_some(&[0, 1, 2]);
    assert_eq!(st[2], PUMA_ERR_PROTOCOL);
    assert!(st[..2].iter().all(|s| *s == PUMA_ERR_ABORTED), "{st:?}");

    // A fresh operation works after the failure; then a wrong-sender frame while idle.
    let r = p.share(2, &[0.5], 1, 1);
    assert_eq!(p.reveal(r), vec![0.5]);
    free(r);

    // Double free: detected and harmless.
    // SAFETY: first frees are of live handles; the second ones must be detected.
    unsafe {
        ok(puma_tensor_free(sq[0]));
        assert_eq!(puma_tensor_free(sq[0]), PUMA_ERR_INVALID_HANDLE);
        assert_eq!(
            puma_tensor_shape(sq[0], &mut n, &mut n.clone()),
            PUMA_ERR_INVALID_HANDLE
        );
        ok(puma_tensor_free(sq[1]));
        ok(puma_tensor_free(sq[2]));
        let extra = new_session(1, 99);
        ok(puma_session_free(extra));
        assert_eq!(puma_session_free(extra), PUMA_ERR_INVALID_HANDLE);
        assert_eq!(
            puma_session_start_reveal(extra, a[1], 0),
            PUMA_ERR_INVALID_HANDLE
        );
    }
    free(a);
    free(b);
}

#[test]
fn a_frame_while_idle_is_a_protocol_error() {
    let a = Parties::new(15);
    let b = Parties::new(16);
    let mut ev = empty_event();
    let mut buf = vec![0u8; PUMA_MAX_FRAME_LEN];
    let v = [1.0];
    // SAFETY: live sessions, buffers as described.
    unsafe {
        // A setup frame of another session (id 16) arrives at an idle session of id 15.
        ok(puma_session_start_share(b.s[0], 0, v.as_ptr(), 1, 1, 1));
        ok(puma_session_poll(
            b.s[0],
            buf.as_mut_ptr(),
            buf.len(),
            &mut ev,
        ));
        assert_eq!(ev.kind, PUMA_EVENT_TRANSMIT);
        assert_eq!(
            puma_session_handle_frame(a.s[2], 0, buf.as_ptr(), ev.frame_len),
            PUMA_ERR_PROTOCOL
        );
        // Garbage.
        assert_eq!(
            puma_session_handle_frame(a.s[2], 0, buf.as_ptr(), 3),
            PUMA_ERR_PROTOCOL
        );
    }
}

#[test]
fn a_timeout_fails_the_operation_and_aborts_it_at_the_peers() {
    let mut p = Parties::new(17);
    let mut ev = empty_event();
    // SAFETY: live sessions; null values at non-owners.
    unsafe {
        assert_eq!(puma_session_handle_timeout(p.s[0]), PUMA_ERR_WRONG_STATE);
        let v = [2.0];
        for i in 0..3 {
            let vp = if i == 1 { v.as_ptr() } else { ptr::null() };
            ok(puma_session_start_share(p.s[i], 1, vp, 1, 1, 1));
        }
        assert_eq!(puma_session_handle_timeout(p.s[0]), PUMA_ERR_TIMEOUT);
        assert!(last_error().contains("deadline"), "{}", last_error());
        // The setup frame is dropped; abort frames go to both peers.
        let buf = &mut p.buf;
        let mut to = Vec::new();
        loop {
            let st = puma_session_poll(p.s[0], buf.as_mut_ptr(), buf.len(), &mut ev);
            if ev.kind == PUMA_EVENT_DONE {
                assert_eq!(st, PUMA_ERR_TIMEOUT);
                break;
            }
            ok(st);
            to.push(ev.peer);
        }
        assert_eq!(to, vec![1, 2]);
        // The session started over: the next poll returns the new setup frame, for P2.
        ok(puma_session_poll(
            p.s[0],
            buf.as_mut_ptr(),
            buf.len(),
            &mut ev,
        ));
        assert_eq!(
            (ev.kind, ev.peer, ev.frame_len),
            (PUMA_EVENT_TRANSMIT, 2, 64)
        );
        assert_eq!(puma_session_handle_timeout(p.s[0]), PUMA_ERR_WRONG_STATE);
    }
}

/// Greedy generation with the KV cache through the C API on the embedded Shakespeare
/// GPT-2: one model share, then a generation in each output mode, all in one session (one
/// setup round); the client's ids are the plaintext model's, the others learn none.
#[test]
fn generation_on_the_shakespeare_model_matches_the_plaintext_model() {
    use puma_layers::gpt2::plain::PlainGpt2;
    const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/gpt2-shakespeare");
    let tokenizer = puma_layers::Tokenizer::from_dir(std::path::Path::new(MODEL)).unwrap();
    let prompt = tokenizer.encode("ROMEO:").unwrap();
    let max_new = 4;
    let plain = PlainGpt2::load(std::path::Path::new(MODEL)).unwrap();
    let want = plain.generate_greedy(&prompt, max_new).unwrap();
    println!("ROMEO:{}", tokenizer.decode(&want).unwrap());

    let mut p = Parties::new(21);
    let dir = std::ffi::CString::new(MODEL).unwrap();
    for s in p.s {
        // Every party may pass the directory: only the owner (P2) reads the weights.
        // SAFETY: live session, NUL-terminated path.
        ok(unsafe { puma_session_start_model_share(s, 2, dir.as_ptr()) });
    }
    p.run();
    let models = p.s.map(|s| {
        let mut m = ptr::null_mut();
        // SAFETY: live session, valid out pointer.
        ok(unsafe { puma_session_take_model(s, &mut m) });
        m
    });
    let mut info = puma_model_info::default();
    // SAFETY: live model, valid out pointer.
    ok(unsafe { puma_model_get_info(models[0], &mut info) });
    assert_eq!(
        (
            info.architecture,
            info.n_layer,
            info.d_model,
            info.vocab_size
        ),
        (PUMA_ARCH_GPT2, 4, 256, 50257)
    );
    for mode in [
        PUMA_OUTPUT_REVEAL_LOGITS,
        PUMA_OUTPUT_SECURE_ARGMAX,
        PUMA_OUTPUT_PRIVATE,
    ] {
        for (i, s) in p.s.iter().enumerate() {
            let ids = if i == 0 { prompt.as_ptr() } else { ptr::null() };
            // SAFETY: live session and model; ids null or prompt.len() values.
            ok(unsafe {
                puma_session_start_generate(*s, models[i], 0, ids, prompt.len(), max_new, mode)
            });
        }
        p.run();
        for i in 0..3 {
            let mut n = usize::MAX;
            // SAFETY: live session, valid out pointer.
            ok(unsafe { puma_session_result_len(p.s[i], &mut n) });
            let mut got = vec![0u32; n];
            let mut written = usize::MAX;
            // SAFETY: live session, n ids, valid out pointer.
            ok(unsafe { puma_session_take_ids(p.s[i], got.as_mut_ptr(), n, &mut written) });
            assert_eq!(written, n);
            if i == 0 {
                assert_eq!(got, want, "mode {mode}");
            } else {
                assert_eq!(n, 0, "P{i} learned the ids");
            }
        }
    }
    for m in models {
        // SAFETY: each model freed once.
        ok(unsafe { puma_model_free(m) });
    }
    assert_eq!(p.stats(1).setup_bytes_sent, 64);
}

/// Closing: each party sends its last frames and reports `PUMA_EVENT_CLOSED` (again on
/// later polls); frames that reach a closed session are dropped without error; nothing
/// starts on a closed session.
#[test]
fn a_closed_session_drops_late_frames() {
    let mut p = Parties::new(31);
    let r = p.share(1, &[1.5, -2.0], 1, 2);
    assert_eq!(p.reveal(r), vec![1.5, -2.0]);
    free(r);
    let mut ev = empty_event();
    // SAFETY: live sessions, buffers as described.
    unsafe {
        for s in p.s {
            ok(puma_session_close(s));
            ok(puma_session_close(s));
        }
        // Every frame is handed in, also to a party that has closed meanwhile.
        let mut closed = [false; 3];
        let mut late = 0;
        while closed.iter().any(|c| !c) {
            let mut progress = false;
            for i in 0..3 {
                while !closed[i] {
                    let buf = &mut p.buf;
                    ok(puma_session_poll(
                        p.s[i],
                        buf.as_mut_ptr(),
                        buf.len(),
                        &mut ev,
                    ));
                    match ev.kind {
                        PUMA_EVENT_TRANSMIT => {
                            late += usize::from(closed[ev.peer as usize]);
                            ok(puma_session_handle_frame(
                                p.s[ev.peer as usize],
                                i as u32,
                                buf.as_ptr(),
                                ev.frame_len,
                            ));
                        }
                        PUMA_EVENT_PENDING => break,
                        PUMA_EVENT_CLOSED => closed[i] = true,
                        other => panic!("P{i}: {other:?}"),
                    }
                    progress = true;
                }
            }
            assert!(progress, "no party can close");
        }
        assert!(late > 0, "no frame reached a closed session");
        let buf = &mut p.buf;
        ok(puma_session_poll(
            p.s[0],
            buf.as_mut_ptr(),
            buf.len(),
            &mut ev,
        ));
        assert_eq!(ev.kind, PUMA_EVENT_CLOSED);
        let v = [1.0];
        assert_eq!(
            puma_session_start_share(p.s[0], 0, v.as_ptr(), 1, 1, 1),
            PUMA_ERR_WRONG_STATE
        );
        assert_eq!(puma_session_handle_timeout(p.s[0]), PUMA_ERR_WRONG_STATE);
    }
    // One setup round, one share and one reveal: two rounds.
    let st = p.stats(2);
    assert_eq!((st.operations, st.rounds, st.setup_bytes_sent), (2, 2, 64));
}

/// Shares the model at `path` (owner P1) in `p`'s sessions and takes each party's handle.
fn share_model(p: &mut Parties, path: &str) -> Triple<puma_model> {
    let path = std::ffi::CString::new(path).unwrap();
    for s in p.s {
        // SAFETY: live session, NUL-terminated path.
        ok(unsafe { puma_session_start_model_share(s, 1, path.as_ptr()) });
    }
    p.run();
    p.s.map(|s| {
        let mut m = ptr::null_mut();
        // SAFETY: live session, valid out pointer.
        ok(unsafe { puma_session_take_model(s, &mut m) });
        m
    })
}

/// LLaMA (the tiny random checkpoint: GQA, RoPE, SwiGLU) through the C API: the generated
/// ids in every output mode equal the plaintext model's greedy ids, in one session.
#[test]
fn llama_generation_through_the_c_api_matches_the_plaintext_model() {
    use puma_layers::llama::plain::PlainLlama;
    const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/llama-tiny-random");
    let (cfg, w) = puma_layers::llama::load_hf(std::path::Path::new(MODEL)).unwrap();
    let plain = PlainLlama::new(cfg, w).unwrap();
    let prompt = vec![19556u32, 905, 42];
    let max_new = 3;
    let want = plain.generate_greedy(&prompt, max_new).unwrap();
    let mut p = Parties::new(31);
    let models = share_model(&mut p, MODEL);
    let mut info = puma_model_info::default();
    // SAFETY: live model, valid out pointer.
    ok(unsafe { puma_model_get_info(models[2], &mut info) });
    assert_eq!(
        (info.architecture, info.n_layer, info.d_model),
        (PUMA_ARCH_LLAMA, 2, 64)
    );
    for mode in [
        PUMA_OUTPUT_REVEAL_LOGITS,
        PUMA_OUTPUT_SECURE_ARGMAX,
        PUMA_OUTPUT_PRIVATE,
    ] {
        for (i, s) in p.s.iter().enumerate() {
            let ids = if i == 0 { prompt.as_ptr() } else { ptr::null() };
            // SAFETY: live session and model; ids null or prompt.len() values.
            ok(unsafe {
                puma_session_start_generate(*s, models[i], 0, ids, prompt.len(), max_new, mode)
            });
        }
        p.run();
        for i in 0..3 {
            let mut got = vec![0u32; max_new];
            let mut written = usize::MAX;
            // SAFETY: live session, max_new ids, valid out pointer.
            ok(unsafe { puma_session_take_ids(p.s[i], got.as_mut_ptr(), max_new, &mut written) });
            if i == 0 {
                assert_eq!(got, want, "mode {mode}");
            } else {
                assert_eq!(written, 0, "P{i} learned the ids");
            }
        }
    }
    for m in models {
        // SAFETY: each model freed once.
        ok(unsafe { puma_model_free(m) });
    }
}

/// BERT (the tiny random checkpoint) through the C API: a padded batch of two sequences,
/// the sentence embeddings and classification logits equal the plaintext model's within
/// the secure bounds; a decoder operation on an encoder is refused.
#[test]
fn bert_encoding_through_the_c_api_matches_the_plaintext_model() {
    use puma_layers::bert::plain::mean_pool_normalized;
    use puma_layers::bert::{BertBatch, PlainBert};
    const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/bert-tiny-random");
    let plain = PlainBert::load(std::path::Path::new(MODEL)).unwrap();
    let seqs = vec![
        (vec![101u32, 7592, 2088, 102], vec![0u32; 4]),
        (vec![101u32, 2023, 102], vec![0u32; 3]),
    ];
    let batch = BertBatch::padded(&seqs, 0).unwrap();
    let out = plain.forward(&batch).unwrap();
    let emb = mean_pool_normalized(out.last_hidden_state.view(), &batch);
    let logits = out.logits.clone().unwrap();
    let mask: Vec<u8> = batch.attention_mask.iter().map(|&m| u8::from(m)).collect();
    let mut p = Parties::new(41);
    let models = share_model(&mut p, MODEL);
    let mut info = puma_model_info::default();
    // SAFETY: live model, valid out pointer.
    ok(unsafe { puma_model_get_info(models[1], &mut info) });
    assert_eq!(info.architecture, PUMA_ARCH_BERT);
    let prompt = [1u32];
    // SAFETY: live session and model; one id.
    let st = unsafe { puma_session_start_generate(p.s[0], models[0], 0, prompt.as_ptr(), 1, 1, 0) };
    assert_eq!(
        st,
        puma_status::PUMA_ERR_INVALID_ARGUMENT,
        "{}",
        last_error()
    );
    let outputs = PUMA_ENCODE_LOGITS | PUMA_ENCODE_EMBEDDINGS;
    for (i, s) in p.s.iter().enumerate() {
        let ids = if i == 0 {
            batch.input_ids.as_ptr()
        } else {
            ptr::null()
        };
        // SAFETY: live session and model; mask and ids of batch × seq_len values.
        ok(unsafe {
            puma_session_start_encode(
                *s,
                models[i],
                0,
                ids,
                mask.as_ptr(),
                batch.batch,
                batch.seq_len,
                outputs,
            )
        });
    }
    p.run();
    let mut got = Vec::new();
    for i in 0..3 {
        let mut n = usize::MAX;
        // SAFETY: live session, valid out pointer.
        ok(unsafe { puma_session_result_len(p.s[i], &mut n) });
        let mut v = vec![f64::NAN; n];
        let mut written = usize::MAX;
        // SAFETY: live session, n doubles, valid out pointer.
        ok(unsafe { puma_session_take_values(p.s[i], v.as_mut_ptr(), n, &mut written) });
        if i == 0 {
            got = v;
        } else {
            assert_eq!(n, 0, "P{i} learned the outputs");
        }
    }
    let want: Vec<f64> = logits.iter().chain(emb.iter()).copied().collect();
    assert_eq!(got.len(), want.len());
    let (gl, ge) = got.split_at(logits.len());
    let (wl, we) = want.split_at(logits.len());
    let (el, ee) = (max_err(gl, wl), max_err(ge, we));
    println!("BERT through C: logits {el:.2e}, embeddings {ee:.2e}");
    assert!(el <= 5e-4 && ee <= 5e-3, "logits {el}, embeddings {ee}");
    for m in models {
        // SAFETY: each model freed once.
        ok(unsafe { puma_model_free(m) });
    }
}

/// Polls party `i` until it waits or ends; returns the frames it sends (destination,
/// bytes) and its last event and status.
fn poll_until_idle(p: &mut Parties, i: usize) -> (Vec<(usize, Vec<u8>)>, puma_event, puma_status) {
    let mut out = Vec::new();
    loop {
        let mut ev = empty_event();
        // SAFETY: live session, buffer of buf.len() bytes, valid event.
        let st = unsafe { puma_session_poll(p.s[i], p.buf.as_mut_ptr(), p.buf.len(), &mut ev) };
        match ev.kind {
            PUMA_EVENT_TRANSMIT => {
                ok(st);
                out.push((ev.peer as usize, p.buf[..ev.frame_len].to_vec()));
            }
            PUMA_EVENT_YIELDED => ok(st),
            _ => return (out, ev, st),
        }
    }
}

/// A frame of a generation that failed here two restarts ago (a peer's setup frame that
/// was still on the wire) is late: it is dropped, and the current generation goes on.
#[test]
fn a_frame_from_two_failed_generations_ago_is_dropped() {
    let mut p = Parties::new(41);
    let v = [2.0];
    // SAFETY (all calls below): live sessions; null values at non-owners.
    unsafe {
        for i in 0..3 {
            let vp = if i == 1 { v.as_ptr() } else { ptr::null() };
            ok(puma_session_start_share(p.s[i], 1, vp, 1, 1, 1));
        }
        // P1's setup frame of generation 1, for P0, stays on the wire.
        let (sent, ..) = poll_until_idle(&mut p, 1);
        let (_, late) = sent.into_iter().find(|(to, _)| *to == 0).unwrap();
        // P0 fails twice (two timeouts), so it runs generation 3.
        for round in 0..2 {
            if round > 0 {
                ok(puma_session_start_share(p.s[0], 1, ptr::null(), 1, 1, 1));
            }
            assert_eq!(puma_session_handle_timeout(p.s[0]), PUMA_ERR_TIMEOUT);
            let (_, ev, st) = poll_until_idle(&mut p, 0);
            assert_eq!((ev.kind, st), (PUMA_EVENT_DONE, PUMA_ERR_TIMEOUT));
        }
        assert_eq!(
            puma_session_handle_frame(p.s[0], 1, late.as_ptr(), late.len()),
            PUMA_OK,
            "{}",
            last_error()
        );
        // Generation 3 is intact: its setup frame goes out, and it waits (no abort).
        let (sent, ev, st) = poll_until_idle(&mut p, 0);
        assert_eq!(
            sent.iter()
                .map(|(to, f)| (*to, f.len()))
                .collect::<Vec<_>>(),
            vec![(2, 64)]
        );
        assert_eq!((ev.kind, st), (PUMA_EVENT_PENDING, PUMA_OK));
    }
}

/// A host timer that expires after the closing protocol has ended (before the host polled
/// `PUMA_EVENT_CLOSED`) finds no wait to time out: `PUMA_ERR_WRONG_STATE`, as the header
/// says, and the session still closes cleanly.
#[test]
fn a_timeout_after_the_session_ended_is_the_wrong_state() {
    let mut p = Parties::new(42);
    let r = p.share(1, &[1.5], 1, 1);
    free(r);
    // SAFETY (all calls below): live sessions, frames as polled.
    unsafe {
        for s in p.s {
            ok(puma_session_close(s));
        }
        let (_, ev, _) = poll_until_idle(&mut p, 0);
        assert_eq!(ev.kind, PUMA_EVENT_PENDING);
        // P1's and P2's last frames reach everyone.
        for i in [1usize, 2] {
            let (sent, ..) = poll_until_idle(&mut p, i);
            for (to, f) in sent {
                ok(puma_session_handle_frame(
                    p.s[to],
                    i as u32,
                    f.as_ptr(),
                    f.len(),
                ));
            }
        }
        // P0's protocol has ended: its last two frames wait to be polled, then CLOSED.
        for _ in 0..2 {
            let mut ev = empty_event();
            ok(puma_session_poll(
                p.s[0],
                p.buf.as_mut_ptr(),
                p.buf.len(),
                &mut ev,
            ));
            assert_eq!(ev.kind, PUMA_EVENT_TRANSMIT);
        }
        assert_eq!(puma_session_handle_timeout(p.s[0]), PUMA_ERR_WRONG_STATE);
        assert!(last_error().contains("no operation"), "{}", last_error());
        let (_, ev, st) = poll_until_idle(&mut p, 0);
        assert_eq!((ev.kind, st), (PUMA_EVENT_CLOSED, PUMA_OK));
    }
}

/// A config whose sizes exceed the model size limits, passed at a party that does not own
/// the weights (it reads the config only), is an error naming the field when the sharing
/// starts: nothing is allocated for it (it used to abort the host process on its first
/// poll, sizing 16 bytes per parameter).
#[test]
fn a_huge_config_at_a_non_owner_is_an_error() {
    let dir = std::env::temp_dir().join(format!("puma-ffi-huge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let configs = [
        (
            "gpt2",
            r#"{"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
                "n_positions": 128, "vocab_size": 1000000000000}"#,
        ),
        (
            "llama",
            r#"{"model_type": "llama", "vocab_size": 1000000000000, "hidden_size": 64,
                "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}"#,
        ),
        (
            "bert",
            r#"{"model_type": "bert", "vocab_size": 1000000000000, "hidden_size": 64,
                "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}"#,
        ),
    ];
    let p = Parties::new(43);
    for (name, text) in configs {
        let file = dir.join(format!("{name}.json"));
        std::fs::write(&file, text).unwrap();
        let path = std::ffi::CString::new(file.to_str().unwrap()).unwrap();
        for i in [0usize, 2] {
            // SAFETY: live session, NUL-terminated path.
            let st = unsafe { puma_session_start_model_share(p.s[i], 1, path.as_ptr()) };
            assert_eq!(st, PUMA_ERR_IO, "{name} at P{i}");
            let e = last_error();
            assert!(
                e.contains("vocab_size") && e.contains("exceeds the limit of 262144"),
                "{name}: {e}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
