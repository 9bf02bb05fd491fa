//! The model's tokenizer as llguidance sees it: every token's bytes (control tokens marked
//! special, so no grammar text can produce them) and a way to tokenize text.

use crate::text::tokenizer::TokenKind;
use crate::text::Tokenizer;
use llguidance::toktrie::{TokRxInfo, TokTrie, TokenId};
use std::sync::Arc;

pub struct TokenizerEnv {
    tokenizer: Arc<Tokenizer>,
    trie: TokTrie,
}

impl TokenizerEnv {
    /// Indexes `tokenizer`'s vocabulary.
    pub fn new(tokenizer: Arc<Tokenizer>) -> Result<TokenizerEnv, String> {
        let n = tokenizer.vocab_size();
        let eos = tokenizer
            .eog_ids()
            .first()
            .copied()
            .or(tokenizer.eos_id())
            .ok_or("the model has no end-of-generation token, so a grammar cannot end")?;
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| {
                let bytes = tokenizer.token_bytes(id);
                match tokenizer.token_kind(id) {
                    Some(TokenKind::Normal | TokenKind::UserDefined | TokenKind::Byte) => bytes,
                    _ => {
                        let mut marked = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                        marked.extend_from_slice(tokenizer.token_text(id).unwrap_or("").as_bytes());
                        marked
                    }
                }
            })
            .collect();
        let mut info = TokRxInfo::new(n as u32, eos);
        info.tok_bos = tokenizer.bos_id();
        let trie = TokTrie::from(&info, &words).with_eos_tokens(tokenizer.eog_ids());
        Ok(TokenizerEnv { tokenizer, trie })
    }
}

impl llguidance::toktrie::TokenizerEnv for TokenizerEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.tokenizer
            .encode(&String::from_utf8_lossy(s), false, false)
    }
}
