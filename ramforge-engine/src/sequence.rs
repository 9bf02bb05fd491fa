//! A sequence's own context: its tokens, and their keys and values in a KV cache charged to
//! the engine's budget chunk by chunk as it grows. The engine has one of its own; a server
//! decoding several requests together keeps one per slot ([`crate::Engine::new_sequence`]).

use crate::kv::KvCache;

/// The tokens of one sequence and their keys and values.
pub struct Sequence {
    pub(crate) kv: KvCache,
    pub(crate) history: Vec<u32>,
    /// What a verify pass on this sequence overwrote (see the engine's field of that name).
    pub(crate) saved: Option<(usize, crate::kv::Saved)>,
    /// A rolled-back recurrent state holds only `history[..n]` (see the engine's field).
    pub(crate) stale: Option<usize>,
    /// Which hidden states an MTP layer's drafts start from (see the engine's field).
    pub(crate) mtp: crate::forward::mtp::MtpState,
}

impl Sequence {
    pub(crate) fn new(kv: KvCache) -> Sequence {
        Sequence {
            kv,
            history: Vec::new(),
            saved: None,
            stale: None,
            mtp: Default::default(),
        }
    }

    /// Every token in the context, in order.
    pub fn tokens(&self) -> &[u32] {
        &self.history
    }

    /// Tokens in the context.
    pub fn len(&self) -> usize {
        self.history.len()
    }

    /// Whether the context is empty.
    pub fn is_empty(&self) -> bool {
        self.history.is_empty()
    }

    /// Forgets every token and releases (uncharges) the keys and values.
    pub fn clear(&mut self) {
        self.kv.clear();
        self.history.clear();
        self.saved = None;
        self.stale = None;
        self.mtp = Default::default();
    }

    /// How many leading tokens of `tokens` this context holds already.
    pub fn common_prefix(&self, tokens: &[u32]) -> usize {
        self.history
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count()
    }
}
