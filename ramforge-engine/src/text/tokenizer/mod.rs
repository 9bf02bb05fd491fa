//! Tokenizers built from GGUF metadata alone: byte-level BPE (gpt2) and SentencePiece (llama).
//!
//! Encoding follows llama.cpp step by step, so ids agree token for token: special tokens are
//! split out of the text first ([`special`]), then each plain fragment goes through the
//! model's algorithm ([`bpe`] with a [`pretokenize`]r, or [`spm`]). Decoding is in [`decode`].

mod bpe;
mod checks;
mod decode;
mod encode;
mod error;
mod pretokenize;
mod queue;
mod special;
mod spm;
mod vocab;

pub use decode::StreamDecoder;
pub use encode::{Tokenizer, SUPPORTED_MODELS};
pub use error::TokenizerError;
/// The `tokenizer.ggml.pre` names known for gpt2 (byte-level BPE) models.
pub use pretokenize::KNOWN as KNOWN_PRE_TOKENIZERS;
pub use vocab::TokenKind;
