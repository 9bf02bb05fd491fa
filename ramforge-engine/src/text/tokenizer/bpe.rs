//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`): each word from the pre-tokenizer starts as
//! one symbol per byte (GPT-2's byte-to-character alphabet) and adjacent pairs are merged by
//! rank, lowest first and leftmost among equals, exactly as llama.cpp does. A priority queue of
//! candidate pairs ([`MergeQueue`]) keeps a word of n bytes at O(n log n).

use super::error::TokenizerError;
use super::pretokenize::{PreSpec, PreTokenizer};
use super::queue::MergeQueue;
use super::vocab::Vocab;
use hashbrown::HashMap;
use std::ops::Range;

/// No symbol / no token.
const NONE: u32 = u32::MAX;

const fn is_printable(b: u8) -> bool {
    matches!(b, 0x21..=0x7E | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// GPT-2's byte-level alphabet: printable Latin-1 bytes stand for themselves, the other 68
/// bytes for U+0100 onwards in byte order.
const BYTE_CHARS: [u32; 256] = {
    let mut t = [0u32; 256];
    let (mut b, mut n) = (0usize, 0u32);
    while b < 256 {
        if is_printable(b as u8) {
            t[b] = b as u32;
        } else {
            t[b] = 256 + n;
            n += 1;
        }
        b += 1;
    }
    t
};

/// The bytes U+0100..=U+0143 stand for.
const SHIFTED_BYTES: [u8; 68] = {
    let mut t = [0u8; 68];
    let mut b = 0usize;
    while b < 256 {
        if !is_printable(b as u8) {
            t[(BYTE_CHARS[b] - 256) as usize] = b as u8;
        }
        b += 1;
    }
    t
};

/// The byte-level character that stands for byte `b`.
pub fn byte_to_char(b: u8) -> char {
    char::from_u32(BYTE_CHARS[b as usize]).expect("below U+0144")
}

/// The byte a byte-level character stands for, if it is one.
pub fn char_to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 256 && is_printable(cp as u8) {
        return Some(cp as u8);
    }
    SHIFTED_BYTES.get(cp.wrapping_sub(256) as usize).copied()
}

/// Merge table and pre-tokenizer of a byte-level BPE vocabulary.
pub struct Bpe {
    /// (left id << 32 | right id) -> (rank << 32 | merged id).
    merges: HashMap<u64, u64>,
    /// Token of each byte's alphabet character; NONE where the vocabulary lacks it.
    byte_tokens: [u32; 256],
    pre: PreTokenizer,
    ignore_merges: bool,
}

/// One symbol of a word being merged: its token and its live neighbours.
#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    prev: u32,
    next: u32,
}

/// Buffers reused across words of one `encode` call.
#[derive(Default)]
pub struct BpeScratch {
    words: Vec<Range<usize>>,
    pieces: Vec<Range<usize>>,
    symbols: Vec<Symbol>,
    queue: MergeQueue,
    encoded: String,
}

