//! Text generation on an [`Engine`]: prompt as one batch, then one token at a time, sampled,
//! streamed as text, stopped by end-of-generation tokens, stop strings, the token limit, the
//! context size or a cancel flag.

use crate::budget::MemoryBudget;
use crate::constraint::Constraint;
use crate::decoding::{Decoding, Next, StopReason};
use crate::draft::{DraftModel, Drafter, Speculating, SpeculationStats};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::sampling::argmax;
use crate::sampling::SamplingParams;
use crate::sequence::Sequence;
use crate::stream::ResidencyStats;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// What one `generate` call did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GenerationStats {
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Leading prompt tokens whose keys and values were reused from the context
    /// ([`Engine::generate_reusing`]); 0 for [`Engine::generate`].
    pub cached_tokens: usize,
    /// Tokens generated (an end-of-generation token that stopped it is not counted).
    pub generated_tokens: usize,
    /// The generated tokens.
    pub tokens: Vec<u32>,
    /// The text shown (up to, not including, a stop string).
    pub text: String,
    /// Why generation stopped.
    pub stop_reason: StopReason,
    /// Seconds spent on the prompt.
    pub prompt_secs: f64,
    /// Seconds spent decoding.
    pub decode_secs: f64,
    /// Of `decode_secs`, the seconds spent on a constraint's mask (0 when unconstrained).
    pub constraint_secs: f64,
    /// Storage traffic of this call.
    pub residency: ResidencyStats,
    /// Storage traffic of the decode phase alone (its `tokens` are the decode evals, so
    /// `bytes_read_per_token()` is the per-decoded-token figure).
    pub decode_residency: ResidencyStats,
    /// Storage traffic of the first [`WINDOW_EVALS`] decoding evals (all of them when fewer
    /// ran): how warm the caches start, e.g. with an expert history.
    pub first_decode_residency: ResidencyStats,
    /// The same of the last [`WINDOW_EVALS`]: where the caches ended up.
    pub last_decode_residency: ResidencyStats,
    /// Most budget bytes held at once since the engine was made.
    pub peak_managed_bytes: u64,
    /// What speculative decoding did, when a drafter was set.
    pub speculation: Option<SpeculationStats>,
}

/// Decoding evals in the first and last windows of [`GenerationStats`].
pub const WINDOW_EVALS: usize = 32;

impl GenerationStats {
    /// Prompt tokens evaluated (those not reused from the context) per second.
    pub fn prompt_tokens_per_sec(&self) -> f64 {
        rate(self.prompt_tokens - self.cached_tokens, self.prompt_secs)
    }

    /// Decode speed: tokens after the first, over the time spent producing them.
    pub fn decode_tokens_per_sec(&self) -> f64 {
        rate(self.generated_tokens.saturating_sub(1), self.decode_secs)
    }
}

fn rate(n: usize, secs: f64) -> f64 {
    if secs > 0.0 {
        n as f64 / secs
    } else {
        0.0
    }
}

impl Engine {
    /// Generates from `prompt` (token ids, BOS included if wanted) in a fresh context.
    ///
    /// `on_token(id, text)` is called for every generated token with the text that became
    /// visible (empty while a multi-byte character or a possible stop string is pending; text
    /// held back until the end is reported with the last token's id).
    /// Raising `cancel` ends generation after the current token.
    pub fn generate(
        &mut self,
        prompt: &[u32],
        params: &SamplingParams,
        on_token: &mut dyn FnMut(u32, &str),
        cancel: &AtomicBool,
    ) -> Result<GenerationStats, EngineError> {
        self.reset();
        self.generate_from(0, prompt, params, None, on_token, cancel)
    }

    /// [`Engine::generate`] whose output `constraint` (a compiled grammar, see
    /// [`crate::constraint`]) keeps inside its grammar.
    pub fn generate_constrained(
        &mut self,
        prompt: &[u32],
        params: &SamplingParams,
        constraint: Constraint,
        on_token: &mut dyn FnMut(u32, &str),
        cancel: &AtomicBool,
    ) -> Result<GenerationStats, EngineError> {
        self.reset();
        self.generate_from(0, prompt, params, Some(constraint), on_token, cancel)
    }

