//! A protocol the test programs share.

use puma_core::wire::FRAME_HEADER_LEN;
use puma_core::{Ctx, Error, FixedPoint, PartyId, Stats, proto};

/// P0 shares `xs` (in the default fixed point), the parties square them and reveal the
/// squares to all. Only P0's `xs` are used; the others need just as many.
pub async fn squares(mut ctx: Ctx, me: PartyId, xs: Vec<f64>) -> Result<Vec<u64>, Error> {
    let fx = FixedPoint::default();
    let n = xs.len();
    let xs = fx.encode_slice(&xs)?;
    let x = proto::share_input(
        &mut ctx,
        PartyId::P0,
        (me == PartyId::P0).then_some(&xs[..]),
        n,
    )
    .await?;
    let y = proto::mul_fixed(&mut ctx, &x, &x).await?;
    proto::reveal_all(&mut ctx, &y).await
}

/// Asserts that a run over threads or sockets (`threaded`) cost exactly what another run
/// of the same protocol (`simulated`: the simulator, or an unshaped run) cost.
///
/// Everything a party sends, and its rounds, depend only on the protocol. What it
/// receives can miss its peers' final END frames (empty, header only) when it finishes
/// first: it stops listening. So received counters are checked against what the peer
/// sent, short by at most that one empty frame.
pub fn assert_same_costs(threaded: &[Stats; 3], simulated: &[Stats; 3], what: &str) {
    for (i, (t, s)) in threaded.iter().zip(simulated).enumerate() {
        assert_eq!(t.rounds, s.rounds, "{what} P{i} rounds");
        assert_eq!(t.frames_sent, s.frames_sent, "{what} P{i} frames sent");
        assert_eq!(t.bytes_sent, s.bytes_sent, "{what} P{i} bytes sent");
        assert_eq!(
            t.payload_bytes_sent, s.payload_bytes_sent,
            "{what} P{i} payload sent"
        );
        assert_eq!(
            t.setup_bytes_sent, s.setup_bytes_sent,
            "{what} P{i} setup bytes"
        );
        for (j, peer) in threaded.iter().enumerate().filter(|(j, _)| *j != i) {
            let (frames, bytes) = (peer.frames_sent[i], peer.bytes_sent[i]);
            assert!(
                t.frames_received[j] <= frames && t.frames_received[j] + 1 >= frames,
                "{what} P{i} from P{j}"
            );
            let missed = bytes - t.bytes_received[j];
            assert!(
                missed == 0 || missed == FRAME_HEADER_LEN as u64,
                "{what} P{i} from P{j}: missed {missed} bytes"
            );
        }
    }
}
