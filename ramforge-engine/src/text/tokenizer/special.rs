//! Splitting special tokens out of the text before the model's algorithm runs, with llama.cpp's
//! semantics: special tokens are tried longest first; each one claims its leftmost
//! non-overlapping occurrences inside the text that is still plain. User-defined tokens are
//! always split out; control and unknown tokens only when the caller parses special tokens.
//!
//! One Aho-Corasick pass finds which special tokens occur at all, so the per-token passes run
//! only for those (a vocabulary may have thousands of special tokens). The pass walks the
//! automaton itself and reads each distinct match state's pattern list once, so a megabyte of
//! spaces (where dozens of space-run tokens match at every byte) costs one step per byte.

use super::error::TokenizerError;
use super::vocab::{TokenKind, Vocab};
use aho_corasick::automaton::Automaton;
use aho_corasick::nfa::contiguous::NFA;
use aho_corasick::{Anchored, MatchKind};
use hashbrown::HashSet;
use std::ops::Range;

/// A piece of the input: plain text to tokenize, or a special token found in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fragment {
    Text(Range<usize>),
    Token(u32),
}

/// The special tokens of a vocabulary, in llama.cpp's priority order.
pub struct SpecialTokens {
    /// User-defined tokens only (for plain tokenization).
    user: Matcher,
    /// Every special token (when parsing special tokens).
    all: Matcher,
}

/// Token ids in priority order (longest piece first, then lowest id) and their automaton.
struct Matcher {
    ids: Vec<u32>,
    /// Matches every occurrence of every token (standard semantics: each match state lists
    /// all patterns that end there).
    automaton: Option<NFA>,
}

impl Matcher {
    fn new(vocab: &Vocab, mut ids: Vec<u32>) -> Result<Matcher, TokenizerError> {
        ids.sort_by_key(|&id| (std::cmp::Reverse(vocab.piece(id).len()), id));
        let automaton = if ids.is_empty() {
            None
        } else {
            let built = NFA::builder()
                .match_kind(MatchKind::Standard)
                .build(ids.iter().map(|&id| vocab.piece(id)));
            Some(built.map_err(|e| TokenizerError::Invalid {
                key: "tokenizer.ggml.tokens",
                msg: format!("cannot index the special tokens: {e}"),
            })?)
        };
        Ok(Matcher { ids, automaton })
    }

    fn heap_bytes(&self) -> usize {
        self.ids.capacity() * 4 + self.automaton.as_ref().map_or(0, |a| a.memory_usage())
    }
}

impl SpecialTokens {
    pub fn new(vocab: &Vocab) -> Result<SpecialTokens, TokenizerError> {
        let ids_where = |keep: &dyn Fn(TokenKind) -> bool| {
            (0..vocab.len() as u32)
                .filter(|&id| keep(vocab.kind(id)))
                .collect::<Vec<_>>()
        };
        Ok(SpecialTokens {
            user: Matcher::new(vocab, ids_where(&|k| k == TokenKind::UserDefined))?,
            all: Matcher::new(vocab, ids_where(&|k| k.is_special()))?,
        })
    }

    /// Cuts `text` into plain-text fragments and special tokens, in order.
    pub fn partition(&self, vocab: &Vocab, text: &str, parse_special: bool) -> Vec<Fragment> {
        let mut frags = Vec::new();
        if text.is_empty() {
            return frags;
        }
        frags.push(Fragment::Text(0..text.len()));
        let m = if parse_special { &self.all } else { &self.user };
        let Some(ac) = &m.automaton else {
            return frags;
        };
        let present = present_patterns(ac, text, m.ids.len());
        let mut next = Vec::new();
        for (i, _) in present.iter().enumerate().filter(|(_, &p)| p) {
            let id = m.ids[i];
            let piece = vocab.piece(id);
            next.clear();
            for f in frags.drain(..) {
                match f {
                    Fragment::Text(r) => claim(text, r, piece, id, &mut next),
                    token => next.push(token),
                }
            }
            std::mem::swap(&mut frags, &mut next);
        }
        frags
    }

    pub fn heap_bytes(&self) -> usize {
        self.user.heap_bytes() + self.all.heap_bytes()
    }
}

/// Which patterns occur anywhere in `text`.
fn present_patterns(nfa: &NFA, text: &str, n: usize) -> Vec<bool> {
    let mut present = vec![false; n];
    let mut seen = HashSet::new();
    let Ok(mut sid) = nfa.start_state(Anchored::No) else {
        return present;
    };
    for &b in text.as_bytes() {
        sid = nfa.next_state(Anchored::No, sid, b);
        if nfa.is_match(sid) && seen.insert(sid) {
            for i in 0..nfa.match_len(sid) {
                present[nfa.match_pattern(sid, i).as_usize()] = true;
            }
        }
    }
    present
}

/// Splits one plain fragment at every leftmost non-overlapping occurrence of `piece`.
fn claim(text: &str, r: Range<usize>, piece: &str, id: u32, out: &mut Vec<Fragment>) {
    let mut start = r.start;
    for (at, _) in text[r.clone()].match_indices(piece) {
        let at = r.start + at;
        if at > start {
            out.push(Fragment::Text(start..at));
        }
        out.push(Fragment::Token(id));
        start = at + piece.len();
    }
    if start < r.end {
        out.push(Fragment::Text(start..r.end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab() -> Vocab {
        let pieces = ["a", "<s>", "<|im_end|>", "ab", "bcd", "  ", "   "];
        let kinds = vec![
            TokenKind::Normal,
            TokenKind::Control,
            TokenKind::Control,
            TokenKind::UserDefined,
            TokenKind::UserDefined,
            TokenKind::UserDefined,
            TokenKind::UserDefined,
        ];
        Vocab::new(pieces.iter().copied(), kinds).unwrap()
    }

    fn show(v: &Vocab, text: &str, parse: bool) -> Vec<String> {
        let s = SpecialTokens::new(v).unwrap();
        s.partition(v, text, parse)
            .into_iter()
            .map(|f| match f {
                Fragment::Text(r) => format!("'{}'", &text[r]),
                Fragment::Token(id) => format!("#{id}"),
            })
            .collect()
    }

    #[test]
    fn control_tokens_only_when_parsing() {
        let v = vocab();
        assert_eq!(show(&v, "x<s>y<|im_end|>", false), ["'x<s>y<|im_end|>'"]);
        assert_eq!(
            show(&v, "x<s>y<|im_end|>", true),
            ["'x'", "#1", "'y'", "#2"]
        );
    }

    #[test]
    fn longer_tokens_claim_first_even_when_later() {
        let v = vocab();
        // "bcd" (longer) wins over the earlier "ab" that overlaps it, as in llama.cpp.
        assert_eq!(show(&v, "abcd", false), ["'a'", "#4"]);
        // A run of five spaces: the three-space token first, then the two-space one.
        assert_eq!(show(&v, "x     y", false), ["'x'", "#6", "#5", "'y'"]);
    }

    #[test]
    fn empty_text_has_no_fragments() {
        let v = vocab();
        assert!(show(&v, "", true).is_empty());
    }
}
