//! Tool calls and reasoning in a chat model's output, by the model family's convention: which
//! convention a chat template follows ([`ToolFormat::of_template`]), the grammar that holds a
//! required call to a function's parameters schema ([`call_grammar`]), and the parser that
//! splits generated text into content, reasoning (`<think>...</think>`, gpt-oss's analysis
//! channel) and OpenAI `tool_calls` ([`OutputParser`]), text by text as it streams.
//!
//! The parser sees untrusted model output: any text is content, reasoning or a call, never a
//! panic; what it holds back is at most the text of one unfinished call.

use ramforge_engine::text::ChatMessage;
use serde_json::{json, Value};

/// One function a request offers (`tools[i].function`).
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    pub name: String,
    /// Its parameters' JSON schema (`{"type": "object"}` when not given).
    pub parameters: Value,
}

/// `tool_choice`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (the default with tools).
    Auto,
    /// No call: the tools are not shown to the model.
    None,
    /// At least one call, its arguments held to the parameters schema.
    Required,
    /// A call of this function, its arguments held to its schema.
    Named(String),
}

/// A request's tools.
#[derive(Clone, Debug, PartialEq)]
pub struct Tools {
    /// The `tools` list as the template receives it (`[{"type": "function", "function":
    /// {...}}]`).
    pub list: Value,
    pub functions: Vec<Function>,
    pub choice: ToolChoice,
    /// `parallel_tool_calls` (default true): false keeps only the first call.
    pub parallel: bool,
}

/// One parsed call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// `call_` and 24 random letters and digits.
    pub id: String,
    pub name: String,
    /// The arguments as a JSON text (OpenAI's `function.arguments`).
    pub arguments: String,
}

impl ToolCall {
    fn new(name: &str, arguments: &Value) -> Option<ToolCall> {
        let name = name.trim();
        if name.is_empty() {
            return None;
        }
        // Arguments given as a string holding JSON are that JSON.
        let arguments = match arguments {
            Value::String(s) => match serde_json::from_str::<Value>(s) {
                Ok(v) if v.is_object() => v,
                _ => return None,
            },
            Value::Object(_) => arguments.clone(),
            Value::Null => json!({}),
            _ => return None,
        };
        Some(ToolCall {
            id: call_id(),
            name: name.to_string(),
            arguments: arguments.to_string(),
        })
    }

    /// OpenAI's `message.tool_calls[i]`.
    pub fn json(&self) -> Value {
        json!({
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
    }
}

/// A fresh call id.
fn call_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let tail: String = (0..24)
        .map(|_| ALPHABET[rand::random::<u32>() as usize % ALPHABET.len()] as char)
        .collect();
    format!("call_{tail}")
}

/// How a model family writes tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    /// Qwen 2.5/3, Hermes: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.
    Hermes,
    /// Llama 3.x: `{"name": ..., "parameters": {...}}` (optionally after `<|python_tag|>`).
    Llama3,
    /// Mistral (v3 tokenizer): `[TOOL_CALLS][{"name": ..., "arguments": {...}}]`.
    Mistral,
    /// Mistral (v11+): `[TOOL_CALLS]name[ARGS]{...}`.
    MistralArgs,
    /// gpt-oss's harmony: `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>`.
    Harmony,
    /// GLM 4.5: `<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call>`.
    Glm,
    /// DeepSeek V3/R1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>...<｜tool▁sep｜>...<｜tool▁call▁end｜>`.
    DeepSeek,
}

const DS_CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
const DS_CALLS_END: &str = "<｜tool▁calls▁end｜>";
const DS_CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const DS_CALL_END: &str = "<｜tool▁call▁end｜>";
const DS_SEP: &str = "<｜tool▁sep｜>";

