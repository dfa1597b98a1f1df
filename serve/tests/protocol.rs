//! The client protocol's framing and payloads, and the service's configuration file:
//! round trips, and refusals of what a hostile or broken peer or file can send.

use std::path::Path;

use proptest::prelude::*;
use puma_core::PartyId;
use puma_core::dealing::{Component, Span, deal};
use puma_serve::config::ServiceConfig;
use puma_serve::protocol::{
    GenerateHeader, MAX_HEADER, ProtocolError, Reply, Request, WireMode, decode_components,
    decode_dealt, encode_components, encode_dealt, read_message, write_message,
};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

fn header() -> Request {
    Request::Generate(GenerateHeader {
        session_id: 9,
        model: "m".into(),
        lens: vec![3, 1],
        max_new: 4,
        mode: WireMode::Private,
        eos: vec![2],
        sampling: None,
        deadline_ms: 0,
    })
}

#[test]
fn messages_round_trip_and_report_their_size() {
    let rt = rt();
    let mut buf = Vec::new();
    let n = rt
        .block_on(write_message(&mut buf, &header(), &[1, 2, 3]))
        .unwrap();
    assert_eq!(n, buf.len() as u64);
    let mut r = &buf[..];
    let (h, p) = rt
        .block_on(read_message::<_, Request>(&mut r, 3))
        .unwrap()
        .unwrap();
    assert_eq!((h, p), (header(), vec![1, 2, 3]));
    // The end of the stream before a message is a clean close.
    assert!(
        rt.block_on(read_message::<_, Request>(&mut r, 3))
            .unwrap()
            .is_none()
    );
}

#[test]
fn oversized_truncated_and_malformed_messages_are_refused() {
    let rt = rt();
    let mut buf = Vec::new();
    rt.block_on(write_message(&mut buf, &header(), &[0; 16]))
        .unwrap();
    // A payload above the receiver's limit.
    let err = rt
        .block_on(read_message::<_, Request>(&mut &buf[..], 15))
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProtocolError::TooLong {
                what: "payload",
                len: 16,
                max: 15
            }
        ),
        "{err}"
    );
    // A payload that ends early.
    let cut = &buf[..buf.len() - 1];
    let err = rt
        .block_on(read_message::<_, Request>(&mut &cut[..], 16))
        .unwrap_err();
    assert!(matches!(err, ProtocolError::Io(_)), "{err}");
    // A header longer than allowed, announced before anything is allocated.
    let mut big = ((MAX_HEADER + 1) as u32).to_le_bytes().to_vec();
    big.extend_from_slice(b"{}");
    let err = rt
        .block_on(read_message::<_, Request>(&mut &big[..], 0))
        .unwrap_err();
    assert!(
        matches!(err, ProtocolError::TooLong { what: "header", .. }),
        "{err}"
    );
    // A header that is not a request (a reply, or an unknown field).
    let mut other = Vec::new();
    rt.block_on(write_message(
        &mut other,
        &Reply::Done {
            rounds: 1,
            bytes_sent: 2,
        },
        &[],
    ))
    .unwrap();
    let err = rt
        .block_on(read_message::<_, Request>(&mut &other[..], 0))
        .unwrap_err();
    assert!(matches!(err, ProtocolError::Header(_)), "{err}");
    let mut extra = Vec::new();
    let text = br#"{"type":"upload_end","model_hash":"00","secret":1}"#;
    extra.extend_from_slice(&(text.len() as u32).to_le_bytes());
    extra.extend_from_slice(text);
    extra.extend_from_slice(&0u64.to_le_bytes());
    let err = rt
        .block_on(read_message::<_, Request>(&mut &extra[..], 0))
        .unwrap_err();
    assert!(matches!(err, ProtocolError::Header(_)), "{err}");
}

