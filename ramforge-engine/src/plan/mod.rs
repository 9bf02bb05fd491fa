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
//! 3. The residency policy ([`crate::residency::choose`]) splits the rest between pinned layers
//!    and a ring of streaming buffers (the prefetch depth); if every layer fits, there is no
//!    ring and its bytes count towards pinning.
//! 4. Anything left enlarges the output chunk (when the output is streamed), up to 8 MiB.
//! 5. Anything still left, where layers or experts are streamed, holds the hidden states of
//!    several prompt batches (up to [`MAX_HELD_BYTES`], whole batches, at least two): a long
//!    prompt then runs layer by layer over all of them, so each streamed layer is read once
//!    per that many tokens instead of once per batch. It takes nothing decoding keeps (some
//!    models hold none: `ModelConfig::prefills_layer_major`), except where experts stream one
//!    by one: each selected expert is then read once per run too ([`groups_experts`]), and
//!    the rows take up to an eighth of the expert cache's share before the cache is sized.
//!
//! The token embedding is only ever read one row per token, so it is never made resident on its
//! own account (with a tied output it is resident exactly when the output is).
//!
//! A mixture-of-experts model that does not fit whole streams its experts one by one
//! ([`ExpertPlan`]): its layers are planned without their expert stacks (attention, router and
//! norms are what every token needs), two staging buffers for experts join the working set,
//! and what is left after step 3 becomes the expert cache, the same number of slots per layer.

use crate::error::EngineError;
use crate::kv::{kv_cache_bytes, rollback_bytes, KvType};
use crate::model::{LayerTensors, ModelConfig, ModelTensors};
use crate::residency::{choose, ResidencyInput, Timing};
use crate::stream::{aligned_buf_charge, LayerLayout};

/// Rows of the output projection read at once, at the least, when it is streamed.
pub const MIN_OUTPUT_CHUNK_ROWS: u64 = 256;
/// The output chunk is not enlarged beyond this.
pub const MAX_OUTPUT_CHUNK_BYTES: u64 = 8 << 20;
/// The held prompt rows (step 5) take at most this.
pub const MAX_HELD_BYTES: u64 = 64 << 20;
/// Where a prefill groups streamed experts over the held rows, these take up to this part of
/// what is left for the expert cache before the cache is sized.
pub const HELD_SHARE_OF_EXPERT_CACHE: u64 = 8;

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
    /// Bytes of the activations of a batch of `batch` tokens at `ctx` (the forward pass's
    /// `Scratch::bytes`, asked by [`crate::Model::plan`]).
    pub scratch_bytes: u64,
    /// Positions one speculative verify pass evaluates with logits for each (drafted tokens
    /// plus one); 0 or 1 when nothing is drafted.
    pub verify_rows: usize,
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
    /// One logit per vocabulary entry, per sequence (or per verified position).
    pub logits_bytes: u64,
    /// What a rejected draft's rollback restores: overwritten sliding-window rows and the
    /// recurrent state (0 without drafting).
    pub rollback_bytes: u64,
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
    /// The smallest budget this model works under at this context and batch (from
    /// [`crate::Model::plan`] under a budget: at the least batch it cuts a longer one to).
    pub minimum: u64,
    /// Experts streamed one by one (an MoE model that does not fit whole); `None` when every
    /// layer, experts included, is pinned or streamed whole.
    pub experts: Option<ExpertPlan>,
    /// Prompt rows whose hidden states are held for a layer-major prefill (a multiple of the
    /// batch, at least two batches; 0 when nothing is streamed or the budget has no room).
    pub held_rows: usize,
    /// Bytes of those rows ([`held_row_bytes`] each).
    pub held_bytes: u64,
    /// Whether the held rows also hold what running each streamed expert once per run of
    /// them takes ([`groups_experts`]).
    pub held_groups_experts: bool,
}

/// The expert cache of an MoE model whose experts are streamed one by one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpertPlan {
    /// Experts per layer.
    pub n_expert: usize,
    /// Experts the router selects per token.
    pub n_used: usize,
    /// Bytes of one expert (its gate, up and down slices).
    pub expert_bytes: u64,
    /// Usable bytes of one expert buffer (any expert's aligned reads fit).
    pub buffer_len: u64,
    /// Bytes charged per expert buffer.
    pub buffer_charge: u64,
    /// Cache slots of each MoE layer (at most `n_expert`).
    pub per_layer: usize,
    /// MoE layers.
    pub layers: usize,
}

impl ExpertPlan {
    /// Staging buffers for missed experts the cache does not admit: two, so one can be read
    /// while the compute uses the other.
    pub const STAGING_BUFFERS: usize = 2;

    /// Bytes charged for the staging buffers.
    pub fn staging_bytes(&self) -> u64 {
        Self::STAGING_BUFFERS as u64 * self.buffer_charge
    }

    /// Bytes charged for the cache and the staging buffers.
    pub fn charged_bytes(&self) -> u64 {
        (self.per_layer * self.layers) as u64 * self.buffer_charge + self.staging_bytes()
    }

