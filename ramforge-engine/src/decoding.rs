//! One sequence's sampling between passes: its sampler, stop strings, text decoder and the
//! tokens so far. [`Engine::generate`](crate::Engine::generate) and batched decoding (the
//! server's scheduler) both step it, so a sequence decoded with others stops and shows text
//! by exactly the same rules as one decoded alone.

use crate::constraint::Constraint;
use crate::sampling::{Logprobs, Sampler, SamplingParams, StopMatcher};
use crate::text::tokenizer::StreamDecoder;
use crate::text::Tokenizer;
use std::time::Instant;

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// An end-of-generation token (EOS, EOT, `<|im_end|>` ...) was sampled.
    EndOfGeneration,
    /// A user stop string appeared in the text.
    StopString,
    /// `max_tokens` were generated.
    MaxTokens,
    /// The context is full.
    ContextFull,
    /// The cancel flag was raised.
    Cancelled,
    /// The grammar constraint failed (a limit broken mid-generation): see
    /// [`Decoding::error`].
    ConstraintFailed,
}

/// What [`Decoding::next`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Evaluate this (sampled, shown) token and call `next` again with the logits after it.
    Eval(u32),
    /// Generation has ended; call [`Decoding::finish`].
    Stop(StopReason),
}

/// A generation in progress on one sequence.
pub struct Decoding<'t> {
    tokenizer: &'t Tokenizer,
    sampler: Sampler,
    stops: StopMatcher,
    decoder: StreamDecoder<'t>,
    max_tokens: usize,
    ignore_eos: bool,
    tokens: Vec<u32>,
    text: String,
    constraint: Option<Constraint>,
    /// Seconds spent computing, applying and advancing the constraint's mask.
    constraint_secs: f64,
    error: Option<String>,
}

impl<'t> Decoding<'t> {
    /// A generation under `params` (already validated) that has generated nothing yet.
    pub fn new(tokenizer: &'t Tokenizer, params: &SamplingParams) -> Decoding<'t> {
        Decoding {
            tokenizer,
            sampler: Sampler::new(params),
            stops: StopMatcher::new(&params.stop),
            decoder: if params.show_control_tokens {
                tokenizer.decoder().with_control_tokens()
            } else {
                tokenizer.decoder()
            },
            max_tokens: params.max_tokens,
            ignore_eos: params.ignore_eos,
            tokens: Vec::new(),
            text: String::new(),
            constraint: None,
            constraint_secs: 0.0,
            error: None,
        }
    }

    /// The same generation, sampling only what `constraint` allows: each step's logits are
    /// masked before the sampler sees them, and the generation ends when the grammar is
    /// complete. Constrained and free sequences decode side by side in one batched step; only
    /// their sampling differs.
    pub fn constrained(mut self, constraint: Constraint) -> Decoding<'t> {
        self.constraint = Some(constraint);
        self
    }

    /// Samples the next token from `logits` (those that follow `history`, the sequence's whole
    /// context of at most `ctx` positions) and shows its text through `on_token(id, text)`
    /// (empty while text is held back), or says why generation ends first.
    pub fn next(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
        ctx: usize,
        cancelled: bool,
        on_token: &mut dyn FnMut(u32, &str),
    ) -> Next {
        self.next_checking(logits, history, ctx, cancelled, on_token, None)
    }

    /// [`Decoding::next`] where `draft` was proposed for this position (speculative
    /// decoding): the token is chosen by [`Sampler::sample_draft`], so it follows the same
    /// distribution as without a draft; it equals `draft` when the draft is accepted.
    pub fn next_checking(
        &mut self,
        logits: &mut [f32],
        history: &[u32],
        ctx: usize,
        cancelled: bool,
        on_token: &mut dyn FnMut(u32, &str),
        draft: Option<u32>,
    ) -> Next {
        if cancelled {
            return Next::Stop(StopReason::Cancelled);
        }
        if self.tokens.len() >= self.max_tokens {
            return Next::Stop(StopReason::MaxTokens);
        }
        if let Some(c) = &mut self.constraint {
            if c.is_stopped() {
                return Next::Stop(StopReason::EndOfGeneration);
            }
            let started = Instant::now();
            let masked = c.mask(logits);
            self.constraint_secs += started.elapsed().as_secs_f64();
            if let Err(e) = masked {
                self.error = Some(e);
                return Next::Stop(StopReason::ConstraintFailed);
            }
        }
        let id = self.sampler.sample_draft(logits, history, draft);
        if !self.ignore_eos && self.tokenizer.is_eog(id) {
            return Next::Stop(StopReason::EndOfGeneration);
        }
        if let Some(c) = &mut self.constraint {
            let started = Instant::now();
            let committed = c.commit(id);
            self.constraint_secs += started.elapsed().as_secs_f64();
            if let Err(e) = committed {
                self.error = Some(e);
                return Next::Stop(StopReason::ConstraintFailed);
            }
        }
        self.tokens.push(id);
        let (shown, hit) = self.stops.push(&self.decoder.push(id));
        self.text.push_str(&shown);
        on_token(id, &shown);
        if hit {
            return Next::Stop(StopReason::StopString);
        }
        if history.len() >= ctx {
            return Next::Stop(StopReason::ContextFull);
        }
        Next::Eval(id)
    }

    /// The log-probabilities of the last sampled token, when the parameters asked for them.
    pub fn logprobs(&self) -> Option<&Logprobs> {
        self.sampler.last_logprobs()
    }

    /// Seconds this generation spent on its constraint: computing each step's mask, applying
    /// it to the logits and advancing past the sampled token (0 when unconstrained).
    pub fn constraint_secs(&self) -> f64 {
        self.constraint_secs
    }

    /// Why the constraint failed, after [`StopReason::ConstraintFailed`].
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Tokens that may still be generated (`max_tokens` less those generated).
    pub fn remaining(&self) -> usize {
        self.max_tokens.saturating_sub(self.tokens.len())
    }

    /// Tokens generated so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Ends the generation for `reason`: the text the decoder and the stop matcher held back is
    /// shown (unless a stop string ended it), reported with the last token's id. Returns the
    /// generated tokens and the whole text shown.
    pub fn finish(
        mut self,
        reason: StopReason,
        on_token: &mut dyn FnMut(u32, &str),
    ) -> (Vec<u32>, String) {
        if reason != StopReason::StopString {
            let (shown, hit) = self.stops.push(&self.decoder.finish());
            let tail = if hit {
                shown
            } else {
                shown + &self.stops.finish()
            };
            if !tail.is_empty() {
                self.text.push_str(&tail);
                on_token(*self.tokens.last().unwrap_or(&0), &tail);
            }
        }
        (self.tokens, self.text)
    }
}
