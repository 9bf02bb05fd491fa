//! Token ids back to text. Each token becomes bytes (byte-level alphabet for BPE, U+2581 as
//! space and `<0xXX>` bytes for SentencePiece); a streaming decoder holds back the bytes of a
//! character that is not complete yet, so multi-byte characters spread over several tokens are
//! never split.

use super::encode::{Model, Tokenizer};
use super::vocab::TokenKind;

impl Tokenizer {
    /// Appends the bytes token `id` prints as. Control and unknown tokens print nothing unless
    /// `show_control`; unused and undefined tokens never print; ids outside the vocabulary
    /// print nothing.
    pub(crate) fn piece_bytes(&self, id: u32, show_control: bool, out: &mut Vec<u8>) {
        let Some(piece) = self.token_text(id) else {
            return;
        };
        match self.vocab.kind(id) {
            TokenKind::Control | TokenKind::Unknown if !show_control => {}
            TokenKind::Control | TokenKind::Unknown | TokenKind::UserDefined => {
                out.extend_from_slice(piece.as_bytes())
            }
            TokenKind::Normal => match &self.model {
                Model::Bpe(_) => super::bpe::decode_piece(piece, out),
                Model::Spm(_) => {
                    for c in piece.chars() {
                        let c = if c == '\u{2581}' { ' ' } else { c };
                        out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                    }
                }
            },
            TokenKind::Byte => out.extend(byte_of(piece)),
            TokenKind::Unused | TokenKind::Undefined => {}
        }
    }

    /// The text of a whole sequence; control tokens are not printed. With SentencePiece's
    /// `add_space_prefix`, the space that encoding put before the text (and after each special
    /// token) is removed again, so `decode(encode(s)) == s`.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        let mut fragment_start = true;
        for &id in ids {
            let Some(kind) = (id < self.vocab_size() as u32).then(|| self.vocab.kind(id)) else {
                continue;
            };
            if kind.is_special() {
                fragment_start = true;
                self.piece_bytes(id, false, &mut bytes);
                continue;
            }
            let at = bytes.len();
            self.piece_bytes(id, false, &mut bytes);
            if fragment_start && self.add_space_prefix && bytes.get(at) == Some(&b' ') {
                bytes.remove(at);
            }
            fragment_start = false;
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// A decoder for text that arrives one token at a time (generation): it continues the
    /// text as is, without removing a leading space.
    pub fn decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder {
            tok: self,
            pending: Vec::new(),
            show_control: false,
        }
    }
}

/// The byte of a `<0xXX>` token (nothing if the piece is not of that form).
fn byte_of(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    u8::from_str_radix(hex, 16).ok()
}

/// Turns tokens into text as they arrive; see [`Tokenizer::decoder`].
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    /// Bytes of a character not yet complete (at most 3).
    pending: Vec<u8>,
    show_control: bool,
}

impl StreamDecoder<'_> {
    /// Print control tokens (e.g. `<|im_end|>`) too.
    pub fn with_control_tokens(mut self) -> Self {
        self.show_control = true;
        self
    }

    /// Adds one token; returns the text that is complete so far (possibly empty).
    /// Bytes that can never form a character come out as U+FFFD.
    pub fn push(&mut self, id: u32) -> String {
        self.tok
            .piece_bytes(id, self.show_control, &mut self.pending);
        let mut text = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    text.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    text.push_str(std::str::from_utf8(good).expect("checked"));
                    match e.error_len() {
                        Some(n) => {
                            text.push('\u{FFFD}');
                            rest = &bad[n..];
                        }
                        None => {
                            rest = bad;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        self.pending.drain(..self.pending.len() - keep);
        text
    }

    /// Ends the stream: bytes of an unfinished character come out as U+FFFD.
    pub fn finish(self) -> String {
        String::from_utf8_lossy(&self.pending).into_owned()
    }
}