impl ToolFormat {
    /// The convention of a chat template, or `None` when it does not render tools (the
    /// server then describes them in the system message and reads Hermes calls).
    pub fn of_template(template: &str) -> Option<ToolFormat> {
        if !template.contains("tools") {
            return None;
        }
        let has = |s: &str| template.contains(s);
        Some(if has("<|channel|>") {
            ToolFormat::Harmony
        } else if has("<arg_key>") {
            ToolFormat::Glm
        } else if has("tool▁calls▁begin") {
            ToolFormat::DeepSeek
        } else if has("[TOOL_CALLS]") {
            if has("[ARGS]") {
                ToolFormat::MistralArgs
            } else {
                ToolFormat::Mistral
            }
        } else if has("<tool_call>") {
            ToolFormat::Hermes
        } else if has("<|start_header_id|>") || has("<|python_tag|>") {
            ToolFormat::Llama3
        } else {
            ToolFormat::Hermes
        })
    }

    /// Whether its markers are control tokens, which the text must show to be parsed.
    pub fn shows_control_tokens(self) -> bool {
        !matches!(self, ToolFormat::Hermes | ToolFormat::Llama3)
    }

    /// The texts that open a call.
    fn openers(self) -> &'static [&'static str] {
        match self {
            ToolFormat::Hermes | ToolFormat::Glm => &["<tool_call>"],
            ToolFormat::Llama3 => &["<|python_tag|>"],
            ToolFormat::Mistral | ToolFormat::MistralArgs => &["[TOOL_CALLS]"],
            ToolFormat::DeepSeek => &[DS_CALLS_BEGIN, DS_CALL_BEGIN],
            ToolFormat::Harmony => &[],
        }
    }
}

/// The system text that describes `tools` to a model whose template does not (Qwen 2.5's own
/// words): the calls come back in Hermes' `<tool_call>` form.
pub fn tools_system_text(tools: &Tools) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
         You are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    if let Value::Array(list) = &tools.list {
        for t in list {
            s.push('\n');
            s.push_str(&t.to_string());
        }
    }
    s.push_str(
        "\n</tools>\n\nFor each function call, return a json object with function name and \
         arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n\
         {\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>",
    );
    s
}

/// A conversation for a template that does not render tools: the tools described in the
/// system message ([`tools_system_text`], when `tools` is given), an assistant's calls written
/// as Hermes `<tool_call>` text, and tool results as user turns of `<tool_response>` text (as
/// Qwen 2.5's template writes them).
pub fn plain_messages(messages: Vec<ChatMessage>, tools: Option<&Tools>) -> Vec<ChatMessage> {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len() + 1);
    let mut messages = messages.into_iter().peekable();
    if let Some(t) = tools {
        let text = tools_system_text(t);
        let content = match messages.next_if(|m| m.role == "system") {
            Some(system) => format!("{}\n\n{text}", system.content),
            None => text,
        };
        out.push(ChatMessage {
            role: "system".into(),
            content,
            ..ChatMessage::default()
        });
    }
    for m in messages {
        let mut content = m.content;
        let role = match m.role.as_str() {
            "tool" => {
                content = format!("<tool_response>\n{content}\n</tool_response>");
                "user".to_string()
            }
            _ => m.role,
        };
        if let Some(Value::Array(calls)) = &m.tool_calls {
            for call in calls {
                let f = &call["function"];
                let body = json!({"name": f["name"], "arguments": f["arguments"]});
                if !content.is_empty() {
                    content.push('\n');
                }
                content.push_str(&format!("<tool_call>\n{body}\n</tool_call>"));
            }
        }
        // Tool results that follow each other are one user turn, as Qwen writes them.
        match out.last_mut() {
            Some(last)
                if role == "user"
                    && last.role == "user"
                    && content.starts_with("<tool_response>")
                    && last.content.contains("</tool_response>") =>
            {
                last.content.push('\n');
                last.content.push_str(&content);
            }
            _ => out.push(ChatMessage {
                role,
                content,
                ..ChatMessage::default()
            }),
        }
    }
    out
}

/// Whether a message needs a template that renders tools (a call or a tool result).
pub fn has_tool_turns(messages: &[ChatMessage]) -> bool {
    messages
        .iter()
        .any(|m| m.role == "tool" || m.tool_calls.is_some())
}

