//! The engine's thread: decodes up to `--parallel` requests together.
//!
//! Between decoding steps it admits queued requests: each goes to the free slot whose kept
//! context shares the longest prefix with its prompt (as llama-server does), so a
//! conversation's next turn prefills only its new tokens; the rest of that slot's context is
//! dropped. Then one batched step ([`Engine::decode_batch`]) serves every active request: one
//! pass over the weights, each row sampled with its own sampler. Text goes back as it is
//! produced; a request whose client is gone is stopped (or skipped, if still queued). A
//! finished request's keys and values stay in its slot (the plan booked a whole context for
//! every slot), to be reused or dropped by the next request the slot takes.
//!
//! With `--lookup` or `--draft`, a step with one request active is a speculative one instead
//! ([`Engine::speculate_sequence`]): a draft, checked in one pass over the weights, accepted
//! as `run` accepts it (greedy output token for token that of plain decoding). Several active
//! requests already share each pass, so they step plainly. A request asking for logprobs
//! always decodes plainly (one logprob event per token, after its own step).

use super::job::Job;
use super::metrics::Telemetry;
use super::reply::Usage;
use ramforge_engine::text::Tokenizer;
use ramforge_engine::{Decoding, Engine, EngineError, Next, Sequence, Speculating, StopReason};
use std::cmp::Reverse;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::sync::Arc;

/// The most requests one decoding step has served (`/health` shows it).
#[derive(Default)]
pub struct Busiest(AtomicUsize);

impl Busiest {
    /// The most so far.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    fn saw(&self, n: usize) {
        self.0.fetch_max(n, Ordering::Relaxed);
    }
}

/// A sequence slot: its context (kept after its request ends) and when it was last used.
struct Slot {
    seq: Sequence,
    busy: bool,
    last_used: u64,
}

/// A request being decoded in slot `slot`.
struct Active<'t> {
    job: Job,
    slot: usize,
    decoding: Decoding<'t>,
    /// The token to evaluate in the next step.
    next: u32,
    usage: Usage,
    /// Its speculative decoding, when the server drafts and the request may take drafts.
    spec: Option<Speculating>,
}

