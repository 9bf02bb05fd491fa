//! MoE experts streamed one by one under the budget: when the model does not fit, a layer's
//! attention and router stay a layer (pinned or streamed whole), and each of its experts is
//! read on demand, only when the router selects it: its three slices (gate, up, down) in as
//! few aligned reads as the file allows, into a cache slot of its layer or, when the policy
//! ([`policy`]) keeps what the slots hold, into a staging buffer used once. A thread
//! ([`reader`]) reads the misses while the compute runs the experts before them; from a warm
//! page cache an expert used once is mapped in place instead of copied.

pub mod history;
pub mod policy;
mod reader;

use super::view::MatrixView;
use crate::budget::MemoryBudget;
use crate::error::EngineError;
use crate::model::LayerTensors;
use crate::plan::ExpertPlan;
use crate::stream::{AlignedBuf, LayerLayout, MappedLayer, ReadMode, ResidencyStats, StreamFile};
use history::ExpertHistory;
use policy::{sources, Admit, ExpertUse, Source};
use ramforge_gguf::{GgufFile, TensorInfo};
use reader::{Done, ExpertReader, Read, Request};
use std::collections::VecDeque;
use std::time::Instant;

/// The expert cache of every MoE layer and the reader that fills it.
pub struct ExpertStore {
    n_expert: usize,
    /// Cache slots of each layer: layer `l` owns `slots[l * per_layer..][..per_layer]`; a
    /// slot's buffer is away (`None`) while the reader fills it.
    per_layer: usize,
    slots: Vec<Option<AlignedBuf>>,
    /// The expert each slot holds.
    held: Vec<Option<usize>>,
    /// Free staging buffers, where missed experts the cache does not admit are read.
    staging: Vec<AlignedBuf>,
    /// Each MoE layer's expert stacks (gate, up, down).
    stacks: Vec<[TensorInfo; 3]>,
    /// The MoE layer each model layer is (`None`: a dense layer, e.g. a leading one).
    moe_index: Vec<Option<usize>>,
    /// Where each shard's tensor data starts.
    data_offsets: Vec<u64>,
    reader: ExpertReader,
    /// The model's files (by shard), to tell where they end when a mapped expert faulted.
    files: Vec<std::fs::File>,
    /// Windows of experts used in place, unmapped by the reader with its next request.
    retiring: Vec<MappedLayer>,
    use_: ExpertUse,
    /// Expert traffic not yet handed to the run's stats ([`ExpertStore::drain_stats`]).
    pending: ResidencyStats,
    /// Reads sent ahead of their layer ([`ExpertStore::read_ahead`]), in the reader's order:
    /// `(MoE layer, slot, expert)`.
    ahead: VecDeque<(usize, usize, usize)>,
    /// Slots filled ahead and not yet used (their first use is the read, not a hit).
    fresh: Vec<bool>,
}

impl ExpertStore {
    /// Charges and allocates the plan's expert buffers for the MoE layers among `layers` (the
    /// model's layers, with their stacks), reading with `mode`.
    pub fn new(
        file: &GgufFile,
        layers: &[LayerTensors],
        plan: &ExpertPlan,
        budget: &MemoryBudget,
        mode: ReadMode,
    ) -> Result<ExpertStore, EngineError> {
        let mut stacks = Vec::new();
        let mut moe_index = Vec::with_capacity(layers.len());
        for l in layers {
            moe_index.push(l.expert_stacks().map(|s| {
                stacks.push(s.map(TensorInfo::clone));
                stacks.len() - 1
            }));
        }
        if stacks.len() != plan.layers {
            return Err(EngineError::BadModel(format!(
                "the plan streams the experts of {} layers, the model has {}",
                plan.layers,
                stacks.len()
            )));
        }
        let len = plan.buffer_len as usize;
        let slots = (0..plan.per_layer * stacks.len())
            .map(|i| AlignedBuf::new(budget, &format!("expert cache slot {i}"), len).map(Some))
            .collect::<Result<Vec<_>, _>>()?;
        let staging = (0..ExpertPlan::STAGING_BUFFERS)
            .map(|i| AlignedBuf::new(budget, &format!("expert staging buffer {i}"), len))
            .collect::<Result<Vec<_>, _>>()?;
        let stream_file = StreamFile::of_model(file, mode)?;
        Ok(ExpertStore {
            n_expert: plan.n_expert,
            per_layer: plan.per_layer,
            held: vec![None; slots.len()],
            fresh: vec![false; slots.len()],
            slots,
            staging,
            stacks,
            moe_index,
            data_offsets: file.data_offsets(),
            reader: ExpertReader::start(stream_file)?,
            files: crate::stream::model_handles(file)?,
            retiring: Vec::new(),
            use_: ExpertUse::new(plan.layers, plan.n_expert, plan.n_used),
            pending: ResidencyStats::default(),
            ahead: VecDeque::new(),
        })
    }

