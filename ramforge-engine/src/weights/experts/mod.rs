//! MoE experts streamed one by one under the budget: when the model does not fit, a layer's
//! attention and router stay a layer (pinned or streamed whole), and each of its experts is
//! read on demand, only when the router selects it: its three slices (gate, up, down) in as
//! few aligned reads as the file allows, into a cache slot of its layer or, when the policy
//! ([`policy`]) keeps what the slots hold, into a staging buffer used once.

pub mod policy;

use super::view::MatrixView;
use crate::budget::MemoryBudget;
use crate::error::EngineError;
use crate::model::LayerTensors;
use crate::plan::ExpertPlan;
use crate::stream::{AlignedBuf, LayerLayout, ReadMode, ResidencyStats, StreamFile};
use policy::{admit, Admit, ExpertUse, Slot};
use ramforge_gguf::{GgufFile, TensorInfo};
use std::time::Instant;

/// The expert cache of every MoE layer and the reader that fills it.
pub struct ExpertStore {
    n_expert: usize,
    /// Cache slots of each layer: layer `l` owns `slots[l * per_layer..][..per_layer]`.
    per_layer: usize,
    slots: Vec<AlignedBuf>,
    /// The expert each slot holds.
    held: Vec<Option<usize>>,
    /// Where a missed expert the cache does not admit is read.
    staging: AlignedBuf,
    /// Each layer's expert stacks (gate, up, down).
    stacks: Vec<[TensorInfo; 3]>,
    data_offset: u64,
    file: StreamFile,
    use_: ExpertUse,
    /// Expert traffic not yet handed to the run's stats ([`ExpertStore::drain_stats`]).
    pending: ResidencyStats,
}

impl ExpertStore {
    /// Charges and allocates the plan's expert buffers for `layers` (the model's MoE layers,
    /// with their stacks), reading with `mode`.
    pub fn new(
        file: &GgufFile,
        layers: &[LayerTensors],
        plan: &ExpertPlan,
        budget: &MemoryBudget,
        mode: ReadMode,
    ) -> Result<ExpertStore, EngineError> {
        let stacks = layers
            .iter()
            .enumerate()
            .map(|(i, l)| {
                l.expert_stacks()
                    .map(|s| s.map(TensorInfo::clone))
                    .ok_or_else(|| {
                        EngineError::BadModel(format!("layer {i} of an MoE model has no experts"))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let len = plan.buffer_len as usize;
        let slots = (0..plan.per_layer * layers.len())
            .map(|i| AlignedBuf::new(budget, &format!("expert cache slot {i}"), len))
            .collect::<Result<Vec<_>, _>>()?;
        let staging = AlignedBuf::new(budget, "expert staging buffer", len)?;
        let io = |source| ramforge_gguf::GgufError::Io {
            path: file.path().display().to_string(),
            source,
        };
        Ok(ExpertStore {
            n_expert: plan.n_expert,
            per_layer: plan.per_layer,
            held: vec![None; slots.len()],
            slots,
            staging,
            stacks,
            data_offset: file.header().data_offset,
            file: StreamFile::open(file.path(), file.file(), mode).map_err(io)?,
            use_: ExpertUse::new(layers.len(), plan.n_expert),
            pending: ResidencyStats::default(),
        })
    }

    /// Whether expert reads go around the page cache.
    pub fn direct(&self) -> bool {
        self.file.is_direct()
    }

    /// Calls `f(expert, [gate, up, down])` for each `(expert, rows routed to it)` of `wanted`
    /// in layer `l`, in that order (so sums over experts add up as in an all-resident run):
    /// from its cache slot, or read first. Nothing is read that `wanted` does not name.
    pub fn for_each(
        &mut self,
        l: usize,
        wanted: &[(usize, usize)],
        mut f: impl FnMut(usize, [MatrixView<'_>; 3]) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        self.use_.next_pass(l);
        for &(x, rows) in wanted {
            self.use_.record(l, x, rows);
        }
        let slots = l * self.per_layer..(l + 1) * self.per_layer;
        for (done, &(x, _)) in wanted.iter().enumerate() {
            let layout = self.layout(l, x);
            if let Some(i) = self.held[slots.clone()].iter().position(|&h| h == Some(x)) {
                self.pending.expert_hits += 1;
                f(
                    x,
                    self.views(l, &layout, self.slots[slots.start + i].bytes()),
                )?;
                continue;
            }
            let later = &wanted[done + 1..];
            let view: Vec<Slot> = self.held[slots.clone()]
                .iter()
                .map(|h| match *h {
                    None => Slot::Free,
                    Some(e) => Slot::Held {
                        score: self.use_.score(l, e),
                        busy: later.iter().any(|&(w, _)| w == e),
                    },
                })
                .collect();
            let place = admit(self.use_.score(l, x), &view);
            let buf = match place {
                Admit::Into(i) => {
                    // Emptied first: a failed read leaves no half-read expert behind.
                    self.held[slots.start + i] = None;
                    &mut self.slots[slots.start + i]
                }
                Admit::Bypass => &mut self.staging,
            };
            let started = Instant::now();
            let n = self.file.read_layer(&layout, buf.bytes_mut())?;
            let secs = started.elapsed().as_secs_f64();
            let p = &mut self.pending;
            p.expert_misses += 1;
            p.expert_bytes_read += n;
            p.bytes_read += n;
            p.read_secs += secs;
            p.io_wait_secs += secs;
            let bytes = match place {
                Admit::Into(i) => {
                    self.held[slots.start + i] = Some(x);
                    self.pending.experts_admitted += 1;
                    self.slots[slots.start + i].bytes()
                }
                Admit::Bypass => self.staging.bytes(),
            };
            f(x, self.views(l, &layout, bytes))?;
        }
        Ok(())
    }

    /// Adds the expert traffic since the last call to `stats`.
    pub fn drain_stats(&mut self, stats: &mut ResidencyStats) {
        let p = std::mem::take(&mut self.pending);
        stats.expert_hits += p.expert_hits;
        stats.expert_misses += p.expert_misses;
        stats.experts_admitted += p.experts_admitted;
        stats.expert_bytes_read += p.expert_bytes_read;
        stats.bytes_read += p.bytes_read;
        stats.read_secs += p.read_secs;
        stats.io_wait_secs += p.io_wait_secs;
    }

    /// Where expert `x` of layer `l` lies in the file and in a buffer.
    fn layout(&self, l: usize, x: usize) -> LayerLayout {
        LayerLayout::of_expert(&self.stacks[l], x, self.n_expert, self.data_offset)
    }

    /// The three matrices of an expert read into `buf` with `layout`.
    fn views<'a>(&self, l: usize, layout: &LayerLayout, buf: &'a [u8]) -> [MatrixView<'a>; 3] {
        let ne = self.n_expert;
        std::array::from_fn(|m| {
            let t = &self.stacks[l][m];
            MatrixView {
                ty: t.ggml_type,
                rows: t.n_rows() as usize / ne,
                cols: t.row_len() as usize,
                bytes: layout.buffered_matrix(buf, m),
            }
        })
    }
}
