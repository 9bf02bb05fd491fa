//! Answering one generation request: the prompt as tokens (chat template or plain text, as
//! `run --chat` and `run` make them), checked against the context, queued to the engine, then
//! collected into one JSON answer or streamed as server-sent events ending in `[DONE]`.

use super::api::{GenRequest, Prompt};
use super::errors::ApiError;
use super::reply::{Reply, Usage};
use super::state::State;
use super::worker::{CancelOnDrop, Event};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ramforge_engine::{Constraint, Grammar, StopReason};
use serde_json::Value;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;

/// Generates for `request` and answers, whole or streamed.
pub async fn answer(state: Arc<State>, request: GenRequest) -> Result<Response, ApiError> {
    let GenRequest {
        endpoint,
        model,
        prompt,
        max_tokens,
        mut params,
        stream,
        include_usage,
        grammar,
    } = request;
    let constraint = match grammar {
        None => None,
        Some(g) => Some(compile(&state, g).await?),
    };
    let tokens = prompt_tokens(Arc::clone(&state), prompt).await?;
    let room = state.ctx.saturating_sub(tokens.len());
    if room == 0 {
        return Err(ApiError::invalid(
            Some(prompt_param(endpoint)),
            format!(
                "the prompt is {} tokens, which leaves no room in the context of {} tokens for a reply",
                tokens.len(),
                state.ctx
            ),
        )
        .with_code("context_length_exceeded"));
    }
    // A longer ask is cut to the room left (and says so: finish_reason "length").
    params.max_tokens = max_tokens.map_or(room, |n| n.min(room));
    let wants_logprobs = params.logprobs.is_some();
    let (events, guard) = state.queue.submit(tokens, params, constraint)?;
    let mut reply = Reply::new(endpoint, &model);
    reply.wants_logprobs = wants_logprobs;
    if stream {
        Ok(streamed(reply, events, guard, include_usage).into_response())
    } else {
        whole(reply, events, guard).await
    }
}

/// Compiles a `response_format` off the async threads, under the grammar limits (a 400 names
/// the limit a grammar broke).
async fn compile(state: &Arc<State>, grammar: Grammar) -> Result<Constraint, ApiError> {
    let state = Arc::clone(state);
    tokio::task::spawn_blocking(move || {
        let compiler = state
            .grammars
            .get_or_init(|| {
                ramforge_engine::GrammarCompiler::new(Arc::clone(&state.tokenizer)).map(Arc::new)
            })
            .clone()
            .map_err(|e| format!("constrained output is off for this model: {e}"))?;
        compiler.compile(&grammar)
    })
    .await
    .map_err(|e| ApiError::internal(format!("compiling the grammar failed: {e}")))?
    .map_err(|e| {
        ApiError::invalid(Some("response_format"), format!("response_format: {e}"))
            .with_code("invalid_grammar")
    })
}

fn prompt_param(endpoint: super::api::Endpoint) -> &'static str {
    match endpoint {
        super::api::Endpoint::Chat => "messages",
        super::api::Endpoint::Completion => "prompt",
    }
}

/// The prompt's token ids, made off the async threads (a long prompt takes a while).
async fn prompt_tokens(state: Arc<State>, prompt: Prompt) -> Result<Vec<u32>, ApiError> {
    let tokens = tokio::task::spawn_blocking(move || match prompt {
        Prompt::Text(text) => Ok(state.tokenizer.encode(&text, true, true)),
        Prompt::Chat(messages) => {
            let chat = state.chat.as_ref().ok_or_else(|| {
                ApiError::invalid(
                    Some("messages"),
                    "the model has no chat template: use /v1/completions, or start the server with --template FILE",
                )
            })?;
            chat.tokens(&state.tokenizer, &messages)
                .map_err(|e| ApiError::invalid(Some("messages"), format!("the chat template failed: {e}")))
        }
    })
    .await
    .map_err(|e| ApiError::internal(format!("tokenizing the prompt failed: {e}")))??;
    if tokens.is_empty() {
        return Err(ApiError::invalid(None, "the prompt has no tokens"));
    }
    Ok(tokens)
}

/// Waits for the whole generation. Dropping this future (the client hung up) drops the guard,
/// which stops the engine.
async fn whole(
    reply: Reply,
    mut events: UnboundedReceiver<Event>,
    _guard: CancelOnDrop,
) -> Result<Response, ApiError> {
    let mut text = String::new();
    let mut logprobs = Vec::new();
    while let Some(event) = events.recv().await {
        match event {
            Event::Text(t) => text.push_str(&t),
            Event::Logprob(lp, bytes, top) => logprobs.push((lp, bytes, top)),
            Event::Done(Ok((reason, usage))) => {
                let lps = reply.wants_logprobs.then_some(logprobs.as_slice());
                return Ok(Json(reply.whole(&text, lps, reason, usage)).into_response());
            }
            Event::Done(Err(e)) => return Err(ApiError::internal(e)),
        }
    }
    Err(ApiError::internal(
        "the engine stopped before the reply was finished",
    ))
}

/// The stream's state: the engine's events, what is ready to send, and the cancel guard
/// (dropped with the stream when the client hangs up).
struct Streaming {
    reply: Reply,
    events: UnboundedReceiver<Event>,
    ready: VecDeque<String>,
    done: bool,
    include_usage: bool,
    _guard: CancelOnDrop,
}

impl Streaming {
    /// Turns one engine event into the chunks to send.
    fn take(&mut self, event: Option<Event>) {
        match event {
            Some(Event::Text(t)) => self.push(self.reply.text_chunk(&t)),
            Some(Event::Logprob(lp, bytes, top)) => {
                self.push(self.reply.logprob_chunk(&[(lp, bytes, top)]))
            }
            Some(Event::Done(Ok((reason, usage)))) => self.close(reason, usage),
            Some(Event::Done(Err(e))) => {
                self.push(ApiError::internal(e).body());
                self.done = true;
            }
            None => {
                let e = ApiError::internal("the engine stopped before the reply was finished");
                self.push(e.body());
                self.done = true;
            }
        }
    }

    fn close(&mut self, reason: StopReason, usage: Usage) {
        self.push(self.reply.closing_chunk(reason));
        if self.include_usage {
            self.push(self.reply.usage_chunk(usage));
        }
        self.ready.push_back("[DONE]".into());
        self.done = true;
    }

    fn push(&mut self, chunk: Value) {
        self.ready.push_back(chunk.to_string());
    }
}

/// The answer as server-sent events: `data: {chunk}` lines, then `data: [DONE]`.
fn streamed(
    reply: Reply,
    events: UnboundedReceiver<Event>,
    guard: CancelOnDrop,
    include_usage: bool,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let mut state = Streaming {
        reply,
        events,
        ready: VecDeque::new(),
        done: false,
        include_usage,
        _guard: guard,
    };
    if let Some(first) = state.reply.opening_chunk() {
        state.push(first);
    }
    let chunks = futures_util::stream::unfold(state, |mut s| async move {
        while s.ready.is_empty() && !s.done {
            let event = s.events.recv().await;
            s.take(event);
        }
        let data = s.ready.pop_front()?;
        Some((Ok(SseEvent::default().data(data)), s))
    });
    Sse::new(chunks)
}
