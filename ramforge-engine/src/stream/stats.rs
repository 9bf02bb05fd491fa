//! The storage-traffic figures of a run: bytes and layers read, prefetch hits, I/O wait against
//! compute, and the layout they came from. A leaf: the readers, the weights and the engine all
//! write to it, and the tools print it.

use crate::residency::Timing;

/// What storage traffic the weights caused.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct ResidencyStats {
    /// Bytes read from the model file while loading (vectors and pinned weights).
    pub load_bytes: u64,
    /// Bytes read from the model file while generating (streamed layers, output chunks,
    /// embedding rows).
    pub bytes_read: u64,
    /// Layers read into a streaming buffer.
    pub layers_loaded: u64,
    /// Streamed layers the prefetch thread had read before the compute asked for them.
    pub prefetch_hits: u64,
    /// Streamed layers the compute had to wait for.
    pub prefetch_late: u64,
    /// Seconds the compute waited for storage: late prefetches, embedding rows and output
    /// chunks (read synchronously).
    pub io_wait_secs: f64,
    /// Seconds spent in `eval` (compute plus I/O wait).
    pub eval_secs: f64,
    /// Layers used from memory without a read.
    pub layers_pinned_hits: u64,
    /// Output-projection chunks read.
    pub output_chunks_read: u64,
    /// Seconds spent reading while generating.
    pub read_secs: f64,
    /// Most weight bytes held in memory at once.
    pub peak_resident: u64,
    /// Tokens run through the model (prompt and generated).
    pub tokens: u64,
    /// Layers pinned in memory, and streamed.
    pub pinned_layers: u64,
    /// Layers streamed.
    pub streamed_layers: u64,
    /// Matrix bytes of the pinned layers, and of the streamed ones (read every pass).
    pub pinned_bytes: u64,
    /// Matrix bytes of the streamed layers (read every pass).
    pub streamed_bytes: u64,
    /// Buffers the plan gave the prefetch ring (the most the budget allows).
    pub stream_buffers: u64,
    /// Buffers the ring uses now: the prefetch depth, adapted at run time from the measured
    /// read and compute times (at most `stream_buffers`).
    pub prefetch_depth: u64,
    /// Whether streamed layers are read with O_DIRECT (false: buffered reads).
    pub direct_io: bool,
    /// Whether streamed layers are used in place, mapped from a warm page cache (no copy).
    pub mapped_io: bool,
    /// MoE experts streamed one by one: those found in the expert cache.
    pub expert_hits: u64,
    /// Experts read from storage (each one its three slices).
    pub expert_misses: u64,
    /// Of those, the ones the cache admitted (the others were used once from staging).
    pub experts_admitted: u64,
    /// Bytes read for experts (part of `bytes_read`).
    pub expert_bytes_read: u64,
    /// Of the missed experts, those used in place from a warm page cache (mapped, no copy).
    pub experts_mapped: u64,
    /// Seconds the expert reader spent reading (part of `read_secs`; it overlaps compute).
    pub expert_read_secs: f64,
    /// Seconds the compute waited for a missed expert (part of `io_wait_secs`).
    pub expert_wait_secs: f64,
    /// Of the missed experts, those read ahead of their layer: a hash-routed layer's, known
    /// from the token ids at the start of a step (DeepSeek V4).
    pub experts_read_ahead: u64,
    /// Seconds the compute waited for experts read ahead (part of `io_wait_secs`, not of
    /// `expert_wait_secs`).
    pub ahead_wait_secs: f64,
    /// Expert cache slots of each MoE layer (0: experts are not streamed one by one).
    pub expert_slots_per_layer: u64,
    /// Experts read into the cache before the first pass, as the expert history named them
    /// (their bytes are part of `load_bytes`).
    pub experts_preloaded: u64,
}

impl ResidencyStats {
    /// How streamed layers reach the compute, as the tools print it: `mapped` (in place from
    /// the page cache), `O_DIRECT` (read around it) or `buffered` (copied out of it).
    pub fn read_path(&self) -> &'static str {
        if self.mapped_io {
            "mapped"
        } else if self.direct_io {
            "O_DIRECT"
        } else {
            "buffered"
        }
    }

    /// The traffic since `before` (a snapshot of the same engine's stats); the layout
    /// figures (peak resident, layer counts, load bytes) are kept as they are.
    pub fn since(&self, before: &ResidencyStats) -> ResidencyStats {
        ResidencyStats {
            bytes_read: self.bytes_read - before.bytes_read,
            layers_loaded: self.layers_loaded - before.layers_loaded,
            layers_pinned_hits: self.layers_pinned_hits - before.layers_pinned_hits,
            output_chunks_read: self.output_chunks_read - before.output_chunks_read,
            read_secs: self.read_secs - before.read_secs,
            tokens: self.tokens - before.tokens,
            prefetch_hits: self.prefetch_hits - before.prefetch_hits,
            prefetch_late: self.prefetch_late - before.prefetch_late,
            io_wait_secs: self.io_wait_secs - before.io_wait_secs,
            eval_secs: self.eval_secs - before.eval_secs,
            expert_hits: self.expert_hits - before.expert_hits,
            expert_misses: self.expert_misses - before.expert_misses,
            experts_admitted: self.experts_admitted - before.experts_admitted,
            expert_bytes_read: self.expert_bytes_read - before.expert_bytes_read,
            experts_mapped: self.experts_mapped - before.experts_mapped,
            expert_read_secs: self.expert_read_secs - before.expert_read_secs,
            expert_wait_secs: self.expert_wait_secs - before.expert_wait_secs,
            experts_read_ahead: self.experts_read_ahead - before.experts_read_ahead,
            ahead_wait_secs: self.ahead_wait_secs - before.ahead_wait_secs,
            ..*self
        }
    }

    /// Seconds of `eval` not spent waiting for storage.
    pub fn compute_secs(&self) -> f64 {
        (self.eval_secs - self.io_wait_secs).max(0.0)
    }

    /// The speeds these figures show, for the residency policy
    /// ([`crate::plan::MemoryPlan::with_timing`]); `None` until something was read and
    /// computed. Compute per layer averages every layer pass, prompt batches included.
    pub fn measured_timing(&self) -> Option<Timing> {
        let layers = self.layers_loaded + self.layers_pinned_hits;
        if self.bytes_read == 0 || self.read_secs <= 0.0 || layers == 0 {
            return None;
        }
        Some(Timing {
            read_secs_per_byte: self.read_secs / self.bytes_read as f64,
            compute_secs_per_layer: self.compute_secs() / layers as f64,
        })
    }

    /// Whether an MoE model's experts were streamed one by one (an expert cache was planned, or
    /// experts were read).
    pub fn streams_experts(&self) -> bool {
        self.expert_slots_per_layer > 0 || self.expert_hits + self.expert_misses > 0
    }

    /// Experts read from storage per token processed.
    pub fn expert_reads_per_token(&self) -> f64 {
        if self.tokens == 0 {
            0.0
        } else {
            self.expert_misses as f64 / self.tokens as f64
        }
    }

    /// The fraction of expert uses served from the cache.
    pub fn expert_hit_rate(&self) -> f64 {
        let uses = self.expert_hits + self.expert_misses;
        if uses == 0 {
            0.0
        } else {
            self.expert_hits as f64 / uses as f64
        }
    }

    /// Bytes read from storage per token processed.
    pub fn bytes_read_per_token(&self) -> f64 {
        if self.tokens == 0 {
            0.0
        } else {
            self.bytes_read as f64 / self.tokens as f64
        }
    }
}