/// Runs jobs from `jobs` until every sender is gone and nothing is left; returns the engine.
pub fn serve_jobs(
    mut engine: Engine,
    jobs: Receiver<Job>,
    busiest: &Busiest,
    telemetry: &Telemetry,
) -> Engine {
    // Only the slots hold contexts: the engine's own is one of the caches the plan booked.
    engine.reset();
    let tokenizer = Arc::clone(&engine.model().tokenizer);
    let mut slots: Vec<Slot> = (0..engine.max_sequences())
        .map(|_| Slot {
            seq: engine.new_sequence(),
            busy: false,
            last_used: 0,
        })
        .collect();
    let mut active: Vec<Active> = Vec::new();
    let mut row = vec![0f32; engine.n_vocab()];
    let mut clock = 0u64;
    let mut open = true;
    loop {
        // Admit what waits, between steps.
        while open && active.len() < slots.len() {
            let job = if active.is_empty() {
                jobs.recv().ok()
            } else {
                match jobs.try_recv() {
                    Ok(job) => Some(job),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => None,
                }
            };
            let Some(job) = job else {
                open = false;
                break;
            };
            if job.abandoned() {
                continue; // its client left while it waited
            }
            clock += 1;
            if let Some(a) = admit(&mut engine, &mut slots, job, &tokenizer, clock, telemetry) {
                active.push(a);
            }
            telemetry.set_active(active.len());
        }
        if active.is_empty() {
            if open {
                continue;
            }
            drop(slots);
            return engine;
        }
        // One step for every active request, rows in slot order.
        active.sort_by_key(|a| a.slot);
        busiest.saw(active.len());
        if active.len() == 1
            && active[0].spec.is_some()
            && speculative_room(&engine, &mut slots, active[0].slot)
        {
            let mut a = active.pop().expect("one active request");
            let seq = &mut slots[a.slot].seq;
            match speculative_step(&mut engine, seq, &mut a, &mut row, telemetry) {
                Ok(Next::Eval(t)) => {
                    a.next = t;
                    active.push(a);
                }
                Ok(Next::Stop(reason)) => {
                    let slot = &mut slots[a.slot];
                    (slot.busy, slot.last_used) = (false, clock);
                    telemetry.set_active(0);
                    finish(a.job, a.decoding, reason, a.usage, a.spec, telemetry);
                }
                Err(e) => {
                    let slot = &mut slots[a.slot];
                    (slot.busy, slot.last_used) = (false, clock);
                    slot.seq.clear();
                    telemetry.set_active(0);
                    a.job.done(Err(e.to_string()));
                }
            }
            continue;
        }
        let tokens: Vec<u32> = active.iter().map(|a| a.next).collect();
        let mut seqs: Vec<&mut Sequence> = slots
            .iter_mut()
            .filter(|s| s.busy)
            .map(|s| &mut s.seq)
            .collect();
        let mut result = engine.decode_batch(&mut seqs, &tokens).map(|_| ());
        drop(seqs);
        if matches!(result, Err(EngineError::Budget(_))) && evict_idle(&mut slots, usize::MAX) {
            let mut seqs: Vec<&mut Sequence> = slots
                .iter_mut()
                .filter(|s| s.busy)
                .map(|s| &mut s.seq)
                .collect();
            result = engine.decode_batch(&mut seqs, &tokens).map(|_| ());
        }
        if result.is_ok() {
            telemetry.stepped(&engine, tokens.len());
        }
        let logits = match result {
            Ok(()) => engine.batch_logits(tokens.len()),
            Err(e) => {
                // Nothing grew; the requests of this step fail with the engine's error.
                let message = e.to_string();
                telemetry.set_active(0);
                for a in active.drain(..) {
                    let slot = &mut slots[a.slot];
                    (slot.busy, slot.last_used) = (false, clock);
                    slot.seq.clear();
                    a.job.done(Err(message.clone()));
                }
                continue;
            }
        };
        let v = row.len();
        let ctx = engine.context_size();
        let mut finished = Vec::new();
        for (i, a) in active.iter_mut().enumerate() {
            row.copy_from_slice(&logits[i * v..(i + 1) * v]);
            let history = slots[a.slot].seq.tokens();
            let cancelled = a.job.cancel.load(Ordering::Relaxed);
            let job = &a.job;
            let before = a.decoding.tokens().len();
            let next = a
                .decoding
                .next(&mut row, history, ctx, cancelled, &mut |_, t| job.text(t));
            send_logprob(job, &a.decoding, before, &tokenizer);
            match next {
                Next::Eval(t) => a.next = t,
                Next::Stop(reason) => finished.push((i, reason)),
            }
        }
        for (i, reason) in finished.into_iter().rev() {
            let a = active.remove(i);
            let slot = &mut slots[a.slot];
            (slot.busy, slot.last_used) = (false, clock);
            // Before the answer goes out, so a client that reads /metrics next sees it done.
            telemetry.set_active(active.len());
            finish(a.job, a.decoding, reason, a.usage, a.spec, telemetry);
        }
    }
}

/// Whether the keys and values of the speculative step of `slot` can be charged (dropping
/// the idle slots' kept contexts if needed); if not, the step is a plain one.
fn speculative_room(engine: &Engine, slots: &mut [Slot], slot: usize) -> bool {
    if engine.reserve_speculation(&mut slots[slot].seq).is_ok() {
        return true;
    }
    evict_idle(slots, slot) && engine.reserve_speculation(&mut slots[slot].seq).is_ok()
}

/// One speculative step of the one active request `a`, its context `seq`: the tokens it
/// accepted are sent as they are chosen; returns the next token to evaluate, or why it ends.
fn speculative_step(
    engine: &mut Engine,
    seq: &mut Sequence,
    a: &mut Active<'_>,
    row: &mut [f32],
    telemetry: &Telemetry,
) -> Result<Next, EngineError> {
    let spec = a.spec.as_mut().expect("a speculating request");
    let before = spec.stats;
    let job = &a.job;
    let next = engine.speculate_sequence(
        seq,
        spec,
        &mut a.decoding,
        row,
        a.next,
        &mut |_, t| job.text(t),
        &job.cancel,
    );
    let after = spec.stats;
    if after.passes > before.passes {
        let drafted = after.drafted - before.drafted;
        telemetry.stepped(engine, 1 + drafted as usize);
        telemetry.speculated(drafted, after.accepted - before.accepted);
    }
    next
}