impl Bpe {
    /// Reads `tokenizer.ggml.merges` ("left right" strings, rank = position).
    pub fn new<'a>(
        vocab: &Vocab,
        merges: impl ExactSizeIterator<Item = &'a str>,
        pre: &PreSpec,
    ) -> Result<Bpe, TokenizerError> {
        let mut byte_tokens = [NONE; 256];
        let mut buf = [0u8; 4];
        for (b, slot) in byte_tokens.iter_mut().enumerate() {
            let c = byte_to_char(b as u8).encode_utf8(&mut buf);
            *slot = vocab.id_of(c).unwrap_or(NONE);
        }
        let mut table = HashMap::with_capacity_and_hasher(merges.len(), Default::default());
        let mut merged_text = String::new();
        for (rank, merge) in merges.enumerate() {
            let bad = |msg: String| TokenizerError::Invalid {
                key: "tokenizer.ggml.merges",
                msg: format!("merge {rank} {merge:?}: {msg}"),
            };
            // The separator is the first space after the first byte (a piece may be " ").
            let split = merge
                .bytes()
                .skip(1)
                .position(|b| b == b' ')
                .map(|p| p + 1)
                .ok_or_else(|| bad("is not two pieces separated by a space".into()))?;
            let (left, right) = (&merge[..split], &merge[split + 1..]);
            let part = |p: &str| {
                vocab
                    .id_of(p)
                    .ok_or_else(|| bad(format!("{p:?} is not in the vocabulary")))
            };
            let (l, r) = (part(left)?, part(right)?);
            merged_text.clear();
            merged_text.push_str(left);
            merged_text.push_str(right);
            let m = vocab.id_of(&merged_text).ok_or_else(|| {
                bad(format!(
                    "the result {merged_text:?} is not in the vocabulary"
                ))
            })?;
            let rank = u32::try_from(rank).map_err(|_| bad("too many merges".into()))?;
            table
                .entry(pair_key(l, r))
                .or_insert((rank as u64) << 32 | m as u64);
        }
        Ok(Bpe {
            merges: table,
            byte_tokens,
            pre: PreTokenizer::new(pre)?,
            ignore_merges: pre.ignore_merges,
        })
    }

    /// Tokenizes one fragment of plain text (no special tokens in it).
    pub fn encode(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>, s: &mut BpeScratch) {
        let mut words = std::mem::take(&mut s.words);
        self.pre.split(text, &mut words, &mut s.pieces);
        for w in &words {
            self.encode_word(vocab, text[w.clone()].as_bytes(), out, s);
        }
        s.words = words;
    }

    fn encode_word(&self, vocab: &Vocab, word: &[u8], out: &mut Vec<u32>, s: &mut BpeScratch) {
        if self.ignore_merges {
            s.encoded.clear();
            s.encoded.extend(word.iter().map(|&b| byte_to_char(b)));
            if let Some(id) = vocab.id_of(&s.encoded) {
                out.push(id);
                return;
            }
        }
        let n = word.len() as u32;
        s.symbols.clear();
        s.symbols
            .extend(word.iter().enumerate().map(|(i, &b)| Symbol {
                id: self.byte_tokens[b as usize],
                prev: if i == 0 { NONE } else { i as u32 - 1 },
                next: if i as u32 + 1 == n {
                    NONE
                } else {
                    i as u32 + 1
                },
            }));
        s.queue.reset(word.len());
        for left in 0..n.saturating_sub(1) {
            self.push_pair(&s.symbols, &mut s.queue, left);
        }
        while let Some((rank, left)) = s.queue.pop() {
            let l = s.symbols[left as usize];
            if l.id == NONE || l.next == NONE {
                continue;
            }
            let r = s.symbols[l.next as usize];
            // Stale entry: the pair at `left` changed since it was queued.
            let Some((cur_rank, merged)) = self.rank(l.id, r.id) else {
                continue;
            };
            if cur_rank != rank {
                continue;
            }
            let right = l.next;
            s.symbols[left as usize].id = merged;
            s.symbols[left as usize].next = r.next;
            if r.next != NONE {
                s.symbols[r.next as usize].prev = left;
            }
            s.symbols[right as usize].id = NONE;
            if l.prev != NONE {
                self.push_pair(&s.symbols, &mut s.queue, l.prev);
            }
            self.push_pair(&s.symbols, &mut s.queue, left);
        }
        // Bytes whose alphabet character is not a token are dropped, as llama.cpp does.
        let mut i = 0;
        while i != NONE {
            let sym = s.symbols[i as usize];
            if sym.id != NONE {
                out.push(sym.id);
            }
            i = sym.next;
        }
    }

    fn rank(&self, left: u32, right: u32) -> Option<(u32, u32)> {
        if left == NONE || right == NONE {
            return None;
        }
        self.merges
            .get(&pair_key(left, right))
            .map(|&v| ((v >> 32) as u32, v as u32))
    }

    /// Queues the pair starting at symbol `left`, if it has a merge.
    fn push_pair(&self, symbols: &[Symbol], queue: &mut MergeQueue, left: u32) {
        let l = symbols[left as usize];
        if l.next == NONE {
            return;
        }
        if let Some((rank, _)) = self.rank(l.id, symbols[l.next as usize].id) {
            queue.push(rank, left);
        }
    }

    /// Bytes of heap memory the merge table uses (hashbrown: one control byte per bucket).
    pub fn heap_bytes(&self) -> usize {
        self.merges.capacity() * (16 + 1)
    }
}

fn pair_key(left: u32, right: u32) -> u64 {
    (left as u64) << 32 | right as u64
}

/// Appends the bytes a byte-level piece stands for; characters outside the alphabet are kept
/// as their own UTF-8.
pub fn decode_piece(piece: &str, out: &mut Vec<u8>) {
    for c in piece.chars() {
        match char_to_byte(c) {
            Some(b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alphabet_round_trips_every_byte() {
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'a'), 'a');
        let mut seen = std::collections::HashSet::new();
        for b in 0..=255u8 {
            let c = byte_to_char(b);
            assert!(seen.insert(c));
            assert_eq!(char_to_byte(c), Some(b));
        }
        assert_eq!(char_to_byte('€'), None);
    }
}
