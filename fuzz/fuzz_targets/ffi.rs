//! The C API's buffer entry points: `puma_session_handle_frame` with arbitrary bytes, for an
//! idle session (frames buffered before an operation) and during a truncation, with
//! `puma_session_poll` into buffers of fuzzed sizes and `puma_session_handle_timeout`.
//!
//! Checked: no panic reaches the boundary (`PUMA_ERR_PANIC`) and no input is reported as a
//! bug (`PUMA_ERR_BUG`); polling settles.
#![no_main]
// Calling the C ABI needs `unsafe`; every pointer passed is a live Rust value or buffer.
#![allow(unsafe_code)]

use libfuzzer_sys::fuzz_target;
use puma_ffi::{
    PUMA_MAX_FRAME_LEN, puma_event, puma_event_kind, puma_session, puma_session_free,
    puma_session_handle_frame, puma_session_handle_timeout, puma_session_new, puma_session_poll,
    puma_session_start_trunc, puma_status, puma_tensor, puma_tensor_free, puma_tensor_from_public,
};

fn ok(s: puma_status) -> puma_status {
    assert!(
        !matches!(s, puma_status::PUMA_ERR_PANIC | puma_status::PUMA_ERR_BUG),
        "{s:?}"
    );
    s
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, mut rest)) = data.split_first() else {
        return;
    };
    let party = u32::from(sel % 3);
    let mut session: *mut puma_session = std::ptr::null_mut();
    let entropy = [7u8; 32];
    // SAFETY: valid entropy buffer and out pointer.
    let st = unsafe { puma_session_new(party, 1, entropy.as_ptr(), 32, &mut session) };
    assert_eq!(st, puma_status::PUMA_OK);
    let mut tensor: *mut puma_tensor = std::ptr::null_mut();
    if sel & 0x80 != 0 {
        let vals = [1.5f64, -2.0];
        // SAFETY: live session, two readable doubles, valid out pointer.
        let st = unsafe { puma_tensor_from_public(session, vals.as_ptr(), 2, 1, 2, &mut tensor) };
        assert_eq!(st, puma_status::PUMA_OK);
        // SAFETY: live session and tensor.
        ok(unsafe { puma_session_start_trunc(session, tensor, 3) });
    }
    // Frames of a two-element truncation are small; a larger buffer only slows each run.
    let mut buf = vec![0u8; PUMA_MAX_FRAME_LEN.min(1 << 14)];
    for _ in 0..32 {
        let Some((&op, r)) = rest.split_first() else {
            break;
        };
        rest = r;
        let from = if op & 1 == 0 {
            (party + 1) % 3
        } else {
            (party + 2) % 3
        };
        if op & 0x40 != 0 {
            // SAFETY: live session.
            ok(unsafe { puma_session_handle_timeout(session) });
        } else {
            let n = usize::from(op >> 1 & 0x1f) * 8 + usize::from(op & 0x80 != 0) * 3;
            let n = n.min(rest.len());
            let (frame, r) = rest.split_at(n);
            rest = r;
            // SAFETY: live session; `frame` readable for its length (never null, even empty).
            ok(unsafe {
                puma_session_handle_frame(session, from, frame.as_ptr().cast(), frame.len())
            });
        }
        let cap = if op & 0x20 != 0 { 16 } else { buf.len() };
        for _ in 0..10_000 {
            let mut ev = puma_event {
                kind: puma_event_kind::PUMA_EVENT_PENDING,
                peer: 0,
                frame_len: 0,
            };
            // SAFETY: live session, `buf` writable for `cap` bytes, valid out pointer.
            let st = ok(unsafe { puma_session_poll(session, buf.as_mut_ptr(), cap, &mut ev) });
            if st != puma_status::PUMA_OK
                || !matches!(
                    ev.kind,
                    puma_event_kind::PUMA_EVENT_TRANSMIT | puma_event_kind::PUMA_EVENT_YIELDED
                )
            {
                break;
            }
        }
    }
    if !tensor.is_null() {
        // SAFETY: the tensor made above, freed once.
        ok(unsafe { puma_tensor_free(tensor) });
    }
    // SAFETY: the session made above, freed once.
    ok(unsafe { puma_session_free(session) });
});