    /// The fraction of all experts the cache holds.
    pub fn cached_fraction(&self) -> f64 {
        self.per_layer as f64 / self.n_expert.max(1) as f64
    }
}

/// Whether a layer-major prefill runs each streamed expert once over all the held rows routed
/// to it: where experts stream one by one (`experts`), in blocks that split at their experts
/// (not DeepSeek V4's hyper-connected ones).
pub fn groups_experts(cfg: &ModelConfig, experts: Option<&ExpertPlan>) -> bool {
    experts.is_some() && cfg.dsv4.is_none()
}

/// Bytes of one held prompt row: its residual streams as f32 and, where the prefill groups
/// experts ([`groups_experts`]), its FFN input, its experts' sum (f32) and its routes.
pub fn held_row_bytes(cfg: &ModelConfig, grouped: bool) -> u64 {
    let streams = 4 * (cfg.residual_streams() * cfg.n_embd) as u64;
    if !grouped {
        return streams;
    }
    let route = std::mem::size_of::<(usize, f32)>() as u64;
    streams + 2 * 4 * cfg.n_embd as u64 + route * cfg.n_expert_used as u64
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
        let whole = MemoryPlan::lay_out(cfg, tensors, &tensors.layers, None, request, timing);
        let moe_layers = tensors
            .layers
            .iter()
            .filter(|l| l.expert_stacks().is_some())
            .count();
        let moe = cfg.n_expert > 0 && moe_layers > 0;
        if !moe {
            return whole;
        }
        let core: Vec<LayerTensors> = tensors
            .layers
            .iter()
            .map(LayerTensors::without_experts)
            .collect();
        let buffer_len = tensors
            .layers
            .iter()
            .map(|l| LayerLayout::expert_bound(l, cfg.n_expert))
            .max()
            .unwrap_or(0);
        let experts = ExpertPlan {
            n_expert: cfg.n_expert,
            n_used: cfg.n_expert_used,
            expert_bytes: tensors
                .layers
                .iter()
                .find_map(|l| l.expert_bytes(cfg.n_expert))
                .unwrap_or(0),
            buffer_len,
            buffer_charge: aligned_buf_charge(buffer_len),
            per_layer: 0,
            layers: moe_layers,
        };
        let streamed = |request| {
            MemoryPlan::lay_out(cfg, tensors, &core, Some(experts.clone()), request, timing)
        };
        match (whole, request.budget) {
            // Unlimited: everything resident; the minimum is the streamed-experts one.
            (Ok(mut w), None) => {
                w.minimum = w.minimum.min(streamed(request)?.minimum);
                Ok(w)
            }
            // The whole model fits: nothing to stream.
            (Ok(w), Some(_)) if w.streamed_layers() == 0 && w.output_resident => Ok(w),
            _ => streamed(request),
        }
    }

    /// The plan for `layers` (the model's, or its MoE layers without their experts when
    /// `experts` streams those one by one).
    fn lay_out(
        cfg: &ModelConfig,
        tensors: &ModelTensors,
        layers: &[LayerTensors],
        mut experts: Option<ExpertPlan>,
        request: PlanRequest,
        timing: Timing,
    ) -> Result<MemoryPlan, EngineError> {
        let layer_bytes: Vec<u64> = layers.iter().map(|l| l.matrix_bytes()).collect();
        let stream_buffer_len = layers.iter().map(LayerLayout::bound).max().unwrap_or(0);
        let buffer_charge = aligned_buf_charge(stream_buffer_len);
        // The staging buffers missed experts the cache does not admit are read into.
        let staging = experts.as_ref().map_or(0, ExpertPlan::staging_bytes);
        let out = &tensors.output;
        let output_bytes = out.n_bytes;
        let out_row = out.row_bytes();
        let min_chunk_rows = MIN_OUTPUT_CHUNK_ROWS.min(out.n_rows());
        let min_chunk = min_chunk_rows * out_row;

        let vector_bytes = tensors.vector_bytes();
        let sequences = request.sequences.max(1) as u64;
        let kv_bytes = sequences * kv_cache_bytes(cfg, request.ctx, request.kv_type);
        let scratch_bytes = request.scratch_bytes;
        let rows = sequences.max(request.verify_rows as u64);
        let logits_bytes = rows * 4 * tensors.n_vocab as u64;
        let rollback_bytes = if request.verify_rows > 1 {
            rollback_bytes(cfg, request.ctx, request.verify_rows)
        } else {
            0
        };
        let embd_row_bytes = tensors.token_embd.row_bytes();
        let working = vector_bytes
            + kv_bytes
            + scratch_bytes
            + logits_bytes
            + rollback_bytes
            + embd_row_bytes
            + staging;
        // An MTP layer (`--mtp`, after the blocks) is pinned: drafts run it between passes.
        let mtp_bytes: u64 = layer_bytes.iter().skip(cfg.n_layer).sum();
        let minimum = working + mtp_bytes + buffer_charge + min_chunk;

        let mut plan = MemoryPlan {
            request,
            vector_bytes,
            kv_bytes,
            scratch_bytes,
            logits_bytes,
            rollback_bytes,
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
            experts: None,
            held_rows: 0,
            held_bytes: 0,
            held_groups_experts: false,
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
        plan.output_resident = output_bytes + buffer_charge + mtp_bytes <= share
            || output_bytes + plan.layer_bytes.iter().sum::<u64>() <= share;
        let output_held = if plan.output_resident {
            output_bytes
        } else {
            min_chunk
        };
        let blocks = plan.layer_bytes.len().min(cfg.n_layer);
        let residency = choose(&ResidencyInput {
            layer_bytes: &plan.layer_bytes[..blocks],
            buffer_bytes: buffer_charge,
            persistent_bytes: output_held,
            weight_budget: share - mtp_bytes,
            timing,
        })
        .expect("the minimum budget holds one streaming buffer and the smallest output chunk");
        plan.pinned = residency.pinned;
        plan.pinned.resize(plan.layer_bytes.len(), true);
        plan.stream_buffers = residency.buffers;
        if residency.buffers > 0 {
            plan.stream_buffer_len = stream_buffer_len;
            plan.slot_bytes = residency.buffers as u64 * buffer_charge;
        }
        let mut free = share - output_held - plan.pinned_bytes() - plan.slot_bytes;
        let layer_major = cfg.prefills_layer_major();
        let grouped = layer_major && groups_experts(cfg, experts.as_ref());
        let row = held_row_bytes(cfg, grouped);
        let batch = request.batch.max(1);
        let held_rows_in = |bytes: u64| {
            let rows = ((bytes.min(MAX_HELD_BYTES) / row) as usize).min(request.ctx);
            Some(rows / batch * batch).filter(|&r| r >= 2 * batch)
        };
        // Experts grouped over held rows: a share of what the cache would take is held first
        // (step 5), since a prompt's expert reads fall with each batch a run holds, where a
        // cache slot saves decoding reads only at its hit rate.
        let reserved = match held_rows_in(free / HELD_SHARE_OF_EXPERT_CACHE) {
            Some(rows) if grouped => rows as u64 * row,
            _ => 0,
        };
        free -= reserved;
        if let Some(x) = experts.as_mut() {
            let per_slot_row = x.buffer_charge * x.layers as u64;
            x.per_layer = ((free / per_slot_row.max(1)) as usize).min(x.n_expert);
            free -= x.per_layer as u64 * per_slot_row;
        }
        plan.experts = experts;
        if !plan.output_resident {
            let extra_rows = free.min(MAX_OUTPUT_CHUNK_BYTES.saturating_sub(min_chunk)) / out_row;
            plan.output_chunk_rows = (min_chunk_rows + extra_rows).min(out.n_rows());
            plan.output_chunk_bytes = plan.output_chunk_rows * out_row;
            free -= plan.output_chunk_bytes - min_chunk;
        }
        if (plan.streamed_layers() > 0 || plan.experts.is_some()) && layer_major {
            if let Some(rows) = held_rows_in(free + reserved) {
                plan.held_rows = rows;
                plan.held_bytes = rows as u64 * row;
                plan.held_groups_experts = grouped;
            }
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

    /// Whether this plan keeps resident what `other` does: the same layers, the output
    /// projection where `other` does, as many expert slots per layer and streaming buffers
    /// (so decoding reads no more from storage, as deep ahead).
    pub fn keeps_resident(&self, other: &MemoryPlan) -> bool {
        let slots = |p: &MemoryPlan| p.experts.as_ref().map(|e| e.per_layer);
        self.pinned == other.pinned
            && self.output_resident == other.output_resident
            && slots(self) == slots(other)
            && self.stream_buffers >= other.stream_buffers
    }

    /// Layers streamed from storage on every pass.
    pub fn streamed_layers(&self) -> usize {
        self.pinned.iter().filter(|&&p| !p).count()
    }

    /// Weight bytes held in memory: pinned layers, slot, expert buffers, output (whole or one
    /// chunk).
    pub fn weight_bytes(&self) -> u64 {
        self.pinned_bytes()
            + self.slot_bytes
            + self.experts.as_ref().map_or(0, ExpertPlan::charged_bytes)
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
            + self.rollback_bytes
            + self.embd_row_bytes
            + self.held_bytes
            + self.weight_bytes()
    }

    /// Weight bytes read from storage per decoded token (streamed layers + streamed output +,
    /// with experts streamed one by one, the selected experts outside the cache if routing
    /// were uniform).
    pub fn streamed_bytes_per_token(&self) -> u64 {
        let experts = self.experts.as_ref().map_or(0, |x| {
            let missed =
                (x.n_expert - x.per_layer.min(x.n_expert)) as f64 / x.n_expert.max(1) as f64;
            (x.layers as f64 * x.n_used as f64 * x.expert_bytes as f64 * missed) as u64
        });
        let layers: u64 = self
            .layer_bytes
            .iter()
            .zip(&self.pinned)
            .filter(|(_, &p)| !p)
            .map(|(b, _)| b)
            .sum();
        experts
            + layers
            + if self.output_resident {
                0
            } else {
                self.output_bytes
            }
    }
}
