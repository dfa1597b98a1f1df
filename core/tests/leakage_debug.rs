//! No `Debug`, `Display` or error message of a type holding secret data prints it: shares,
//! bit shares, frames, inputs, transmits, contexts, sessions and every error a failed
//! protocol or a rejected frame produces. Secrets are planted as distinctive values and
//! searched for in every rendering, in decimal and in hex.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use puma_core::sim::{Sim, bit_shares_from_components};
use puma_core::{Config, Error, Input, Output, PartyId, Session, Shares, Width, proto};

/// A value no counter, length or id in a rendering could equal by chance.
const SECRET: u64 = 0x5EC2_E7AB_CDEF_1234;

/// Every way `v` could appear in text.
fn renderings(v: u64) -> Vec<String> {
    let mut out = vec![
        format!("{v}"),
        format!("{v:x}"),
        format!("{v:X}"),
        format!("{}", v as i64),
    ];
    // Single bytes of a hex dump of the little-endian encoding (two bytes, to avoid noise).
    let b = v.to_le_bytes();
    out.push(format!("{}, {}", b[0], b[1]));
    out.push(format!("{:02x}{:02x}", b[0], b[1]));
    out
}

fn assert_hides(text: &str, secrets: &[u64]) {
    for &s in secrets {
        for r in renderings(s) {
            assert!(
                !text.contains(&r),
                "{text:?} contains {r} (from secret {s:#x})"
            );
        }
    }
}

/// The secret shared by P0 and each party's shares of it.
fn shared_secret() -> [Shares; 3] {
    Sim::new(3)
        .run(|me| {
            move |mut ctx| async move {
                let v = [SECRET; 4];
                proto::share_input(
                    &mut ctx,
                    PartyId::P0,
                    (me == PartyId::P0).then_some(&v[..]),
                    4,
                )
                .await
            }
        })
        .into_results()
        .unwrap()
}

#[test]
fn shares_print_only_party_and_length() {
    let shares = shared_secret();
    for s in &shares {
        let (a, b) = s.components();
        let mut planted: Vec<u64> = a.iter().chain(b).copied().collect();
        planted.push(SECRET);
        for text in [format!("{s:?}"), format!("{s:#?}")] {
            assert_hides(&text, &planted);
            assert!(text.contains("len: 4"), "{text}");
        }
        let bits = bit_shares_from_components(s.party(), Width::W64, a.to_vec(), b.to_vec());
        assert_hides(&format!("{bits:?} {bits:#?}"), &planted);
    }
}

#[test]
fn frames_inputs_and_transmits_print_only_sizes() {
    // P0's session sends its seed at once: the frame holds 32 secret key bytes.
    let mut s = Session::new(Config::new(1), PartyId::P0, [0x42; 32], |_ctx| async {
        Ok::<(), Error>(())
    })
    .unwrap();
    let Output::Transmit(t) = s.poll_output() else {
        panic!("the setup frame comes first")
    };
    let bytes = t.frame.as_bytes().to_vec();
    let seed: Vec<u64> = bytes[32..]
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    let text = format!("{t:?} {:?} {s:?}", t.frame);
    assert_hides(&text, &seed);
    assert!(text.contains("64 bytes"), "{text}");
    let input = Input::Frame {
        from: PartyId::P1,
        bytes: &bytes,
    };
    let text = format!("{input:?} {input:#?}");
    assert_hides(&text, &seed);
    assert!(text.contains("64 bytes"), "{text}");
}

#[test]
fn protocol_and_frame_errors_carry_no_values() {
    // A protocol failing on secret data: mismatched lengths of secret operands.
    let out = Sim::new(4).run(|me| {
        move |mut ctx| async move {
            let v = [SECRET; 3];
            let x = proto::share_input(
                &mut ctx,
                PartyId::P1,
                (me == PartyId::P1).then_some(&v[..]),
                3,
            )
            .await?;
            let y = x.slice(0..2)?;
            proto::mul(&mut ctx, &x, &y).await
        }
    });
    let mut texts = Vec::new();
    for r in &out.results {
        let e = r.as_ref().unwrap_err();
        texts.push(format!("{e} {e:?} {:?}", e.kind()));
    }
    // Frames carrying the secret, rejected for every reason a receiver checks.
    let mut s = Session::new(Config::new(9), PartyId::P2, [1; 32], |_ctx| async {
        Ok::<(), Error>(())
    })
    .unwrap();
    let mut frame = vec![0x50, 0x4d, 1, 1, 0, 2, 0, 0];
    frame.extend_from_slice(&9u64.to_le_bytes());
    frame.extend_from_slice(&0u64.to_le_bytes());
    frame.extend_from_slice(&[0; 8]);
    frame.extend_from_slice(&SECRET.to_le_bytes());
    for cut in [3, 20, frame.len()] {
        let mut s2 = Session::new(Config::new(9), PartyId::P2, [1; 32], |_ctx| async {
            Ok::<(), Error>(())
        })
        .unwrap();
        let e = s2
            .handle_input(Input::Frame {
                from: PartyId::P0,
                bytes: &frame[..cut],
            })
            .unwrap_err();
        texts.push(format!("{e} {e:?}"));
    }
    let e = s
        .handle_input(Input::Frame {
            from: PartyId::P0,
            bytes: &frame,
        })
        .unwrap_err();
    texts.push(format!("{e} {e:?} {s:?}"));
    for t in &texts {
        assert_hides(t, &[SECRET]);
    }
    // Error messages are static: the type cannot hold a value at all.
    assert!(std::mem::size_of::<Error>() <= 3 * std::mem::size_of::<usize>());
}
