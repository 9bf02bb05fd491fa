//! Weight storage under the plan: pinned layers, the streaming slot, the output projection
//! (resident or read in row chunks) and the small f32 vectors. Every buffer is charged to the
//! budget before it is allocated; layers stay in their quantized form.

use crate::budget::{Charge, ChargedVec, MemoryBudget};
use crate::error::EngineError;
use crate::plan::MemoryPlan;
use crate::tensors::{LayerTensors, ModelTensors};
use ramforge_gguf::{GgmlType, GgufFile, TensorInfo};
use std::time::Instant;

/// A weight matrix in memory: `rows` rows of `cols` elements of type `ty`.
#[derive(Clone, Copy)]
pub struct MatrixView<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub bytes: &'a [u8],
}

/// One layer's matrices, borrowed from a pinned buffer or the streaming slot.
pub struct LayerView<'a> {
    pub q: MatrixView<'a>,
    pub k: MatrixView<'a>,
    pub v: MatrixView<'a>,
    pub o: MatrixView<'a>,
    pub gate: MatrixView<'a>,
    pub up: MatrixView<'a>,
    pub down: MatrixView<'a>,
}

/// A layer's norms and biases as f32 (always resident).
pub struct LayerVectors {
    pub attn_norm: Vec<f32>,
    pub ffn_norm: Vec<f32>,
    pub qkv_bias: Option<[Vec<f32>; 3]>,
}

/// What storage traffic the weights caused.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct ResidencyStats {
    /// Bytes read from the model file while loading (vectors and pinned weights).
    pub load_bytes: u64,
    /// Bytes read from the model file while generating (streamed layers, output chunks,
    /// embedding rows).
    pub bytes_read: u64,
    /// Layers read into the streaming slot.
    pub layers_loaded: u64,
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
    pub streamed_layers: u64,
}

impl ResidencyStats {
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
            ..*self
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

enum Output {
    Resident(ChargedVec<u8>),
    Streamed { chunk: ChargedVec<u8>, rows: usize },
}

/// Every weight of the model, laid out as the plan says.
pub struct Weights {
    pub vectors: Vectors,
    pub matrices: Matrices,
}

/// The small f32 vectors, always resident.
pub struct Vectors {
    pub layers: Vec<LayerVectors>,
    pub output_norm: Vec<f32>,
    pub rope_freqs: Option<Vec<f32>>,
    _charge: Charge,
}

/// The matrices: pinned layers, the streaming slot, the output projection.
pub struct Matrices {
    pinned: Vec<Option<ChargedVec<u8>>>,
    slot: Option<ChargedVec<u8>>,
    slot_holds: Option<usize>,
    output: Output,
    embd_row: ChargedVec<u8>,
    pub stats: ResidencyStats,
}

/// Reads a whole 1-D tensor as f32 (norms, biases, RoPE factors).
fn read_vector(file: &GgufFile, t: &TensorInfo) -> Result<Vec<f32>, EngineError> {
    let mut raw = vec![0u8; t.n_bytes as usize];
    file.read_tensor_into(t, &mut raw)?;
    let mut out = vec![0.0f32; t.n_elements as usize];
    ramforge_quant::dequantize_row(t.ggml_type, &raw, &mut out)?;
    Ok(out)
}

/// Reads the seven matrices of a layer back to back into `buf`.
fn read_layer(file: &GgufFile, layer: &LayerTensors, buf: &mut [u8]) -> Result<u64, EngineError> {
    let mut at = 0usize;
    for t in layer.matrices() {
        let n = t.n_bytes as usize;
        file.read_tensor_into(t, &mut buf[at..at + n])?;
        at += n;
    }
    Ok(at as u64)
}

/// Views of a layer's matrices laid out by [`read_layer`].
fn layer_view<'a>(layer: &LayerTensors, buf: &'a [u8]) -> LayerView<'a> {
    let mut at = 0usize;
    let mut next = |t: &TensorInfo| {
        let n = t.n_bytes as usize;
        let view = MatrixView {
            ty: t.ggml_type,
            rows: t.n_rows() as usize,
            cols: t.row_len() as usize,
            bytes: &buf[at..at + n],
        };
        at += n;
        view
    };
    LayerView {
        q: next(&layer.attn_q),
        k: next(&layer.attn_k),
        v: next(&layer.attn_v),
        o: next(&layer.attn_output),
        gate: next(&layer.ffn_gate),
        up: next(&layer.ffn_up),
        down: next(&layer.ffn_down),
    }
}

