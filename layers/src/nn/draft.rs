//! The client's drafts for speculative verification ([`super::generate_batch`]): a public
//! method it runs on what it already knows. Two are offered ([`Drafter`]):
//!
//! - **Prompt lookup** ([`prompt_lookup`]) finds the latest earlier occurrence of the
//!   context's last few tokens in the prompt and the output so far and proposes the tokens
//!   that followed it: text that quotes its prompt or repeats itself is drafted well.
//! - **A public corpus** ([`CorpusIndex`], retrieval-based drafting after REST, He et al.
//!   2024): the client indexes a public text of the kind the model writes (for a model
//!   trained on public text, that text) and drafts, token by token, the most frequent
//!   continuation of the longest suffix of the context that the corpus contains. A model
//!   follows its training text's common turns, so its greedy picks are often those.
//!
//! Either way the output is the model's greedy output: a draft only decides how many
//! tokens one step may confirm, and anything else costs only rejected rows.

use std::fmt;
use std::sync::Arc;

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

/// How the client drafts: prompt lookup, or a public corpus.
#[derive(Clone, Default)]
pub enum Drafter {
    /// [`prompt_lookup`] over the prompt and the output so far.
    #[default]
    PromptLookup,
    /// The most frequent continuations in a public corpus ([`CorpusIndex::draft`]).
    Corpus(Arc<CorpusIndex>),
}

impl fmt::Debug for Drafter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Drafter::PromptLookup => f.write_str("PromptLookup"),
            Drafter::Corpus(c) => write!(f, "Corpus({} tokens)", c.len()),
        }
    }
}

