use alloc::vec::Vec;

use crate::engine::Ctx;
use crate::engine::ctx::try_words;
use crate::error::Error;
use crate::party::PartyId;
use crate::ring::Width;
use crate::share::Shares;
use crate::wire;

use super::dpf;
use crate::engine::budget::PRSS_WORD;

/// Secret-shares `n` values held by `owner` (a computing party).
///
/// Component `o+1` is `F_{o+1}(t)` (known to `owner` and its next party), component `o+2`
/// is 0, and the owner sends component `o = v − F_{o+1}(t)` to its previous party. Each
/// non-owner sees one uniformly masked or one pseudorandom vector. (docs/PROTOCOLS.md, Input
/// sharing.)
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
            Ok(Shares::with_zero_b(me, f))
        }
        (false, None) => {
            let c = ctx.recv(owner, n, Width::W64).await?;
            Ok(Shares::with_zero_a(me, c))
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
    let mut masks = ctx.pair_random_stream(owner.next());
    match (me == owner, values) {
        (true, Some(mut vs))
            if vs.len() == sizes.len() && vs.iter().zip(sizes).all(|(v, &n)| v.len() == n) =>
        {
            let stream = masks
                .as_mut()
                .ok_or(Error::bug("owner lacks its input mask"))?;
            let mut fs = Vec::with_capacity(sizes.len());
            for v in vs.iter_mut() {
                ctx.spend_draw(v.len()).await;
                let f = stream.take(v.len())?;
                for (x, m) in v.iter_mut().zip(&f) {
                    *x = x.wrapping_sub(*m);
                }
                fs.push(f);
            }
            let parts: Vec<&[u64]> = vs.iter().map(Vec::as_slice).collect();
            ctx.send_parts_w64(me.prev(), &parts)?;
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
            let stream = masks
                .as_mut()
                .ok_or(Error::bug("next party lacks the input mask"))?;
            let mut out = Vec::with_capacity(sizes.len());
            for &n in sizes {
                ctx.spend_draw(n).await;
                out.push(Shares::with_zero_b(me, stream.take(n)?));
            }
            Ok(out)
        }
        (false, None) => {
            let cs = ctx.recv_parts_w64(owner, sizes).await?;
            Ok(cs.into_iter().map(|c| Shares::with_zero_a(me, c)).collect())
        }
    }
}

/// [`share_input_parts`] with the owner's record streamed in chunks of `chunk_words` words,
/// one chunk per round, and the owner's vectors taken one at a time from an iterator.
///
/// Same mask (one draw, one stream), same masked words in the same order and so the same
/// payload bytes as [`share_input_parts`]: the record is cut at every `chunk_words` words of
/// the concatenation, and chunk `k` travels in round `k`. No party holds more than one chunk
/// of the message: the owner masks each vector in place as the iterator yields it (so it
/// may encode it just then, and drop its plaintext), and the receiver copies each chunk into
/// its pieces. Before chunk `k + 1` the owner waits for an empty record from the receiver
/// sent in round `k`, which bounds how far the owner runs ahead; the owner's next party,
/// which receives nothing else, waits for an empty record from the owner in each of those
/// rounds, so that all three parties leave the sharing in the same round. With
/// `chunk_words ≥ Σ sizes` it is exactly [`share_input_parts`] (one record, one round).
///
/// Rounds: `K = max(1, ⌈Σ sizes / chunk_words⌉)`. Bytes: 8·Σ sizes from the owner, 0 from
/// the others (plus `K − 1` empty records from the owner's previous party to the owner, and
/// `K − 1` from the owner to its next party).
///
/// # Errors
/// `Misuse` if `chunk_words` is 0, the owner passes no values, the iterator yields an error,
/// a vector whose length is not its size, or more or fewer vectors than `sizes`, or
/// another party passes values; `Protocol` if a chunk is malformed.
pub async fn share_input_streamed<I>(
    ctx: &mut Ctx,
    owner: PartyId,
    values: Option<I>,
    sizes: &[usize],
    chunk_words: usize,
) -> Result<Vec<Shares>, Error>
where
    I: IntoIterator<Item = Result<Vec<u64>, Error>>,
{
    share_input_streamed_observed(ctx, owner, values, sizes, chunk_words, &mut |_| {}).await
}

