//! The OpenAI request bodies of `/v1/chat/completions` and `/v1/completions`, read strictly
//! into one [`GenRequest`]: what the sampler can do is mapped to [`SamplingParams`], a feature
//! it cannot do is a 400 naming the field (unless its value asks for nothing, e.g. `n: 1`), and
//! an unknown field is a 400 too.

use super::errors::ApiError;
use super::fields::{is_off, is_one, Fields};
use ramforge_engine::text::prompt::message;
use ramforge_engine::text::ChatMessage;
use ramforge_engine::SamplingParams;
use serde_json::Value;

/// Which endpoint a request came to (the shapes of its answer differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
}

/// What to generate from.
pub enum Prompt {
    /// A conversation, rendered with the model's chat template (as `run --chat` does).
    Chat(Vec<ChatMessage>),
    /// Plain text, tokenized with BOS per the model (as `run` does).
    Text(String),
}

/// One generation request, as read from either endpoint.
pub struct GenRequest {
    pub endpoint: Endpoint,
    pub model: String,
    pub prompt: Prompt,
    /// The most tokens asked for; `None`: as many as the context holds.
    pub max_tokens: Option<usize>,
    /// Sampling (its `max_tokens` is set once the prompt's length is known).
    pub params: SamplingParams,
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with the usage.
    pub include_usage: bool,
}

/// Most stop strings, as OpenAI allows.
const MAX_STOPS: usize = 4;

/// Reads a `/v1/chat/completions` body.
pub fn chat_request(body: Value) -> Result<GenRequest, ApiError> {
    let mut f = Fields::of(body, "", String::new())?;
    let messages = messages(&mut f)?;
    let max_tokens = match (
        f.uint("max_tokens", 1)?,
        f.uint("max_completion_tokens", 1)?,
    ) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                Some("max_tokens"),
                "give one of 'max_tokens' and 'max_completion_tokens', not both",
            ))
        }
        (a, b) => a.or(b),
    };
    f.unsupported("logprobs", is_off, "log-probabilities are not reported")?;
    f.unsupported("top_logprobs", is_off, "log-probabilities are not reported")?;
    f.unsupported("tools", is_off, "tool calls are not implemented")?;
    f.unsupported("functions", is_off, "function calls are not implemented")?;
    let none = |v: &Value| v == "none";
    f.unsupported("tool_choice", none, "tool calls are not implemented")?;
    f.unsupported("function_call", none, "function calls are not implemented")?;
    // Says how tools may be called; there are none, so either value asks for nothing.
    f.bool("parallel_tool_calls")?;
    let text_format = |v: &Value| {
        v.get("type").is_some_and(|t| t == "text") && v.as_object().is_some_and(|o| o.len() == 1)
    };
    f.unsupported(
        "response_format",
        text_format,
        "only {\"type\": \"text\"} is produced",
    )?;
    let max_tokens = max_tokens.map(|n| n as usize);
    common(f, Endpoint::Chat, Prompt::Chat(messages), max_tokens)
}

/// Reads a `/v1/completions` body.
pub fn completion_request(body: Value) -> Result<GenRequest, ApiError> {
    let mut f = Fields::of(body, "", String::new())?;
    let prompt = match f.take("prompt") {
        None => return Err(f.missing("prompt")),
        Some(Value::String(s)) => s,
        Some(Value::Array(mut a)) if a.len() == 1 && a[0].is_string() => a
            .pop()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        Some(_) => {
            return Err(ApiError::invalid(
                Some("prompt"),
                "'prompt' must be a string (or a list of exactly one string)",
            ))
        }
    };
    // OpenAI's default for this endpoint.
    let max_tokens = Some(f.uint("max_tokens", 1)?.unwrap_or(16) as usize);
    f.unsupported("logprobs", is_off, "log-probabilities are not reported")?;
    f.unsupported("echo", is_off, "the prompt is not echoed")?;
    let empty = |v: &Value| v == "";
    f.unsupported(
        "suffix",
        empty,
        "insertion after a suffix is not implemented",
    )?;
    f.unsupported("best_of", is_one, "one completion is generated per request")?;
    common(f, Endpoint::Completion, Prompt::Text(prompt), max_tokens)
}

/// The fields both endpoints share, then the end of the body.
fn common(
    mut f: Fields,
    endpoint: Endpoint,
    prompt: Prompt,
    max_tokens: Option<usize>,
) -> Result<GenRequest, ApiError> {
    let model = f.required_string("model")?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = stream_options(&mut f, stream)?;
    let params = sampling(&mut f)?;
    f.unsupported("n", is_one, "one choice is generated per request")?;
    f.unsupported("logit_bias", is_off, "the sampler has no per-token bias")?;
    // An end-user id for the provider's abuse monitoring; it has no effect on the output.
    f.string("user")?;
    f.finish()?;
    Ok(GenRequest {
        endpoint,
        model,
        prompt,
        max_tokens,
        params,
        stream,
        include_usage,
    })
}