/// A Lark grammar (llguidance's syntax) for one call of one of `functions` in `format`, its
/// arguments a value of the function's parameters schema. `special` gives the id of a text
/// that is one control token (written `<[id]>` in the grammar; such a token cannot be spelled
/// by text).
pub fn call_grammar(
    format: ToolFormat,
    functions: &[&Function],
    special: &dyn Fn(&str) -> Option<u32>,
) -> Result<String, String> {
    if functions.is_empty() {
        return Err("no function to call".into());
    }
    let lit = |s: &str| match special(s) {
        Some(id) => format!("<[{id}]>"),
        None => Value::String(s.to_string()).to_string(),
    };
    let call_object = |f: &Function, args_key: &str| {
        json!({
            "type": "object",
            "properties": {"name": {"const": f.name}, args_key: f.parameters},
            "required": ["name", args_key],
            "additionalProperties": false,
        })
    };
    let mut rules = String::new();
    let mut alternatives = Vec::new();
    for (i, f) in functions.iter().enumerate() {
        let name = Value::String(f.name.clone()).to_string();
        let params = f.parameters.to_string();
        let body = match format {
            ToolFormat::Hermes => format!(
                "{} \"\\n\" %json {} \"\\n\" {}",
                lit("<tool_call>"),
                call_object(f, "arguments"),
                lit("</tool_call>")
            ),
            ToolFormat::Llama3 => format!("%json {}", call_object(f, "parameters")),
            ToolFormat::Mistral => format!(
                "{} \"[\" %json {} \"]\"",
                lit("[TOOL_CALLS]"),
                call_object(f, "arguments")
            ),
            ToolFormat::MistralArgs => format!(
                "{} {name} {} %json {params}",
                lit("[TOOL_CALLS]"),
                lit("[ARGS]")
            ),
            ToolFormat::Harmony => format!(
                "{} \"commentary to=functions.\" {name} \" \" {} \"json\" {} %json {params}",
                lit("<|channel|>"),
                lit("<|constrain|>"),
                lit("<|message|>")
            ),
            ToolFormat::DeepSeek => format!(
                "{} {} {name} {} %json {params} {} {}",
                lit(DS_CALLS_BEGIN),
                lit(DS_CALL_BEGIN),
                lit(DS_SEP),
                lit(DS_CALL_END),
                lit(DS_CALLS_END)
            ),
            ToolFormat::Glm => {
                return Err(
                    "GLM's tool calls are not JSON, so they cannot be held to a schema".into(),
                )
            }
        };
        rules.push_str(&format!("call{i}: {body}\n"));
        alternatives.push(format!("call{i}"));
    }
    Ok(format!("start: {}\n{rules}", alternatives.join(" | ")))
}

/// A piece of visible output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    Content(String),
    Reasoning(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Nothing but whitespace yet: `<think>` or (Llama 3) a JSON call may start here.
    Start,
    Think,
    Text,
    /// Inside the calls: held to the end.
    Calls,
}

/// Harmony: where in a message the text is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Channel {
    /// Reading the header up to `<|message|>`.
    Header,
    /// A message's body: reasoning, content, or a call to this function.
    Body(Kind),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    Reasoning,
    Content,
    Call(String),
}

/// Most bytes of a harmony header with its `<|message|>` (`assistant<|channel|>commentary
/// to=functions.NAME <|constrain|>json<|message|>`).
const MAX_HEADER: usize = 1024;

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

/// Splits generated text into content, reasoning and tool calls as it arrives.
pub struct OutputParser {
    /// The call convention, when tools are parsed.
    format: Option<ToolFormat>,
    /// `<think>...</think>` (or the analysis channel) goes to reasoning.
    reasoning: bool,
    harmony: bool,
    mode: Mode,
    channel: Channel,
    /// Text not decided yet (a possible marker's start).
    pending: String,
    /// The text of the calls (from their opener on).
    calls: String,
    /// Harmony: calls already complete.
    done_calls: Vec<ToolCall>,
    /// Content was shown (a Llama 3 call must start the output).
    shown: bool,
    /// Just after `</think>`: the newlines that follow it are dropped.
    after_think: bool,
}

