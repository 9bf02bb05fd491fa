//! DeepSeek V4's per-sequence attention state beyond the common cache: each layer's raw
//! window ring and its compressors' pending tokens (fixed size, kept in the recurrent state so
//! that checkpoints and speculative rollbacks copy them), and the compressed rows (and, in a
//! ratio-4 layer, the indexer's key rows) that grow by one every `ratio` positions, charged in
//! chunks as they are needed. A compressed row depends only on the positions before it, so a
//! context cut back to `n` positions keeps its first `n / ratio` rows as they are.

use crate::budget::{Charge, MemoryBudget};
use crate::error::EngineError;
use crate::model::dsv4::Dsv4Config;
use crate::model::ModelConfig;
use half::f16;

/// Compressed rows per chunk.
const ROWS_PER_CHUNK: usize = 64;

/// One layer's fixed state ([`Dsv4Config::fixed_floats`]), split: the ring, the compressor's
/// pending entries and scores
/// (slot-major: a slot's entries, then its scores), and the indexer compressor's.
pub(crate) struct Fixed<'a> {
    pub ring: &'a mut [f32],
    pub comp: &'a mut [f32],
    pub idx: &'a mut [f32],
}

impl<'a> Fixed<'a> {
    /// Splits `whole` (layer `l`'s fixed state) as [`Dsv4Config::fixed_floats`] lays it out.
    pub(crate) fn split(cfg: &ModelConfig, l: usize, whole: &'a mut [f32]) -> Fixed<'a> {
        let d = cfg.dsv4.as_ref().expect("a deepseek4 model");
        let (ring, rest) = whole.split_at_mut(d.window * cfg.head_dim);
        let comp_len = Dsv4Config::pending_tokens(d.ratio(l)) * 2 * d.comp_width(l, cfg.head_dim);
        let (comp, idx) = rest.split_at_mut(comp_len.min(rest.len()));
        Fixed { ring, comp, idx }
    }
}

/// Bytes of every layer's compressed rows for a context of `ctx` positions, `element` bytes
/// each.
pub(crate) fn rows_bytes(cfg: &ModelConfig, ctx: usize, element: u64) -> u64 {
    let Some(d) = &cfg.dsv4 else {
        return 0;
    };
    (0..cfg.n_layer)
        .map(|l| match d.ratio(l) {
            0 => 0,
            r => (ctx / r).div_ceil(ROWS_PER_CHUNK) * ROWS_PER_CHUNK * row_width(cfg, l),
        })
        .sum::<usize>() as u64
        * element
}

/// Floats of one compressed row of layer `l` and its indexer key after it.
fn row_width(cfg: &ModelConfig, l: usize) -> usize {
    let d = cfg.dsv4.as_ref().expect("a deepseek4 model");
    cfg.head_dim
        + if d.ratio(l) == 4 {
            d.indexer.head_dim
        } else {
            0
        }
}

enum Data {
    F16(Vec<f16>),
    F32(Vec<f32>),
}

struct Chunk {
    data: Data,
    _charge: Charge,
}

/// Every layer's compressed rows.
pub(crate) struct CompressedRows {
    /// Whether rows are kept as f16 (else f32).
    half: bool,
    /// Per layer: its ratio (0: none), row width, and chunks.
    layers: Vec<(usize, usize, Vec<Chunk>)>,
}

impl CompressedRows {
    /// The rows `cfg` needs (nothing allocated yet; empty for other models).
    pub(crate) fn for_model(cfg: &ModelConfig, half: bool) -> CompressedRows {
        let layers = match &cfg.dsv4 {
            Some(d) => (0..cfg.n_layer)
                .map(|l| (d.ratio(l), row_width(cfg, l), Vec::new()))
                .collect(),
            None => Vec::new(),
        };
        CompressedRows { half, layers }
    }

    /// No compressed rows (a cache made without a model).
    pub(crate) fn for_model_none() -> CompressedRows {
        CompressedRows {
            half: true,
            layers: Vec::new(),
        }
    }

    /// Makes room for the rows of positions `0..n`.
    pub(crate) fn reserve(&mut self, budget: &MemoryBudget, n: usize) -> Result<(), EngineError> {
        for (ratio, width, chunks) in &mut self.layers {
            if *ratio == 0 {
                continue;
            }
            while chunks.len() * ROWS_PER_CHUNK < n / *ratio {
                let len = ROWS_PER_CHUNK * *width;
                let element = if self.half { 2 } else { 4 };
                let charge = budget.charge("compressed KV rows", len as u64 * element)?;
                let data = if self.half {
                    Data::F16(vec![f16::ZERO; len])
                } else {
                    Data::F32(vec![0.0; len])
                };
                chunks.push(Chunk {
                    data,
                    _charge: charge,
                });
            }
        }
        Ok(())
    }

    /// Forgets every row and releases the memory.
    pub(crate) fn clear(&mut self) {
        for (_, _, chunks) in &mut self.layers {
            chunks.clear();
        }
    }

    /// Stores row `j` of `layer` (its compressed row, then in a ratio-4 layer its indexer
    /// key); room must have been reserved.
    pub(crate) fn put(&mut self, layer: usize, j: usize, row: &[f32]) {
        let (_, width, chunks) = &mut self.layers[layer];
        let at = (j % ROWS_PER_CHUNK) * *width;
        match &mut chunks[j / ROWS_PER_CHUNK].data {
            Data::F16(d) => {
                for (o, &v) in d[at..at + *width].iter_mut().zip(row) {
                    *o = f16::from_f32(v);
                }
            }
            Data::F32(d) => d[at..at + *width].copy_from_slice(&row[..*width]),
        }
    }

    /// Elements `first..first + dst.len()` of row `j` of `layer`, as f32.
    pub(crate) fn get(&self, layer: usize, j: usize, first: usize, dst: &mut [f32]) {
        let (_, width, chunks) = &self.layers[layer];
        let (at, len) = ((j % ROWS_PER_CHUNK) * *width + first, dst.len());
        match &chunks[j / ROWS_PER_CHUNK].data {
            Data::F16(d) => {
                for (o, v) in dst.iter_mut().zip(&d[at..at + len]) {
                    *o = v.to_f32();
                }
            }
            Data::F32(d) => dst.copy_from_slice(&d[at..at + dst.len()]),
        }
    }
}