/// Prefills `job` in the free slot whose context shares the longest prefix with its prompt
/// (the least recently used among equals) and samples its first token. `None` when it ended
/// there (an error, a cancel, or a first token that stops it): it has had its answer.
fn admit<'t>(
    engine: &mut Engine,
    slots: &mut [Slot],
    mut job: Job,
    tokenizer: &'t Tokenizer,
    clock: u64,
    telemetry: &Telemetry,
) -> Option<Active<'t>> {
    let prompt = &job.prompt;
    if let Err(e) = job.params.validate() {
        job.done(Err(EngineError::Invalid(e).to_string()));
        return None;
    }
    let ctx = engine.context_size();
    if prompt.len() > ctx {
        let e = EngineError::ContextOverflow {
            prompt: prompt.len(),
            needed: prompt.len() + job.params.max_tokens,
            ctx,
        };
        job.done(Err(e.to_string()));
        return None;
    }
    let index = slots
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.busy)
        .max_by_key(|(_, s)| (s.seq.common_prefix(prompt), Reverse(s.last_used)))
        .map(|(i, _)| i)
        .expect("a request is admitted only while a slot is free");
    let mut result = engine.prefill(&mut slots[index].seq, prompt, &job.cancel);
    if matches!(result, Err(EngineError::Budget(_))) && evict_idle(slots, index) {
        result = engine.prefill(&mut slots[index].seq, prompt, &job.cancel);
    }
    let cached = match result {
        Ok(Some(cached)) => cached,
        Ok(None) => {
            let usage = Usage {
                prompt_tokens: prompt.len(),
                cached_tokens: 0,
                completion_tokens: 0,
                speculation: None,
            };
            job.done(Ok((StopReason::Cancelled, usage)));
            return None;
        }
        Err(e) => {
            job.done(Err(e.to_string()));
            return None;
        }
    };
    telemetry.prefilled(engine, prompt.len(), cached);
    let slot = &mut slots[index];
    slot.last_used = clock;
    let usage = Usage {
        prompt_tokens: prompt.len(),
        cached_tokens: cached,
        completion_tokens: 0,
        speculation: None,
    };
    // Logprobs go out one event per step: such a request decodes plainly.
    let spec =
        (engine.can_speculate() && job.params.logprobs.is_none()).then(|| engine.speculating());
    let mut decoding = Decoding::new(tokenizer, &job.params);
    if let Some(c) = job.constraint.take() {
        decoding = decoding.constrained(c);
    }
    let mut logits = engine.logits().to_vec();
    let cancelled = job.cancel.load(Ordering::Relaxed);
    let first = decoding.next(
        &mut logits,
        slot.seq.tokens(),
        ctx,
        cancelled,
        &mut |_, t| job.text(t),
    );
    send_logprob(&job, &decoding, 0, tokenizer);
    match first {
        Next::Eval(next) => {
            slot.busy = true;
            Some(Active {
                job,
                slot: index,
                decoding,
                next,
                usage,
                spec,
            })
        }
        Next::Stop(reason) => {
            finish(job, decoding, reason, usage, spec, telemetry);
            None
        }
    }
}

/// Drops the kept contexts of the free slots but `except`, for a sequence the budget has no
/// room for; whether any was dropped.
fn evict_idle(slots: &mut [Slot], except: usize) -> bool {
    let mut any = false;
    for (i, s) in slots.iter_mut().enumerate() {
        if i != except && !s.busy && !s.seq.is_empty() {
            s.seq.clear();
            any = true;
        }
    }
    any
}

/// Sends the log-probabilities of the token the last step generated, if it generated one and
/// they were asked for.
fn send_logprob(job: &Job, decoding: &Decoding<'_>, before: usize, tokenizer: &Tokenizer) {
    if decoding.tokens().len() == before {
        return;
    }
    if let Some(lp) = decoding.logprobs() {
        let bytes = tokenizer.token_bytes(lp.chosen.id);
        let top = lp.top.iter().map(|t| tokenizer.token_bytes(t.id)).collect();
        job.logprob(lp.clone(), bytes, top);
    }
}

/// Shows what the generation held back and ends the job.
fn finish(
    job: Job,
    decoding: Decoding<'_>,
    reason: StopReason,
    mut usage: Usage,
    spec: Option<Speculating>,
    telemetry: &Telemetry,
) {
    usage.speculation = spec.map(|s| s.stats);
    if reason == StopReason::ConstraintFailed {
        let why = decoding.error().unwrap_or("the grammar failed").to_string();
        job.done(Err(format!("response_format: {why}")));
        return;
    }
    let (tokens, _) = decoding.finish(reason, &mut |_, t| job.text(t));
    usage.completion_tokens = tokens.len();
    telemetry.finished(tokens.len());
    job.done(Ok((reason, usage)));
}