impl OutputParser {
    /// A parser for tool calls in `format` (none: no tools) and, when `reasoning`, thinking;
    /// `thinking` when the prompt already opened `<think>`. A harmony model's channels are
    /// parsed whenever `harmony`.
    pub fn new(
        format: Option<ToolFormat>,
        reasoning: bool,
        thinking: bool,
        harmony: bool,
    ) -> OutputParser {
        OutputParser {
            format,
            reasoning,
            harmony,
            mode: if reasoning && thinking {
                Mode::Think
            } else {
                Mode::Start
            },
            channel: Channel::Header,
            pending: String::new(),
            calls: String::new(),
            done_calls: Vec::new(),
            shown: false,
            after_think: false,
        }
    }

    /// Takes generated text; returns what can be shown now.
    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        if self.harmony {
            self.harmony_step(&mut out, false);
        } else {
            self.step(&mut out, false);
        }
        merge(out)
    }

    /// Ends the output: the rest of the pieces, and the calls found (a call that does not
    /// parse stays in the content).
    pub fn finish(mut self) -> (Vec<Piece>, Vec<ToolCall>) {
        let mut out = Vec::new();
        if self.harmony {
            self.harmony_step(&mut out, true);
            return (merge(out), std::mem::take(&mut self.done_calls));
        }
        self.step(&mut out, true);
        let mut calls = Vec::new();
        if self.mode == Mode::Calls {
            let text = std::mem::take(&mut self.calls);
            match self.format.and_then(|f| parse_calls(f, &text)) {
                Some(c) if !c.is_empty() => calls = c,
                _ => out.push(Piece::Content(text)),
            }
        }
        (merge(out), calls)
    }

    fn markers(&self) -> Vec<&'static str> {
        let mut m: Vec<&'static str> = Vec::new();
        match self.mode {
            Mode::Think => m.push(THINK_CLOSE),
            Mode::Start | Mode::Text => {
                if self.reasoning && self.mode == Mode::Start {
                    m.push(THINK_OPEN);
                }
                if let Some(f) = self.format {
                    m.extend_from_slice(f.openers());
                }
            }
            Mode::Calls => {}
        }
        m
    }

    fn step(&mut self, out: &mut Vec<Piece>, end: bool) {
        loop {
            if self.mode == Mode::Calls {
                self.calls.push_str(&std::mem::take(&mut self.pending));
                return;
            }
            if self.after_think {
                // The content after thinking starts after its blank lines.
                let kept = self.pending.trim_start_matches(['\n', '\r']).len();
                self.pending.drain(..self.pending.len() - kept);
                if self.pending.is_empty() {
                    return;
                }
                self.after_think = false;
            }
            if self.mode == Mode::Start {
                let trimmed = self.pending.trim_start();
                if trimmed.is_empty() && !end {
                    return;
                }
                if self.format == Some(ToolFormat::Llama3)
                    && !self.shown
                    && trimmed.starts_with('{')
                {
                    self.mode = Mode::Calls;
                    continue;
                }
            }
            let markers = self.markers();
            let (safe, found) = scan(&self.pending, &markers);
            let safe = if end && found.is_none() {
                self.pending.len()
            } else {
                safe
            };
            if self.mode == Mode::Start
                && !end
                && found.is_none()
                && self.pending[..safe].trim().is_empty()
            {
                return; // only whitespace before what may be a marker
            }
            let head: String = self.pending.drain(..safe).collect();
            match self.mode {
                Mode::Think => push_piece(out, Piece::Reasoning(head)),
                _ => {
                    if !(self.mode == Mode::Start && head.trim().is_empty() && found.is_some()) {
                        if !head.is_empty() {
                            self.shown = true;
                            self.mode = Mode::Text;
                        }
                        push_piece(out, Piece::Content(head));
                    }
                }
            }
            let Some(marker) = found else {
                if self.mode == Mode::Start && end {
                    self.mode = Mode::Text;
                }
                return;
            };
            match marker {
                // Thinking opens only the output: after text it is text.
                THINK_OPEN if self.mode == Mode::Text => {}
                THINK_OPEN => {
                    self.pending.drain(..THINK_OPEN.len());
                    self.mode = Mode::Think;
                }
                THINK_CLOSE => {
                    self.pending.drain(..THINK_CLOSE.len());
                    self.mode = Mode::Text;
                    self.after_think = true;
                }
                _ => self.mode = Mode::Calls,
            }
        }
    }

    /// Harmony: `<|channel|>NAME[ to=functions.F][ <|constrain|>json]<|message|>BODY` messages,
    /// each ended by `<|end|>`, `<|call|>` or `<|return|>` and the next opened by
    /// `<|start|>assistant`.
    fn harmony_step(&mut self, out: &mut Vec<Piece>, end: bool) {
        const MESSAGE: &str = "<|message|>";
        const ENDS: [&str; 4] = ["<|end|>", "<|call|>", "<|return|>", "<|start|>"];
        loop {
            match self.channel.clone() {
                Channel::Header => {
                    // A header is `<|message|>` within its first MAX_HEADER bytes; decided on
                    // those bytes alone, so streamed and whole text agree.
                    let mut window = self.pending.len().min(MAX_HEADER);
                    while !self.pending.is_char_boundary(window) {
                        window -= 1;
                    }
                    if let Some(at) = self.pending[..window].find(MESSAGE) {
                        let header: String = self.pending.drain(..at + MESSAGE.len()).collect();
                        self.channel = Channel::Body(harmony_kind(&header, self.reasoning));
                        continue;
                    }
                    if self.pending.len() >= MAX_HEADER {
                        // No header: text outside any message is content.
                        self.channel = Channel::Body(Kind::Content);
                        continue;
                    }
                    if end {
                        let rest = std::mem::take(&mut self.pending);
                        if !rest.contains("<|channel|>") {
                            push_piece(out, Piece::Content(rest));
                        }
                    }
                    return;
                }
                Channel::Body(kind) => {
                    let (safe, found) = scan(&self.pending, &ENDS);
                    let safe = if end && found.is_none() {
                        self.pending.len()
                    } else {
                        safe
                    };
                    let body: String = self.pending.drain(..safe).collect();
                    match &kind {
                        Kind::Reasoning => push_piece(out, Piece::Reasoning(body)),
                        Kind::Content => push_piece(out, Piece::Content(body)),
                        Kind::Call(_) => self.calls.push_str(&body),
                    }
                    if found.is_none() && !end {
                        return;
                    }
                    if let Kind::Call(name) = &kind {
                        let text = std::mem::take(&mut self.calls);
                        match serde_json::from_str::<Value>(text.trim())
                            .ok()
                            .and_then(|args| ToolCall::new(name, &args))
                        {
                            Some(call) => self.done_calls.push(call),
                            None => push_piece(out, Piece::Content(text)),
                        }
                    }
                    let Some(marker) = found else {
                        return;
                    };
                    // After `<|start|>`, `assistant` and the next header follow.
                    self.pending.drain(..marker.len());
                    self.channel = Channel::Header;
                }
            }
        }
    }
}

