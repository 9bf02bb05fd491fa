//! The prompt rows a layer-major prefill (`layer_major.rs`) holds between layers.

use crate::budget::{ChargedVec, MemoryBudget};
use crate::error::EngineError;
use crate::forward::{rope_tables, Scratch};
use crate::model::ModelConfig;
use crate::plan::MemoryPlan;

/// What a layer-major prefill keeps of each held row between layers, charged together as
/// "held prompt rows" (`MemoryPlan::held_bytes`).
pub(crate) struct HeldRows {
    /// The residual streams.
    pub(crate) x: ChargedVec<f32>,
    /// Where the plan groups experts, an MoE layer's FFN input (normalized), the weighted sum
    /// of its routed experts' outputs and its routes (`n_expert_used` each); else empty.
    pub(crate) ffn_in: ChargedVec<f32>,
    pub(crate) expert_sums: ChargedVec<f32>,
    pub(crate) routes: ChargedVec<(usize, f32)>,
}

impl HeldRows {
    /// Charges and allocates the rows `plan` holds (none: empty buffers).
    pub(crate) fn new(
        budget: &MemoryBudget,
        cfg: &ModelConfig,
        plan: &MemoryPlan,
    ) -> Result<HeldRows, EngineError> {
        let rows = plan.held_rows;
        let grouped = if plan.held_groups_experts { rows } else { 0 };
        let what = "held prompt rows";
        let e = cfg.n_embd;
        let held = HeldRows {
            x: ChargedVec::zeroed(budget, what, rows * cfg.residual_streams() * e)?,
            ffn_in: ChargedVec::zeroed(budget, what, grouped * e)?,
            expert_sums: ChargedVec::zeroed(budget, what, grouped * e)?,
            routes: ChargedVec::zeroed(budget, what, grouped * cfg.n_expert_used)?,
        };
        debug_assert_eq!(
            held.x.charged_bytes()
                + held.ffn_in.charged_bytes()
                + held.expert_sums.charged_bytes()
                + held.routes.charged_bytes(),
            plan.held_bytes
        );
        Ok(held)
    }

    /// Moves batch `b` of the held rows (`bt`'s tokens at positions from `pos`) into the
    /// scratch: its residual streams, token ids and RoPE tables.
    pub(crate) fn load(
        &self,
        cfg: &ModelConfig,
        rope_freqs: Option<&[f32]>,
        s: &mut Scratch,
        b: usize,
        bt: &[u32],
        pos: usize,
    ) {
        let n = bt.len();
        self.restore(cfg, s, b, n);
        s.tokens[..n].copy_from_slice(bt);
        rope_tables(cfg, rope_freqs, pos..pos + n, s);
    }

    /// Puts the residual streams of batch `b` (`n` rows) back into the scratch.
    pub(crate) fn restore(&self, cfg: &ModelConfig, s: &mut Scratch, b: usize, n: usize) {
        let row = cfg.residual_streams() * cfg.n_embd;
        let at = b * s.batch * row;
        s.x[..n * row].copy_from_slice(&self.x[at..at + n * row]);
    }

    /// Keeps the scratch's residual streams of batch `b` (`n` rows).
    pub(crate) fn keep(&mut self, cfg: &ModelConfig, s: &Scratch, b: usize, n: usize) {
        let row = cfg.residual_streams() * cfg.n_embd;
        let at = b * s.batch * row;
        self.x[at..at + n * row].copy_from_slice(&s.x[..n * row]);
    }
}
