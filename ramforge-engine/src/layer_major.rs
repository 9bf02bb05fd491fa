//! Prefill layer by layer: a prompt longer than one batch runs each layer over all the rows
//! the plan holds (`MemoryPlan::held_rows`, whole batches) before the next layer, instead of
//! every layer over one batch. Each batch still meets each layer with the same rows, positions
//! and caches as batch by batch (a layer's caches fill in the same order), so the numbers are
//! the same; a streamed layer is read once per held rows instead of once per batch. (Experts
//! streamed one by one are still read per batch: the run's rows are not grouped by expert.)

use crate::engine::{input_rows, Engine};
use crate::error::EngineError;
use crate::forward::{block, output_rows, rope_tables, LayerWeights, Rows};
use std::sync::atomic::{AtomicBool, Ordering};

impl Engine {
    /// Runs `tokens` (at positions from `first` on) through every layer, layer-major over each
    /// run of held rows, and leaves the last row normed for the output projection in the
    /// scratch (as the batch-major pass does). `Ok(false)`: `cancel` was raised between
    /// layers. Only with held rows (`MemoryPlan::held_rows` > 0).
    pub(crate) fn layer_major_pass(
        &mut self,
        tokens: &[u32],
        cancel: Option<&AtomicBool>,
        first: usize,
    ) -> Result<bool, EngineError> {
        let held_rows = self.plan.held_rows;
        let batch = self.scratch.batch;
        let cfg = &self.model.config;
        let row = cfg.residual_streams() * cfg.n_embd;
        debug_assert!(held_rows.is_multiple_of(batch) && self.held.len() >= held_rows * row);
        let (file, tensors) = (&self.model.file, &self.model.tensors);
        let mut start = 0;
        while start < tokens.len() {
            let run = &tokens[start..(start + held_rows).min(tokens.len())];
            // Each batch's input rows (its embeddings), held.
            for (b, bt) in run.chunks(batch).enumerate() {
                let pos = first + start + b * batch;
                input_rows(
                    &self.model,
                    &mut self.weights,
                    bt,
                    pos..pos + bt.len(),
                    &mut self.scratch,
                )?;
                let at = b * batch * row;
                self.held[at..at + bt.len() * row]
                    .copy_from_slice(&self.scratch.x[..bt.len() * row]);
            }
            for l in 0..cfg.n_layer {
                if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                    return Ok(false);
                }
                let view = self.weights.matrices.layer(file, tensors, l)?;
                for (b, bt) in run.chunks(batch).enumerate() {
                    let (n, pos) = (bt.len(), first + start + b * batch);
                    let s = &mut self.scratch;
                    let at = b * batch * row;
                    s.x[..n * row].copy_from_slice(&self.held[at..at + n * row]);
                    s.tokens[..n].copy_from_slice(bt);
                    rope_tables(
                        cfg,
                        self.weights.vectors.rope_freqs.as_deref(),
                        pos..pos + n,
                        s,
                    );
                    let weights = LayerWeights {
                        matrices: &view,
                        vectors: &self.weights.vectors.layers[l],
                        experts: self.weights.experts.as_mut(),
                    };
                    block(
                        cfg,
                        l,
                        weights,
                        s,
                        Rows::Run(&mut self.kv, pos..pos + n, false),
                    )?;
                    self.held[at..at + n * row].copy_from_slice(&s.x[..n * row]);
                }
                if let Some(report) = self.prompt_progress.as_mut() {
                    report(start + run.len() * (l + 1) / cfg.n_layer, tokens.len());
                }
            }
            start += run.len();
        }
        // The last batch ran last through the last layer: its rows are in the scratch.
        let n = (tokens.len() - 1) % batch + 1;
        let v = &self.weights.vectors;
        output_rows(
            cfg,
            &v.output_norm,
            v.output_hc.as_ref(),
            &mut self.scratch,
            n - 1,
            n,
        );
        Ok(true)
    }
}
