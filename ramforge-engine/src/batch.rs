//! Decoding several sequences together: one pass over the weights per step serves every
//! sequence of the batch (a streamed layer is read once per step, not once per sequence),
//! while attention runs per row against the row's own [`Sequence`].
//!
//! Every product of a batched step runs per token ([`ramforge_quant::matmul_many_per_token`]),
//! so each row's logits equal, bit for bit, those of [`Engine::eval`] of its token on its
//! sequence alone: greedy decoding gives the same tokens batched or not.

use crate::engine::{input_rows, reusable_prefix, Engine};
use crate::error::EngineError;
use crate::forward::{block, output_rows, LayerWeights, Rows};
use crate::kv::KvCache;
use crate::sequence::Sequence;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

impl Engine {
    /// An empty sequence with this engine's context size; nothing is charged until it holds
    /// tokens.
    pub fn new_sequence(&self) -> Sequence {
        let ty = self.plan.request.kv_type;
        let kv = KvCache::for_model(&self.budget, ty, self.config(), self.context_size());
        Sequence::new(kv)
    }

    /// Sequences one [`Engine::decode_batch`] step may decode: those the plan booked a KV cache
    /// and logits for (`EngineOptions::sequences`). The engine's own context (that of
    /// [`Engine::eval`]) is one of the booked caches: [`Engine::reset`] it before holding that
    /// many sequences.
    pub fn max_sequences(&self) -> usize {
        self.plan.request.sequences.clamp(1, self.scratch.batch)
    }

    /// Exchanges the engine's own context with `seq`'s (with what a verify pass saved, and a
    /// rolled-back recurrent state's lag).
    pub(crate) fn swap_context(&mut self, seq: &mut Sequence) {
        std::mem::swap(&mut self.kv, &mut seq.kv);
        std::mem::swap(&mut self.history, &mut seq.history);
        std::mem::swap(&mut self.saved, &mut seq.saved);
        std::mem::swap(&mut self.stale, &mut seq.stale);
        std::mem::swap(&mut self.mtp, &mut seq.mtp);
    }

    /// Evaluates `prompt` on `seq`, keeping the longest prefix `seq` already holds (at least
    /// the last prompt token is evaluated, for its logits), as
    /// [`Engine::generate_reusing`] does. Returns how many tokens were reused, or `None` when
    /// `cancel` was raised (`seq` is then empty, as after an error); the logits that follow
    /// the prompt are in [`Engine::logits`].
    pub fn prefill(
        &mut self,
        seq: &mut Sequence,
        prompt: &[u32],
        cancel: &AtomicBool,
    ) -> Result<Option<usize>, EngineError> {
        if prompt.is_empty() {
            return Err(EngineError::Invalid("the prompt has no tokens".into()));
        }
        let keep = reusable_prefix(&seq.kv, seq.common_prefix(prompt), seq.len(), prompt.len());
        self.swap_context(seq);
        self.truncate_context(keep);
        let done = self
            .eval_unless_cancelled(&prompt[keep..], Some(cancel))
            .and_then(|done| {
                if done {
                    self.checkpoint_prompt()?;
                }
                Ok(done)
            });
        self.swap_context(seq);
        Ok(done?.then_some(keep))
    }

