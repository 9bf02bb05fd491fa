//! Speculative verification: several drafted tokens evaluated in one pass over the weights
//! (a streamed layer is read once for all of them), with logits for every position, then a
//! rollback to the accepted prefix.
//!
//! The pass runs every product per token, so row `i`'s logits equal, bit for bit, those of
//! evaluating its token alone: greedy output with drafts is token-identical to plain decoding.
//! Before the pass the engine saves what a shorter context still needs and the pass overwrites
//! ([`crate::kv::KvCache::save`]): sliding-window ring slots, and a hybrid model's recurrent
//! state. A rollback puts those back and cuts the keys and values; a recurrent state restored
//! to before the pass lacks the accepted tokens, which the next pass evaluates again first, in
//! the same batch as its own tokens (no extra pass over the weights).
//!
//! The expert cache's decayed use counts keep the rejected tokens' routing: they only steer
//! which experts stay cached (never a number computed), and undoing them would need a copy of
//! every layer's counts per pass.

use crate::engine::Engine;
use crate::error::EngineError;
use std::sync::Arc;
use std::time::Instant;

impl Engine {
    /// Most tokens one [`Engine::eval_verify`] takes (`EngineOptions::draft` plus one); 1 when
    /// the engine was not laid out for drafting.
    pub fn verify_capacity(&self) -> usize {
        self.plan.request.verify_rows.max(1)
    }

    /// Appends `tokens` to the context in one pass and returns the logits after each of them:
    /// row `i` (of [`Engine::n_vocab`]) follows `tokens[..=i]`. [`Engine::rollback`] may then
    /// cut the context back to any length from before the pass on. On error the context is
    /// reset.
    pub fn eval_verify(&mut self, tokens: &[u32]) -> Result<&[f32], EngineError> {
        // Tokens a rolled-back recurrent state lacks go first, in the same pass.
        let mut all = Vec::with_capacity(tokens.len() + 4);
        if let Some(stale) = self.stale.take() {
            all.extend_from_slice(&self.history[stale..]);
            self.history.truncate(stale);
            self.kv.set_len(stale);
        }
        let redo = all.len();
        all.extend_from_slice(tokens);
        if all.is_empty() {
            return Ok(&[]);
        }
        let capacity = self.verify_capacity() + redo;
        if all.len() > capacity.min(self.scratch.batch) {
            self.reset();
            return Err(EngineError::Invalid(format!(
                "{} tokens in one verify pass; this engine was laid out for {}",
                tokens.len(),
                self.verify_capacity()
            )));
        }
        let first = self.history.len();
        let needed = first + all.len();
        if needed > self.kv.capacity() {
            self.reset();
            return Err(EngineError::ContextOverflow {
                prompt: all.len(),
                needed,
                ctx: self.kv.capacity(),
            });
        }
        self.saved = None;
        // One token leaves nothing to roll back to but the context before it: no copy.
        let save = all.len() > 1;
        if let Err(e) = self.kv.reserve(needed).and_then(|()| {
            if save {
                self.saved = Some((first, self.kv.save(first, all.len())?));
            }
            Ok(())
        }) {
            self.reset();
            return Err(e);
        }
        let pool = Arc::clone(&self.pool);
        let started = Instant::now();
        let rows = tokens.len().max(1);
        let result = pool.install_with(false, || self.eval_batches(&all, None, rows));
        let added = if result.is_ok() { all.len() } else { 0 };
        self.weights
            .record_eval(started.elapsed().as_secs_f64(), added);
        if let Err(e) = result {
            self.reset();
            return Err(e);
        }
        self.history.extend_from_slice(&all);
        self.kv.set_len(self.history.len());
        let v = self.n_vocab();
        Ok(&self.logits[..tokens.len() * v])
    }

    /// Keeps the first `n` tokens of the context after an [`Engine::eval_verify`], `n` no
    /// shorter than the context before that pass: the keys and values past `n` are forgotten,
    /// overwritten ring slots and a recurrent state are put back.
    pub fn rollback(&mut self, n: usize) -> Result<(), EngineError> {
        if n >= self.history.len() {
            return Ok(());
        }
        let Some((before, saved)) = self.saved.take() else {
            return Err(EngineError::Invalid(
                "rollback without a verify pass to undo".into(),
            ));
        };
        if n < before {
            self.saved = Some((before, saved));
            return Err(EngineError::Invalid(format!(
                "rollback to {n} tokens, before the verify pass at {before}"
            )));
        }
        self.kv.restore(&saved, n);
        self.history.truncate(n);
        self.kv.set_len(n);
        if self.kv.is_recurrent() && n > before {
            self.stale = Some(before);
        }
        Ok(())
    }
}