/// `stream_options`: only with `stream`, and only `include_usage`.
fn stream_options(f: &mut Fields, stream: bool) -> Result<bool, ApiError> {
    let Some(options) = f.take("stream_options") else {
        return Ok(false);
    };
    if !stream {
        return Err(ApiError::invalid(
            Some("stream_options"),
            "'stream_options' is only allowed when 'stream' is true",
        ));
    }
    let mut o = Fields::of(options, "stream_options", "stream_options.".into())?;
    let include_usage = o.bool("include_usage")?.unwrap_or(false);
    o.finish()?;
    Ok(include_usage)
}

/// The sampler's fields. OpenAI's defaults: temperature 1, top_p 1, a fresh seed; top_k,
/// min_p and repeat_penalty (llama.cpp's extensions) default to off.
fn sampling(f: &mut Fields) -> Result<SamplingParams, ApiError> {
    let temperature = f.number("temperature", 0.0, 2.0)?.unwrap_or(1.0) as f32;
    let top_p = f.number("top_p", 0.0, 1.0)?.unwrap_or(1.0) as f32;
    if top_p <= 0.0 {
        return Err(ApiError::invalid(Some("top_p"), "'top_p' must be above 0"));
    }
    let top_k = f.uint("top_k", 0)?.unwrap_or(0) as usize;
    let min_p = f.number("min_p", 0.0, 1.0)?.unwrap_or(0.0) as f32;
    let repeat_penalty = f
        .number("repeat_penalty", f64::MIN_POSITIVE, f64::MAX)?
        .unwrap_or(1.0) as f32;
    // Any integer; a negative one keeps its bits.
    let seed = f.int("seed")?.map_or_else(rand::random, |s| s as u64);
    for name in ["presence_penalty", "frequency_penalty"] {
        if f.number(name, -2.0, 2.0)?.is_some_and(|x| x != 0.0) {
            return Err(ApiError::unsupported(
                name,
                "the sampler has a multiplicative repeat_penalty, not additive presence or frequency penalties; send 0 or use repeat_penalty",
            ));
        }
    }
    let stop = stops(f)?;
    Ok(SamplingParams {
        temperature,
        top_k,
        top_p,
        min_p,
        repeat_penalty,
        seed,
        stop,
        ..SamplingParams::default()
    })
}

/// `stop`: a string or a list of up to four non-empty strings.
fn stops(f: &mut Fields) -> Result<Vec<String>, ApiError> {
    let bad = || {
        ApiError::invalid(
            Some("stop"),
            format!("'stop' must be a non-empty string or a list of at most {MAX_STOPS} of them"),
        )
    };
    let list = match f.take("stop") {
        None => Vec::new(),
        Some(Value::String(s)) => vec![s],
        Some(Value::Array(a)) if a.len() <= MAX_STOPS => a
            .into_iter()
            .map(|v| v.as_str().map(str::to_string).ok_or_else(bad))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad()),
    };
    if list.iter().any(String::is_empty) {
        return Err(bad());
    }
    Ok(list)
}

/// `messages`: a non-empty list of `{role, content}`.
fn messages(f: &mut Fields) -> Result<Vec<ChatMessage>, ApiError> {
    let list = match f.take("messages") {
        None => return Err(f.missing("messages")),
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(_) => {
            return Err(ApiError::invalid(
                Some("messages"),
                "'messages' must be a non-empty list of messages",
            ))
        }
    };
    list.into_iter()
        .enumerate()
        .map(|(i, m)| chat_message(m, &format!("messages[{i}]")))
        .collect()
}

/// One message. `developer` is OpenAI's new name for `system`.
fn chat_message(value: Value, at: &str) -> Result<ChatMessage, ApiError> {
    let mut m = Fields::of(value, at, format!("{at}."))?;
    let role = m.required_string("role")?;
    let role =
        match role.as_str() {
            "system" | "developer" => "system",
            "user" => "user",
            "assistant" => "assistant",
            _ => return Err(ApiError::unsupported(
                &m.param("role"),
                "roles are system, developer, user and assistant (tool calls are not implemented)",
            )),
        };
    let content = match m.take("content") {
        None => return Err(m.missing("content")),
        Some(Value::String(s)) => s,
        Some(Value::Array(parts)) => text_parts(parts, &m.param("content"))?,
        Some(_) => {
            return Err(ApiError::invalid(
                Some(&m.param("content")),
                format!(
                    "'{}' must be a string or a list of text parts",
                    m.param("content")
                ),
            ))
        }
    };
    m.unsupported(
        "name",
        |_| false,
        "the chat template has no place for participant names",
    )?;
    m.unsupported("tool_calls", is_off, "tool calls are not implemented")?;
    m.unsupported("refusal", |_| false, "refusals are not part of the prompt")?;
    m.finish()?;
    Ok(message(role, &content))
}

/// The text of a list of content parts, each `{"type": "text", "text": ...}`, joined.
fn text_parts(parts: Vec<Value>, at: &str) -> Result<String, ApiError> {
    let mut text = String::new();
    for (j, part) in parts.into_iter().enumerate() {
        let here = format!("{at}[{j}]");
        let mut p = Fields::of(part, &here, format!("{here}."))?;
        let kind = p.required_string("type")?;
        if kind != "text" {
            return Err(ApiError::unsupported(
                &p.param("type"),
                "only text parts are understood by a text model",
            ));
        }
        text.push_str(&p.required_string("text")?);
        p.finish()?;
    }
    Ok(text)
}
