//! The OpenAI request bodies of `/v1/chat/completions` and `/v1/completions`, read strictly
//! into one [`GenRequest`]: what the sampler can do is mapped to [`SamplingParams`], a feature
//! it cannot do is a 400 naming the field (unless its value asks for nothing, e.g. `n: 1`), and
//! an unknown field is a 400 too.

use super::errors::ApiError;
use super::fields::{is_off, is_one, Fields};
use super::tools::{Function, ToolChoice, Tools};
use ramforge_engine::text::prompt::message;
use ramforge_engine::text::ChatMessage;
use ramforge_engine::{Grammar, SamplingParams};
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
    /// `response_format` (`json_object`, `json_schema`, `grammar`) or `grammar`: the grammar
    /// the output must match.
    pub grammar: Option<Grammar>,
    /// `tools`, `tool_choice`, `parallel_tool_calls` (chat; `None` without tools).
    pub tools: Option<Tools>,
    /// `reasoning_format: "none"`: thinking stays in the content (chat).
    pub reasoning_inline: bool,
}

/// Most tools a request may offer (OpenAI's limit).
pub const MAX_TOOLS: usize = 128;

use ramforge_engine::sampling::MAX_TOP_LOGPROBS;

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
    let logprobs = f.bool("logprobs")?.unwrap_or(false);
    let top = f.uint("top_logprobs", 0)?;
    if top.is_some_and(|n| n > MAX_TOP_LOGPROBS as u64) {
        return Err(ApiError::invalid(
            Some("top_logprobs"),
            format!("'top_logprobs' must be at most {MAX_TOP_LOGPROBS}"),
        ));
    }
    if top.is_some() && !logprobs {
        return Err(ApiError::invalid(
            Some("top_logprobs"),
            "'top_logprobs' needs 'logprobs': true",
        ));
    }
    let logprobs = logprobs.then(|| top.unwrap_or(0) as usize);
    let tools = tools(&mut f)?;
    f.unsupported(
        "functions",
        is_off,
        "use 'tools' instead of the deprecated 'functions'",
    )?;
    let none = |v: &Value| v == "none";
    f.unsupported(
        "function_call",
        none,
        "use 'tool_choice' instead of the deprecated 'function_call'",
    )?;
    let reasoning_inline =
        match f.string("reasoning_format")?.as_deref() {
            None | Some("auto") | Some("deepseek") => false,
            Some("none") => true,
            Some(_) => return Err(ApiError::invalid(
                Some("reasoning_format"),
                "'reasoning_format' must be none (thinking stays in the content), auto or deepseek",
            )),
        };
    let format = response_format(&mut f)?;
    let max_tokens = max_tokens.map(|n| n as usize);
    let mut request = common(f, Endpoint::Chat, Prompt::Chat(messages), max_tokens)?;
    request.params.logprobs = logprobs;
    if format.is_some() && request.grammar.is_some() {
        return Err(ApiError::invalid(
            Some("grammar"),
            "give one of 'response_format' and 'grammar', not both",
        ));
    }
    request.grammar = request.grammar.or(format);
    let forced = tools
        .as_ref()
        .is_some_and(|t| matches!(t.choice, ToolChoice::Required | ToolChoice::Named(_)));
    if forced && request.grammar.is_some() {
        return Err(ApiError::invalid(
            Some("tool_choice"),
            "a required tool call cannot be combined with 'response_format' or 'grammar'",
        ));
    }
    request.tools = tools;
    request.reasoning_inline = reasoning_inline;
    Ok(request)
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
    let logprobs = f.uint("logprobs", 0)?;
    if logprobs.is_some_and(|n| n > MAX_TOP_LOGPROBS as u64) {
        return Err(ApiError::invalid(
            Some("logprobs"),
            format!("'logprobs' must be at most {MAX_TOP_LOGPROBS}"),
        ));
    }
    f.unsupported("echo", is_off, "the prompt is not echoed")?;
    let empty = |v: &Value| v == "";
    f.unsupported(
        "suffix",
        empty,
        "insertion after a suffix is not implemented",
    )?;
    f.unsupported("best_of", is_one, "one completion is generated per request")?;
    let mut request = common(f, Endpoint::Completion, Prompt::Text(prompt), max_tokens)?;
    request.params.logprobs = logprobs.map(|n| n as usize);
    Ok(request)
}

