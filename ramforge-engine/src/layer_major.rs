//! Prefill layer by layer: a prompt longer than one batch runs each layer over all the rows
//! the plan holds (`MemoryPlan::held_rows`, whole batches) before the next layer, instead of
//! every layer over one batch. Each batch still meets each layer with the same rows, positions
//! and caches as batch by batch (a layer's caches fill in the same order), so the numbers are
//! the same; a streamed layer is read once per held rows instead of once per batch. Where
//! experts stream one by one (`MemoryPlan::held_groups_experts`), an MoE layer runs in two
//! halves around its routed experts: every batch to its routes, then each selected expert,
//! read once, over the rows of each batch routed to it (the product that batch alone would
//! run), then every batch's shared expert and residual.

use crate::engine::{input_rows, Engine};
use crate::error::EngineError;
use crate::forward::{
    block, block_from_experts, block_to_experts, output_rows, routed_experts, splits_at_experts,
    ExpertRows, ExpertWork, LayerWeights, Rows,
};
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
        let (row, n_layer) = (cfg.residual_streams() * cfg.n_embd, cfg.n_layer);
        debug_assert!(held_rows.is_multiple_of(batch) && self.held.x.len() >= held_rows * row);
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
                self.held.x[at..at + bt.len() * row]
                    .copy_from_slice(&self.scratch.x[..bt.len() * row]);
            }
            for l in 0..n_layer {
                if cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
                    return Ok(false);
                }
                if self.plan.held_groups_experts && splits_at_experts(&self.model.config, l) {
                    self.grouped_moe_layer(l, run, first + start)?;
                } else {
                    self.layer_over_run(l, run, first + start)?;
                }
                if let Some(report) = self.prompt_progress.as_mut() {
                    report(start + run.len() * (l + 1) / n_layer, tokens.len());
                }
            }
            start += run.len();
        }
        // The last batch ran last through the last layer: its rows are in the scratch.
        let n = (tokens.len() - 1) % batch + 1;
        let v = &self.weights.vectors;
        output_rows(
            &self.model.config,
            &v.output_norm,
            v.output_hc.as_ref(),
            &mut self.scratch,
            n - 1,
            n,
        );
        Ok(true)
    }

    /// Layer `l` over each batch of `run` (the held rows, the first at position `pos`), whole.
    fn layer_over_run(&mut self, l: usize, run: &[u32], pos: usize) -> Result<(), EngineError> {
        let (file, tensors) = (&self.model.file, &self.model.tensors);
        let view = self.weights.matrices.layer(file, tensors, l)?;
        for (b, bt) in run.chunks(self.scratch.batch).enumerate() {
            let (n, pos) = (bt.len(), pos + b * self.scratch.batch);
            let cfg = &self.model.config;
            let freqs = self.weights.vectors.rope_freqs.as_deref();
            self.held.load(cfg, freqs, &mut self.scratch, b, bt, pos);
            let weights = LayerWeights {
                matrices: &view,
                vectors: &self.weights.vectors.layers[l],
                experts: self.weights.experts.as_mut(),
            };
            let rows = Rows::Run(&mut self.kv, pos..pos + n, false);
            block(cfg, l, weights, &mut self.scratch, rows)?;
            self.held.keep(cfg, &self.scratch, b, n);
        }
        Ok(())
    }

    /// MoE layer `l` over `run` ([`splits_at_experts`]): each batch up to its routes, then
    /// every selected expert once for the whole run (read once where it streams), then each
    /// batch's shared expert and residual.
    fn grouped_moe_layer(&mut self, l: usize, run: &[u32], pos: usize) -> Result<(), EngineError> {
        let cfg = &self.model.config;
        let (e, k, batch) = (cfg.n_embd, cfg.n_expert_used, self.scratch.batch);
        let (file, tensors) = (&self.model.file, &self.model.tensors);
        let view = self.weights.matrices.layer(file, tensors, l)?;
        let vecs = &self.weights.vectors.layers[l];
        for (b, bt) in run.chunks(batch).enumerate() {
            let (n, pos) = (bt.len(), pos + b * batch);
            let freqs = self.weights.vectors.rope_freqs.as_deref();
            self.held.load(cfg, freqs, &mut self.scratch, b, bt, pos);
            let at = b * batch;
            let s = &mut self.scratch;
            let rows = Rows::Run(&mut self.kv, pos..pos + n, false);
            let routes = &mut self.held.routes[at * k..(at + n) * k];
            block_to_experts(cfg, l, &view, vecs, s, rows, routes)?;
            self.held.ffn_in[at * e..(at + n) * e].copy_from_slice(&s.xn[..n * e]);
            self.held.keep(cfg, s, b, n);
        }
        let rows = ExpertRows {
            input: &self.held.ffn_in[..run.len() * e],
            routes: &self.held.routes[..run.len() * k],
            out: &mut self.held.expert_sums[..run.len() * e],
            batch,
        };
        let s = &mut self.scratch;
        let work = ExpertWork {
            moe_in: &mut s.moe_in,
            gate: &mut s.gate,
            up: &mut s.up,
            act: &mut s.act,
        };
        let store = self.weights.experts.as_mut();
        routed_experts(cfg, l, &view, vecs, store, rows, work, false)?;
        for (b, bt) in run.chunks(batch).enumerate() {
            let (n, at) = (bt.len(), b * batch);
            let s = &mut self.scratch;
            self.held.restore(cfg, s, b, n);
            s.xn[..n * e].copy_from_slice(&self.held.ffn_in[at * e..(at + n) * e]);
            s.moe_out[..n * e].copy_from_slice(&self.held.expert_sums[at * e..(at + n) * e]);
            block_from_experts(cfg, &view, vecs, s, n, false)?;
            self.held.keep(cfg, s, b, n);
        }
        Ok(())
    }
}