/// [`share_input_streamed`] that tells `on_chunk` at every party how many of its `K`
/// chunks are through, `1..=K` in order, each once: at the owner when it has sent chunk `k`
/// (and heard back, but for the last), at the receiver when chunk `k` arrived, at the
/// owner's next party when the owner's empty record of round `k` arrived (the last at the
/// end). Same rounds and bytes.
///
/// # Errors
/// As [`share_input_streamed`].
pub async fn share_input_streamed_observed<I>(
    ctx: &mut Ctx,
    owner: PartyId,
    values: Option<I>,
    sizes: &[usize],
    chunk_words: usize,
    on_chunk: &mut (dyn FnMut(usize) + Send),
) -> Result<Vec<Shares>, Error>
where
    I: IntoIterator<Item = Result<Vec<u64>, Error>>,
{
    if chunk_words == 0 {
        return Err(Error::misuse("chunks must hold at least one word"));
    }
    let total = sizes
        .iter()
        .try_fold(0usize, |acc, &n| acc.checked_add(n))
        .ok_or(Error::misuse("input length overflows"))?;
    let chunks = total.div_ceil(chunk_words).max(1);
    let mut ctx = ctx.fork();
    let me = ctx.me();
    let mut masks = ctx.pair_random_stream(owner.next());
    match (me == owner, values) {
        (true, Some(vs)) => {
            let stream = masks
                .as_mut()
                .ok_or(Error::bug("owner lacks its input mask"))?;
            let mut vs = vs.into_iter();
            let mut cs: Vec<Vec<u64>> = Vec::with_capacity(sizes.len());
            let mut fs = Vec::with_capacity(sizes.len());
            // The next chunk as pieces (tensor, range) of the masked tensors, sent as one
            // record without a copy of its own.
            let mut pending: Vec<(usize, core::ops::Range<usize>)> = Vec::new();
            let mut pending_len = 0;
            let mut sent = 0;
            for &n in sizes {
                let mut v = vs
                    .next()
                    .ok_or(Error::misuse("the input owner passed too few vectors"))??;
                if v.len() != n {
                    return Err(Error::misuse(
                        "the input owner must pass one vector of each given size",
                    ));
                }
                // Each tensor's mask is drawn when it is needed, within the work budget.
                ctx.spend_draw(n).await;
                let f = stream.take(n)?;
                for (x, m) in v.iter_mut().zip(&f) {
                    *x = x.wrapping_sub(*m);
                }
                fs.push(f);
                cs.push(v);
                let t = cs.len() - 1;
                let mut at = 0;
                while at < n {
                    let take = (chunk_words - pending_len).min(n - at);
                    pending.push((t, at..at + take));
                    pending_len += take;
                    at += take;
                    if pending_len == chunk_words {
                        send_pieces(&mut ctx, me.prev(), &cs, &pending)?;
                        pending.clear();
                        pending_len = 0;
                        sent += 1;
                        if sent < chunks {
                            ctx.send(me.next(), &[], Width::W64)?;
                            ctx.recv(me.prev(), 0, Width::W64).await?;
                        }
                        on_chunk(sent);
                    }
                }
            }
            if vs.next().is_some() {
                return Err(Error::misuse("the input owner passed too many vectors"));
            }
            if sent < chunks {
                send_pieces(&mut ctx, me.prev(), &cs, &pending)?;
                on_chunk(chunks);
            }
            Ok(cs
                .into_iter()
                .zip(fs)
                .map(|(c, f)| Shares::from_parts(me, c, f))
                .collect())
        }
        (true, None) => Err(Error::misuse(
            "the input owner must pass one vector of each given size",
        )),
        (false, Some(_)) => Err(Error::misuse("only the input owner passes values")),
        (false, None) if me == owner.next() => {
            let stream = masks
                .as_mut()
                .ok_or(Error::bug("next party lacks the input mask"))?;
            let mut out = Vec::with_capacity(sizes.len());
            for &n in sizes {
                ctx.spend_draw(n).await;
                // The data half is reserved fallibly first: a tensor beyond this
                // machine's memory fails there; the zero half of the same size is then
                // lazily zeroed memory.
                let mask = stream.take(n)?;
                out.push(Shares::with_zero_b(me, mask));
            }
            for k in 1..chunks {
                ctx.recv(owner, 0, Width::W64).await?;
                on_chunk(k);
            }
            on_chunk(chunks);
            Ok(out)
        }
        (false, None) => {
            let mut cs: Vec<Vec<u64>> = Vec::with_capacity(sizes.len());
            let mut piece = 0;
            for k in 0..chunks {
                if k + 1 < chunks {
                    ctx.send(owner, &[], Width::W64)?;
                }
                let len = chunk_words.min(total - k * chunk_words);
                // Decoded straight into the pieces: no chunk-sized vector of words between.
                let bytes = ctx.recv_packed(owner, len, Width::W64).await?;
                let mut words = wire::words_w64(&bytes);
                let mut left = len;
                while left > 0 {
                    let n = *sizes
                        .get(piece)
                        .ok_or(Error::bug("chunks overrun the sizes"))?;
                    if cs.len() == piece {
                        cs.push(try_words(n)?);
                    }
                    let c = cs.last_mut().ok_or(Error::bug("no piece to fill"))?;
                    let take = (n - c.len()).min(left);
                    c.extend(words.by_ref().take(take));
                    left -= take;
                    if c.len() == n {
                        piece += 1;
                    }
                }
                on_chunk(k + 1);
            }
            // Empty pieces take no words of any chunk.
            cs.resize_with(sizes.len(), Vec::new);
            Ok(cs
                .into_iter()
                .zip(sizes)
                .map(|(c, _)| Shares::with_zero_a(me, c))
                .collect())
        }
    }
}