/// What a harmony header says the body is.
fn harmony_kind(header: &str, reasoning: bool) -> Kind {
    if let Some(at) = header.find("to=functions.") {
        let name: String = header[at + "to=functions.".len()..]
            .chars()
            .take_while(|c| !c.is_whitespace() && *c != '<')
            .collect();
        return Kind::Call(name);
    }
    let channel = header
        .split("<|channel|>")
        .nth(1)
        .unwrap_or("")
        .split(|c: char| c.is_whitespace() || c == '<')
        .next()
        .unwrap_or("");
    if channel == "analysis" && reasoning {
        Kind::Reasoning
    } else {
        Kind::Content
    }
}

/// Appends `piece` unless it is empty.
fn push_piece(out: &mut Vec<Piece>, piece: Piece) {
    let empty = match &piece {
        Piece::Content(s) | Piece::Reasoning(s) => s.is_empty(),
    };
    if !empty {
        out.push(piece);
    }
}

/// Joins neighbouring pieces of one kind.
fn merge(pieces: Vec<Piece>) -> Vec<Piece> {
    let mut out: Vec<Piece> = Vec::new();
    for p in pieces {
        match (out.last_mut(), p) {
            (Some(Piece::Content(a)), Piece::Content(b)) => a.push_str(&b),
            (Some(Piece::Reasoning(a)), Piece::Reasoning(b)) => a.push_str(&b),
            (_, p) => out.push(p),
        }
    }
    out
}

