use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::error::Error;
use crate::party::PartyId;
use crate::ring::Width;
use crate::share::Shares;

/// Secret-shares `n` values held by `owner` (a computing party).
///
/// Component `o+1` is `F_{o+1}(t)` (known to `owner` and its next party), component `o+2`
/// is 0, and the owner sends component `o = v − F_{o+1}(t)` to its previous party. Each
/// non-owner sees one uniformly masked or one pseudorandom vector. (PROTOCOLS.md §2.)
///
/// Rounds: 1. Bytes: 8·n from the owner, 0 from the others.
///
/// # Errors
/// `Misuse` if the owner passes no values or a wrong length, or another party passes
/// values; `Protocol` if the owner's message is malformed.
pub async fn share_input(
    ctx: &mut Ctx,
    owner: PartyId,
    values: Option<&[u64]>,
    n: usize,
) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let me = ctx.me();
    let mask = ctx.pair_random(owner.next(), n)?;
    match (me == owner, values) {
        (true, Some(v)) if v.len() == n => {
            let f = mask.ok_or(Error::bug("owner lacks its input mask"))?;
            let c: Vec<u64> = v.iter().zip(&f).map(|(v, f)| v.wrapping_sub(*f)).collect();
            ctx.send(me.prev(), &c, Width::W64)?;
            Ok(Shares::from_parts(me, c, f))
        }
        (true, _) => Err(Error::misuse("the input owner must pass exactly n values")),
        (false, Some(_)) => Err(Error::misuse("only the input owner passes values")),
        (false, None) if me == owner.next() => {
            let f = mask.ok_or(Error::bug("next party lacks the input mask"))?;
            Ok(Shares::from_parts(me, f, alloc::vec![0; n]))
        }
        (false, None) => {
            let c = ctx.recv(owner, n, Width::W64).await?;
            Ok(Shares::from_parts(me, alloc::vec![0; n], c))
        }
    }
}

/// [`share_input`] of the concatenation of several vectors, returned as one sharing per
/// vector: the owner passes the vectors (`values[i].len() == sizes[i]`), by value, and
/// every party passes the same `sizes`.
///
/// Same draw, same record and same bytes as [`share_input`] of the concatenation, but no
/// party ever builds the concatenation or cuts it up again: the owner masks its vectors in
/// place, the mask is drawn piece by piece and the received record is unpacked straight
/// into pieces. For sharing a large model as one message.
///
/// Rounds: 1. Bytes: 8·Σ sizes from the owner, 0 from the others.
///
/// # Errors
/// As [`share_input`]: `Misuse` if the owner passes no values or vectors whose lengths are
/// not `sizes`, or another party passes values; `Protocol` if the owner's message is
/// malformed.
pub async fn share_input_parts(
    ctx: &mut Ctx,
    owner: PartyId,
    values: Option<Vec<Vec<u64>>>,
    sizes: &[usize],
) -> Result<Vec<Shares>, Error> {
    let mut ctx = ctx.fork();
    let me = ctx.me();
    let masks = ctx.pair_random_parts(owner.next(), sizes)?;
    let zeros = || sizes.iter().map(|&n| alloc::vec![0u64; n]);
    match (me == owner, values) {
        (true, Some(mut vs))
            if vs.len() == sizes.len() && vs.iter().zip(sizes).all(|(v, &n)| v.len() == n) =>
        {
            let fs = masks.ok_or(Error::bug("owner lacks its input mask"))?;
            for (v, f) in vs.iter_mut().zip(&fs) {
                for (x, m) in v.iter_mut().zip(f) {
                    *x = x.wrapping_sub(*m);
                }
            }
            ctx.send_parts_w64(me.prev(), &vs)?;
            Ok(vs
                .into_iter()
                .zip(fs)
                .map(|(c, f)| Shares::from_parts(me, c, f))
                .collect())
        }
        (true, _) => Err(Error::misuse(
            "the input owner must pass one vector of each given size",
        )),
        (false, Some(_)) => Err(Error::misuse("only the input owner passes values")),
        (false, None) if me == owner.next() => {
            let fs = masks.ok_or(Error::bug("next party lacks the input mask"))?;
            Ok(fs
                .into_iter()
                .zip(zeros())
                .map(|(f, z)| Shares::from_parts(me, f, z))
                .collect())
        }
        (false, None) => {
            let cs = ctx.recv_parts_w64(owner, sizes).await?;
            Ok(zeros()
                .zip(cs)
                .map(|(z, c)| Shares::from_parts(me, z, c))
                .collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::reveal_all;
    use crate::sim::{Fate, Sim};
    use alloc::rc::Rc;
    use alloc::vec;
    use core::cell::RefCell;

    type FrameLog = Vec<(PartyId, PartyId, Vec<u8>)>;
    type Frames = Rc<RefCell<FrameLog>>;

    /// Runs `share_input` of the concatenation (`split = false`) or `share_input_parts`,
    /// then reveals every piece; returns the revealed pieces, the frames and the rounds.
    fn run(parts: &[Vec<u64>], split: bool) -> (Vec<Vec<u64>>, FrameLog, u32) {
        let frames: Frames = Rc::default();
        let log = frames.clone();
        let mut sim = Sim::new(5).with_fault(move |f| {
            log.borrow_mut().push((f.from, f.to, f.bytes.clone()));
            Fate::Deliver
        });
        let sizes: Vec<usize> = parts.iter().map(Vec::len).collect();
        let out = sim.run(|me| {
            let parts = parts.to_vec();
            let sizes = sizes.clone();
            move |mut ctx| async move {
                let owner = PartyId::P1;
                let mine = (me == owner).then_some(parts);
                let shares = if split {
                    share_input_parts(&mut ctx, owner, mine, &sizes).await?
                } else {
                    let flat = mine.map(|p| p.concat());
                    let n = sizes.iter().sum();
                    let all = share_input(&mut ctx, owner, flat.as_deref(), n).await?;
                    let mut at = 0;
                    let mut pieces = Vec::new();
                    for &n in &sizes {
                        pieces.push(all.slice(at..at + n)?);
                        at += n;
                    }
                    pieces
                };
                let mut revealed = Vec::new();
                for s in &shares {
                    revealed.push(reveal_all(&mut ctx, s).await?);
                }
                Ok(revealed)
            }
        });
        let rounds = out.rounds();
        let [a, b, c] = out.into_results().unwrap();
        assert_eq!(a, b);
        assert_eq!(b, c);
        let frames = frames.borrow().clone();
        (a, frames, rounds)
    }

    #[test]
    fn parts_equal_the_concatenated_sharing_frame_for_frame() {
        let parts = vec![
            (0..5u64)
                .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .collect(),
            vec![],
            vec![u64::MAX, 7],
            (0..300u64).collect::<Vec<u64>>(),
        ];
        let (a, fa, ra) = run(&parts, false);
        let (b, fb, rb) = run(&parts, true);
        assert_eq!(a, parts);
        assert_eq!(b, parts);
        assert_eq!(ra, rb);
        assert_eq!(fa, fb);
    }

    #[test]
    fn parts_reject_wrong_lengths() {
        let out = Sim::new(1).run(|me| {
            move |mut ctx| async move {
                let mine = (me == PartyId::P0).then(|| vec![vec![1u64, 2], vec![3]]);
                share_input_parts(&mut ctx, PartyId::P0, mine, &[2, 2]).await
            }
        });
        assert!(out.results[0].is_err());
    }
}