/// Sends the pieces (tensor, range) of `cs` to `to` as one 64-bit record.
fn send_pieces(
    ctx: &mut Ctx,
    to: PartyId,
    cs: &[Vec<u64>],
    pieces: &[(usize, core::ops::Range<usize>)],
) -> Result<(), Error> {
    let parts = pieces
        .iter()
        .map(|(t, r)| {
            cs.get(*t)
                .and_then(|c| c.get(r.clone()))
                .ok_or(Error::bug("a chunk piece outside the masked tensors"))
        })
        .collect::<Result<Vec<&[u64]>, Error>>()?;
    ctx.send_parts_w64(to, &parts)
}

/// Secret-shares one-hot rows held by `owner` (a computing party): `rows` rows of `width`
/// columns, row r holding a one at each of the `per_row` columns
/// `hot[r·per_row..(r + 1)·per_row]` (a column named twice holds a single one). The owner
/// passes `Some(hot)`, the others `None`; `rows`, `per_row` and `width` are public.
///
/// The shares are [`share_input`]'s of the rows, but what is sent is a pair of
/// distributed-point-function keys per column named, not the rows: the owner deals key 0
/// of each to its next party and key 1 to its previous one. Component `o+1` is the next
/// party's evaluation of its keys, component `o` the previous party's (their sum is the
/// rows), component `o+2` is 0. Each key alone is pseudorandom, so neither receiver
/// learns a column. (docs/PROTOCOLS.md, One-hot input sharing.)
///
/// Rounds: 1. Bytes: 2·8·(11 + 2⌈log2 ⌈width/8⌉⌉) per column named, from the owner (GPT-2's
/// vocabulary of 50,257: 592 bytes per token, against 402,056 for the masked row).
///
/// # Errors
/// `Misuse` at the owner if `hot` has the wrong length or a column is not below `width`
/// (no value is named), or if the owner passes nothing and another party something; if a
/// size overflows or cannot be allocated; `Protocol` if the owner's message is malformed.
pub async fn share_one_hot(
    ctx: &mut Ctx,
    owner: PartyId,
    hot: Option<&[u32]>,
    rows: usize,
    per_row: usize,
    width: usize,
) -> Result<Shares, Error> {
    let mut ctx = ctx.fork();
    let me = ctx.me();
    let total = rows
        .checked_mul(width)
        .ok_or(Error::misuse("one-hot input size overflows"))?;
    let points = rows
        .checked_mul(per_row)
        .ok_or(Error::misuse("one-hot input size overflows"))?;
    let levels = dpf::levels(width)?;
    let key_words = dpf::key_words(levels);
    let record = points
        .checked_mul(key_words)
        .ok_or(Error::misuse("one-hot input size overflows"))?;
    // Each node of a key's tree costs one ChaCha refill of 32 words.
    let per_key = (width.div_ceil(8) as u64).saturating_mul(2 * 32 * PRSS_WORD);
    let mut component = try_words(total)?;
    component.resize(total, 0);
    match (me == owner, hot) {
        (true, Some(cols)) => {
            if cols.len() != points || cols.iter().any(|&c| c as usize >= width) {
                return Err(Error::misuse(
                    "input ids must be one per row and below the vocabulary size",
                ));
            }
            let roots = ctx.private_random(4 * points);
            let mut to_next = try_words(record)?;
            let mut to_prev = try_words(record)?;
            // x_o = rows − x_{o+1}: the rows' ones, less the next party's evaluations.
            let mut own = try_words(total)?;
            own.resize(total, 0);
            // x_{o+1}: the next party's evaluations.
            for (r, ((row_cols, row), own_row)) in cols
                .chunks(per_row.max(1))
                .zip(component.chunks_mut(width.max(1)))
                .zip(own.chunks_mut(width.max(1)))
                .enumerate()
            {
                for (j, &c) in row_cols.iter().enumerate() {
                    // A repeated column gets a key pair of the zero function.
                    let beta = u64::from(!row_cols[..j].contains(&c));
                    let p = r * per_row + j;
                    let seeds = roots
                        .get(4 * p..4 * p + 4)
                        .and_then(|s| <&[u64; 4]>::try_from(s).ok())
                        .ok_or(Error::bug("one-hot root seeds"))?;
                    let [k0, k1] = dpf::keys(u64::from(c), beta, levels, seeds);
                    ctx.spend(per_key).await;
                    dpf::eval_add(false, &k0, levels, row)?;
                    if let Some(x) = own_row.get_mut(c as usize) {
                        *x = x.wrapping_add(beta);
                    }
                    to_next.extend_from_slice(&k0);
                    to_prev.extend_from_slice(&k1);
                }
            }
            ctx.send(me.next(), &to_next, Width::W64)?;
            ctx.send(me.prev(), &to_prev, Width::W64)?;
            for (x, d) in own.iter_mut().zip(&component) {
                *x = x.wrapping_sub(*d);
            }
            Ok(Shares::from_parts(me, own, component))
        }
        (true, None) => Err(Error::misuse("the client must pass its input ids")),
        (false, Some(_)) => Err(Error::misuse("only the input owner passes values")),
        (false, None) => {
            let keys = ctx.recv(owner, record, Width::W64).await?;
            let party = me == owner.prev();
            for (r, row) in component.chunks_mut(width.max(1)).enumerate() {
                for j in 0..per_row {
                    let p = r * per_row + j;
                    let key = keys
                        .get(p * key_words..(p + 1) * key_words)
                        .ok_or(Error::bug("one-hot key record"))?;
                    ctx.spend(per_key).await;
                    dpf::eval_add(party, key, levels, row)?;
                }
            }
            Ok(if party {
                Shares::with_zero_a(me, component)
            } else {
                Shares::with_zero_b(me, component)
            })
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

    /// How [`run`] shares the pieces.
    #[derive(Clone, Copy)]
    enum Mode {
        /// `share_input` of the concatenation, sliced.
        Concat,
        /// `share_input_parts`.
        Parts,
        /// `share_input_streamed` with chunks of this many words.
        Streamed(usize),
    }

    /// Runs one sharing of `parts` owned by P1, then reveals every piece; returns the
    /// revealed pieces, the frames and each party's rounds.
    fn run(parts: &[Vec<u64>], mode: Mode) -> (Vec<Vec<u64>>, FrameLog, [u32; 3], [u64; 3]) {
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
                let shares = match mode {
                    Mode::Parts => share_input_parts(&mut ctx, owner, mine, &sizes).await?,
                    Mode::Streamed(chunk) => {
                        let mine = mine.map(|p| p.into_iter().map(Ok));
                        share_input_streamed(&mut ctx, owner, mine, &sizes, chunk).await?
                    }
                    Mode::Concat => {
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
                    }
                };
                let mut revealed = Vec::new();
                for s in &shares {
                    revealed.push(reveal_all(&mut ctx, s).await?);
                }
                Ok(revealed)
            }
        });
        let rounds = [0, 1, 2].map(|i| out.stats[i].rounds);
        let bytes = out.payload_bytes();
        let [a, b, c] = out.into_results().unwrap();
        assert_eq!(a, b);
        assert_eq!(b, c);
        let frames = frames.borrow().clone();
        (a, frames, rounds, bytes)
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
        let (a, fa, ra, _) = run(&parts, Mode::Concat);
        let (b, fb, rb, _) = run(&parts, Mode::Parts);
        assert_eq!(a, parts);
        assert_eq!(b, parts);
        assert_eq!(ra, rb);
        assert_eq!(fa, fb);
        // One chunk is the same protocol, frame for frame.
        let (c, fc, rc, _) = run(&parts, Mode::Streamed(307));
        assert_eq!(c, parts);
        assert_eq!(rc, rb);
        assert_eq!(fc, fb);
    }

    #[test]
    fn streamed_chunks_share_the_same_values_one_chunk_per_round() {
        let parts = vec![
            (0..5u64)
                .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
                .collect(),
            vec![],
            vec![u64::MAX, 7],
            (0..300u64).collect::<Vec<u64>>(),
            vec![],
            vec![1u64 << 63; 10],
            vec![],
        ];
        let (one, _, per_one, b_one) = run(&parts, Mode::Parts);
        let r_one = per_one[0];
        // 317 words: chunks of 7 words (46 rounds), of 100 (4) and of 317 exactly (1).
        for (chunk, rounds) in [(7usize, 46u32), (100, 4), (317, 1)] {
            let (got, _, per, bytes) = run(&parts, Mode::Streamed(chunk));
            let r = per[0];
            assert_eq!(got, parts, "chunk {chunk}");
            assert_eq!(got, one);
            assert_eq!(r, r_one - 1 + rounds, "chunk {chunk}");
            // Every party spends the same rounds on it.
            assert_eq!(per, per_one.map(|x| x - 1 + rounds), "chunk {chunk}");
            // The same payload bytes from every party: the receiver's records are empty.
            assert_eq!(bytes, b_one, "chunk {chunk}");
        }
    }

    /// Every party hears of each chunk once, in order, up to the last (317 words in chunks
    /// of 7: 46; of 317: 1; an exact multiple, 300 words of 100: 3), whoever owns.
    #[test]
    fn streamed_reports_every_chunk_at_every_party() {
        for (sizes, chunk, chunks) in [
            (vec![300usize, 0, 10, 7], 7usize, 46usize),
            (vec![300, 0, 10, 7], 317, 1),
            (vec![200, 100], 100, 3),
        ] {
            for owner in PartyId::ALL {
                let sizes = sizes.clone();
                let out = Sim::new(5).run(|me| {
                    let sizes = sizes.clone();
                    move |mut ctx| async move {
                        let mine = (me == owner).then(|| {
                            sizes
                                .iter()
                                .map(|&n| Ok(vec![3u64; n]))
                                .collect::<Vec<Result<Vec<u64>, Error>>>()
                        });
                        let mut seen = Vec::new();
                        share_input_streamed_observed(
                            &mut ctx,
                            owner,
                            mine,
                            &sizes,
                            chunk,
                            &mut |k| seen.push(k),
                        )
                        .await?;
                        Ok::<_, Error>(seen)
                    }
                });
                let want: Vec<usize> = (1..=chunks).collect();
                for (i, r) in out.results.iter().enumerate() {
                    assert_eq!(
                        r.as_ref().ok(),
                        Some(&want),
                        "P{i}, owner {owner:?}, chunk {chunk}"
                    );
                }
            }
        }
    }

    #[test]
    fn streamed_rejects_bad_owner_input() {
        type Owner = Vec<Result<Vec<u64>, Error>>;
        let cases: Vec<(Owner, &str)> = vec![
            (vec![Ok(vec![1, 2]), Ok(vec![3])], "wrong length"),
            (vec![Ok(vec![1, 2])], "too few"),
            (
                vec![Ok(vec![1, 2]), Ok(vec![3, 4]), Ok(vec![5])],
                "too many",
            ),
            (
                vec![Ok(vec![1, 2]), Err(Error::misuse("does not fit"))],
                "iterator error",
            ),
        ];
        for (values, what) in cases {
            let values = RefCell::new(Some(values));
            let out = Sim::new(2).run(|me| {
                let mine = values.borrow_mut().take().filter(|_| me == PartyId::P0);
                move |mut ctx| async move {
                    share_input_streamed(&mut ctx, PartyId::P0, mine, &[2, 2], 1).await
                }
            });
            assert!(out.results[0].is_err(), "{what}");
        }
        let zero = Sim::new(3).run(|me| {
            move |mut ctx| async move {
                let mine = (me == PartyId::P0).then(|| vec![Ok(vec![1u64])]);
                share_input_streamed(&mut ctx, PartyId::P0, mine, &[1], 0).await
            }
        });
        assert!(zero.results.iter().all(Result::is_err));
    }

    /// A size beyond this machine's memory (here beyond the address space) is an error at
    /// the parties that allocate for it, not an abort or a panic.
    #[test]
    fn streamed_sizes_beyond_memory_are_errors() {
        let huge = 1usize << 61;
        let out = Sim::new(4).run(|_| {
            move |mut ctx| async move {
                let none: Option<Vec<Result<Vec<u64>, Error>>> = None;
                share_input_streamed(&mut ctx, PartyId::P0, none, &[huge], 1 << 20).await
            }
        });
        // P1 draws the owner's mask: it cannot reserve it.
        let e = out.results[1].as_ref().unwrap_err();
        assert_eq!(
            (e.kind(), e.detail()),
            (crate::ErrorKind::Misuse, "not enough memory for the shares")
        );
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