/// How much of `text` is safe to show before any of `markers` (the earliest marker found and
/// where, or the text less its longest tail that could start a marker).
fn scan(text: &str, markers: &[&'static str]) -> (usize, Option<&'static str>) {
    let found = markers
        .iter()
        .filter_map(|m| text.find(m).map(|at| (at, *m)))
        .min_by_key(|(at, m)| (*at, std::cmp::Reverse(m.len())));
    if let Some((at, m)) = found {
        return (at, Some(m));
    }
    let mut keep = 0;
    for m in markers {
        for (i, _) in m.char_indices().skip(1) {
            if i > keep && text.ends_with(&m[..i]) {
                keep = i;
            }
        }
    }
    (text.len() - keep, None)
}

/// The calls in `text` (from the first opener on), or `None` when it is not calls of `format`.
pub fn parse_calls(format: ToolFormat, text: &str) -> Option<Vec<ToolCall>> {
    let calls = match format {
        ToolFormat::Hermes => hermes(text),
        ToolFormat::Llama3 => llama3(text),
        ToolFormat::Mistral => mistral(text),
        ToolFormat::MistralArgs => mistral_args(text),
        ToolFormat::Glm => glm(text),
        ToolFormat::DeepSeek => deepseek(text),
        ToolFormat::Harmony => None,
    }?;
    (!calls.is_empty()).then_some(calls)
}

/// A JSON call object: `name` and `arguments` (or `parameters`).
fn call_of(v: &Value) -> Option<ToolCall> {
    let o = v.as_object()?;
    // Some models nest it: {"function": {"name", "arguments"}}.
    if let Some(f) = o.get("function").filter(|f| f.is_object()) {
        if !o.contains_key("name") {
            return call_of(f);
        }
    }
    let name = o.get("name")?.as_str()?;
    let args = o
        .get("arguments")
        .or_else(|| o.get("parameters"))
        .unwrap_or(&Value::Null);
    ToolCall::new(name, args)
}

/// Every `<tool_call>BODY</tool_call>` (the last may be unclosed); only whitespace between.
fn hermes(text: &str) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        rest = rest.strip_prefix("<tool_call>")?;
        let (body, after) = match rest.find("</tool_call>") {
            Some(at) => (&rest[..at], &rest[at + "</tool_call>".len()..]),
            None => (rest, ""),
        };
        calls.push(call_of(&serde_json::from_str(body.trim()).ok()?)?);
        rest = after.trim();
    }
    Some(calls)
}

/// JSON call objects, optionally after `<|python_tag|>`, separated by `;` or whitespace.
fn llama3(text: &str) -> Option<Vec<ToolCall>> {
    let text = text.trim();
    let text = text.strip_prefix("<|python_tag|>").unwrap_or(text).trim();
    let mut calls = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut values = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        let v = values.next()?.ok()?;
        calls.push(call_of(&v)?);
        rest = rest[values.byte_offset()..]
            .trim_start_matches(|c: char| c == ';' || c.is_whitespace());
    }
    Some(calls)
}

/// `[TOOL_CALLS]` and a JSON list of call objects (or one object).
fn mistral(text: &str) -> Option<Vec<ToolCall>> {
    let body = text.trim().strip_prefix("[TOOL_CALLS]")?.trim();
    let mut values = serde_json::Deserializer::from_str(body).into_iter::<Value>();
    let v = values.next()?.ok()?;
    if !body[values.byte_offset()..].trim().is_empty() {
        return None;
    }
    match v {
        Value::Array(list) => list.iter().map(call_of).collect(),
        v => Some(vec![call_of(&v)?]),
    }
}

