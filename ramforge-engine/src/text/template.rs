//! Chat templates: render `tokenizer.chat_template` with minijinja the way Hugging Face's
//! `apply_chat_template` does (trim_blocks, lstrip_blocks, `raise_exception`, Python string and
//! dict methods such as `.strip()` and `.items()`), with the conventional context: `messages`,
//! `add_generation_prompt`, `bos_token`, `eos_token`.
//!
//! A model without a template (or whose template does not render) can be given one from a
//! file instead: the commands take `--template FILE`.
//!
//! The template is untrusted code from the model file: it renders under the hard limits of
//! [`super::limits`] (instructions, recursion, `range()` length, output size, and on Linux
//! memory and wall time in a forked child, see [`super::isolate`]).

use super::isolate::run_isolated;
use super::limits::{
    bounded_range, exceeded_limit, BoundedOutput, RenderLimits, TEMPLATE_FUEL,
    TEMPLATE_RECURSION_LIMIT,
};
pub use super::template_error::{ChatError, TEMPLATE_KEY};
use minijinja::{context, Environment, Error, ErrorKind};
use ramforge_gguf::{Metadata, Value, ValueType};
use serde::{Deserialize, Serialize};

/// One message of a conversation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The message text.
    pub content: String,
    /// An assistant's tool calls, as Hugging Face templates read them: a list of
    /// `{"id", "type": "function", "function": {"name", "arguments"}}` with the arguments an
    /// object (absent from the template's view when `None`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    /// A tool result's call id (`role: tool`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A tool result's function name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The model's own chat template.
pub fn model_chat_template(md: &Metadata) -> Result<&str, ChatError> {
    if !md.contains(TEMPLATE_KEY) {
        return Err(ChatError::NoTemplate);
    }
    Ok(md.get_str(TEMPLATE_KEY)?)
}

/// The texts of the model's BOS and EOS tokens, as templates receive them (empty when the
/// model names none).
pub fn bos_eos_texts(md: &Metadata) -> (String, String) {
    let text = |key: &str| -> Option<String> {
        let id = md.get_u32(key).ok()? as usize;
        let (t, tokens) = md.get_array("tokenizer.ggml.tokens").ok()?;
        if t != ValueType::String {
            return None;
        }
        tokens.get(id).and_then(Value::as_str).map(str::to_string)
    };
    (
        text("tokenizer.ggml.bos_token_id").unwrap_or_default(),
        text("tokenizer.ggml.eos_token_id").unwrap_or_default(),
    )
}

