//! Distributed point functions over Z_2^64 (Boyle, Gilboa and Ishai, "Function Secret
//! Sharing: Improvements and Extensions", 2016, with early termination): two keys whose
//! evaluations over a whole domain sum to β at one point α and to 0 everywhere else, each
//! key alone pseudorandom whatever α and β. The one-hot input sharing sends a pair of
//! these instead of a row of `width` masked words (docs/PROTOCOLS.md, One-hot input
//! sharing).

use alloc::vec::Vec;

use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};

use crate::error::Error;

/// Domain bits resolved at a leaf: a leaf turns its seed into 2^3 outputs, so the tree is
/// three levels shorter (and has an eighth of the nodes) than one leaf per point.
const LEAF_BITS: u32 = 3;
/// Outputs per leaf.
const LEAF: usize = 1 << LEAF_BITS;
/// Most tree levels: the control-bit corrections of all levels pack into one word.
const MAX_LEVELS: u32 = 32;

/// A node's 128-bit seed.
type Seed = [u64; 2];

/// The ChaCha12 stream `stream` keyed by a seed (the seed in the key's first 128 bits):
/// the tree's pseudorandom generator, with stream 0 expanding a node and stream 1
/// converting a leaf.
fn prg(seed: &Seed, stream: u64) -> ChaCha12Rng {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed[0].to_le_bytes());
    key[8..16].copy_from_slice(&seed[1].to_le_bytes());
    let mut rng = ChaCha12Rng::from_seed(key);
    rng.set_stream(stream);
    rng
}

/// G(s) = (s_L, t_L, s_R, t_R): the children's seeds and control bits.
fn expand(seed: &Seed) -> (Seed, bool, Seed, bool) {
    let mut rng = prg(seed, 0);
    let left = [rng.next_u64(), rng.next_u64()];
    let right = [rng.next_u64(), rng.next_u64()];
    let t = rng.next_u64();
    (left, t & 1 == 1, right, t & 2 == 2)
}

/// A leaf seed's outputs.
fn convert(seed: &Seed) -> [u64; LEAF] {
    let mut rng = prg(seed, 1);
    core::array::from_fn(|_| rng.next_u64())
}

fn xor(a: Seed, b: Seed) -> Seed {
    [a[0] ^ b[0], a[1] ^ b[1]]
}

/// Tree levels of a point function on [0, `width`): ⌈log2 ⌈width/8⌉⌉.
///
/// # Errors
/// `Misuse` if `width` needs more than 32 levels (width > 2^35).
pub(crate) fn levels(width: usize) -> Result<u32, Error> {
    let leaves = width.div_ceil(LEAF).max(1);
    let levels = usize::BITS - (leaves - 1).leading_zeros();
    if levels > MAX_LEVELS {
        Err(Error::misuse("a one-hot row of more than 2^35 columns"))
    } else {
        Ok(levels)
    }
}

/// Words of one key over `levels` levels: the root seed (2), a seed correction per level
/// (2 each), the control-bit corrections of all levels (1) and the leaf correction (8).
pub(crate) const fn key_words(levels: u32) -> usize {
    2 + 2 * levels as usize + 1 + LEAF
}

/// The two keys of the function that is `beta` at `alpha` and 0 elsewhere on
/// [0, 2^(`levels` + 3)), from four fresh random words `roots` (the keys' root seeds).
/// Party 0's evaluation plus party 1's is the function; `alpha` must lie in the domain.
pub(crate) fn keys(alpha: u64, beta: u64, levels: u32, roots: &[u64; 4]) -> [Vec<u64>; 2] {
    let mut s = [[roots[0], roots[1]], [roots[2], roots[3]]];
    let mut t = [false, true];
    let mut keys = [
        Vec::with_capacity(key_words(levels)),
        Vec::with_capacity(key_words(levels)),
    ];
    for (key, seed) in keys.iter_mut().zip(&s) {
        key.extend_from_slice(seed);
    }
    let node = alpha >> LEAF_BITS;
    let mut t_bits = 0u64;
    for i in 0..levels {
        let right = (node >> (levels - 1 - i)) & 1 == 1;
        let (l0, tl0, r0, tr0) = expand(&s[0]);
        let (l1, tl1, r1, tr1) = expand(&s[1]);
        // The correction makes the two seeds off the path equal, and the control bits on
        // it differ (off it, equal).
        let s_cw = if right { xor(l0, l1) } else { xor(r0, r1) };
        let tl_cw = tl0 ^ tl1 ^ right ^ true;
        let tr_cw = tr0 ^ tr1 ^ right;
        for key in &mut keys {
            key.extend_from_slice(&s_cw);
        }
        t_bits |= (u64::from(tl_cw) << (2 * i)) | (u64::from(tr_cw) << (2 * i + 1));
        let (keep, t_cw) = if right {
            ([(r0, tr0), (r1, tr1)], tr_cw)
        } else {
            ([(l0, tl0), (l1, tl1)], tl_cw)
        };
        for b in 0..2 {
            let (ks, kt) = keep[b];
            s[b] = if t[b] { xor(ks, s_cw) } else { ks };
            t[b] = kt ^ (t[b] & t_cw);
        }
    }
    let (c0, c1) = (convert(&s[0]), convert(&s[1]));
    let at = (alpha as usize) & (LEAF - 1);
    for key in &mut keys {
        key.push(t_bits);
    }
    for j in 0..LEAF {
        let target = if j == at { beta } else { 0 };
        // On the path t_0 ≠ t_1, and the party whose bit is set adds the correction:
        // (−1)^b·(convert(s_b) + t_b·cw) summed over b is `target`.
        let v = target.wrapping_sub(c0[j]).wrapping_add(c1[j]);
        let cw = if t[1] { v.wrapping_neg() } else { v };
        for key in &mut keys {
            key.push(cw);
        }
    }
    keys
}

