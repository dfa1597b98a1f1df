//! Cost report: measured rounds and bytes of every protocol, from the engine's counters.
//!
//! `cargo run --release -p puma-core --example cost` prints, for each protocol on a batch of
//! inputs, the critical-path rounds and the payload bytes each party sent, per element (or
//! per row/token where that is the natural unit). The numbers are deterministic: they are
//! the same on every machine and are pinned by the tests.

use std::future::Future;

use puma_core::sim::Sim;
use puma_core::{Ctx, Error, Shares, Width, proto};

/// Runs `f` on fresh random sharings of `n` elements and prints its cost per `unit`.
fn report<F, Fut, T>(name: &str, n: usize, units: usize, unit: &str, f: F)
where
    F: Fn(Ctx, Shares) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<T, Error>> + Send + 'static,
    T: 'static,
{
    let out = Sim::new(1).run(move |_| {
        let f = f.clone();
        move |mut ctx| async move {
            let x = ctx.random_shares(n);
            f(ctx, x).await
        }
    });
    let rounds = out.rounds();
    let bytes = out.payload_bytes();
    if let Some(e) = out.results.iter().find_map(|r| r.as_ref().err()) {
        println!("{name:<34} failed: {e}");
        return;
    }
    let per = |b: u64| b as f64 / units as f64;
    let total: u64 = bytes.iter().sum();
    println!(
        "{name:<34} {rounds:>4} rounds   per {unit:<8} bytes P0 {:>10.1}  P1 {:>10.1}  P2 {:>10.1}  total {:>10.1}  ({:.0} bits)",
        per(bytes[0]),
        per(bytes[1]),
        per(bytes[2]),
        per(total),
        per(total) * 8.0
    );
}

fn main() {
    let n = 3 * 1024;
    println!(
        "puma-core protocol costs (payload bytes sent, excluding 60 bytes of frame and record headers per message)\n"
    );
    report("mul", n, n, "element", |mut c, x| async move {
        proto::mul(&mut c, &x, &x).await
    });
    report("square", n, n, "element", |mut c, x| async move {
        proto::square(&mut c, &x).await
    });
    report("trunc (d = 18)", n, n, "element", |mut c, x| async move {
        proto::trunc(&mut c, &x, 18).await
    });
    report(
        "mul_fixed (mul + trunc)",
        n,
        n,
        "element",
        |mut c, x| async move { proto::mul_fixed(&mut c, &x, &x).await },
    );
    report(
        "matmul 32×768 · 768×64 (per output)",
        32 * 768 + 768 * 64,
        32 * 64,
        "output",
        |mut c, x| async move {
            let (a, b) = x.split_at(32 * 768)?;
            proto::matmul(&mut c, &a, &b, 32, 768, 64).await
        },
    );
    for k in [64u32, 40, 32, 16] {
        let w = Width::new(k).unwrap_or(Width::W64);
        report(
            &format!("msb / lt (k = {k})"),
            n,
            n,
            "element",
            move |mut c, x| async move { proto::msb(&mut c, &x, w).await },
        );
    }
    for k in [64u32, 32, 16] {
        let w = Width::new(k).unwrap_or(Width::W64);
        report(
            &format!("eq (k = {k})"),
            n,
            n,
            "element",
            move |mut c, x| async move { proto::eq_public(&mut c, &x, &vec![0; x.len()], w).await },
        );
    }
    report("b2a", n, n, "element", |mut c, x| async move {
        let b = puma_core::BitShares::from_public(c.me(), Width::BIT, &vec![1; x.len()]);
        proto::b2a(&mut c, &b).await
    });
    report(
        "select (b2a + mul)",
        n,
        n,
        "element",
        |mut c, x| async move {
            let b = puma_core::BitShares::from_public(c.me(), Width::BIT, &vec![1; x.len()]);
            proto::select(&mut c, &b, &x, &x).await
        },
    );
    for a in [
        proto::ExpApprox::Taylor2 { squarings: 8 },
        proto::ExpApprox::Minimax,
    ] {
        report(
            &format!("neg_exp {a:?}"),
            n,
            n,
            "element",
            move |mut c, x| async move { proto::neg_exp_with(&mut c, &x, a).await },
        );
    }
    let w32 = Width::new(proto::SOFTMAX_RING_BITS).unwrap_or(Width::W64);
    report(
        "max 384 rows of 32 (prompt)",
        384 * 32,
        384,
        "row",
        move |mut c, x| async move { proto::max_rows(&mut c, &x, 384, 32, w32).await },
    );
    report(
        "max 12 rows of 33 (KV step)",
        12 * 33,
        12,
        "row",
        move |mut c, x| async move { proto::max_rows(&mut c, &x, 12, 33, w32).await },
    );
    report(
        "softmax 384 rows of 32, Minimax",
        384 * 32,
        384,
        "row",
        |mut c, x| async move {
            let valid = vec![32; 384];
            proto::softmax_rows_with(&mut c, &x, 384, 32, &valid, proto::ExpApprox::Minimax).await
        },
    );
    report(
        "rmsnorm 24 rows of 576, bound 2^15",
        24 * 576 + 576,
        24,
        "row",
        |mut c, x| async move {
            let (x, g) = x.split_at(24 * 576)?;
            proto::rms_norm_rows(&mut c, &x, 24, 576, &g, 1e-5, 32768.0).await
        },
    );
    report(
        "silu_precise Minimax",
        n,
        n,
        "element",
        |mut c, x| async move { proto::silu_precise(&mut c, &x, proto::ExpApprox::Minimax).await },
    );
    report("tanh", n, n, "element", |mut c, x| async move {
        proto::tanh(&mut c, &x).await
    });
}
