//! `Session::handle_input` with arbitrary frames in arbitrary states.
//!
//! The input is a script of operations against one party (chosen by the first byte) whose
//! peers replay an honest run: deliver the next genuine frame, deliver it bit-flipped,
//! truncated or extended, deliver an earlier or later frame (duplicate / reorder), skip one
//! (drop), deliver raw bytes, or fire the timer. Checked: no panic, no hang, `Done` exactly
//! once, every rejected input a typed error, and a successful result equals the honest one
//! unless a payload byte (which only the authenticated link protects) was altered.
#![no_main]

use libfuzzer_sys::fuzz_target;
use puma_core::{ErrorKind, Input, Output, PartyId};
use puma_fuzz::{is_payload, session, transcript};

/// Polls until the session waits or ends; more steps than this is a hang.
const MAX_POLLS: usize = 100_000;

fuzz_target!(|data: &[u8]| {
    let Some((&who, mut ops)) = data.split_first() else {
        return;
    };
    let me = PartyId::from_index(usize::from(who % 3));
    let t = transcript(me);
    let mut s = session(me);
    let mut cursor = [0usize; 3];
    let mut payload_altered = false;
    let mut done = false;
    let take = |ops: &mut &[u8]| -> u8 {
        let Some((&b, rest)) = ops.split_first() else {
            return 0;
        };
        *ops = rest;
        b
    };
    let mut steps = 0;
    while !ops.is_empty() && !done && steps < 512 {
        steps += 1;
        let op = take(&mut ops);
        let peer = if op & 0x80 == 0 { me.next() } else { me.prev() };
        let frames = &t.frames[peer.index()];
        let c = &mut cursor[peer.index()];
        let arg = u16::from_le_bytes([take(&mut ops), take(&mut ops)]);
        let genuine = frames.get(*c).cloned();
        let mut timeout = false;
        let input: Option<Vec<u8>> = match op & 0x7 {
            // In order, untouched.
            0 | 1 => {
                *c += 1;
                genuine
            }
            // One bit flipped.
            2 => genuine.map(|mut f| {
                *c += 1;
                let pos = usize::from(arg) % f.len();
                payload_altered |= is_payload(&f, pos);
                f[pos] ^= 1 << (arg >> 13);
                f
            }),
            // Truncated.
            3 => genuine.map(|mut f| {
                *c += 1;
                f.truncate(usize::from(arg) % f.len().max(1));
                f
            }),
            // Another frame of the link: a duplicate or one from the future.
            4 => frames.get(usize::from(arg) % frames.len().max(1)).cloned(),
            // Dropped.
            5 => {
                *c += 1;
                None
            }
            // Extended by trailing bytes.
            6 => genuine.map(|mut f| {
                *c += 1;
                f.extend(std::iter::repeat_n(
                    (arg >> 8) as u8,
                    usize::from(arg & 0xff) + 1,
                ));
                f
            }),
            // The host's timer fires.
            _ if op & 0x40 != 0 => {
                timeout = true;
                None
            }
            // Raw bytes from the rest of the input.
            _ => {
                let n = usize::from(arg % 512).min(ops.len());
                let (raw, rest) = ops.split_at(n);
                ops = rest;
                Some(raw.to_vec())
            }
        };
        let r = match &input {
            Some(bytes) => s.handle_input(Input::Frame { from: peer, bytes }),
            None if timeout => s.handle_input(Input::Timeout),
            None => Ok(()),
        };
        if let Err(e) = r {
            assert!(
                !matches!(e.kind(), ErrorKind::Bug),
                "bad input reported as an internal bug: {e}"
            );
        }
        for polls in 0.. {
            assert!(polls < MAX_POLLS, "session does not settle (hang)");
            match s.poll_output() {
                Output::Transmit(_) | Output::Yielded => {}
                Output::Pending { .. } => break,
                Output::Done(r) => {
                    done = true;
                    match r {
                        Ok(v) => assert!(
                            payload_altered || v == t.expected,
                            "wrong output presented as valid"
                        ),
                        Err(e) => assert!(
                            !matches!(e.kind(), ErrorKind::Bug),
                            "bad input ended as an internal bug: {e}"
                        ),
                    }
                    break;
                }
            }
        }
    }
    if done {
        // After Done, input is misuse and polling keeps saying so.
        let e = s.handle_input(Input::Timeout).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Misuse);
        assert!(matches!(s.poll_output(), Output::Done(Err(_))));
    }
});