/// Renders `template` for a conversation, under the hard limits of [`super::limits`].
pub fn render_chat(
    template: &str,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String, ChatError> {
    render_chat_tools(
        template,
        messages,
        None,
        add_generation_prompt,
        bos_token,
        eos_token,
    )
}

/// [`render_chat`] with the `tools` variable set (OpenAI's list of
/// `{"type": "function", "function": {...}}`, as Hugging Face's `apply_chat_template(tools=)`
/// and llama.cpp pass it); `None` leaves it undefined.
pub fn render_chat_tools(
    template: &str,
    messages: &[ChatMessage],
    tools: Option<&serde_json::Value>,
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String, ChatError> {
    let limits = tool_input_limits(messages, tools, bos_token, eos_token);
    run_isolated(&limits, || {
        render_in_process_tools(
            template,
            messages,
            tools,
            add_generation_prompt,
            bos_token,
            eos_token,
        )
    })
}

/// [`render_chat`] in this process: the instruction, recursion, loop and output limits, but
/// not the memory and time limits of the forked child. Only for a caller that has bounded
/// memory another way, or knows the render stays within it (the fuzzer re-runs renders that
/// passed in the child, to see their coverage).
pub fn render_in_process(
    template: &str,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String, ChatError> {
    render_in_process_tools(
        template,
        messages,
        None,
        add_generation_prompt,
        bos_token,
        eos_token,
    )
}

/// [`render_in_process`] with the `tools` variable (see [`render_chat_tools`]).
pub fn render_in_process_tools(
    template: &str,
    messages: &[ChatMessage],
    tools: Option<&serde_json::Value>,
    add_generation_prompt: bool,
    bos_token: &str,
    eos_token: &str,
) -> Result<String, ChatError> {
    let limits = tool_input_limits(messages, tools, bos_token, eos_token);
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_fuel(Some(TEMPLATE_FUEL));
    env.set_recursion_limit(TEMPLATE_RECURSION_LIMIT);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", raise_exception);
    env.add_function("range", bounded_range);
    let tmpl = env
        .template_from_str(template)
        .map_err(|e| ChatError::Syntax(one_line(&e)))?;
    let mut out = BoundedOutput::new(limits.output_bytes);
    let exceeded = out.exceeded.clone();
    let ctx = context! {
        messages => messages,
        add_generation_prompt => add_generation_prompt,
        bos_token => bos_token,
        eos_token => eos_token,
        tools => tools,
    };
    let rendered = tmpl.render_captured_to(ctx, &mut out).map(drop);
    match rendered {
        Ok(()) => String::from_utf8(out.buf)
            .map_err(|_| ChatError::Render("the output is not UTF-8".into())),
        Err(_) if exceeded.get() => Err(ChatError::Limit(limits.output_message())),
        Err(e) => Err(match exceeded_limit(&e) {
            Some(limit) => ChatError::Limit(format!("{limit}{}", at_line(&e))),
            None => ChatError::Render(one_line(&e)),
        }),
    }
}

/// The limits for a conversation: sized by its messages and BOS/EOS texts.
pub fn input_limits(messages: &[ChatMessage], bos_token: &str, eos_token: &str) -> RenderLimits {
    tool_input_limits(messages, None, bos_token, eos_token)
}

/// [`input_limits`] counting the tools and the messages' tool calls too.
pub fn tool_input_limits(
    messages: &[ChatMessage],
    tools: Option<&serde_json::Value>,
    bos_token: &str,
    eos_token: &str,
) -> RenderLimits {
    let json_len = |v: Option<&serde_json::Value>| v.map_or(0, |v| v.to_string().len());
    let input: usize = messages
        .iter()
        .map(|m| {
            m.role.len()
                + m.content.len()
                + json_len(m.tool_calls.as_ref())
                + m.tool_call_id.as_ref().map_or(0, String::len)
                + m.name.as_ref().map_or(0, String::len)
        })
        .sum::<usize>()
        + json_len(tools)
        + bos_token.len()
        + eos_token.len();
    RenderLimits::for_input(input)
}

/// What templates call to reject a conversation (e.g. roles out of order).
fn raise_exception(msg: String) -> Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// A minijinja error as one line, with where in the template it happened.
fn one_line(e: &Error) -> String {
    let mut s = e.kind().to_string();
    if let Some(detail) = e.detail() {
        s.push_str(": ");
        s.push_str(detail);
    }
    s.push_str(&at_line(e));
    s.replace('\n', " ")
}

/// " (template line N)" where the error says where it happened.
fn at_line(e: &Error) -> String {
    e.line()
        .map(|line| format!(" (template line {line})"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(pairs: &[(&str, &str)]) -> Vec<ChatMessage> {
        pairs
            .iter()
            .map(|(r, c)| ChatMessage {
                role: r.to_string(),
                content: c.to_string(),
                ..ChatMessage::default()
            })
            .collect()
    }

    #[test]
    fn trims_blocks_like_hugging_face() {
        let t = "{% for m in messages %}\n  {% if m.role == 'user' %}\n[{{ m.content }}]\n  {% endif %}\n{% endfor %}\n";
        let out = render_chat(
            t,
            &msgs(&[("user", "a"), ("assistant", "b")]),
            false,
            "",
            "",
        )
        .unwrap();
        assert_eq!(out, "[a]\n");
    }

    #[test]
    fn python_methods_and_context_work() {
        let t = "{{ bos_token }}{% for m in messages %}{{ m['content'].strip().upper() }}{% endfor %}{% if add_generation_prompt %}>{% endif %}{{ eos_token }}";
        let out = render_chat(t, &msgs(&[("user", "  hi ")]), true, "<s>", "</s>").unwrap();
        assert_eq!(out, "<s>HI></s>");
    }

    #[test]
    fn raise_exception_is_a_clear_error() {
        let t = "{% if messages[0].role != 'system' %}{{ raise_exception('first message must be system') }}{% endif %}";
        let e = render_chat(t, &msgs(&[("user", "x")]), false, "", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("first message must be system"), "{e}");
        assert!(!e.contains('\n'));
    }

    #[test]
    fn syntax_error_is_reported() {
        let e = render_chat("{% for %}", &[], false, "", "")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("chat template does not compile"), "{e}");
    }

    #[test]
    fn missing_template_says_how_to_pass_one() {
        let e = model_chat_template(&Metadata::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("--template FILE"), "{e}");
    }
}