/// `[TOOL_CALLS]NAME[ARGS]{...}` (with `[CALL_ID]ID` before `[ARGS]` in some versions),
/// repeated.
fn mistral_args(text: &str) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    let text = text.trim();
    if !text.starts_with("[TOOL_CALLS]") {
        return None;
    }
    for part in text.split("[TOOL_CALLS]").skip(1) {
        let (head, args) = part.split_once("[ARGS]")?;
        let name = head.split("[CALL_ID]").next()?;
        let mut values = serde_json::Deserializer::from_str(args).into_iter::<Value>();
        let v = values.next()?.ok()?;
        if !args[values.byte_offset()..].trim().is_empty() {
            return None;
        }
        calls.push(ToolCall::new(name, &v)?);
    }
    Some(calls)
}

/// `<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>...</tool_call>`: a value
/// that is JSON is that value, otherwise a string.
fn glm(text: &str) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        rest = rest.strip_prefix("<tool_call>")?;
        let (body, after) = match rest.find("</tool_call>") {
            Some(at) => (&rest[..at], &rest[at + "</tool_call>".len()..]),
            None => (rest, ""),
        };
        let (name, mut args_text) = match body.find("<arg_key>") {
            Some(at) => (&body[..at], &body[at..]),
            None => (body, ""),
        };
        let mut args = serde_json::Map::new();
        loop {
            args_text = args_text.trim_start();
            if args_text.is_empty() {
                break;
            }
            let k = args_text.strip_prefix("<arg_key>")?;
            let (key, after_key) = k.split_once("</arg_key>")?;
            let v = after_key.trim_start().strip_prefix("<arg_value>")?;
            let (value, after_value) = v.split_once("</arg_value>")?;
            let value = serde_json::from_str::<Value>(value)
                .unwrap_or_else(|_| Value::String(value.to_string()));
            args.insert(key.trim().to_string(), value);
            args_text = after_value;
        }
        calls.push(ToolCall::new(name, &Value::Object(args))?);
        rest = after.trim();
    }
    Some(calls)
}

/// DeepSeek: `<｜tool▁calls▁begin｜>` then calls, each `<｜tool▁call▁begin｜>` and either
/// `function<｜tool▁sep｜>NAME\n```json\nARGS\n```` (V3, R1) or `NAME<｜tool▁sep｜>ARGS` (V3.1),
/// then `<｜tool▁call▁end｜>`.
fn deepseek(text: &str) -> Option<Vec<ToolCall>> {
    let text = text.trim();
    let text = text.strip_prefix(DS_CALLS_BEGIN).unwrap_or(text);
    let text = match text.find(DS_CALLS_END) {
        Some(at) => &text[..at],
        None => text,
    };
    let mut calls = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        rest = rest.strip_prefix(DS_CALL_BEGIN)?;
        let (body, after) = match rest.find(DS_CALL_END) {
            Some(at) => (&rest[..at], &rest[at + DS_CALL_END.len()..]),
            None => (rest, ""),
        };
        let (head, tail) = body.split_once(DS_SEP)?;
        let (name, args) = if head.trim() == "function" {
            let (name, args) = tail.split_once('\n')?;
            let args = args.trim();
            let args = args.strip_prefix("```json").unwrap_or(args);
            let args = args.strip_suffix("```").unwrap_or(args);
            (name, args)
        } else {
            (head, tail)
        };
        calls.push(ToolCall::new(
            name,
            &serde_json::from_str(args.trim()).ok()?,
        )?);
        rest = after.trim();
    }
    Some(calls)
}

/// The whole output at once: content (`None` when empty), reasoning and calls.
pub fn parse_output(
    parser: OutputParser,
    text: &str,
) -> (Option<String>, Option<String>, Vec<ToolCall>) {
    let mut parser = parser;
    let mut pieces = parser.push(text);
    let (rest, calls) = parser.finish();
    pieces.extend(rest);
    let (mut content, mut reasoning) = (String::new(), String::new());
    for p in merge(pieces) {
        match p {
            Piece::Content(s) => content.push_str(&s),
            Piece::Reasoning(s) => reasoning.push_str(&s),
        }
    }
    (
        (!content.is_empty()).then_some(content),
        (!reasoning.is_empty()).then_some(reasoning),
        calls,
    )
}

#[cfg(test)]
mod tests;