/// `response_format`: `text` (nothing to do), `json_object`, or `json_schema` with its
/// `schema` (always held to strictly).
fn response_format(f: &mut Fields) -> Result<Option<Grammar>, ApiError> {
    let Some(value) = f.take("response_format") else {
        return Ok(None);
    };
    let mut r = Fields::of(value, "response_format", "response_format.".into())?;
    let kind = r.required_string("type")?;
    let grammar = match kind.as_str() {
        "text" => None,
        "json_object" => Some(Grammar::JsonObject),
        "json_schema" => {
            let Some(spec) = r.take("json_schema") else {
                return Err(r.missing("json_schema"));
            };
            let mut j = Fields::of(
                spec,
                "response_format.json_schema",
                "response_format.json_schema.".into(),
            )?;
            j.required_string("name")?;
            j.string("description")?;
            j.bool("strict")?;
            let schema = j.take("schema").unwrap_or(serde_json::json!({}));
            if !schema.is_object() && !schema.is_boolean() {
                return Err(ApiError::invalid(
                    Some("response_format.json_schema.schema"),
                    "'response_format.json_schema.schema' must be a JSON schema object",
                ));
            }
            j.finish()?;
            Some(Grammar::JsonSchema(schema))
        }
        "grammar" => {
            let text = r.required_string("grammar")?;
            match r.string("syntax")?.as_deref() {
                None | Some("gbnf") => Some(Grammar::Gbnf(text)),
                Some("lark") => Some(Grammar::Lark(text)),
                Some(_) => {
                    return Err(ApiError::invalid(
                        Some("response_format.syntax"),
                        "'response_format.syntax' must be gbnf or lark",
                    ))
                }
            }
        }
        _ => {
            return Err(ApiError::invalid(
                Some("response_format.type"),
                "'response_format.type' must be text, json_object, json_schema or grammar",
            ))
        }
    };
    r.finish()?;
    Ok(grammar)
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
    // llama-server's extension: a GBNF grammar the output must match.
    let grammar = f.string("grammar")?.map(Grammar::Gbnf);
    f.finish()?;
    Ok(GenRequest {
        endpoint,
        model,
        prompt,
        max_tokens,
        params,
        stream,
        include_usage,
        grammar,
        tools: None,
        reasoning_inline: false,
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
    // OpenAI's additive penalties (repeat_penalty, llama.cpp's multiplicative one, stays).
    let presence_penalty = f.number("presence_penalty", -2.0, 2.0)?.unwrap_or(0.0) as f32;
    let frequency_penalty = f.number("frequency_penalty", -2.0, 2.0)?.unwrap_or(0.0) as f32;
    let stop = stops(f)?;
    Ok(SamplingParams {
        temperature,
        top_k,
        top_p,
        min_p,
        repeat_penalty,
        presence_penalty,
        frequency_penalty,
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

/// One message. `developer` is OpenAI's new name for `system`; a `tool` message is a tool's
/// result; an assistant message may carry `tool_calls` (its content then may be null).
fn chat_message(value: Value, at: &str) -> Result<ChatMessage, ApiError> {
    let mut m = Fields::of(value, at, format!("{at}."))?;
    let role = m.required_string("role")?;
    let role = match role.as_str() {
        "system" | "developer" => "system",
        "user" => "user",
        "assistant" => "assistant",
        "tool" => "tool",
        _ => {
            return Err(ApiError::unsupported(
                &m.param("role"),
                "roles are system, developer, user, assistant and tool",
            ))
        }
    };
    let tool_calls = match m.take("tool_calls") {
        Some(v) if role == "assistant" && !is_off(&v) => {
            Some(history_calls(v, &m.param("tool_calls"))?)
        }
        Some(v) if !is_off(&v) => {
            return Err(ApiError::invalid(
                Some(&m.param("tool_calls")),
                format!(
                    "'{}' is only allowed on assistant messages",
                    m.param("tool_calls")
                ),
            ))
        }
        _ => None,
    };
    let content = match m.take("content") {
        None if tool_calls.is_some() => String::new(),
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
    let (tool_call_id, name) = if role == "tool" {
        let id = m.required_string("tool_call_id")?;
        (Some(id), m.string("name")?)
    } else {
        m.unsupported(
            "name",
            |_| false,
            "the chat template has no place for participant names",
        )?;
        (None, None)
    };
    m.unsupported("refusal", |_| false, "refusals are not part of the prompt")?;
    m.finish()?;
    let mut msg = message(role, &content);
    msg.tool_calls = tool_calls;
    msg.tool_call_id = tool_call_id;
    msg.name = name;
    Ok(msg)
}

/// An assistant message's `tool_calls`, as templates read them: each call's `arguments` (a
/// JSON text in OpenAI's API) as the object it holds.
fn history_calls(value: Value, at: &str) -> Result<Value, ApiError> {
    let Value::Array(list) = value else {
        return Err(ApiError::invalid(
            Some(at),
            format!("'{at}' must be a list of tool calls"),
        ));
    };
    let mut calls = Vec::with_capacity(list.len());
    for (i, call) in list.into_iter().enumerate() {
        let here = format!("{at}[{i}]");
        let mut c = Fields::of(call, &here, format!("{here}."))?;
        let id = c.required_string("id")?;
        if c.string("type")?.is_some_and(|t| t != "function") {
            return Err(ApiError::invalid(
                Some(&c.param("type")),
                "a tool call's type must be function",
            ));
        }
        let Some(function) = c.take("function") else {
            return Err(c.missing("function"));
        };
        c.finish()?;
        let fat = format!("{here}.function");
        let mut f = Fields::of(function, &fat, format!("{fat}."))?;
        let name = f.required_string("name")?;
        let arguments = f.required_string("arguments")?;
        f.finish()?;
        let arguments =
            serde_json::from_str::<Value>(&arguments).unwrap_or(Value::String(arguments));
        calls.push(serde_json::json!({
            "id": id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }));
    }
    Ok(Value::Array(calls))
}

/// `tools` (functions only), `tool_choice` and `parallel_tool_calls`; `None` when no tool is
/// offered.
fn tools(f: &mut Fields) -> Result<Option<Tools>, ApiError> {
    let list = match f.take("tools") {
        None => Vec::new(),
        Some(Value::Array(a)) if a.len() <= MAX_TOOLS => a,
        Some(_) => {
            return Err(ApiError::invalid(
                Some("tools"),
                format!("'tools' must be a list of at most {MAX_TOOLS} tools"),
            ))
        }
    };
    let mut functions: Vec<Function> = Vec::with_capacity(list.len());
    let mut shown = Vec::with_capacity(list.len());
    for (i, tool) in list.into_iter().enumerate() {
        let here = format!("tools[{i}]");
        let mut t = Fields::of(tool, &here, format!("{here}."))?;
        let kind = t.required_string("type")?;
        if kind != "function" {
            return Err(ApiError::unsupported(
                &t.param("type"),
                "only function tools can be called",
            ));
        }
        let Some(function) = t.take("function") else {
            return Err(t.missing("function"));
        };
        t.finish()?;
        let fat = format!("{here}.function");
        let mut fields = Fields::of(function, &fat, format!("{fat}."))?;
        let name = fields.required_string("name")?;
        let good = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        if !good {
            return Err(ApiError::invalid(
                Some(&fields.param("name")),
                format!(
                    "'{}' must be 1 to 64 letters, digits, '_', '-' or '.'",
                    fields.param("name")
                ),
            ));
        }
        if functions.iter().any(|g| g.name == name) {
            return Err(ApiError::invalid(
                Some(&fields.param("name")),
                format!("two tools are named '{name}'"),
            ));
        }
        let description = fields.string("description")?;
        fields.bool("strict")?;
        let parameters = match fields.take("parameters") {
            None => serde_json::json!({"type": "object", "properties": {}}),
            Some(p) if p.is_object() => p,
            Some(_) => {
                return Err(ApiError::invalid(
                    Some(&fields.param("parameters")),
                    format!(
                        "'{}' must be a JSON schema object",
                        fields.param("parameters")
                    ),
                ))
            }
        };
        fields.finish()?;
        let mut function = serde_json::json!({"name": name});
        if let Some(d) = description {
            function["description"] = d.into();
        }
        function["parameters"] = parameters.clone();
        shown.push(serde_json::json!({"type": "function", "function": function}));
        functions.push(Function { name, parameters });
    }
    let choice = match f.take("tool_choice") {
        None => ToolChoice::Auto,
        Some(Value::String(s)) if s == "auto" => ToolChoice::Auto,
        Some(Value::String(s)) if s == "none" => ToolChoice::None,
        Some(Value::String(s)) if s == "required" => ToolChoice::Required,
        Some(v @ Value::Object(_)) => {
            let mut c = Fields::of(v, "tool_choice", "tool_choice.".into())?;
            if c.required_string("type")? != "function" {
                return Err(ApiError::invalid(Some("tool_choice.type"), "'tool_choice.type' must be function"));
            }
            let Some(function) = c.take("function") else {
                return Err(c.missing("function"));
            };
            c.finish()?;
            let mut n = Fields::of(function, "tool_choice.function", "tool_choice.function.".into())?;
            let name = n.required_string("name")?;
            n.finish()?;
            if !functions.iter().any(|g| g.name == name) {
                return Err(ApiError::invalid(
                    Some("tool_choice.function.name"),
                    format!("'tool_choice' names '{name}', which is not among the tools"),
                ));
            }
            ToolChoice::Named(name)
        }
        Some(_) => {
            return Err(ApiError::invalid(
                Some("tool_choice"),
                "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": ...}}",
            ))
        }
    };
    let parallel = f.bool("parallel_tool_calls")?.unwrap_or(true);
    if functions.is_empty() {
        if matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) {
            return Err(ApiError::invalid(
                Some("tool_choice"),
                "'tool_choice' asks for a call, but there are no 'tools'",
            ));
        }
        return Ok(None);
    }
    Ok(Some(Tools {
        list: Value::Array(shown),
        functions,
        choice,
        parallel,
    }))
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