    /// [`Engine::generate`] that keeps the longest prefix the context already holds (the
    /// previous prompt and reply of a conversation) and evaluates only the rest of `prompt`:
    /// the second turn of a chat prefills only its new tokens. At least the last prompt token
    /// is evaluated, for its logits. The reused keys and values were computed in other batches,
    /// so logits may differ from a fresh [`Engine::generate`] in f32 rounding.
    pub fn generate_reusing(
        &mut self,
        prompt: &[u32],
        params: &SamplingParams,
        on_token: &mut dyn FnMut(u32, &str),
        cancel: &AtomicBool,
    ) -> Result<GenerationStats, EngineError> {
        let common = self
            .history()
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        let keep =
            crate::engine::reusable_prefix(&self.kv, common, self.history().len(), prompt.len());
        self.truncate_context(keep);
        self.generate_from(keep, prompt, params, None, on_token, cancel)
    }

    /// Generates after `prompt`, whose first `cached` tokens the context already holds.
    fn generate_from(
        &mut self,
        cached: usize,
        prompt: &[u32],
        params: &SamplingParams,
        constraint: Option<Constraint>,
        on_token: &mut dyn FnMut(u32, &str),
        cancel: &AtomicBool,
    ) -> Result<GenerationStats, EngineError> {
        debug_assert_eq!(self.n_past(), cached);
        if let Err(e) = params.validate() {
            self.reset();
            return Err(EngineError::Invalid(e));
        }
        if prompt.is_empty() {
            return Err(EngineError::Invalid("the prompt has no tokens".into()));
        }
        if prompt.len() > self.context_size() {
            return Err(EngineError::ContextOverflow {
                prompt: prompt.len(),
                needed: prompt.len() + params.max_tokens,
                ctx: self.context_size(),
            });
        }
        let before = *self.residency();
        let started = Instant::now();
        let prompt_done = self.eval_unless_cancelled(&prompt[cached..], Some(cancel))?;
        if prompt_done {
            self.checkpoint_prompt()?;
        }
        let prompt_secs = started.elapsed().as_secs_f64();
        if !prompt_done {
            return Ok(GenerationStats {
                prompt_tokens: prompt.len(),
                cached_tokens: cached,
                generated_tokens: 0,
                tokens: Vec::new(),
                text: String::new(),
                stop_reason: StopReason::Cancelled,
                prompt_secs,
                decode_secs: 0.0,
                constraint_secs: 0.0,
                residency: self.residency().since(&before),
                decode_residency: ResidencyStats::default(),
                first_decode_residency: ResidencyStats::default(),
                last_decode_residency: ResidencyStats::default(),
                peak_managed_bytes: self.budget().peak(),
                speculation: None,
            });
        }

        let decode_started = Instant::now();
        let decode_before = *self.residency();
        let mut logits = self.logits().to_vec();
        let tokenizer = Arc::clone(&self.model().tokenizer);
        let mut decoding = Decoding::new(&tokenizer, params);
        if let Some(c) = constraint {
            decoding = decoding.constrained(c);
        }
        // Snapshots after each of the last WINDOW_EVALS evals (and the one before them); a
        // speculative decode has passes, not single evals, and reports its whole decode.
        let mut window = std::collections::VecDeque::from([decode_before]);
        let mut first = None;
        let mut speculation = None;
        let stop_reason = match self.drafter.take() {
            Some(mut drafter) if self.verify_capacity() > 1 => {
                let mut stats = SpeculationStats::default();
                let result = self.speculate(
                    &mut drafter,
                    &mut decoding,
                    &mut logits,
                    &mut stats,
                    on_token,
                    cancel,
                );
                self.drafter = Some(drafter);
                speculation = Some(stats);
                result?
            }
            drafter => {
                self.drafter = drafter;
                loop {
                    let cancelled = cancel.load(Ordering::Relaxed);
                    let ctx = self.context_size();
                    match decoding.next(&mut logits, self.history(), ctx, cancelled, on_token) {
                        Next::Stop(reason) => break check_stop(reason, &decoding)?,
                        Next::Eval(id) => {
                            logits.copy_from_slice(self.eval(&[id])?);
                            let now = *self.residency();
                            if now.tokens - decode_before.tokens == WINDOW_EVALS as u64 {
                                first = Some(now.since(&decode_before));
                            }
                            if window.len() > WINDOW_EVALS {
                                window.pop_front();
                            }
                            window.push_back(now);
                        }
                    }
                }
            }
        };
        let constraint_secs = decoding.constraint_secs();
        let (tokens, text) = decoding.finish(stop_reason, on_token);
        Ok(GenerationStats {
            prompt_tokens: prompt.len(),
            cached_tokens: cached,
            generated_tokens: tokens.len(),
            tokens,
            text,
            stop_reason,
            prompt_secs,
            decode_secs: decode_started.elapsed().as_secs_f64(),
            constraint_secs,
            residency: self.residency().since(&before),
            decode_residency: self.residency().since(&decode_before),
            first_decode_residency: first.unwrap_or_else(|| self.residency().since(&decode_before)),
            last_decode_residency: self.residency().since(&window[0]),
            peak_managed_bytes: self.budget().peak(),
            speculation,
        })
    }

