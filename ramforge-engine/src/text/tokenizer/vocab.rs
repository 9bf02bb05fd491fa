//! The vocabulary: every token's piece and kind, stored compactly (one text buffer, end offsets,
//! and a hash index of ids) so a 50k-token vocabulary costs about a megabyte.

use super::error::TokenizerError;
use hashbrown::{DefaultHashBuilder, HashTable};
use std::hash::BuildHasher;

/// What a token is, from `tokenizer.ggml.token_type` (llama.cpp's token types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TokenKind {
    /// An ordinary token.
    Normal,
    /// The unknown-token placeholder.
    Unknown,
    /// Control tokens (BOS, `<|im_end|>`): matched in text only when asked, never printed.
    Control,
    /// User-defined tokens: always matched in text before the model's algorithm runs.
    UserDefined,
    /// A slot the vocabulary does not use.
    Unused,
    /// `<0xXX>` byte-fallback tokens.
    Byte,
    /// Not defined by the model.
    Undefined,
}

impl TokenKind {
    /// The kind for a `token_type` value; values outside 1..=6 are undefined, as in llama.cpp.
    pub fn from_type_id(t: i64) -> TokenKind {
        match t {
            1 => TokenKind::Normal,
            2 => TokenKind::Unknown,
            3 => TokenKind::Control,
            4 => TokenKind::UserDefined,
            5 => TokenKind::Unused,
            6 => TokenKind::Byte,
            _ => TokenKind::Undefined,
        }
    }

    /// Tokens that llama.cpp splits out of the text before tokenizing the rest.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            TokenKind::Control | TokenKind::UserDefined | TokenKind::Unknown
        )
    }
}

/// All pieces back to back with their kinds and a piece -> id index.
pub struct Vocab {
    text: String,
    /// `ends[i]` is the end offset of piece `i` in `text`; piece `i` starts at `ends[i - 1]`.
    ends: Vec<u32>,
    kinds: Vec<TokenKind>,
    index: HashTable<u32>,
    hasher: DefaultHashBuilder,
    max_piece_len: usize,
}

impl Vocab {
    /// Builds the vocabulary. Empty pieces are renamed `[EMPTY_<id>]` (as llama.cpp does);
    /// a piece that occurs twice is an error.
    pub fn new<'a>(
        pieces: impl ExactSizeIterator<Item = &'a str>,
        kinds: Vec<TokenKind>,
    ) -> Result<Vocab, TokenizerError> {
        let n = pieces.len();
        if n == 0 {
            return Err(TokenizerError::Invalid {
                key: "tokenizer.ggml.tokens",
                msg: "the vocabulary is empty".into(),
            });
        }
        if n >= u32::MAX as usize {
            return Err(TokenizerError::Invalid {
                key: "tokenizer.ggml.tokens",
                msg: format!("{n} tokens do not fit 32-bit ids"),
            });
        }
        debug_assert_eq!(kinds.len(), n);
        let mut v = Vocab {
            text: String::new(),
            ends: Vec::with_capacity(n),
            kinds,
            index: HashTable::with_capacity(n),
            hasher: Default::default(),
            max_piece_len: 0,
        };
        for (id, piece) in pieces.enumerate() {
            if piece.is_empty() {
                v.text.push_str(&format!("[EMPTY_{id}]"));
            } else {
                v.text.push_str(piece);
            }
            let end = u32::try_from(v.text.len()).map_err(|_| TokenizerError::Invalid {
                key: "tokenizer.ggml.tokens",
                msg: "the pieces total more than 4 GiB".into(),
            })?;
            v.ends.push(end);
            let id = id as u32;
            v.max_piece_len = v.max_piece_len.max(v.piece(id).len());
            if let Some(first) = v.id_of(v.piece(id)) {
                return Err(TokenizerError::Invalid {
                    key: "tokenizer.ggml.tokens",
                    msg: format!("duplicate token {:?} at ids {first} and {id}", v.piece(id)),
                });
            }
            let (text, ends, hasher) = (&v.text, &v.ends, &v.hasher);
            let hash = hasher.hash_one(piece_of(text, ends, id).as_bytes());
            v.index.insert_unique(hash, id, |&other| {
                hasher.hash_one(piece_of(text, ends, other).as_bytes())
            });
        }
        v.text.shrink_to_fit();
        Ok(v)
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// The raw vocabulary piece of a token.
    pub fn piece(&self, id: u32) -> &str {
        piece_of(&self.text, &self.ends, id)
    }

    pub fn kind(&self, id: u32) -> TokenKind {
        self.kinds[id as usize]
    }

    pub fn set_kind(&mut self, id: u32, kind: TokenKind) {
        self.kinds[id as usize] = kind;
    }

    /// The id of the token whose piece is exactly `piece`.
    pub fn id_of(&self, piece: &str) -> Option<u32> {
        if piece.len() > self.max_piece_len {
            return None;
        }
        let hash = self.hasher.hash_one(piece.as_bytes());
        self.index
            .find(hash, |&id| self.piece(id) == piece)
            .copied()
    }

    /// Length in bytes of the longest piece.
    pub fn max_piece_len(&self) -> usize {
        self.max_piece_len
    }

    /// Bytes of heap memory the tables use.
    pub fn heap_bytes(&self) -> usize {
        self.text.capacity()
            + self.ends.capacity() * 4
            + self.kinds.capacity()
            + self.index.capacity() * (std::mem::size_of::<u32>() + 1)
    }
}

fn piece_of<'a>(text: &'a str, ends: &[u32], id: u32) -> &'a str {
    let i = id as usize;
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    &text[start..ends[i] as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(pieces: &[&str]) -> Result<Vocab, TokenizerError> {
        Vocab::new(
            pieces.iter().copied(),
            vec![TokenKind::Normal; pieces.len()],
        )
    }

    #[test]
    fn lookup_both_ways() {
        let v = vocab(&["a", "bc", "", "日本"]).unwrap();
        assert_eq!(v.len(), 4);
        assert_eq!(v.piece(1), "bc");
        assert_eq!(v.piece(2), "[EMPTY_2]");
        assert_eq!(v.id_of("日本"), Some(3));
        assert_eq!(v.id_of("b"), None);
        assert_eq!(v.max_piece_len(), 9);
    }

    #[test]
    fn duplicate_is_an_error() {
        let e = vocab(&["a", "b", "a"]).err().unwrap().to_string();
        assert!(e.contains("duplicate token \"a\" at ids 0 and 2"), "{e}");
    }
}
