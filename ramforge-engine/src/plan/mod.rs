//! The memory plan: which weights stay resident and which are streamed, under a budget.
//!
//! The same arithmetic serves the engine (which allocates exactly what the plan books) and the
//! `plan` command (which prints it).
//!
//! Policy, in order:
//! 1. The working set is reserved first: norms and biases (f32), the KV cache for the whole
//!    context of each sequence decoded together (a sliding-window layer's for its window only), scratch activations for one batch, logits, one token-embedding row, one streaming
//!    buffer large enough for any layer's aligned read, and a minimum output-projection chunk.
//!    Their sum is the minimum workable budget; below it loading fails with an error that
//!    states it.
//! 2. What is left of the budget is the share for resident weights. The output projection is
//!    pinned first if it fits in that share (it is used once per token, like a layer).
//! 3. The residency policy ([`residency::choose`]) splits the rest between pinned layers
//!    and a ring of streaming buffers (the prefetch depth); if every layer fits, there is no
//!    ring and its bytes count towards pinning.
//! 4. Anything left enlarges the output chunk (when the output is streamed), up to 8 MiB.
//!
//! The token embedding is only ever read one row per token, so it is never made resident on its
//! own account (with a tied output it is resident exactly when the output is).

pub mod residency;

use crate::error::EngineError;
use crate::forward::Scratch;
use crate::kv::{kv_cache_bytes, KvType};
use crate::model::{ModelConfig, ModelTensors};
use crate::stream::{aligned_buf_charge, LayerLayout};
use residency::{choose, ResidencyInput, Timing};

/// Rows of the output projection read at once, at the least, when it is streamed.
pub const MIN_OUTPUT_CHUNK_ROWS: u64 = 256;
/// The output chunk is not enlarged beyond this.
pub const MAX_OUTPUT_CHUNK_BYTES: u64 = 8 << 20;

/// What the plan is made for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanRequest {
    /// The budget in bytes; `None` = unlimited (everything resident).
    pub budget: Option<u64>,
    /// Positions the KV cache must hold (prompt + generated tokens).
    pub ctx: usize,
    /// Tokens processed together during prompt processing.
    pub batch: usize,
    /// How keys and values are cached.
    pub kv_type: KvType,
    /// Sequences decoded together at most (`serve --parallel`): each has its own KV cache
    /// for the whole context and its own logits, all booked here.
    pub sequences: usize,
}

/// The plan: every managed byte, by purpose.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryPlan {
    /// What the plan was made for.
    pub request: PlanRequest,
    /// Norms, biases, RoPE factors as f32.
    pub vector_bytes: u64,
    /// The KV caches for the whole context, one per sequence.
    pub kv_bytes: u64,
    /// Activations for one batch.
    pub scratch_bytes: u64,
    /// One logit per vocabulary entry, per sequence.
    pub logits_bytes: u64,
    /// One token-embedding row, staged for dequantization.
    pub embd_row_bytes: u64,
    /// The whole output projection.
    pub output_bytes: u64,
    /// Whether the output projection stays resident.
    pub output_resident: bool,
    /// Rows per output chunk when streamed (0 when resident).
    pub output_chunk_rows: u64,
    /// Bytes of one output chunk (0 when resident).
    pub output_chunk_bytes: u64,
    /// Matrix bytes of each layer.
    pub layer_bytes: Vec<u64>,
    /// Which layers stay resident.
    pub pinned: Vec<bool>,
    /// Streaming buffers in the prefetch ring (0 when every layer is pinned).
    pub stream_buffers: usize,
    /// Usable bytes of one streaming buffer (any layer's aligned read fits).
    pub stream_buffer_len: u64,
    /// Bytes charged for the whole ring (0 when every layer is pinned).
    pub slot_bytes: u64,
    /// The smallest budget this model works under at this context and batch.
    pub minimum: u64,
}

impl MemoryPlan {
    /// Lays the model out under the request, or fails with `BudgetTooSmall`, with the
    /// assumed storage and compute speeds ([`Timing::assumed`]).
    pub fn new(
        cfg: &ModelConfig,
        tensors: &ModelTensors,
        request: PlanRequest,
    ) -> Result<MemoryPlan, EngineError> {
        let layer_bytes: Vec<u64> = tensors.layers.iter().map(|l| l.matrix_bytes()).collect();
        MemoryPlan::with_timing(cfg, tensors, request, Timing::assumed(&layer_bytes))
    }

