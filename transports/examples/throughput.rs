//! Loopback throughput of the network links: 1 GiB of ring elements (u64, little-endian)
//! from P0 to P1 in 4 MiB frames, over TCP+TLS and over QUIC.
//!
//! ```sh
//! cargo run --release -p puma-transports --example throughput [-- GIB]
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::thread;
use std::time::{Duration, Instant};

use puma_core::{Config, PartyId};
use puma_transports::loopback::{LocalNet, Network};
use puma_transports::net::NetOptions;
use puma_transports::{Link, Recv};

fn main() {
    let gib: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1);
    let frame_len = Config::DEFAULT_MAX_FRAME_LEN;
    let total = gib << 30;
    let frames = total / frame_len as u64;
    let frame: Vec<u8> = (0..(frame_len / 8) as u64)
        .flat_map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes())
        .collect();
    for network in [Network::Tcp, Network::Quic] {
        let mut net = LocalNet::new(network).unwrap();
        let [p0, p1, p2] = PartyId::ALL.map(|p| net.party(p));
        let opts = NetOptions {
            timeout: Duration::from_secs(60),
            ..NetOptions::default()
        };
        let (secs, got) = thread::scope(|s| {
            let o = opts.clone();
            let f = &frame;
            let sender = s.spawn(move || {
                let mut link = p0.connect(o).unwrap();
                let t0 = Instant::now();
                for _ in 0..frames {
                    link.send(PartyId::P1, f.clone()).unwrap();
                }
                link.finish(Duration::from_secs(60));
                t0
            });
            let o = opts.clone();
            let receiver = s.spawn(move || {
                let mut link = p1.connect(o).unwrap();
                let mut got = 0u64;
                let mut n = 0u64;
                while n < frames {
                    match link.recv(Duration::from_secs(60)).unwrap() {
                        Recv::Frame {
                            from: PartyId::P0,
                            bytes,
                        } => {
                            assert_eq!(bytes.len(), frame_len);
                            got += bytes.len() as u64;
                            n += 1;
                        }
                        Recv::Frame { .. } | Recv::Closed { peer: PartyId::P2 } => {}
                        other => panic!("{other:?}"),
                    }
                }
                let end = Instant::now();
                link.finish(Duration::from_secs(60));
                (end, got)
            });
            let o = opts.clone();
            s.spawn(move || p2.connect(o).unwrap().finish(Duration::from_secs(60)));
            let t0 = sender.join().unwrap();
            let (end, got) = receiver.join().unwrap();
            (end.duration_since(t0).as_secs_f64(), got)
        });
        assert_eq!(got, frames * frame_len as u64);
        println!(
            "{network:?}: {:.2} GiB in {secs:.2} s = {:.2} GB/s ({:.2} Gbit/s)",
            got as f64 / (1u64 << 30) as f64,
            got as f64 / secs / 1e9,
            got as f64 * 8.0 / secs / 1e9
        );
    }
}