/// Two drafters are equal when they draft alike: both prompt lookup, or the same index.
impl PartialEq for Drafter {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Drafter::PromptLookup, Drafter::PromptLookup) => true,
            (Drafter::Corpus(a), Drafter::Corpus(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Drafter {
    /// Exactly `k` drafts continuing `context`, padded with a public filler (the last
    /// draft or the context's last token; any id would do, a rejected draft only costs
    /// its row).
    pub fn padded(&self, context: &[u32], k: usize) -> Vec<u32> {
        let mut drafts = match self {
            Drafter::PromptLookup => prompt_lookup(context, k),
            Drafter::Corpus(c) => c.draft(context, k),
        };
        let fill = drafts.last().or(context.last()).copied().unwrap_or(0);
        drafts.resize(k, fill);
        drafts
    }
}

/// The longest context suffix, in tokens, that [`CorpusIndex`] matches.
pub const CORPUS_MAX_NGRAM: usize = 8;

/// A public corpus of token ids, indexed for drafting: its positions sorted by the
/// [`CORPUS_MAX_NGRAM`] tokens that start there (a suffix array cut at that depth), so
/// that the occurrences of any n-gram up to that length form one run found by binary
/// search.
pub struct CorpusIndex {
    tokens: Vec<u32>,
    order: Vec<u32>,
}

/// A corpus that [`CorpusIndex::new`] refuses.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// No tokens at all.
    #[error("the draft corpus is empty")]
    Empty,
    /// More tokens than positions of 32 bits can index.
    #[error("the draft corpus has {0} tokens, more than 2^32 − 1")]
    TooLong(usize),
}

impl CorpusIndex {
    /// Indexes `tokens` (the corpus as the model's tokenizer splits it).
    ///
    /// # Errors
    /// [`CorpusError`] for an empty corpus or one of 2^32 tokens or more.
    pub fn new(tokens: Vec<u32>) -> Result<Self, CorpusError> {
        if tokens.is_empty() {
            return Err(CorpusError::Empty);
        }
        let n = u32::try_from(tokens.len()).map_err(|_| CorpusError::TooLong(tokens.len()))?;
        let mut order: Vec<u32> = (0..n).collect();
        order.sort_unstable_by(|&a, &b| gram(&tokens, a).cmp(gram(&tokens, b)));
        Ok(CorpusIndex { tokens, order })
    }

    /// The corpus's length in tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether the corpus has no tokens (never, for an index [`CorpusIndex::new`] made).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    /// The token that most often follows the longest suffix of `context` (at most
    /// [`CORPUS_MAX_NGRAM`] tokens) that occurs in the corpus with a successor; ties go to
    /// the smaller id. `None` if not even the last token occurs with one.
    pub fn next_token(&self, context: &[u32]) -> Option<u32> {
        let len = context.len();
        (1..=CORPUS_MAX_NGRAM.min(len))
            .rev()
            .find_map(|g| self.most_frequent_after(&context[len - g..]))
    }

    /// Up to `k` drafts: [`CorpusIndex::next_token`] applied to the context extended by
    /// the drafts so far; fewer where the corpus has nothing to say.
    pub fn draft(&self, context: &[u32], k: usize) -> Vec<u32> {
        let mut ctx = context.to_vec();
        for _ in 0..k {
            match self.next_token(&ctx) {
                Some(t) => ctx.push(t),
                None => break,
            }
        }
        ctx.split_off(context.len())
    }

    /// The most frequent successor of the n-gram `g` (g no longer than the index depth).
    fn most_frequent_after(&self, g: &[u32]) -> Option<u32> {
        let starts_with = |p: u32| {
            let here = gram(&self.tokens, p);
            here.get(..g.len()).unwrap_or(here).cmp(g)
        };
        let lo = self
            .order
            .partition_point(|&p| starts_with(p) == std::cmp::Ordering::Less);
        let hi = self
            .order
            .partition_point(|&p| starts_with(p) != std::cmp::Ordering::Greater);
        let mut next: Vec<u32> = self
            .order
            .get(lo..hi)?
            .iter()
            .filter_map(|&p| self.tokens.get(p as usize + g.len()).copied())
            .collect();
        next.sort_unstable();
        // The longest run of equal ids; the first (smallest id) wins a tie.
        let mut best: Option<(usize, u32)> = None;
        for run in next.chunk_by(|a, b| a == b) {
            if best.is_none_or(|(n, _)| run.len() > n) {
                best = run.first().map(|&t| (run.len(), t));
            }
        }
        best.map(|(_, t)| t)
    }
}

/// The up to [`CORPUS_MAX_NGRAM`] tokens that start at position `p` (fewer at the end).
fn gram(tokens: &[u32], p: u32) -> &[u32] {
    let p = p as usize;
    tokens
        .get(p..tokens.len().min(p + CORPUS_MAX_NGRAM))
        .unwrap_or(&[])
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
        let lookup = Drafter::PromptLookup;
        assert_eq!(lookup.padded(&[1, 2, 3], 2), vec![3, 3]);
        assert_eq!(lookup.padded(&[7, 8, 7], 3), vec![8, 7, 8]);
        assert_eq!(lookup.padded(&[], 2), vec![0, 0]);
    }

    #[test]
    fn the_corpus_drafts_the_most_frequent_continuation_of_the_longest_match() {
        // "1 2" is followed by 3 three times and by 4 twice; "9 1 2" only by 4.
        let corpus = CorpusIndex::new(vec![
            1, 2, 3, 5, 1, 2, 4, 6, 1, 2, 3, 7, 1, 2, 3, 0, 9, 1, 2, 4, 8,
        ])
        .unwrap();
        assert_eq!(corpus.next_token(&[0, 1, 2]), Some(3));
        assert_eq!(corpus.next_token(&[9, 1, 2]), Some(4));
        // Chained: after "9 1 2 4" comes 8 (the longest match "9 1 2 4"), then nothing
        // follows 8, the corpus's last token: the drafts stop there.
        assert_eq!(corpus.draft(&[9, 1, 2], 5), vec![4, 8]);
        // An unknown last token drafts nothing; padding fills with the context's last.
        assert_eq!(corpus.next_token(&[3, 42]), None);
        let drafter = Drafter::Corpus(Arc::new(corpus));
        assert_eq!(drafter.padded(&[3, 42], 2), vec![42, 42]);
        assert_eq!(drafter.padded(&[9, 1, 2], 3), vec![4, 8, 8]);
    }

    #[test]
    fn corpus_ties_go_to_the_smaller_id_and_long_contexts_back_off() {
        // 5 is followed once by 7 and once by 6.
        let corpus = CorpusIndex::new(vec![5, 7, 0, 5, 6]).unwrap();
        assert_eq!(corpus.next_token(&[5]), Some(6));
        // A context longer than the index depth matches on its last tokens only.
        let long: Vec<u32> = (100..100 + 2 * CORPUS_MAX_NGRAM as u32)
            .chain([0, 5])
            .collect();
        assert_eq!(corpus.next_token(&long), Some(6));
        let run: Vec<u32> = vec![3; 3 * CORPUS_MAX_NGRAM];
        let repeated = CorpusIndex::new(run.clone()).unwrap();
        assert_eq!(repeated.draft(&run, 4), vec![3, 3, 3, 3]);
        assert!(matches!(
            CorpusIndex::new(Vec::new()),
            Err(CorpusError::Empty)
        ));
    }
}