#[test]
fn dealt_parts_round_trip_and_bad_payloads_are_refused() {
    let values: Vec<u64> = (0..10).map(|i| i * 7919).collect();
    for part in deal(&values, &[[5; 32], [6; 32]], Span::whole(3)) {
        let bytes = encode_dealt(&part);
        assert_eq!(decode_dealt(bytes.clone(), 10).unwrap(), part);
        // A vector longer than the request allows.
        if matches!(part.first, Component::Values(_)) || matches!(part.second, Component::Values(_))
        {
            assert!(matches!(
                decode_dealt(bytes.clone(), 9),
                Err(ProtocolError::Payload(_))
            ));
        }
        // Truncated, or with bytes after it.
        assert!(decode_dealt(bytes[..bytes.len() - 1].to_vec(), 10).is_err());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_dealt(longer, 10).is_err());
    }
    // Another party index, another component tag, a length that overflows.
    assert!(decode_dealt(vec![3], 10).is_err());
    assert!(decode_dealt(vec![0, 7], 10).is_err());
    let mut huge = vec![1u8, 1];
    huge.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(decode_dealt(huge, usize::MAX).is_err());
}

#[test]
fn components_round_trip_and_must_match_the_count() {
    let bytes = encode_components(&[1, 2, 3], &[4, 5, 6]);
    assert_eq!(
        decode_components(&bytes, 3).unwrap(),
        (vec![1, 2, 3], vec![4, 5, 6])
    );
    assert!(decode_components(&bytes, 2).is_err());
    assert!(decode_components(&bytes[..47], 3).is_err());
}

proptest! {
    #[test]
    fn any_bytes_decode_to_a_part_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(d) = decode_dealt(bytes.clone(), 8) {
            // What decodes re-encodes to the same bytes.
            prop_assert_eq!(encode_dealt(&d), bytes);
            prop_assert!(matches!(d.party, PartyId::P0 | PartyId::P1 | PartyId::P2));
        }
    }
}

const GOOD: &str = r#"
peer_timeout_secs = 10
[[server]]
id = 0
peer_addr = "127.0.0.1:7000"
client_addr = "127.0.0.1:7100"
cert = "p0.cert.pem"
key = "p0.key.pem"
store = "p0-store"
[[server]]
id = 1
peer_addr = "127.0.0.1:7001"
client_addr = "127.0.0.1:7101"
cert = "p1.cert.pem"
[[server]]
id = 2
peer_addr = "127.0.0.1:7002"
client_addr = "127.0.0.1:7102"
cert = "p2.cert.pem"
"#;

#[test]
fn the_configuration_file_parses_with_defaults_and_refuses_mistakes() {
    let cfg = ServiceConfig::from_toml_str(GOOD, Path::new("/etc/svc")).unwrap();
    assert_eq!(cfg.peer_timeout.as_secs(), 10);
    assert_eq!((cfg.max_running, cfg.max_queued), (4, 16));
    assert!(!cfg.accept_uploads);
    let p0 = cfg.server(PartyId::P0);
    assert_eq!(p0.store.as_deref(), Some(Path::new("/etc/svc/p0-store")));
    assert_eq!(cfg.server(PartyId::P2).client_addr, "127.0.0.1:7102");
    assert!(cfg.server(PartyId::P1).key.is_none());

    for (text, needle) in [
        (GOOD.replace("id = 2", "id = 1"), "listed twice"),
        (GOOD.replace("id = 2", "id = 3"), "not 0, 1 or 2"),
        (
            GOOD.replace("peer_timeout_secs = 10", "peer_timeout_secs = 0"),
            "peer_timeout_secs",
        ),
        (format!("max_running = 0\n{GOOD}"), "max_running"),
        (format!("max_queued = 100000000\n{GOOD}"), "max_queued"),
        (
            format!("deadline_secs = 99999999999\n{GOOD}"),
            "deadline_secs",
        ),
        (format!("colour = 1\n{GOOD}"), "colour"),
    ] {
        let err = ServiceConfig::from_toml_str(&text, Path::new(".")).unwrap_err();
        assert!(err.to_string().contains(needle), "{needle}: {err}");
    }
    let err = ServiceConfig::from_file(Path::new("/nonexistent/service.toml")).unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/service.toml"),
        "{err}"
    );
    // A server without a key on this host cannot be run here.
    let err = cfg.identity_and_pins(PartyId::P1).unwrap_err();
    assert!(err.to_string().contains("no key for server 1"), "{err}");
}
