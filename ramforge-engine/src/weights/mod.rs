//! Weight storage under the plan: pinned layers, the prefetch ring for streamed layers, the
//! output projection (resident or read in row chunks) and the small f32 vectors. Every buffer is
//! charged to the budget before it is allocated; layers stay in their quantized form.

pub mod experts;
mod view;

pub(crate) use experts::ExpertStore;
pub(crate) use view::{LayerVectors, LayerView, MatrixView};

use crate::budget::{Charge, ChargedVec, MemoryBudget};
use crate::error::EngineError;
use crate::model::{LayerTensors, ModelTensors};
use crate::plan::MemoryPlan;
use crate::stream::{
    drop_read, model_handles, AlignedBuf, LayerLayout, Prefetcher, ReadMode, ResidencyStats,
    StreamFile, WARM_FRACTION,
};
use ramforge_gguf::{GgufFile, TensorInfo};
use ramforge_quant::Layout;
use std::time::Instant;

enum Output {
    /// Read whole at load, in the kernels' resident layout.
    Resident(ChargedVec<u8>, Layout),
    Streamed {
        chunk: ChargedVec<u8>,
        rows: usize,
    },
}

/// Every weight of the model, laid out as the plan says.
pub struct Weights {
    pub vectors: Vectors,
    pub matrices: Matrices,
    /// The expert cache, when an MoE model's experts are streamed one by one.
    pub experts: Option<ExpertStore>,
}

/// The small f32 vectors, always resident.
pub struct Vectors {
    pub layers: Vec<LayerVectors>,
    pub output_norm: Vec<f32>,
    pub rope_freqs: Option<Vec<f32>>,
    /// DeepSeek V4's head hyper-connection: `output_hc_fn` (rows of the streams side by
    /// side, one per stream), its base and scale.
    pub output_hc: Option<[Vec<f32>; 3]>,
    _charge: Charge,
}

/// The matrices: pinned layers, the prefetch ring, the output projection.
pub struct Matrices {
    /// The layers as pinned or streamed: the model's, or without their expert stacks when
    /// experts are streamed one by one.
    layers: Vec<LayerTensors>,
    /// Every pinned layer, back to back in one buffer (so its huge pages span layers).
    pinned_store: ChargedVec<u8>,
    /// Where each pinned layer lies in `pinned_store`.
    pinned: Vec<Option<std::ops::Range<usize>>>,
    stream: Option<Prefetcher>,
    output: Output,
    embd_row: ChargedVec<u8>,
    stats: ResidencyStats,
}

/// Reads a whole 1-D tensor as f32 (norms, biases, RoPE factors). An I32 table (DeepSeek
/// V4's experts per token id) must hold indices below `n_expert`, kept exactly as f32.
fn read_vector(file: &GgufFile, t: &TensorInfo, n_expert: usize) -> Result<Vec<f32>, EngineError> {
    let mut raw = vec![0u8; t.n_bytes as usize];
    file.read_tensor_into(t, &mut raw)?;
    let mut out = vec![0.0f32; t.n_elements as usize];
    if t.ggml_type == ramforge_gguf::GgmlType::I32 {
        for (i, (o, b)) in out.iter_mut().zip(raw.chunks_exact(4)).enumerate() {
            let v = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if v < 0 || v as usize >= n_expert {
                return Err(EngineError::BadModel(format!(
                    "tensor {:?}: element {i} is {v}, not an expert index below {n_expert}",
                    t.name
                )));
            }
            *o = v as f32;
        }
        return Ok(out);
    }
    ramforge_quant::dequantize_row(t.ggml_type, &raw, &mut out)?;
    Ok(out)
}

/// Reads the matrices of a pinned layer back to back into `buf` (buffered: a pinned layer is
/// read once), then, with `drop_cached`, drops them from the page cache, and rewrites each
/// into its resident layout ([`ramforge_quant::arrange_rows`]; [`pinned_view`] reads them so).
fn read_pinned_layer(
    file: &GgufFile,
    layer: &LayerTensors,
    buf: &mut [u8],
    drop_cached: bool,
) -> Result<u64, EngineError> {
    let mut at = 0usize;
    for t in layer.matrices() {
        let n = t.n_bytes as usize;
        let bytes = &mut buf[at..at + n];
        file.read_tensor_into(t, bytes)?;
        if drop_cached {
            drop_tensor(file, t);
        }
        let layout = ramforge_quant::arrange_rows(t.ggml_type, bytes)?;
        debug_assert_eq!(layout, ramforge_quant::resident_layout(t.ggml_type));
        at += n;
    }
    Ok(at as u64)
}

/// Drops tensor `t`, just read, from the page cache (its shard's file).
fn drop_tensor(file: &GgufFile, t: &TensorInfo) {
    if let Ok(shard) = file.shard_of(t) {
        let offset = file.absolute_offset(t);
        drop_read(shard.file(), offset, offset.saturating_add(t.n_bytes));
    }
}