    /// Sends the reads of layer `l`'s `experts` that its slots lack, before the layer runs
    /// (a hash-routed layer's experts are known from the token ids at the start of a step):
    /// each into a free slot or that of the least used expert not among `experts` (the step
    /// needs these whatever their counts say); with no such slot, the rest are left to the
    /// layer's own pass.
    pub fn read_ahead(&mut self, l: usize, experts: &[usize]) {
        let Some(l) = self.moe_index.get(l).copied().flatten() else {
            return;
        };
        let base = l * self.per_layer;
        for (k, &x) in experts.iter().enumerate() {
            let slots = base..base + self.per_layer;
            if experts[..k].contains(&x)
                || self.held[slots.clone()].contains(&Some(x))
                || self.ahead.iter().any(|a| a.0 == l && a.2 == x)
            {
                continue;
            }
            let view: Vec<policy::Slot> = slots
                .clone()
                .map(|i| match (self.held[i], &self.slots[i]) {
                    (_, None) => policy::Slot::Held {
                        score: f32::INFINITY,
                        busy: true,
                    },
                    (None, _) => policy::Slot::Free,
                    (Some(e), _) => policy::Slot::Held {
                        score: self.use_.score(l, e),
                        busy: experts.contains(&e),
                    },
                })
                .collect();
            let Admit::Into(i) = policy::admit(f32::INFINITY, &view) else {
                continue;
            };
            let Some(buf) = self.slots[base + i].take() else {
                continue;
            };
            self.held[base + i] = None;
            self.reader.send(Request {
                retire: std::mem::take(&mut self.retiring),
                read: Some(Read {
                    layout: self.layout(l, x),
                    buf,
                    may_map: false,
                }),
            });
            self.ahead.push_back((l, base + i, x));
        }
    }

    /// Takes back the reads sent ahead, in order, through those of MoE layer `through` (all
    /// of them with `None`); the compute's wait for them is counted apart.
    fn land_ahead(&mut self, through: Option<usize>) -> Result<(), EngineError> {
        let mut result = Ok(());
        while let Some(&(_, slot, x)) = self.ahead.front() {
            if through.is_some_and(|t| !self.ahead.iter().any(|a| a.0 <= t)) {
                break;
            }
            self.ahead.pop_front();
            let waited = Instant::now();
            let done = self.reader.recv()?;
            let secs = waited.elapsed().as_secs_f64();
            let p = &mut self.pending;
            p.ahead_wait_secs += secs;
            p.io_wait_secs += secs;
            p.read_secs += done.secs;
            p.expert_read_secs += done.secs;
            match done.result {
                Ok(n) => {
                    p.expert_misses += 1;
                    p.experts_read_ahead += 1;
                    p.experts_admitted += 1;
                    p.expert_bytes_read += n;
                    p.bytes_read += n;
                    self.held[slot] = Some(x);
                    self.fresh[slot] = true;
                }
                Err(e) => {
                    if result.is_ok() {
                        result = Err(EngineError::from(e));
                    }
                }
            }
            self.slots[slot] = Some(done.buf);
        }
        result
    }

