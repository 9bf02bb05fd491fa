//! The recurrent state of a hybrid model's gated delta-net layers, per sequence: for each such
//! layer the last `d_conv - 1` inputs of its convolution and one `head_dim x head_dim` matrix
//! per value head. Its size does not grow with the context: it is allocated (and charged)
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
    /// For each block, its index among the delta-net layers.
    index: Vec<Option<usize>>,
    /// Floats of the convolution inputs of one layer.
    conv: usize,
    /// Floats of one layer's whole state.
    per_layer: usize,
    data: Option<ChargedVec<f32>>,
    /// The state after the first `.0` positions, and that copy.
    checkpoint: Option<(usize, ChargedVec<f32>)>,
}

impl RecurrentState {
    /// The state `cfg`'s delta-net layers need (nothing allocated yet).
    pub(crate) fn for_model(cfg: &ModelConfig) -> RecurrentState {
        let mut next = 0;
        let index = (0..cfg.n_layer)
            .map(|l| {
                cfg.is_recurrent(l).then(|| {
                    next += 1;
                    next - 1
                })
            })
            .collect();
        let (conv, per_layer) = cfg.delta_net.as_ref().map_or((0, 0), |d| {
            ((d.d_conv - 1) * d.channels(), d.state_floats())
        });
        RecurrentState {
            index,
            conv,
            per_layer,
            data: None,
            checkpoint: None,
        }
    }

    /// No recurrent layers.
    pub(crate) fn none() -> RecurrentState {
        RecurrentState {
            index: Vec::new(),
            conv: 0,
            per_layer: 0,
            data: None,
            checkpoint: None,
        }
    }

    fn layers(&self) -> usize {
        self.index.iter().flatten().count()
    }

    /// Bytes of the whole state of one sequence of `cfg` (what [`RecurrentState::reserve`]
    /// charges, and [`RecurrentState::checkpoint`] again).
    pub(crate) fn bytes(cfg: &ModelConfig) -> u64 {
        let s = RecurrentState::for_model(cfg);
        4 * (s.layers() * s.per_layer) as u64
    }

    /// Whether `layer` is a delta-net layer (its key/value slot only stands in).
    pub(crate) fn holds(&self, layer: usize) -> bool {
        self.index.get(layer).is_some_and(Option::is_some)
    }

    /// Whether the model has delta-net layers.
    pub(crate) fn exists(&self) -> bool {
        self.layers() > 0
    }

    /// Allocates and charges the zero state, if not yet done.
    pub(crate) fn reserve(&mut self, budget: &MemoryBudget) -> Result<(), EngineError> {
        if self.data.is_none() && self.exists() {
            let len = self.layers() * self.per_layer;
            self.data = Some(ChargedVec::zeroed(budget, "recurrent state", len)?);
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
        let i = self.index[layer].expect("a delta-net layer");
        let data = self.data.as_mut().expect("the recurrent state is reserved");
        let all = &mut data[i * self.per_layer..(i + 1) * self.per_layer];
        all.split_at_mut(self.conv)
    }
}
