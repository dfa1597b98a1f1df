//! The client's side of a generation as it happens: a live view for the programs
//! ([`LiveView`]: a progress bar while the model is shared and the prompt runs, then the
//! text of each token as the client learns it), the text itself ([`IncrementalText`]), and
//! stop strings as the client's stop test ([`stop_on_strings`]).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use puma_layers::Tokenizer;
use puma_layers::nn::{Observer, Progress, ShareObserver, ShareProgress, StopCheck};

/// What a program shows while a generation runs.
pub struct LiveView {
    bar: ProgressBar,
    /// The text so far, if tokens are printed as they come.
    text: Option<Mutex<IncrementalText>>,
}

impl LiveView {
    /// A view over `layers` blocks × `max_new` steps: a progress bar on stderr if `bar`,
    /// and the text of each token on stdout as it comes if `tok` is given (the output
    /// modes in which the client learns tokens one by one).
    pub fn new(layers: usize, max_new: usize, bar: bool, tok: Option<Arc<Tokenizer>>) -> Self {
        let total = (max_new as u64).saturating_mul(layers as u64);
        let bar = if bar {
            let b = ProgressBar::new(total);
            if let Ok(style) = ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:32.cyan/blue} {pos}/{len} layers · {msg}",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b.enable_steady_tick(Duration::from_millis(120));
            b
        } else {
            ProgressBar::hidden()
        };
        bar.set_message("sharing the model");
        LiveView {
            bar,
            text: tok.map(|t| Mutex::new(IncrementalText::new(t))),
        }
    }

    /// The observer that feeds this view (give it the client's events).
    pub fn observer(self: &Arc<Self>, layers: usize, max_new: usize) -> Observer {
        let view = Arc::clone(self);
        Arc::new(move |ev: Progress| match ev {
            // Once the text has taken over, the bar stays away.
            Progress::Layer { .. } | Progress::Step { .. } if view.bar.is_finished() => {}
            Progress::Layer { step, layer } => {
                view.bar.inc(1);
                let what = if step == 0 {
                    "prompt".to_owned()
                } else {
                    format!("token {}/{max_new}", step + 1)
                };
                view.bar
                    .set_message(format!("{what}, block {}/{layers}", layer + 1));
            }
            Progress::Token { id, .. } => {
                if let Some(text) = view.text.as_ref() {
                    // The text takes over the terminal from the bar at the first token.
                    if !view.bar.is_finished() {
                        view.bar.finish_and_clear();
                    }
                    let piece = text.lock().map(|mut t| t.push(id)).unwrap_or_default();
                    let mut out = std::io::stdout().lock();
                    // A closed stdout only loses the live text; the report still follows.
                    let _ = out.write_all(piece.as_bytes());
                    let _ = out.flush();
                }
            }
            Progress::Step { step } => {
                view.bar
                    .set_message(format!("token {}/{max_new} done", step + 1));
            }
        })
    }

    /// The observer that shows how far the sharing of the model has come (give it the
    /// client's events).
    pub fn share_observer(self: &Arc<Self>) -> ShareObserver {
        let view = Arc::clone(self);
        Arc::new(move |p: ShareProgress| view.bar.set_message(sharing_message(p)))
    }

    /// The observer of an encoder's layers (one pass, `layers` blocks): the bar counts
    /// them.
    pub fn layer_observer(self: &Arc<Self>, layers: usize) -> Observer {
        let view = Arc::clone(self);
        Arc::new(move |ev: Progress| {
            if let Progress::Layer { layer, .. } = ev {
                view.bar.inc(1);
                view.bar
                    .set_message(format!("encoding, layer {}/{layers}", layer + 1));
            }
        })
    }

    /// Whether tokens were printed as they came.
    pub fn streams(&self) -> bool {
        self.text.is_some()
    }

    /// Clears the bar (and ends the streamed line).
    pub fn finish(&self) {
        self.bar.finish_and_clear();
        if self.streams() {
            println!();
        }
    }
}

