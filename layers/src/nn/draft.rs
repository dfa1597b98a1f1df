//! The client's drafts for speculative verification ([`super::generate_batch`]): a public
//! method it runs on what it already knows, the prompt and the output so far. Prompt
//! lookup finds the latest earlier occurrence of the context's last few tokens and
//! proposes the tokens that followed it; text that quotes its prompt or repeats itself (as
//! greedy decoding often does) is drafted well, anything else costs only rejected rows.

/// The longest suffix the lookup tries to match, in tokens.
pub const MAX_NGRAM: usize = 3;

/// Up to `k` tokens that continue `context`: after the latest earlier occurrence of its
/// last g tokens (g from [`MAX_NGRAM`] down to 1), the tokens that followed, continued
/// periodically when that occurrence runs into the end of the context (a repeating text
/// repeats on). Empty when nothing matches.
pub fn prompt_lookup(context: &[u32], k: usize) -> Vec<u32> {
    let len = context.len();
    for g in (1..=MAX_NGRAM.min(len.saturating_sub(1))).rev() {
        let suffix = &context[len - g..];
        let found = (0..len - g)
            .rev()
            .find(|&s| context.get(s..s + g) == Some(suffix));
        if let Some(start) = found {
            // The match ends `period` tokens before the context does.
            let period = len - g - start;
            return (0..k)
                .filter_map(|i| {
                    let mut at = start + g + i;
                    while at >= len {
                        at -= period;
                    }
                    context.get(at).copied()
                })
                .collect();
        }
    }
    Vec::new()
}

/// Exactly `k` drafts: [`prompt_lookup`]'s, padded with the context's last token (a
/// public filler; any id would do, a rejected draft only costs its row).
pub fn padded_drafts(context: &[u32], k: usize) -> Vec<u32> {
    let mut drafts = prompt_lookup(context, k);
    let fill = drafts.last().or(context.last()).copied().unwrap_or(0);
    drafts.resize(k, fill);
    drafts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_longest_match_is_continued() {
        // "5 6" occurs at 1 and 5; the latest (5) is followed by 9.
        let ctx = [4, 5, 6, 7, 1, 5, 6, 9, 2, 5, 6];
        assert_eq!(prompt_lookup(&ctx, 2), vec![9, 2]);
        // A trigram beats a bigram: "1 2 3" at 0 is followed by 4, "2 3" last at 5 by 8.
        let ctx = [1, 2, 3, 4, 7, 2, 3, 8, 1, 2, 3];
        assert_eq!(prompt_lookup(&ctx, 1), vec![4]);
    }

    #[test]
    fn a_repeating_text_is_continued_periodically() {
        // Period 3 ("a b c"): the match of "b c" at 4 runs into the end.
        let ctx = [9, 1, 2, 3, 1, 2, 3, 1, 2];
        assert_eq!(prompt_lookup(&ctx, 5), vec![3, 1, 2, 3, 1]);
        // A token repeated: period 1.
        assert_eq!(prompt_lookup(&[5, 5], 3), vec![5, 5, 5]);
    }

    #[test]
    fn no_match_drafts_nothing_and_padding_fills_to_k() {
        assert!(prompt_lookup(&[1, 2, 3], 4).is_empty());
        assert!(prompt_lookup(&[], 4).is_empty());
        assert_eq!(padded_drafts(&[1, 2, 3], 2), vec![3, 3]);
        assert_eq!(padded_drafts(&[7, 8, 7], 3), vec![8, 7, 8]);
        assert_eq!(padded_drafts(&[], 2), vec![0, 0]);
    }
}