/// Adds party `party`'s evaluation of `key` (over `levels` levels) at 0, 1, …,
/// `out.len()` − 1 to `out`.
///
/// # Errors
/// `Bug` if the key has the wrong length (callers cut keys from records of checked
/// length); `Misuse` if `out` is longer than the domain or the tree's nodes cannot be
/// allocated.
pub(crate) fn eval_add(
    party: bool,
    key: &[u64],
    levels: u32,
    out: &mut [u64],
) -> Result<(), Error> {
    if key.len() != key_words(levels) {
        return Err(Error::bug("a point-function key of the wrong length"));
    }
    let leaves = out.len().div_ceil(LEAF);
    if leaves > 1usize << levels {
        return Err(Error::misuse(
            "evaluated beyond the point function's domain",
        ));
    }
    let levels_us = levels as usize;
    let (seeds, rest) = key.split_at(2 + 2 * levels_us);
    let (t_bits, leaf_cw) = rest.split_at(1);
    let t_bits = t_bits.first().copied().unwrap_or(0);
    let mut nodes = try_vec(1)?;
    nodes.push(([seeds[0], seeds[1]], party));
    for i in 0..levels_us {
        let s_cw = [seeds[2 + 2 * i], seeds[3 + 2 * i]];
        let tl_cw = (t_bits >> (2 * i)) & 1 == 1;
        let tr_cw = (t_bits >> (2 * i + 1)) & 1 == 1;
        // Only the subtrees that reach into `out`.
        let below = levels_us - i - 1;
        let keep = leaves.div_ceil(1 << below).max(1);
        let mut next = try_vec(keep)?;
        for &(s, t) in &nodes {
            let (mut l, mut tl, mut r, mut tr) = expand(&s);
            if t {
                (l, r) = (xor(l, s_cw), xor(r, s_cw));
                tl ^= tl_cw;
                tr ^= tr_cw;
            }
            next.push((l, tl));
            if next.len() < keep {
                next.push((r, tr));
            }
            if next.len() >= keep {
                break;
            }
        }
        nodes = next;
    }
    for ((s, t), chunk) in nodes.iter().zip(out.chunks_mut(LEAF)) {
        let c = convert(s);
        for ((o, &c), &cw) in chunk.iter_mut().zip(&c).zip(leaf_cw) {
            let v = if *t { c.wrapping_add(cw) } else { c };
            *o = o.wrapping_add(if party { v.wrapping_neg() } else { v });
        }
    }
    Ok(())
}

/// An empty vector of nodes with room for `n`, reserved fallibly.
fn try_vec(n: usize) -> Result<Vec<(Seed, bool)>, Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| Error::misuse("not enough memory for a point-function tree"))?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn roots(i: u64) -> [u64; 4] {
        core::array::from_fn(|j| (i * 4 + j as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
    }

    #[test]
    fn evaluations_sum_to_the_point_function() {
        let mut case = 0;
        for width in [1usize, 5, 8, 9, 16, 17, 100, 1000, 4097] {
            let levels = levels(width).unwrap();
            assert!(width <= LEAF << levels && (levels == 0 || width > LEAF << (levels - 1)));
            for alpha in [0, width / 3, width / 2, width - 1] {
                case += 1;
                let beta = 0x1234_5678_9abc_def0u64.wrapping_mul(case);
                let [k0, k1] = keys(alpha as u64, beta, levels, &roots(case));
                assert_eq!(k0.len(), key_words(levels));
                let (mut d0, mut d1) = (vec![0u64; width], vec![0u64; width]);
                eval_add(false, &k0, levels, &mut d0).unwrap();
                eval_add(true, &k1, levels, &mut d1).unwrap();
                for (i, (a, b)) in d0.iter().zip(&d1).enumerate() {
                    let want = if i == alpha { beta } else { 0 };
                    assert_eq!(a.wrapping_add(*b), want, "width {width}, α {alpha}, at {i}");
                }
                // Each party's evaluation alone looks random: no zero runs where the sum is 0.
                assert!(d0.iter().filter(|&&v| v == 0).count() <= 1);
            }
        }
    }

    #[test]
    fn a_key_of_the_wrong_length_or_a_domain_overrun_is_an_error() {
        let [k0, _] = keys(3, 1, 2, &roots(9));
        let mut out = vec![0u64; 32];
        assert!(eval_add(false, &k0[1..], 2, &mut out).is_err());
        let mut long = vec![0u64; 33];
        assert!(eval_add(false, &k0, 2, &mut long).is_err());
        assert!(levels(usize::MAX).is_err());
    }
}