    /// Sets where [`Engine::generate`] takes drafts from (`None`: plain decoding). Drafting
    /// needs an engine laid out for it (`EngineOptions::draft`); otherwise it decodes plainly.
    pub fn set_drafter(&mut self, drafter: Option<Drafter>) {
        self.drafter = drafter;
    }

    /// The drafter [`Engine::generate`] uses, if any.
    pub fn drafter(&self) -> Option<&Drafter> {
        self.drafter.as_ref()
    }

    /// The decoding loop with drafts: speculative passes ([`Engine::speculative_pass`]) until
    /// the generation ends.
    fn speculate(
        &mut self,
        drafter: &mut Drafter,
        decoding: &mut Decoding<'_>,
        logits: &mut [f32],
        stats: &mut SpeculationStats,
        on_token: &mut dyn FnMut(u32, &str),
        cancel: &AtomicBool,
    ) -> Result<StopReason, EngineError> {
        let ctx = self.context_size();
        let mut spec = Speculating::new(self.verify_capacity() - 1);
        let cancelled = cancel.load(Ordering::Relaxed);
        let mut id = match decoding.next(logits, self.history(), ctx, cancelled, on_token) {
            Next::Stop(reason) => return check_stop(reason, decoding),
            Next::Eval(id) => id,
        };
        loop {
            let next =
                self.speculative_pass(drafter, &mut spec, decoding, logits, id, on_token, cancel);
            *stats = spec.stats;
            match next? {
                Next::Eval(t) => id = t,
                Next::Stop(reason) => return check_stop(reason, decoding),
            }
        }
    }

    /// Whether [`Engine::speculate_sequence`] can run: a drafter is set and the engine was
    /// laid out for drafting (`EngineOptions::draft`).
    pub fn can_speculate(&self) -> bool {
        self.drafter.is_some() && self.verify_capacity() > 1
    }

    /// A fresh speculative state for one sequence (drafts as long as this engine verifies).
    pub fn speculating(&self) -> Speculating {
        Speculating::new(self.verify_capacity().saturating_sub(1).max(1))
    }

    /// Charges the keys and values of `seq` for the longest speculative step it may take (its
    /// tokens, plus [`Engine::verify_capacity`], at most the context): a budget error here
    /// leaves `seq` as it was, unlike one inside [`Engine::speculate_sequence`].
    pub fn reserve_speculation(&self, seq: &mut Sequence) -> Result<(), EngineError> {
        let n = (seq.len() + self.verify_capacity()).min(self.context_size());
        seq.kv.reserve(n)
    }

    /// One speculative step of `seq` (the server's, when it decodes one request alone): as
    /// [`Engine::speculative_pass`] on `seq`'s context, with the engine's drafter. Nothing is
    /// left to roll back after it (the copy [`Engine::eval_verify`] made is released). On
    /// error `seq` is emptied.
    #[allow(clippy::too_many_arguments)]
    pub fn speculate_sequence(
        &mut self,
        seq: &mut Sequence,
        spec: &mut Speculating,
        decoding: &mut Decoding<'_>,
        logits: &mut [f32],
        id: u32,
        on_token: &mut dyn FnMut(u32, &str),
        cancel: &AtomicBool,
    ) -> Result<Next, EngineError> {
        if !self.can_speculate() {
            return Err(EngineError::Invalid(
                "speculative decoding needs a drafter and an engine laid out for drafts".into(),
            ));
        }
        let mut drafter = self.drafter.take().expect("can_speculate saw a drafter");
        self.swap_context(seq);
        let next =
            self.speculative_pass(&mut drafter, spec, decoding, logits, id, on_token, cancel);
        self.saved = None;
        self.swap_context(seq);
        self.drafter = Some(drafter);
        if next.is_err() {
            seq.clear();
        }
        next
    }