impl Weights {
    /// Allocates and fills everything the plan keeps resident.
    pub fn load(
        file: &GgufFile,
        tensors: &ModelTensors,
        plan: &MemoryPlan,
        budget: &MemoryBudget,
    ) -> Result<Weights, EngineError> {
        let mut stats = ResidencyStats::default();
        let vector_charge = budget.charge("norms and biases", plan.vector_bytes)?;
        let mut layers = Vec::with_capacity(tensors.layers.len());
        for l in &tensors.layers {
            let qkv_bias = match &l.qkv_bias {
                Some([q, k, v]) => Some([
                    read_vector(file, q)?,
                    read_vector(file, k)?,
                    read_vector(file, v)?,
                ]),
                None => None,
            };
            layers.push(LayerVectors {
                attn_norm: read_vector(file, &l.attn_norm)?,
                ffn_norm: read_vector(file, &l.ffn_norm)?,
                qkv_bias,
            });
        }
        let output_norm = read_vector(file, &tensors.output_norm)?;
        let rope_freqs = match &tensors.rope_freqs {
            Some(t) => Some(read_vector(file, t)?),
            None => None,
        };
        stats.load_bytes += plan.vector_bytes;

        let output = if plan.output_resident {
            let mut buf =
                ChargedVec::zeroed(budget, "output projection", plan.output_bytes as usize)?;
            file.read_tensor_into(&tensors.output, &mut buf)?;
            stats.load_bytes += plan.output_bytes;
            Output::Resident(buf)
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
        let mut pinned = Vec::with_capacity(tensors.layers.len());
        for (i, (l, &pin)) in tensors.layers.iter().zip(&plan.pinned).enumerate() {
            if pin {
                let label = format!("pinned layer {i}");
                let mut buf = ChargedVec::zeroed(budget, &label, plan.layer_bytes[i] as usize)?;
                stats.load_bytes += read_layer(file, l, &mut buf)?;
                pinned.push(Some(buf));
            } else {
                pinned.push(None);
            }
        }
        let slot = if plan.slot_bytes > 0 {
            Some(ChargedVec::zeroed(
                budget,
                "layer streaming slot",
                plan.slot_bytes as usize,
            )?)
        } else {
            None
        };
        let embd_row = ChargedVec::zeroed(budget, "embedding row", plan.embd_row_bytes as usize)?;
        stats.peak_resident = plan.weight_bytes();
        stats.pinned_layers = plan.pinned.iter().filter(|&&p| p).count() as u64;
        stats.streamed_layers = plan.streamed_layers() as u64;
        Ok(Weights {
            vectors: Vectors {
                layers,
                output_norm,
                rope_freqs,
                _charge: vector_charge,
            },
            matrices: Matrices {
                pinned,
                slot,
                slot_holds: None,
                output,
                embd_row,
                stats,
            },
        })
    }
}

impl Matrices {
    /// The matrices of layer `i`, read into the streaming slot first when it is not pinned.
    pub fn layer<'a>(
        &'a mut self,
        file: &GgufFile,
        tensors: &ModelTensors,
        i: usize,
    ) -> Result<LayerView<'a>, EngineError> {
        let lt = &tensors.layers[i];
        if let Some(buf) = &self.pinned[i] {
            self.stats.layers_pinned_hits += 1;
            return Ok(layer_view(lt, buf));
        }
        let slot = self
            .slot
            .as_mut()
            .expect("the plan has a slot whenever a layer is not pinned");
        if self.slot_holds != Some(i) {
            self.slot_holds = None;
            let started = Instant::now();
            let n = read_layer(file, lt, slot)?;
            self.stats.read_secs += started.elapsed().as_secs_f64();
            self.stats.bytes_read += n;
            self.stats.layers_loaded += 1;
            self.slot_holds = Some(i);
        }
        Ok(layer_view(lt, slot))
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
        if let (true, Output::Resident(buf)) = (tensors.tied_output, &self.output) {
            ramforge_quant::dequantize_row(t.ggml_type, &buf[start..start + rb], out)?;
            return Ok(());
        }
        let started = Instant::now();
        file.read_range_into(t, start as u64, &mut self.embd_row)?;
        self.stats.read_secs += started.elapsed().as_secs_f64();
        self.stats.bytes_read += rb as u64;
        ramforge_quant::dequantize_row(t.ggml_type, &self.embd_row, out)?;
        Ok(())
    }

    /// `logits = output . x`, reading the output projection in chunks when it is streamed.
    pub fn logits(
        &mut self,
        file: &GgufFile,
        tensors: &ModelTensors,
        x: &[f32],
        logits: &mut [f32],
    ) -> Result<(), EngineError> {
        let t = &tensors.output;
        let (cols, rows) = (t.row_len() as usize, t.n_rows() as usize);
        match &mut self.output {
            Output::Resident(buf) => {
                ramforge_quant::matvec(t.ggml_type, buf, rows, cols, x, logits)?;
            }
            Output::Streamed { chunk, rows: per } => {
                let rb = t.row_bytes() as usize;
                let mut first = 0;
                while first < rows {
                    let n = (*per).min(rows - first);
                    let bytes = &mut chunk[..n * rb];
                    let started = Instant::now();
                    file.read_range_into(t, (first * rb) as u64, bytes)?;
                    self.stats.read_secs += started.elapsed().as_secs_f64();
                    self.stats.bytes_read += (n * rb) as u64;
                    self.stats.output_chunks_read += 1;
                    ramforge_quant::matvec(
                        t.ggml_type,
                        bytes,
                        n,
                        cols,
                        x,
                        &mut logits[first..first + n],
                    )?;
                    first += n;
                }
            }
        }
        Ok(())
    }
}
