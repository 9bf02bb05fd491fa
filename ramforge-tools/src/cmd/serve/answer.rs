//! Answering one generation request: the prompt as tokens (chat template or plain text, as
//! `run --chat` and `run` make them), checked against the context, queued to the engine, then
//! collected into one JSON answer or streamed as server-sent events ending in `[DONE]`.

use super::api::{Endpoint, GenRequest, Prompt};
use super::errors::ApiError;
use super::reply::{Reply, Usage};
use super::state::State;
use super::worker::{CancelOnDrop, Event};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use ramforge_engine::text::tokenizer::TokenKind;
use ramforge_engine::text::Tokenizer;
use ramforge_engine::{Constraint, Grammar, StopReason};
use ramforge_tools::openai::tools::{
    call_grammar, has_tool_turns, parse_output, plain_messages, OutputParser, Piece, ToolCall,
    ToolChoice, ToolFormat, Tools,
};
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
        tools,
        reasoning_inline,
    } = request;
    // `tool_choice: none`: the tools are not shown, and nothing is parsed as a call.
    let tools = tools.filter(|t| t.choice != ToolChoice::None);
    let prepared = prompt_tokens(Arc::clone(&state), prompt, tools.clone()).await?;
    let tokens = prepared.tokens;
    let parallel = tools.as_ref().is_none_or(|t| t.parallel);
    let (grammar, grammar_param) = match (&tools, prepared.format) {
        (Some(t), Some(format))
            if matches!(t.choice, ToolChoice::Required | ToolChoice::Named(_)) =>
        {
            (Some(forced_call(&state.tokenizer, t, format)?), "tools")
        }
        _ => (grammar, "response_format"),
    };
    let constraint = match grammar {
        None => None,
        Some(g) => Some(compile(&state, g, grammar_param).await?),
    };
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
    let template = prepared.template.as_deref().unwrap_or("");
    let harmony = template.contains("<|channel|>");
    let reasoning = !reasoning_inline;
    let thinks = harmony || template.contains("</think>") || prepared.thinking;
    let parser = (endpoint == Endpoint::Chat && (tools.is_some() || thinks)).then(|| {
        let format = tools.as_ref().and(prepared.format);
        OutputParser::new(format, reasoning, prepared.thinking, harmony)
    });
    params.show_control_tokens = parser.is_some()
        && (harmony
            || prepared
                .format
                .is_some_and(ToolFormat::shows_control_tokens));
    let wants_logprobs = params.logprobs.is_some();
    let (events, guard) = state.queue.submit(tokens, params, constraint)?;
    let mut reply = Reply::new(endpoint, &model);
    reply.wants_logprobs = wants_logprobs;
    if stream {
        Ok(streamed(reply, events, guard, include_usage, parser, parallel).into_response())
    } else {
        whole(reply, events, guard, parser, parallel).await
    }
}

/// The grammar of a required call (`tool_choice` required or a named function) in the
/// template's convention, its arguments held to the function's parameters schema.
fn forced_call(
    tokenizer: &Tokenizer,
    tools: &Tools,
    format: ToolFormat,
) -> Result<Grammar, ApiError> {
    let functions: Vec<_> = match &tools.choice {
        ToolChoice::Named(name) => tools.functions.iter().filter(|f| &f.name == name).collect(),
        _ => tools.functions.iter().collect(),
    };
    // A text that is one control token is written as that token in the grammar.
    let special = |text: &str| {
        let ids = tokenizer.encode(text, false, true);
        match ids.as_slice() {
            [id] if matches!(tokenizer.token_kind(*id), Some(TokenKind::Control)) => Some(*id),
            _ => None,
        }
    };
    call_grammar(format, &functions, &special)
        .map(Grammar::Lark)
        .map_err(|e| {
            ApiError::invalid(Some("tool_choice"), format!("tool_choice: {e}"))
                .with_code("invalid_grammar")
        })
}

/// Compiles a `response_format` off the async threads, under the grammar limits (a 400 names
/// the limit a grammar broke).
async fn compile(
    state: &Arc<State>,
    grammar: Grammar,
    param: &'static str,
) -> Result<Constraint, ApiError> {
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
        ApiError::invalid(Some(param), format!("{param}: {e}")).with_code("invalid_grammar")
    })
}

fn prompt_param(endpoint: Endpoint) -> &'static str {
    match endpoint {
        Endpoint::Chat => "messages",
        Endpoint::Completion => "prompt",
    }
}

/// A prompt made ready: its tokens, and what the chat template says of the output.
struct Prepared {
    tokens: Vec<u32>,
    /// The template's tool-call convention (Hermes when it renders no tools itself).
    format: Option<ToolFormat>,
    /// The chat template (none for completions).
    template: Option<String>,
    /// The prompt ends inside `<think>` (DeepSeek R1's template opens it).
    thinking: bool,
}