    /// One pass with drafts on the engine's own context: evaluates `id` (the token just
    /// chosen, not yet evaluated) and a draft after it ([`Engine::eval_verify`]), then chooses
    /// each next token from its row, checking the draft's token there
    /// ([`Decoding::next_checking`]). The first that differs from the draft (or the one after
    /// a wholly accepted draft) is returned, to be evaluated by the next pass, and the context
    /// is rolled back to just before it; so is it when the generation ends.
    #[allow(clippy::too_many_arguments)]
    fn speculative_pass(
        &mut self,
        drafter: &mut Drafter,
        spec: &mut Speculating,
        decoding: &mut Decoding<'_>,
        logits: &mut [f32],
        id: u32,
        on_token: &mut dyn FnMut(u32, &str),
        cancel: &AtomicBool,
    ) -> Result<Next, EngineError> {
        let v = self.n_vocab();
        let ctx = self.context_size();
        let base = self.n_past();
        let mut context = Vec::with_capacity(base + 1 + spec.length.get());
        context.extend_from_slice(self.history());
        context.push(id);
        // No draft past the tokens still allowed or the context.
        let room = decoding.remaining().min(ctx.saturating_sub(base + 1));
        let read_before = drafter.model().map(|m| m.residency().bytes_read);
        // Tokens a rolled-back recurrent state still lacks ride in the same pass: together
        // no more than the verify capacity, so a run of rejected passes ends with one that
        // drafts nothing (and so is not rolled back) instead of growing.
        let redo = self.stale.map_or(0, |s| base - s);
        let k = spec
            .length
            .get()
            .min(room)
            .min(self.verify_capacity().saturating_sub(1 + redo));
        let draft = match drafter {
            Drafter::Mtp => self.draft_mtp(id, k)?,
            _ => drafter.draft(&context, k)?,
        };
        if let (Some(before), Some(m)) = (read_before, drafter.model()) {
            spec.stats.draft_bytes_read += m.residency().bytes_read.saturating_sub(before);
        }
        context.extend_from_slice(&draft);
        let rows = self.eval_verify(&context[base..])?.to_vec();
        spec.stats.passes += 1;
        spec.stats.drafted += draft.len() as u64;
        let mut accepted = 0;
        let mut outcome = Next::Stop(StopReason::Cancelled);
        for (i, row) in rows.chunks_exact(v).enumerate() {
            logits.copy_from_slice(row);
            // The last row follows the whole draft: nothing to check there.
            let d = draft.get(i).copied();
            let held = base + 1 + i;
            let cancelled = cancel.load(Ordering::Relaxed);
            let history = &self.history()[..held];
            match decoding.next_checking(logits, history, ctx, cancelled, on_token, d) {
                Next::Eval(t) if Some(t) == d => accepted += 1,
                next => {
                    self.rollback(held)?;
                    outcome = next;
                    break;
                }
            }
        }
        spec.stats.accepted += accepted as u64;
        if matches!(outcome, Next::Eval(_)) {
            spec.length.update(draft.len(), accepted);
        }
        Ok(outcome)
    }
}

/// `reason`, unless the grammar failed: then the grammar's error.
fn check_stop(reason: StopReason, decoding: &Decoding<'_>) -> Result<StopReason, EngineError> {
    if reason == StopReason::ConstraintFailed {
        let why = decoding.error().unwrap_or("the grammar failed");
        return Err(EngineError::Invalid(format!("grammar: {why}")));
    }
    Ok(reason)
}

/// A draft model's engine drafts greedily.
impl DraftModel for Engine {
    fn draft(&mut self, context: &[u32], k: usize) -> Result<Vec<u32>, EngineError> {
        draft_greedy(self, context, k)
    }

    fn residency(&self) -> &ResidencyStats {
        Engine::residency(self)
    }

    fn budget(&self) -> &MemoryBudget {
        Engine::budget(self)
    }
}

/// `k` tokens the draft engine picks greedily after `context`, keeping the longest prefix of
/// `context` it already holds (what it drafted and the target accepted).
fn draft_greedy(e: &mut Engine, context: &[u32], k: usize) -> Result<Vec<u32>, EngineError> {
    let common = e
        .history()
        .iter()
        .zip(context)
        .take_while(|(a, b)| a == b)
        .count();
    e.truncate_context(common.min(context.len() - 1));
    let held = e.n_past();
    let room = e.context_size().saturating_sub(context.len());
    let k = k.min(room);
    if k == 0 {
        return Ok(Vec::new());
    }
    let mut logits = e.eval(&context[held..])?.to_vec();
    let mut out = Vec::with_capacity(k);
    for i in 0..k {
        let t = argmax(&logits) as u32;
        out.push(t);
        if i + 1 < k {
            logits.copy_from_slice(e.eval(&[t])?);
        }
    }
    Ok(out)
}
