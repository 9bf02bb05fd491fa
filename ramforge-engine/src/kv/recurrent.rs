//! The fixed-size state of a sequence's layers that summarize what came before instead of
//! keeping every position: for each gated delta-net layer of a hybrid model the last
//! `d_conv - 1` inputs of its convolution and one `head_dim x head_dim` matrix per value head;
//! for each DeepSeek V4 layer its raw window ring and its compressors' pending tokens
//! (`kv/compressed.rs`). Its size does not grow with the context: it is allocated (and charged)
//! whole when the sequence first holds a token, and zero until then.
//!
//! It summarizes every position at once, so it cannot be cut back to a shorter prefix. So that
//! the next turn of a conversation (whose prompt holds the last prompt, but seldom every token
//! generated after it) still evaluates only its new tokens, a copy of the state is kept as it
//! stood at the end of the latest prompt: a checkpoint, charged like the state. A context cut
//! back to exactly that position restores it; cut anywhere else it starts over
//! ([`crate::Engine::truncate_context`]).

use crate::budget::{ChargedVec, MemoryBudget};
use crate::error::EngineError;
use crate::model::ModelConfig;

/// The recurrent state of one sequence (empty for a model without delta-net layers).
pub(crate) struct RecurrentState {
    /// For each block, where its state lies in the whole (`None`: it keeps keys and values).
    spans: Vec<Option<std::ops::Range<usize>>>,
    /// Floats of the convolution inputs of one delta-net layer.
    conv: usize,
    /// Floats of the whole state.
    total: usize,
    data: Option<ChargedVec<f32>>,
    /// The state after the first `.0` positions, and that copy.
    checkpoint: Option<(usize, ChargedVec<f32>)>,
}

impl RecurrentState {
    /// The state `cfg`'s delta-net layers need (nothing allocated yet).
    pub(crate) fn for_model(cfg: &ModelConfig) -> RecurrentState {
        let (conv, per_layer) = cfg.delta_net.as_ref().map_or((0, 0), |d| {
            ((d.d_conv - 1) * d.channels(), d.state_floats())
        });
        let mut total = 0;
        let spans = (0..cfg.n_layer)
            .map(|l| {
                let len = match &cfg.dsv4 {
                    _ if cfg.is_recurrent(l) => per_layer,
                    Some(d) => d.fixed_floats(l, cfg.head_dim),
                    None => 0,
                };
                (len > 0).then(|| {
                    total += len;
                    total - len..total
                })
            })
            .collect();
        RecurrentState {
            spans,
            conv,
            total,
            data: None,
            checkpoint: None,
        }
    }

    /// No recurrent layers.
    pub(crate) fn none() -> RecurrentState {
        RecurrentState {
            spans: Vec::new(),
            conv: 0,
            total: 0,
            data: None,
            checkpoint: None,
        }
    }

    /// Bytes of the whole state of one sequence of `cfg` (what [`RecurrentState::reserve`]
    /// charges, and [`RecurrentState::checkpoint`] again).
    pub(crate) fn bytes(cfg: &ModelConfig) -> u64 {
        4 * RecurrentState::for_model(cfg).total as u64
    }

    /// Whether `layer` keeps its state here (its key/value slot only stands in).
    pub(crate) fn holds(&self, layer: usize) -> bool {
        self.spans.get(layer).is_some_and(Option::is_some)
    }

    /// Whether the model has layers with such a state.
    pub(crate) fn exists(&self) -> bool {
        self.total > 0
    }

    /// Allocates and charges the zero state, if not yet done.
    pub(crate) fn reserve(&mut self, budget: &MemoryBudget) -> Result<(), EngineError> {
        if self.data.is_none() && self.exists() {
            self.data = Some(ChargedVec::zeroed(budget, "recurrent state", self.total)?);
        }
        Ok(())
    }

    /// The whole state (`None` before it is reserved).
    pub(crate) fn data(&self) -> Option<&[f32]> {
        self.data.as_deref()
    }

    /// The whole state, to put a saved copy back.
    pub(crate) fn data_mut(&mut self) -> Option<&mut [f32]> {
        self.data.as_deref_mut()
    }

    /// Forgets the state and its checkpoint and releases their memory.
    pub(crate) fn clear(&mut self) {
        self.data = None;
        self.checkpoint = None;
    }

    /// Copies the state, as it stands after `position` positions, into the checkpoint
    /// (charged when first made); nothing when the state is not reserved.
    pub(crate) fn checkpoint(
        &mut self,
        position: usize,
        budget: &MemoryBudget,
    ) -> Result<(), EngineError> {
        let Some(data) = &self.data else {
            return Ok(());
        };
        let mut copy = match self.checkpoint.take() {
            Some((_, copy)) if copy.len() == data.len() => copy,
            _ => ChargedVec::zeroed(budget, "recurrent checkpoint", data.len())?,
        };
        copy.copy_from_slice(data);
        self.checkpoint = Some((position, copy));
        Ok(())
    }

    /// The position of the checkpoint, if one was made.
    pub(crate) fn checkpoint_position(&self) -> Option<usize> {
        self.checkpoint.as_ref().map(|(p, _)| *p)
    }

    /// Puts the checkpoint back as the state; returns its position, or `None` (nothing
    /// changed) when there is no checkpoint.
    pub(crate) fn restore_checkpoint(&mut self) -> Option<usize> {
        let (position, copy) = self.checkpoint.as_ref()?;
        let data = self.data.as_mut()?;
        data.copy_from_slice(copy);
        Some(*position)
    }

    /// Layer `layer`'s convolution inputs (oldest first, `d_conv - 1` rows of every channel)
    /// and its per-head state matrices (head `h`, row `j` (value), column `i` (key) at
    /// `(h * head_dim + j) * head_dim + i`). The state must have been reserved.
    pub(crate) fn layer(&mut self, layer: usize) -> (&mut [f32], &mut [f32]) {
        let conv = self.conv;
        self.whole_layer(layer).split_at_mut(conv)
    }

    /// Layer `layer`'s whole state. The state must have been reserved.
    pub(crate) fn whole_layer(&mut self, layer: usize) -> &mut [f32] {
        let span = self.spans[layer]
            .clone()
            .expect("a layer with a fixed state");
        let data = self.data.as_mut().expect("the recurrent state is reserved");
        &mut data[span]
    }
}
