//! SentencePiece-style BPE (`tokenizer.ggml.model = "llama"`), as llama.cpp runs it: the text
//! (spaces already written as U+2581) starts as one symbol per character, and the adjacent pair
//! whose concatenation is the highest-scoring token is merged first (leftmost among equals)
//! until no pair forms a token. Symbols that are not tokens fall back to `<0xXX>` byte tokens.
//! Scores become dense ranks (highest score = rank 0, equal scores share a rank), so the same
//! priority queue as BPE ([`MergeQueue`]) keeps n characters at O(n log n).

use super::error::TokenizerError;
use super::queue::MergeQueue;
use super::vocab::Vocab;

const NONE: u32 = u32::MAX;

/// Scores and byte-fallback table of a SentencePiece vocabulary.
pub struct Spm {
    /// Each token's score as a dense rank: 0 for the highest score, equal scores equal ranks.
    ranks: Vec<u32>,
    /// `<0xXX>` token of each byte (or the one-character token of an ASCII byte); NONE if absent.
    byte_tokens: [u32; 256],
    unk: Option<u32>,
}

/// A character range of the text and its live neighbours; `start == NONE` once merged away.
#[derive(Clone, Copy)]
struct Symbol {
    start: u32,
    end: u32,
    prev: u32,
    next: u32,
}

/// Buffers reused across fragments of one `encode` call.
#[derive(Default)]
pub struct SpmScratch {
    symbols: Vec<Symbol>,
    queue: MergeQueue,
}

impl Spm {
    /// `scores` must hold one score per token (checked by the caller).
    pub fn new(vocab: &Vocab, scores: Vec<f32>, unk: Option<u32>) -> Result<Spm, TokenizerError> {
        let mut byte_tokens = [NONE; 256];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            let hex = format!("<0x{b:02X}>");
            let plain = (b < 0x80).then(|| (b as u8 as char).to_string());
            *slot = vocab
                .id_of(&hex)
                .or_else(|| plain.and_then(|p| vocab.id_of(&p)))
                .unwrap_or(NONE);
        }
        Ok(Spm {
            ranks: score_ranks(&scores),
            byte_tokens,
            unk,
        })
    }

    /// Tokenizes one fragment whose spaces are already escaped as U+2581.
    pub fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>, s: &mut SpmScratch) {
        if text.is_empty() {
            return;
        }
        s.symbols.clear();
        let mut chars = text.char_indices().peekable();
        while let Some((start, _)) = chars.next() {
            let end = chars.peek().map_or(text.len(), |&(e, _)| e);
            let i = s.symbols.len() as u32;
            s.symbols.push(Symbol {
                start: start as u32,
                end: end as u32,
                prev: if i == 0 { NONE } else { i - 1 },
                next: if end == text.len() { NONE } else { i + 1 },
            });
        }
        s.queue.reset(s.symbols.len());
        for left in 0..s.symbols.len() as u32 - 1 {
            self.push_pair(vocab, text, &s.symbols, &mut s.queue, left);
        }
        while let Some((rank, left)) = s.queue.pop() {
            let l = s.symbols[left as usize];
            if l.start == NONE || l.next == NONE {
                continue;
            }
            let r = s.symbols[l.next as usize];
            // Stale entry: the pair at `left` changed since it was queued.
            if self.pair_rank(vocab, text, l, r) != Some(rank) {
                continue;
            }
            let right = l.next;
            let sym = &mut s.symbols[left as usize];
            sym.end = r.end;
            sym.next = r.next;
            if r.next != NONE {
                s.symbols[r.next as usize].prev = left;
            }
            s.symbols[right as usize].start = NONE;
            if l.prev != NONE {
                self.push_pair(vocab, text, &s.symbols, &mut s.queue, l.prev);
            }
            self.push_pair(vocab, text, &s.symbols, &mut s.queue, left);
        }
        let mut i = 0;
        while i != NONE {
            let sym = s.symbols[i as usize];
            let piece = &text[sym.start as usize..sym.end as usize];
            match vocab.id_of(piece) {
                Some(id) => out.push(id),
                None => self.byte_fallback(piece, out),
            }
            i = sym.next;
        }
    }

    /// A symbol that is no token becomes its bytes' tokens; a byte without one becomes the
    /// unknown token (llama.cpp would abort there).
    fn byte_fallback(&self, piece: &str, out: &mut Vec<u32>) {
        for &b in piece.as_bytes() {
            match self.byte_tokens[b as usize] {
                NONE => out.extend(self.unk),
                id => out.push(id),
            }
        }
    }

    /// The rank of the token the two symbols would form, if they form one.
    fn pair_rank(&self, vocab: &Vocab, text: &str, l: Symbol, r: Symbol) -> Option<u32> {
        if (r.end - l.start) as usize > vocab.max_piece_len() {
            return None;
        }
        let id = vocab.id_of(&text[l.start as usize..r.end as usize])?;
        Some(self.ranks[id as usize])
    }

    fn push_pair(
        &self,
        vocab: &Vocab,
        text: &str,
        symbols: &[Symbol],
        queue: &mut MergeQueue,
        left: u32,
    ) {
        let l = symbols[left as usize];
        if l.next == NONE {
            return;
        }
        if let Some(rank) = self.pair_rank(vocab, text, l, symbols[l.next as usize]) {
            queue.push(rank, left);
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.ranks.capacity() * 4
    }
}

/// Dense ranks of scores, highest first: equal scores (as llama.cpp compares them, so -0 equals
/// 0) share a rank; NaN ranks last.
fn score_ranks(scores: &[f32]) -> Vec<u32> {
    let key = |s: f32| {
        if s.is_nan() {
            f32::NEG_INFINITY
        } else {
            s + 0.0
        }
    };
    let mut order: Vec<u32> = (0..scores.len() as u32).collect();
    order.sort_by(|&a, &b| key(scores[b as usize]).total_cmp(&key(scores[a as usize])));
    let mut ranks = vec![0u32; scores.len()];
    let mut rank = 0u32;
    for (i, &id) in order.iter().enumerate() {
        if i > 0 && key(scores[order[i - 1] as usize]) != key(scores[id as usize]) {
            rank += 1;
        }
        ranks[id as usize] = rank;
    }
    ranks
}

/// Writes spaces as U+2581, SentencePiece's visible space.
pub fn escape_spaces(text: &str, out: &mut String) {
    for c in text.chars() {
        out.push(if c == ' ' { '\u{2581}' } else { c });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_scores_share_a_rank() {
        let ranks = score_ranks(&[-1.0, 0.0, -1.0, -0.0, 5.0, f32::NAN]);
        assert_eq!(ranks, [2, 1, 2, 1, 0, 3]);
    }
}