    /// One decoding step of several sequences: appends `tokens[i]` to `seqs[i]` and returns
    /// the logits that follow, row `i` (of [`Engine::n_vocab`]) for `seqs[i]`. Every layer
    /// is obtained once for the step. The sequences' keys and values are charged (reserved)
    /// before the pass; on error no sequence grows (one with recurrent state is emptied).
    pub fn decode_batch(
        &mut self,
        seqs: &mut [&mut Sequence],
        tokens: &[u32],
    ) -> Result<&[f32], EngineError> {
        let n = tokens.len();
        if n == 0 || n != seqs.len() {
            return Err(EngineError::Invalid(format!(
                "a batched step of {} sequences was given {n} tokens",
                seqs.len()
            )));
        }
        if n > self.max_sequences() {
            return Err(EngineError::Invalid(format!(
                "{n} sequences in one step; this engine was laid out for {}",
                self.max_sequences()
            )));
        }
        for seq in seqs.iter_mut() {
            // Nothing of a speculative step is rolled back after it: release the copy.
            seq.saved = None;
            if seq.stale.is_some() {
                // A hybrid's recurrent state rolled back by a speculative step lacks its
                // accepted tokens: evaluate them first (a pass of their own).
                self.swap_context(seq);
                let caught_up = self.eval_verify(&[]).map(|_| ());
                self.saved = None;
                self.swap_context(seq);
                caught_up?;
            }
        }
        let ctx = self.context_size();
        for seq in seqs.iter_mut() {
            if seq.len() + 1 > ctx {
                return Err(EngineError::ContextOverflow {
                    prompt: 1,
                    needed: seq.len() + 1,
                    ctx,
                });
            }
            seq.kv.reserve(seq.len() + 1)?;
        }
        let pool = Arc::clone(&self.pool);
        let solo = self.batch_threads.next_is_solo(n);
        let started = Instant::now();
        let result = pool.install_with(solo, || self.decode_rows(seqs, tokens));
        let secs = started.elapsed().as_secs_f64();
        let added = if result.is_ok() { n } else { 0 };
        if added > 0 {
            self.batch_threads.record(secs);
        }
        self.weights.record_eval(secs, added);
        if result.is_err() {
            // A recurrent state (hybrid models) may have advanced in some layers: such a
            // sequence cannot stay as it was, so it starts over.
            for seq in seqs.iter_mut().filter(|q| q.kv.is_recurrent()) {
                seq.clear();
            }
        }
        result?;
        for (seq, &t) in seqs.iter_mut().zip(tokens) {
            seq.history.push(t);
            seq.kv.set_len(seq.history.len());
        }
        Ok(&self.logits[..n * self.model.tensors.n_vocab])
    }

    /// The logits of the last [`Engine::decode_batch`] step of `n` sequences, row `i` for its
    /// `i`-th sequence.
    pub fn batch_logits(&self, n: usize) -> &[f32] {
        &self.logits[..n.min(self.max_sequences()) * self.n_vocab()]
    }

    /// The pass of [`Engine::decode_batch`]: row `i` is `tokens[i]` at the end of `seqs[i]`.
    fn decode_rows(
        &mut self,
        seqs: &mut [&mut Sequence],
        tokens: &[u32],
    ) -> Result<(), EngineError> {
        self.before_pass(tokens[0])?;
        let cfg = &self.model.config;
        let (file, tensors) = (&self.model.file, &self.model.tensors);
        let (e, n, v) = (cfg.n_embd, tokens.len(), tensors.n_vocab);
        let positions: Vec<usize> = seqs.iter().map(|q| q.len()).collect();
        let s = &mut self.scratch;
        input_rows(
            &self.model,
            &mut self.weights,
            tokens,
            positions.iter().copied(),
            s,
        )?;
        let mut kvs: Vec<&mut KvCache> = seqs.iter_mut().map(|q| &mut q.kv).collect();
        for l in 0..cfg.n_layer {
            let view = self.weights.matrices.layer(file, tensors, l)?;
            let weights = LayerWeights {
                matrices: &view,
                vectors: &self.weights.vectors.layers[l],
                experts: self.weights.experts.as_mut(),
            };
            let rows = Rows::Batch {
                kvs: &mut kvs,
                positions: &positions,
            };
            block(cfg, l, weights, s, rows)?;
        }
        let vectors = &self.weights.vectors;
        output_rows(
            cfg,
            &vectors.output_norm,
            vectors.output_hc.as_ref(),
            s,
            0,
            n,
        );
        self.weights.matrices.logits(
            file,
            tensors,
            &s.xn[..n * e],
            n,
            &mut self.logits[..n * v],
        )?;
        // A file written to during the pass may have given it a mix of old and new weights.
        self.check_file(tokens[0], "discarded the pass that started reading")?;
        Ok(())
    }
}