/// What the bar says while the model is shared: parameters shared so far, in millions.
pub fn sharing_message(p: ShareProgress) -> String {
    let m = |n: usize| n as f64 / 1e6;
    let pct = if p.total == 0 {
        100.0
    } else {
        100.0 * p.shared as f64 / p.total as f64
    };
    format!(
        "sharing the model: {:.1}M/{:.1}M parameters ({pct:.0}%)",
        m(p.shared),
        m(p.total)
    )
}

/// The client's stop test for `stops`: generation ends at the first token after which the
/// generated text contains one of them (the stop string stays in the output, as in
/// Hugging Face's `stop_strings`). `None` if `stops` is empty; empty strings are ignored.
pub fn stop_on_strings(tok: Arc<Tokenizer>, stops: Vec<String>) -> Option<StopCheck> {
    let stops: Vec<String> = stops.into_iter().filter(|s| !s.is_empty()).collect();
    let longest = stops.iter().map(|s| s.chars().count()).max()?;
    // A token adds at least one character of text, except tokens that decode to nothing
    // (special tokens, partial UTF-8): a margin covers those.
    let window = longest + 8;
    Some(Arc::new(move |ids: &[u32]| {
        let tail = ids.get(ids.len().saturating_sub(window)..).unwrap_or(ids);
        match tok.decode(tail) {
            Ok(text) => stops.iter().any(|s| text.contains(s.as_str())),
            Err(_) => false,
        }
    }))
}

/// Generated text that grows one token at a time: [`IncrementalText::push`] returns the
/// text a new token completes, holding back an incomplete UTF-8 sequence (a byte-level
/// BPE token may carry part of a character) until the token that completes it.
pub struct IncrementalText {
    tok: Arc<Tokenizer>,
    ids: Vec<u32>,
    /// Bytes of the decoded text already returned.
    shown: usize,
}

impl IncrementalText {
    /// Empty text, decoded with `tok`.
    pub fn new(tok: Arc<Tokenizer>) -> Self {
        IncrementalText {
            tok,
            ids: Vec::new(),
            shown: 0,
        }
    }

    /// Adds `id`; returns the text it completes (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        self.ids.push(id);
        let text = match self.tok.decode(&self.ids) {
            Ok(t) => t,
            Err(_) => return format!("<{id}>"),
        };
        // An unfinished character decodes as U+FFFD at the end: wait for the rest.
        if text.ends_with('\u{FFFD}') {
            return String::new();
        }
        let new = text.get(self.shown..).unwrap_or_default().to_owned();
        self.shown = text.len().max(self.shown);
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shakespeare() -> Arc<Tokenizer> {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/gpt2-shakespeare");
        Arc::new(Tokenizer::from_gpt2_dir(&dir).expect("tokenizer"))
    }

    #[test]
    fn streamed_pieces_add_up_to_the_whole_text() {
        let tok = shakespeare();
        // Multi-byte characters split across byte-level tokens are held back, not garbled.
        let text = "ROMEO: Thou art — naïve, 美しい!";
        let ids = tok.encode(text).expect("encode");
        let mut inc = IncrementalText::new(Arc::clone(&tok));
        let mut streamed = String::new();
        for &id in &ids {
            let piece = inc.push(id);
            assert!(!piece.contains('\u{FFFD}'), "{piece:?}");
            streamed.push_str(&piece);
        }
        assert_eq!(streamed, text);
    }

    #[test]
    fn stop_strings_end_after_the_token_that_completes_them() {
        let tok = shakespeare();
        let ids = tok.encode("First line.\nSecond line.").expect("encode");
        let stop = stop_on_strings(Arc::clone(&tok), vec!["\n".into(), String::new()])
            .expect("a stop test");
        let first = (1..=ids.len())
            .find(|&k| stop(&ids[..k]))
            .expect("the newline stops");
        let text = tok.decode(&ids[..first]).expect("decode");
        assert!(text.ends_with('\n') || text.contains('\n'), "{text:?}");
        assert!(
            !tok.decode(&ids[..first - 1])
                .expect("decode")
                .contains('\n')
        );
        assert!(stop_on_strings(tok, vec![String::new()]).is_none());
    }
}