/// The prompt's token ids, made off the async threads (a long prompt takes a while). Tools
/// and tool turns go through the template's `tools` variable and messages when it renders
/// them, and are written into the conversation as text otherwise.
async fn prompt_tokens(
    state: Arc<State>,
    prompt: Prompt,
    tools: Option<Tools>,
) -> Result<Prepared, ApiError> {
    let prepared = tokio::task::spawn_blocking(move || match prompt {
        Prompt::Text(text) => Ok(Prepared {
            tokens: state.tokenizer.encode(&text, true, true),
            format: None,
            template: None,
            thinking: false,
        }),
        Prompt::Chat(messages) => {
            let chat = state.chat.as_ref().ok_or_else(|| {
                ApiError::invalid(
                    Some("messages"),
                    "the model has no chat template: use /v1/completions, or start the server with --template FILE",
                )
            })?;
            let template = chat.template();
            let own = ToolFormat::of_template(template);
            let (messages, shown) = match own {
                Some(_) => (messages, tools.as_ref().map(|t| &t.list)),
                None if tools.is_some() || has_tool_turns(&messages) => {
                    (plain_messages(messages, tools.as_ref()), None)
                }
                None => (messages, None),
            };
            let (rendered, tokens) = chat
                .prompt(&state.tokenizer, &messages, shown)
                .map_err(|e| ApiError::invalid(Some("messages"), format!("the chat template failed: {e}")))?;
            Ok(Prepared {
                tokens,
                format: Some(own.unwrap_or(ToolFormat::Hermes)),
                template: Some(template.to_string()),
                thinking: rendered.trim_end().ends_with("<think>"),
            })
        }
    })
    .await
    .map_err(|e| ApiError::internal(format!("tokenizing the prompt failed: {e}")))??;
    if prepared.tokens.is_empty() {
        return Err(ApiError::invalid(None, "the prompt has no tokens"));
    }
    Ok(prepared)
}

/// Waits for the whole generation. Dropping this future (the client hung up) drops the guard,
/// which stops the engine.
async fn whole(
    reply: Reply,
    mut events: UnboundedReceiver<Event>,
    _guard: CancelOnDrop,
    parser: Option<OutputParser>,
    parallel: bool,
) -> Result<Response, ApiError> {
    let mut text = String::new();
    let mut logprobs = Vec::new();
    while let Some(event) = events.recv().await {
        match event {
            Event::Text(t) => text.push_str(&t),
            Event::Logprob(lp, bytes, top) => logprobs.push((lp, bytes, top)),
            Event::Done(Ok((reason, usage))) => {
                let lps = reply.wants_logprobs.then_some(logprobs.as_slice());
                let body = match parser {
                    None => reply.whole(&text, lps, reason, usage),
                    Some(p) => {
                        let (content, reasoning, mut calls) = parse_output(p, &text);
                        if !parallel {
                            calls.truncate(1);
                        }
                        reply.whole_chat(
                            content.as_deref(),
                            reasoning.as_deref(),
                            &calls,
                            lps,
                            reason,
                            usage,
                        )
                    }
                };
                return Ok(Json(body).into_response());
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
    /// Splits the text into content, reasoning and tool calls (chat with tools or thinking).
    parser: Option<OutputParser>,
    parallel: bool,
    _guard: CancelOnDrop,
}

impl Streaming {
    /// Turns one engine event into the chunks to send.
    fn take(&mut self, event: Option<Event>) {
        match event {
            Some(Event::Text(t)) => match &mut self.parser {
                None => self.push(self.reply.text_chunk(&t)),
                Some(p) => {
                    let pieces = p.push(&t);
                    self.pieces(pieces);
                }
            },
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

    fn pieces(&mut self, pieces: Vec<Piece>) {
        for piece in pieces {
            let chunk = match piece {
                Piece::Content(t) => self.reply.text_chunk(&t),
                Piece::Reasoning(t) => self.reply.reasoning_chunk(&t),
            };
            self.push(chunk);
        }
    }

    fn close(&mut self, reason: StopReason, usage: Usage) {
        let mut calls: Vec<ToolCall> = Vec::new();
        if let Some(p) = self.parser.take() {
            let (pieces, found) = p.finish();
            self.pieces(pieces);
            calls = found;
            if !self.parallel {
                calls.truncate(1);
            }
        }
        for (i, call) in calls.iter().enumerate() {
            self.push(self.reply.tool_call_chunk(i, call));
        }
        self.push(self.reply.closing_chunk(reason, !calls.is_empty()));
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
    parser: Option<OutputParser>,
    parallel: bool,
) -> Sse<impl futures_util::Stream<Item = Result<SseEvent, Infallible>>> {
    let mut state = Streaming {
        reply,
        events,
        ready: VecDeque::new(),
        done: false,
        include_usage,
        parser,
        parallel,
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