    /// [`MemoryPlan::new`] with measured (or other) speeds for the residency policy.
    pub fn with_timing(
        cfg: &ModelConfig,
        tensors: &ModelTensors,
        request: PlanRequest,
        timing: Timing,
    ) -> Result<MemoryPlan, EngineError> {
        let layer_bytes: Vec<u64> = tensors.layers.iter().map(|l| l.matrix_bytes()).collect();
        let stream_buffer_len = tensors
            .layers
            .iter()
            .map(LayerLayout::bound)
            .max()
            .unwrap_or(0);
        let buffer_charge = aligned_buf_charge(stream_buffer_len);
        let out = &tensors.output;
        let output_bytes = out.n_bytes;
        let out_row = out.row_bytes();
        let min_chunk_rows = MIN_OUTPUT_CHUNK_ROWS.min(out.n_rows());
        let min_chunk = min_chunk_rows * out_row;

        let vector_bytes = tensors.vector_bytes();
        let sequences = request.sequences.max(1) as u64;
        let kv_bytes = sequences * kv_cache_bytes(cfg, request.ctx, request.kv_type);
        let scratch_bytes = Scratch::bytes(cfg, tensors, request.batch, request.ctx)?;
        let logits_bytes = sequences * 4 * tensors.n_vocab as u64;
        let embd_row_bytes = tensors.token_embd.row_bytes();
        let working = vector_bytes + kv_bytes + scratch_bytes + logits_bytes + embd_row_bytes;
        let minimum = working + buffer_charge + min_chunk;

        let mut plan = MemoryPlan {
            request,
            vector_bytes,
            kv_bytes,
            scratch_bytes,
            logits_bytes,
            embd_row_bytes,
            output_bytes,
            output_resident: true,
            output_chunk_rows: 0,
            output_chunk_bytes: 0,
            layer_bytes,
            pinned: vec![true; tensors.layers.len()],
            stream_buffers: 0,
            stream_buffer_len: 0,
            slot_bytes: 0,
            minimum,
        };
        let Some(budget) = request.budget else {
            return Ok(plan);
        };
        if budget < minimum {
            return Err(EngineError::BudgetTooSmall {
                budget,
                minimum,
                ctx: request.ctx,
            });
        }
        // The share for weights: everything but the working set.
        let share = budget - working;
        plan.output_resident = output_bytes + buffer_charge <= share
            || output_bytes + plan.layer_bytes.iter().sum::<u64>() <= share;
        let output_held = if plan.output_resident {
            output_bytes
        } else {
            min_chunk
        };
        let residency = choose(&ResidencyInput {
            layer_bytes: &plan.layer_bytes,
            buffer_bytes: buffer_charge,
            persistent_bytes: output_held,
            weight_budget: share,
            timing,
        })
        .expect("the minimum budget holds one streaming buffer and the smallest output chunk");
        plan.pinned = residency.pinned;
        plan.stream_buffers = residency.buffers;
        if residency.buffers > 0 {
            plan.stream_buffer_len = stream_buffer_len;
            plan.slot_bytes = residency.buffers as u64 * buffer_charge;
        }
        let free = share - output_held - plan.pinned_bytes() - plan.slot_bytes;
        if !plan.output_resident {
            let extra_rows = free.min(MAX_OUTPUT_CHUNK_BYTES.saturating_sub(min_chunk)) / out_row;
            plan.output_chunk_rows = (min_chunk_rows + extra_rows).min(out.n_rows());
            plan.output_chunk_bytes = plan.output_chunk_rows * out_row;
        }
        Ok(plan)
    }

    /// Bytes of layers kept resident.
    pub fn pinned_bytes(&self) -> u64 {
        self.layer_bytes
            .iter()
            .zip(&self.pinned)
            .filter(|(_, &p)| p)
            .map(|(b, _)| b)
            .sum()
    }

    /// Bytes charged for one buffer of the streaming ring (0 when nothing is streamed).
    pub fn stream_buffer_charge(&self) -> u64 {
        if self.stream_buffers == 0 {
            0
        } else {
            aligned_buf_charge(self.stream_buffer_len)
        }
    }

    /// Layers streamed from storage on every pass.
    pub fn streamed_layers(&self) -> usize {
        self.pinned.iter().filter(|&&p| !p).count()
    }

    /// Weight bytes held in memory: pinned layers, slot, output (whole or one chunk).
    pub fn weight_bytes(&self) -> u64 {
        self.pinned_bytes()
            + self.slot_bytes
            + if self.output_resident {
                self.output_bytes
            } else {
                self.output_chunk_bytes
            }
    }

    /// Every byte the engine will charge at most.
    pub fn total_bytes(&self) -> u64 {
        self.vector_bytes
            + self.kv_bytes
            + self.scratch_bytes
            + self.logits_bytes
            + self.embd_row_bytes
            + self.weight_bytes()
    }

    /// Weight bytes read from storage per decoded token (streamed layers + streamed output).
    pub fn streamed_bytes_per_token(&self) -> u64 {
        let layers: u64 = self
            .layer_bytes
            .iter()
            .zip(&self.pinned)
            .filter(|(_, &p)| !p)
            .map(|(b, _)| b)
            .sum();
        layers
            + if self.output_resident {
                0
            } else {
                self.output_bytes
            }
    }
}