    /// Whether expert reads go around the page cache.
    pub fn direct(&self) -> bool {
        self.reader.direct()
    }

    /// Counts one pass of layer `l` (a decode step or a prompt batch) that routes `wanted`'s
    /// rows to each of its experts, for the cache's policy ([`policy::ExpertUse`]): a
    /// layer-major prefill that runs several batches' experts at once counts each batch.
    pub fn count_pass(&mut self, l: usize, wanted: &[(usize, usize)]) {
        let Some(l) = self.moe_index.get(l).copied().flatten() else {
            return;
        };
        self.use_.next_pass(l);
        for &(x, rows) in wanted {
            self.use_.record(l, x, rows);
        }
    }

    /// Calls `f(expert, [gate, up, down])` for each `(expert, rows routed to it)` of `wanted`
    /// in layer `l`, in that order (so sums over experts add up as in an all-resident run):
    /// from its cache slot, or read first. Nothing is read that `wanted` does not name. The
    /// misses are all placed first ([`sources`]) and read by the reader thread in order, as
    /// far ahead as their buffers allow, while `f` runs the experts before them.
    pub fn for_each(
        &mut self,
        l: usize,
        wanted: &[(usize, usize)],
        mut f: impl FnMut(usize, [MatrixView<'_>; 3]) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        let Some(l) = self.moe_index.get(l).copied().flatten() else {
            return Err(EngineError::BadModel(format!(
                "layer {l} has no experts to stream"
            )));
        };
        let base = l * self.per_layer;
        let experts: Vec<usize> = wanted.iter().map(|w| w.0).collect();
        // This layer's reads sent ahead land first (the reader answers in order).
        self.land_ahead(Some(l))?;
        let mut places = sources(&self.held[base..base + self.per_layer], &experts, |e| {
            self.use_.score(l, e)
        });
        if places.iter().any(|p| matches!(p, Source::Read { .. })) && !self.ahead.is_empty() {
            // Reads of its own must queue behind the later layers' reads sent ahead.
            self.land_ahead(None)?;
            places = sources(&self.held[base..base + self.per_layer], &experts, |e| {
                self.use_.score(l, e)
            });
        }
        let mut reads = Reads {
            misses: (0..places.len())
                .filter(|&k| matches!(places[k], Source::Read { .. }))
                .collect(),
            in_flight: VecDeque::new(),
        };
        let mut result = Ok(());
        for (k, &x) in experts.iter().enumerate() {
            self.send_ready(l, &experts, &places, &mut reads, k);
            let layout = self.layout(l, x);
            result = match places[k] {
                Source::Hit(i) => {
                    // An expert read ahead counted as a miss when it landed.
                    if !std::mem::take(&mut self.fresh[base + i]) {
                        self.pending.expert_hits += 1;
                    }
                    let buf = self.slots[base + i].as_ref().map_or(&[][..], |b| b.bytes());
                    f(x, self.views(l, |m| layout.buffered_matrix(buf, m)))
                }
                Source::Read { into, .. } => {
                    debug_assert_eq!(reads.in_flight.front(), Some(&k));
                    reads.in_flight.pop_front();
                    let waited = Instant::now();
                    match self.reader.recv() {
                        Ok(done) => {
                            let secs = waited.elapsed().as_secs_f64();
                            self.pending.expert_wait_secs += secs;
                            self.pending.io_wait_secs += secs;
                            self.use_read(l, x, &layout, into, done, &mut f)
                        }
                        Err(e) => Err(e),
                    }
                }
            };
            if result.is_err() {
                break;
            }
        }
        // After a failure: let what is in flight land, so every buffer is back.
        while let Some(k) = reads.in_flight.pop_front() {
            if let (Ok(done), Source::Read { into, .. }) = (self.reader.recv(), places[k]) {
                self.put_back(base, into, done.buf);
            }
        }
        if !self.retiring.is_empty() {
            self.reader.send(Request {
                retire: std::mem::take(&mut self.retiring),
                read: None,
            });
        }
        result
    }

    /// Sends the reads of `reads.misses` in order while each one's buffer is free: a slot
    /// once the compute is past the slot's earlier user (`computed` experts are done), a
    /// staging buffer while one is free.
    fn send_ready(
        &mut self,
        l: usize,
        experts: &[usize],
        places: &[Source],
        reads: &mut Reads,
        computed: usize,
    ) {
        let base = l * self.per_layer;
        while let Some(&k) = reads.misses.front() {
            let Source::Read { into, after } = places[k] else {
                unreachable!("only misses are read")
            };
            let buf = match into {
                Admit::Into(_) if after.is_some_and(|p| p >= computed) => break,
                Admit::Into(i) => {
                    // Emptied first: a failed read leaves no half-read expert behind.
                    self.held[base + i] = None;
                    self.slots[base + i].take()
                }
                Admit::Bypass => self.staging.pop(),
            };
            let Some(buf) = buf else { break };
            reads.misses.pop_front();
            reads.in_flight.push_back(k);
            self.reader.send(Request {
                retire: std::mem::take(&mut self.retiring),
                read: Some(Read {
                    layout: self.layout(l, experts[k]),
                    buf,
                    may_map: into == Admit::Bypass,
                }),
            });
        }
    }

    /// Runs `f` on missed expert `x` of layer `l`, which the reader answered with `done`, and
    /// puts its buffer where it belongs.
    fn use_read(
        &mut self,
        l: usize,
        x: usize,
        layout: &LayerLayout,
        into: Admit,
        done: Done,
        f: &mut impl FnMut(usize, [MatrixView<'_>; 3]) -> Result<(), EngineError>,
    ) -> Result<(), EngineError> {
        let base = l * self.per_layer;
        let Done {
            mapped,
            buf,
            result,
            secs,
            ..
        } = done;
        let p = &mut self.pending;
        p.read_secs += secs;
        p.expert_read_secs += secs;
        let n = match result {
            Ok(n) => n,
            Err(e) => {
                self.put_back(base, into, buf);
                return Err(e.into());
            }
        };
        p.expert_misses += 1;
        p.expert_bytes_read += n;
        p.bytes_read += n;
        let used = match &mapped {
            Some(m) => {
                p.experts_mapped += 1;
                f(x, self.views(l, |i| layout.mapped_matrix(m, i)))
                    .and_then(|()| layout.check(m, &self.files).map_err(EngineError::from))
            }
            None => f(x, self.views(l, |i| layout.buffered_matrix(buf.bytes(), i))),
        };
        self.retiring.extend(mapped);
        if used.is_ok() {
            if let Admit::Into(i) = into {
                self.held[base + i] = Some(x);
                self.pending.experts_admitted += 1;
            }
        }
        self.put_back(base, into, buf);
        used
    }

    /// Returns a buffer the reader had: to its slot (which holds whatever `held` says) or to
    /// the free staging buffers.
    fn put_back(&mut self, base: usize, into: Admit, buf: AlignedBuf) {
        match into {
            Admit::Into(i) => self.slots[base + i] = Some(buf),
            Admit::Bypass => self.staging.push(buf),
        }
    }

    /// Each expert's share of its layer's routing so far, blended with the history this
    /// cache started from, for the next process ([`history`], [`ExpertUse::shares`]).
    pub fn history(&self) -> Option<ExpertHistory> {
        ExpertHistory::new(self.use_.layers(), self.use_.n_expert(), self.use_.shares())
    }

    /// MoE layers and experts per layer, the shape a history must have.
    pub fn shape(&self) -> (usize, usize) {
        (self.use_.layers(), self.use_.n_expert())
    }

    /// Starts from a previous process's `history`: its shares seed this cache's counts, and each
    /// layer whose slots are all free (nothing has run yet) has them filled with its most
    /// used experts, read in order by the reader thread, so the first pass finds them
    /// resident and the policy keeps them until the new routing says otherwise. Nothing
    /// beyond the slots already charged is read. Returns the experts read and their bytes;
    /// after a failed read the slots hold what was read whole before it.
    pub fn preload(&mut self, history: &ExpertHistory) -> Result<(u64, u64), EngineError> {
        if (history.layers(), history.n_expert()) != self.shape() {
            return Err(EngineError::Invalid(format!(
                "an expert history of {} layers of {} experts, the model streams {} of {}",
                history.layers(),
                history.n_expert(),
                self.use_.layers(),
                self.use_.n_expert()
            )));
        }
        self.use_.seed(history.shares());
        let mut sent: VecDeque<(usize, usize)> = VecDeque::new();
        for l in 0..self.stacks.len() {
            let base = l * self.per_layer;
            if self.held[base..base + self.per_layer]
                .iter()
                .any(Option::is_some)
            {
                continue;
            }
            for (i, x) in history.top(l, self.per_layer).into_iter().enumerate() {
                let Some(buf) = self.slots[base + i].take() else {
                    continue;
                };
                self.reader.send(Request {
                    retire: std::mem::take(&mut self.retiring),
                    read: Some(Read {
                        layout: self.layout(l, x),
                        buf,
                        may_map: false,
                    }),
                });
                sent.push_back((base + i, x));
            }
        }
        let (mut experts, mut bytes, mut result) = (0u64, 0u64, Ok(()));
        // Every read is taken back, even after a failure, so every buffer returns.
        while let Some((slot, x)) = sent.pop_front() {
            let done = self.reader.recv()?;
            match done.result {
                Ok(n) if result.is_ok() => {
                    self.held[slot] = Some(x);
                    experts += 1;
                    bytes += n;
                }
                Ok(_) => {}
                Err(e) => {
                    if result.is_ok() {
                        result = Err(EngineError::from(e));
                    }
                }
            }
            self.slots[slot] = Some(done.buf);
        }
        result.map(|()| (experts, bytes))
    }

    /// Adds the expert traffic since the last call to `stats`.
    pub fn drain_stats(&mut self, stats: &mut ResidencyStats) {
        let p = std::mem::take(&mut self.pending);
        stats.expert_hits += p.expert_hits;
        stats.expert_misses += p.expert_misses;
        stats.experts_admitted += p.experts_admitted;
        stats.expert_bytes_read += p.expert_bytes_read;
        stats.experts_mapped += p.experts_mapped;
        stats.expert_read_secs += p.expert_read_secs;
        stats.expert_wait_secs += p.expert_wait_secs;
        stats.experts_read_ahead += p.experts_read_ahead;
        stats.ahead_wait_secs += p.ahead_wait_secs;
        stats.bytes_read += p.bytes_read;
        stats.read_secs += p.read_secs;
        stats.io_wait_secs += p.io_wait_secs;
    }

    /// Where expert `x` of layer `l` lies in the file and in a buffer.
    fn layout(&self, l: usize, x: usize) -> LayerLayout {
        LayerLayout::of_expert(&self.stacks[l], x, self.n_expert, &self.data_offsets)
    }

    /// The three matrices of an expert of layer `l`, whose bytes `matrix(i)` gives.
    fn views<'a>(&self, l: usize, matrix: impl Fn(usize) -> &'a [u8]) -> [MatrixView<'a>; 3] {
        let ne = self.n_expert;
        std::array::from_fn(|m| {
            let t = &self.stacks[l][m];
            MatrixView {
                ty: t.ggml_type,
                layout: ramforge_quant::Layout::Gguf,
                rows: t.n_rows() as usize / ne,
                cols: t.row_len() as usize,
                bytes: matrix(m),
            }
        })
    }
}

/// A pass's missed experts: those not yet sent to the reader, and those sent and not yet used,
/// both in compute order (indices into the pass's experts).
struct Reads {
    misses: VecDeque<usize>,
    in_flight: VecDeque<usize>,
}