/// The view of a layer laid out back to back in `buf` by [`read_pinned_layer`].
fn pinned_view<'a>(layer: &LayerTensors, buf: &'a [u8]) -> LayerView<'a> {
    let mut at = 0usize;
    LayerView::new(layer, |_, t| {
        let bytes = &buf[at..at + t.n_bytes as usize];
        at += t.n_bytes as usize;
        (bytes, ramforge_quant::resident_layout(t.ggml_type))
    })
}

impl Weights {
    /// Allocates and fills everything the plan keeps resident.
    pub fn load(
        file: &GgufFile,
        tensors: &ModelTensors,
        plan: &MemoryPlan,
        budget: &MemoryBudget,
        progress: &dyn Fn(u64, u64),
    ) -> Result<Weights, EngineError> {
        let mut stats = ResidencyStats::default();
        let layers_as_planned: Vec<LayerTensors> = match plan.experts {
            Some(_) => tensors
                .layers
                .iter()
                .map(LayerTensors::without_experts)
                .collect(),
            None => tensors.layers.clone(),
        };
        // Decided before anything is read: reading the pinned layers warms their pages.
        let mode = read_mode(file, tensors, &layers_as_planned, plan);
        let to_load = plan.vector_bytes
            + if plan.output_resident {
                plan.output_bytes
            } else {
                0
            }
            + plan.pinned_bytes();
        let vector_charge = budget.charge("norms and biases", plan.vector_bytes)?;
        let mut layers = Vec::with_capacity(tensors.layers.len());
        for l in &tensors.layers {
            let n_expert = l.expert_stacks().map_or(0, |x| x[0].shape[2] as usize);
            let vectors = l
                .vectors()
                .map(|(role, t)| Ok((role, read_vector(file, t, n_expert)?)))
                .collect::<Result<Vec<_>, EngineError>>()?;
            layers.push(LayerVectors::new(vectors));
        }
        let output_norm = read_vector(file, &tensors.output_norm, 0)?;
        let rope_freqs = match &tensors.rope_freqs {
            Some(t) => Some(read_vector(file, t, 0)?),
            None => None,
        };
        let output_hc = match &tensors.output_hc {
            Some(ts) => Some([
                read_vector(file, &ts[0], 0)?,
                read_vector(file, &ts[1], 0)?,
                read_vector(file, &ts[2], 0)?,
            ]),
            None => None,
        };
        stats.load_bytes += plan.vector_bytes;
        progress(stats.load_bytes, to_load);

        let output = if plan.output_resident {
            let mut buf =
                ChargedVec::zeroed(budget, "output projection", plan.output_bytes as usize)?;
            file.read_tensor_into(&tensors.output, &mut buf)?;
            if mode == ReadMode::Direct {
                drop_tensor(file, &tensors.output);
            }
            stats.load_bytes += plan.output_bytes;
            progress(stats.load_bytes, to_load);
            let layout = ramforge_quant::arrange_rows(tensors.output.ggml_type, &mut buf)?;
            Output::Resident(buf, layout)
        } else {
            Output::Streamed {
                chunk: ChargedVec::zeroed(
                    budget,
                    "output projection chunk",
                    plan.output_chunk_bytes as usize,
                )?,
                rows: plan.output_chunk_rows as usize,
            }
        };
        let mut pinned_store =
            ChargedVec::zeroed(budget, "pinned layers", plan.pinned_bytes() as usize)?;
        let mut pinned = Vec::with_capacity(tensors.layers.len());
        let mut at = 0usize;
        for (i, (l, &pin)) in layers_as_planned.iter().zip(&plan.pinned).enumerate() {
            if pin {
                let range = at..at + plan.layer_bytes[i] as usize;
                let buf = &mut pinned_store[range.clone()];
                stats.load_bytes += read_pinned_layer(file, l, buf, mode == ReadMode::Direct)?;
                progress(stats.load_bytes, to_load);
                at = range.end;
                pinned.push(Some(range));
            } else {
                pinned.push(None);
            }
        }
        let stream = if plan.stream_buffers > 0 {
            Some(start_prefetch(
                file,
                &layers_as_planned,
                plan,
                budget,
                mode,
            )?)
        } else {
            None
        };
        let experts = match &plan.experts {
            Some(x) => Some(ExpertStore::new(file, &tensors.layers, x, budget, mode)?),
            None => None,
        };
        let embd_row = ChargedVec::zeroed(budget, "embedding row", plan.embd_row_bytes as usize)?;
        stats.peak_resident = plan.weight_bytes();
        stats.pinned_layers = plan.pinned.iter().filter(|&&p| p).count() as u64;
        stats.streamed_layers = plan.streamed_layers() as u64;
        stats.pinned_bytes = plan.pinned_bytes();
        stats.streamed_bytes = plan.layer_bytes.iter().sum::<u64>() - plan.pinned_bytes();
        stats.stream_buffers = plan.stream_buffers as u64;
        stats.prefetch_depth = plan.stream_buffers as u64;
        stats.direct_io = stream.as_ref().is_some_and(Prefetcher::direct);
        stats.mapped_io = stream.as_ref().is_some_and(Prefetcher::mapped);
        if let Some(x) = &plan.experts {
            stats.expert_slots_per_layer = x.per_layer as u64;
            stats.direct_io |= experts.as_ref().is_some_and(ExpertStore::direct);
        }
        Ok(Weights {
            vectors: Vectors {
                layers,
                output_norm,
                rope_freqs,
                output_hc,
                _charge: vector_charge,
            },
            matrices: Matrices {
                layers: layers_as_planned,
                pinned_store,
                pinned,
                stream,
                output,
                embd_row,
                stats,
            },
            experts,
        })
    }
}

/// Starts the prefetch thread with the plan's ring of buffers, for the layers it streams.
fn start_prefetch(
    file: &GgufFile,
    layers: &[LayerTensors],
    plan: &MemoryPlan,
    budget: &MemoryBudget,
    mode: ReadMode,
) -> Result<Prefetcher, EngineError> {
    let data_offsets = file.data_offsets();
    let layouts: Vec<Option<LayerLayout>> = layers
        .iter()
        .zip(&plan.pinned)
        .map(|(l, &pinned)| (!pinned).then(|| LayerLayout::new(l, &data_offsets)))
        .collect();
    if let Some(l) = layouts
        .iter()
        .flatten()
        .find(|l| l.buffer_len() as u64 > plan.stream_buffer_len)
    {
        return Err(EngineError::BadModel(format!(
            "a streamed layer needs a {}-byte buffer, more than the planned {}",
            l.buffer_len(),
            plan.stream_buffer_len
        )));
    }
    let buffers = (0..plan.stream_buffers)
        .map(|i| {
            AlignedBuf::new(
                budget,
                &format!("layer streaming buffer {i}"),
                plan.stream_buffer_len as usize,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let stream_file = StreamFile::of_model(file, mode)?;
    Prefetcher::start(stream_file, model_handles(file)?, layouts, buffers)
}

/// [`ReadMode::Cached`] when the page cache already holds the streamed layers and experts (at
/// least [`WARM_FRACTION`] of them), else [`ReadMode::Direct`].
fn read_mode(
    file: &GgufFile,
    tensors: &ModelTensors,
    layers: &[LayerTensors],
    plan: &MemoryPlan,
) -> ReadMode {
    if plan.stream_buffers == 0 && plan.experts.is_none() {
        // Nothing is streamed: every layer is read once, buffered, and kept in the cache.
        return ReadMode::Cached;
    }
    let (mut cached, mut total) = (0u64, 0u64);
    let streamed = layers.iter().zip(&plan.pinned).filter(|(_, &p)| !p);
    let experts = tensors
        .layers
        .iter()
        .filter(|_| plan.experts.is_some())
        .filter_map(LayerTensors::expert_stacks)
        .flatten();
    for t in streamed.flat_map(|(l, _)| l.matrices()).chain(experts) {
        total += t.n_bytes;
        cached += file.cached_bytes(t).unwrap_or(0);
    }
    if total > 0 && cached as f64 >= WARM_FRACTION * total as f64 {
        ReadMode::Cached
    } else {
        ReadMode::Direct
    }
}

impl Weights {
    /// Fills the expert cache from a previous process's `history`
    /// ([`ExpertStore::preload`]), counting what was read as loading; 0 experts when
    /// experts are not streamed one by one.
    pub fn preload_experts(
        &mut self,
        history: &experts::history::ExpertHistory,
    ) -> Result<u64, EngineError> {
        let Some(x) = &mut self.experts else {
            return Ok(0);
        };
        let (n, bytes) = x.preload(history)?;
        self.matrices.stats.experts_preloaded += n;
        self.matrices.stats.load_bytes += bytes;
        Ok(n)
    }

    /// Records a finished `eval` ([`Matrices::record_eval`]), with the expert traffic it
    /// caused.
    pub fn record_eval(&mut self, secs: f64, tokens: usize) {
        if let Some(x) = &mut self.experts {
            x.drain_stats(&mut self.matrices.stats);
        }
        self.matrices.record_eval(secs, tokens);
    }
}

impl Matrices {
    /// The storage traffic so far.
    pub fn stats(&self) -> &ResidencyStats {
        &self.stats
    }

    /// Records a finished `eval`: its seconds, and the tokens it added to the context (0 when
    /// it failed or was cancelled); and the prefetch depth the ring keeps now.
    pub fn record_eval(&mut self, secs: f64, tokens: usize) {
        self.stats.eval_secs += secs;
        self.stats.tokens += tokens as u64;
        if let Some(p) = &self.stream {
            self.stats.prefetch_depth = p.depth() as u64;
        }
    }

    /// The prefetch ring, when layers are streamed (the engine adapts its depth).
    pub fn prefetcher(&mut self) -> Option<&mut Prefetcher> {
        self.stream.as_mut()
    }

    /// The matrices of layer `i`: pinned, or read ahead into a streaming buffer by the
    /// prefetch thread (waiting for it if it is late).
    pub fn layer<'a>(
        &'a mut self,
        _file: &GgufFile,
        _tensors: &ModelTensors,
        i: usize,
    ) -> Result<LayerView<'a>, EngineError> {
        let lt = &self.layers[i];
        if let Some(stream) = &mut self.stream {
            stream.recycle(&mut self.stats)?;
        }
        if let Some(range) = &self.pinned[i] {
            self.stats.layers_pinned_hits += 1;
            let buf = &self.pinned_store[range.clone()];
            return Ok(pinned_view(lt, buf));
        }
        let stream = self
            .stream
            .as_mut()
            .expect("the plan has a streaming ring whenever a layer is not pinned");
        let streamed = stream.get(i, &mut self.stats)?;
        Ok(LayerView::new(lt, |m, _| {
            (streamed.matrix(m), Layout::Gguf)
        }))
    }

    /// Dequantizes the embedding row of `token` into `out`.
    pub fn embed(
        &mut self,
        file: &GgufFile,
        tensors: &ModelTensors,
        token: u32,
        out: &mut [f32],
    ) -> Result<(), EngineError> {
        let t = &tensors.token_embd;
        if token as u64 >= t.n_rows() {
            return Err(EngineError::Invalid(format!(
                "token id {token} is outside the vocabulary of {}",
                t.n_rows()
            )));
        }
        let rb = t.row_bytes() as usize;
        let start = token as usize * rb;
        if let (true, Output::Resident(buf, layout)) = (tensors.tied_output, &self.output) {
            ramforge_quant::dequantize_row_laid(
                t.ggml_type,
                *layout,
                &buf[start..start + rb],
                out,
            )?;
            return Ok(());
        }
        let started = Instant::now();
        file.read_range_into(t, start as u64, &mut self.embd_row)?;
        let secs = started.elapsed().as_secs_f64();
        self.stats.read_secs += secs;
        self.stats.io_wait_secs += secs;
        self.stats.bytes_read += rb as u64;
        ramforge_quant::dequantize_row(t.ggml_type, &self.embd_row, out)?;
        Ok(())
    }

    /// The logits of `n` rows of normalized activations `x` into `logits` (`n` rows of the
    /// vocabulary): the output projection is read once for all rows (chunk by chunk when it
    /// is streamed), and each row's logits are those it would get alone.
    pub fn logits(
        &mut self,
        file: &GgufFile,
        tensors: &ModelTensors,
        x: &[f32],
        n: usize,
        logits: &mut [f32],
    ) -> Result<(), EngineError> {
        // The last layer is done: its buffer goes back to the prefetch ring now, so the next
        // pass's first streamed layer is read while the output projection computes.
        if let Some(stream) = &mut self.stream {
            stream.recycle(&mut self.stats)?;
        }
        let t = &tensors.output;
        let (cols, rows) = (t.row_len() as usize, t.n_rows() as usize);
        match &mut self.output {
            Output::Resident(buf, layout) => {
                ramforge_quant::matmul_per_token_laid(
                    t.ggml_type,
                    *layout,
                    buf,
                    rows,
                    cols,
                    x,
                    n,
                    logits,
                )?;
            }
            Output::Streamed { chunk, rows: per } => {
                let rb = t.row_bytes() as usize;
                let mut first = 0;
                while first < rows {
                    let m = (*per).min(rows - first);
                    let bytes = &mut chunk[..m * rb];
                    let started = Instant::now();
                    file.read_range_into(t, (first * rb) as u64, bytes)?;
                    let secs = started.elapsed().as_secs_f64();
                    self.stats.read_secs += secs;
                    self.stats.io_wait_secs += secs;
                    self.stats.bytes_read += (m * rb) as u64;
                    self.stats.output_chunks_read += 1;
                    for (row, out) in x.chunks_exact(cols).zip(logits.chunks_exact_mut(rows)) {
                        let out = &mut out[first..first + m];
                        ramforge_quant::matvec(t.ggml_type, bytes, m, cols, row, out)?;
                    }
                    first += m;
                }
            }
        }
        Ok(())
    }
}
