//! The parsers on outputs as each model family writes them (from the families' chat templates
//! and model cards: Qwen 2.5/3, Hermes 2 Pro, Llama 3.1, Mistral Nemo, Mistral Small 3.2,
//! gpt-oss, GLM 4.5, DeepSeek R1 and V3.1), whole and streamed a character at a time.

use super::*;

fn args(call: &ToolCall) -> Value {
    serde_json::from_str(&call.arguments).unwrap()
}

/// Parses `text` whole, then pushed a character at a time: both must agree.
fn both(
    format: Option<ToolFormat>,
    reasoning: bool,
    thinking: bool,
    text: &str,
) -> (Option<String>, Option<String>, Vec<ToolCall>) {
    let harmony = format == Some(ToolFormat::Harmony);
    let whole = parse_output(
        OutputParser::new(format, reasoning, thinking, harmony),
        text,
    );
    let mut p = OutputParser::new(format, reasoning, thinking, harmony);
    let mut pieces = Vec::new();
    for c in text.chars() {
        pieces.extend(p.push(&c.to_string()));
    }
    let (rest, calls) = p.finish();
    pieces.extend(rest);
    let (mut content, mut reasoning_text) = (String::new(), String::new());
    for piece in merge(pieces) {
        match piece {
            Piece::Content(s) => content.push_str(&s),
            Piece::Reasoning(s) => reasoning_text.push_str(&s),
        }
    }
    assert_eq!(
        whole.0.clone().unwrap_or_default(),
        content,
        "streamed content differs"
    );
    assert_eq!(whole.1.clone().unwrap_or_default(), reasoning_text);
    let strip = |c: &[ToolCall]| {
        c.iter()
            .map(|c| (c.name.clone(), c.arguments.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&whole.2), strip(&calls), "streamed calls differ");
    whole
}

#[test]
fn qwen_and_hermes_calls() {
    let out = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris, France\", \"unit\": \"celsius\"}}\n</tool_call>";
    let (content, reasoning, calls) = both(Some(ToolFormat::Hermes), true, false, out);
    assert_eq!((content, reasoning), (None, None));
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(
        args(&calls[0]),
        json!({"location": "Paris, France", "unit": "celsius"})
    );
    assert!(calls[0].id.starts_with("call_") && calls[0].id.len() == 29);

    // Hermes 2 Pro puts the arguments first; two calls; text before them is content.
    let out = "Let me look both up.\n<tool_call>\n{\"arguments\": {\"symbol\": \"TSLA\"}, \"name\": \"get_stock_fundamentals\"}\n</tool_call>\n<tool_call>\n{\"arguments\": {\"symbol\": \"AAPL\"}, \"name\": \"get_stock_fundamentals\"}\n</tool_call>";
    let (content, _, calls) = both(Some(ToolFormat::Hermes), false, false, out);
    assert_eq!(content.as_deref(), Some("Let me look both up.\n"));
    assert_eq!(calls.len(), 2);
    assert_eq!(args(&calls[1]), json!({"symbol": "AAPL"}));
    assert_ne!(calls[0].id, calls[1].id);

    // Qwen 3 thinks first.
    let out = "<think>\nThe user wants the weather in Paris. I should call get_weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>";
    let (content, reasoning, calls) = both(Some(ToolFormat::Hermes), true, false, out);
    assert_eq!(content, None);
    assert_eq!(
        reasoning.as_deref(),
        Some("\nThe user wants the weather in Paris. I should call get_weather.\n")
    );
    assert_eq!(calls[0].name, "get_weather");
}

#[test]
fn a_call_that_does_not_parse_stays_content() {
    for out in [
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Par",
        "<tool_call>\nnot json\n</tool_call>",
        "<tool_call>\n{\"arguments\": {}}\n</tool_call>",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call> trailing words",
    ] {
        let (content, _, calls) = both(Some(ToolFormat::Hermes), false, false, out);
        assert!(calls.is_empty(), "{out}");
        assert_eq!(content.as_deref(), Some(out));
    }
    // Without tools, the same text is only content.
    let out = "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
    let (content, _, calls) = both(None, false, false, out);
    assert!(calls.is_empty());
    assert_eq!(content.as_deref(), Some(out));
}

#[test]
fn llama3_calls() {
    let out = "{\"name\": \"get_current_conditions\", \"parameters\": {\"location\": \"San Francisco, CA\", \"unit\": \"Fahrenheit\"}}";
    let (content, _, calls) = both(Some(ToolFormat::Llama3), false, false, out);
    assert_eq!(content, None);
    assert_eq!(calls[0].name, "get_current_conditions");
    assert_eq!(args(&calls[0])["unit"], "Fahrenheit");
    let out = "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", \"parameters\": {}}";
    let (_, _, calls) = both(Some(ToolFormat::Llama3), false, false, out);
    assert_eq!(
        calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    // A plain answer, and JSON that is not a call, are content.
    for out in ["The weather is fine.", "{\"answer\": 42}"] {
        let (content, _, calls) = both(Some(ToolFormat::Llama3), false, false, out);
        assert!(calls.is_empty());
        assert_eq!(content.as_deref(), Some(out));
    }
}

#[test]
fn mistral_calls() {
    let out = "[TOOL_CALLS][{\"name\": \"get_current_weather\", \"arguments\": {\"location\": \"Paris, France\", \"format\": \"celsius\"}, \"id\": \"9Ae3bDc2F\"}]";
    let (content, _, calls) = both(Some(ToolFormat::Mistral), false, false, out);
    assert_eq!(content, None);
    assert_eq!(calls[0].name, "get_current_weather");
    assert_eq!(args(&calls[0])["format"], "celsius");

    let out = "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}[TOOL_CALLS]get_time[ARGS]{\"zone\": \"CET\"}";
    let (_, _, calls) = both(Some(ToolFormat::MistralArgs), false, false, out);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].name, "get_time");
    assert_eq!(args(&calls[1]), json!({"zone": "CET"}));
    let out = "[TOOL_CALLS]get_weather[CALL_ID]abc123XYZ[ARGS]{\"location\": \"Paris\"}";
    let (_, _, calls) = both(Some(ToolFormat::MistralArgs), false, false, out);
    assert_eq!(calls[0].name, "get_weather");
}

#[test]
fn gpt_oss_harmony_channels() {
    let h = Some(ToolFormat::Harmony);
    let out = "<|channel|>analysis<|message|>User asks weather in Tokyo. Use function.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"Tokyo\"}";
    let (content, reasoning, calls) = both(h, true, false, out);
    assert_eq!(content, None);
    assert_eq!(
        reasoning.as_deref(),
        Some("User asks weather in Tokyo. Use function.")
    );
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(args(&calls[0]), json!({"location": "Tokyo"}));

    let out = "<|channel|>analysis<|message|>Simple greeting.<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?";
    let (content, reasoning, calls) = both(h, true, false, out);
    assert_eq!(content.as_deref(), Some("Hello! How can I help?"));
    assert_eq!(reasoning.as_deref(), Some("Simple greeting."));
    assert!(calls.is_empty());
    // Kept inline (reasoning off), the analysis is content.
    let (content, reasoning, _) = both(h, false, false, out);
    assert_eq!(
        content.as_deref(),
        Some("Simple greeting.Hello! How can I help?")
    );
    assert_eq!(reasoning, None);
}

#[test]
fn glm_calls() {
    let out = "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>";
    let (content, _, calls) = both(Some(ToolFormat::Glm), true, false, out);
    assert_eq!(content, None);
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(args(&calls[0]), json!({"city": "Beijing", "days": 3}));
}

#[test]
fn deepseek_calls() {
    let r1 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\": \"Tokyo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    let v31 = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": \"Tokyo\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    for out in [r1, v31] {
        let (content, _, calls) = both(Some(ToolFormat::DeepSeek), true, false, out);
        assert_eq!(content, None, "{out}");
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(args(&calls[0]), json!({"location": "Tokyo"}));
    }
    // R1's prompt opens the thinking: the output starts inside it.
    let out = "Okay, the user wants Tokyo's weather.\n</think>\n\n".to_string() + r1;
    let (content, reasoning, calls) = both(Some(ToolFormat::DeepSeek), true, true, &out);
    assert_eq!(content, None);
    assert_eq!(
        reasoning.as_deref(),
        Some("Okay, the user wants Tokyo's weather.\n")
    );
    assert_eq!(calls.len(), 1);
}

#[test]
fn thinking_is_split_or_kept_inline() {
    let out = "<think>\nTwo plus two is four.\n</think>\n\nThe answer is 4.";
    let (content, reasoning, _) = both(None, true, false, out);
    assert_eq!(content.as_deref(), Some("The answer is 4."));
    assert_eq!(reasoning.as_deref(), Some("\nTwo plus two is four.\n"));
    let (content, reasoning, _) = both(None, false, false, out);
    assert_eq!(content.as_deref(), Some(out));
    assert_eq!(reasoning, None);
    // Unfinished thinking (cut by max_tokens) is all reasoning.
    let (content, reasoning, _) = both(None, true, true, "Let me see, two plus");
    assert_eq!(
        (content, reasoning.as_deref()),
        (None, Some("Let me see, two plus"))
    );
    // `<think>` later in the text is content.
    let out = "Use the <think> tag.";
    let (content, reasoning, _) = both(None, true, false, out);
    assert_eq!((content.as_deref(), reasoning), (Some(out), None));
}

#[test]
fn formats_are_read_from_templates() {
    let cases = [
        (
            "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
            None,
        ),
        (
            "{% if tools %}<tools>{{ tools }}</tools> <tool_call>{% endif %}",
            Some(ToolFormat::Hermes),
        ),
        (
            "{% if tools %}<|start_header_id|>ipython{% endif %}",
            Some(ToolFormat::Llama3),
        ),
        (
            "{% if tools %}[AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]",
            Some(ToolFormat::Mistral),
        ),
        (
            "{% if tools %}{% endif %}[TOOL_CALLS]{{ n }}[ARGS]",
            Some(ToolFormat::MistralArgs),
        ),
        (
            "{% if tools %}{% endif %}<|channel|>commentary",
            Some(ToolFormat::Harmony),
        ),
        (
            "{% if tools %}{% endif %}<tool_call>{{ n }}<arg_key>",
            Some(ToolFormat::Glm),
        ),
        (
            "{% if tools %}{% endif %}<｜tool▁calls▁begin｜>",
            Some(ToolFormat::DeepSeek),
        ),
    ];
    for (template, want) in cases {
        assert_eq!(ToolFormat::of_template(template), want, "{template}");
    }
}

#[test]
fn call_grammars_name_the_function_and_its_schema() {
    let f = Function {
        name: "get_weather".into(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
    };
    let special = |s: &str| (s == "<|channel|>").then_some(7);
    let g = call_grammar(ToolFormat::Hermes, &[&f], &special).unwrap();
    assert!(
        g.starts_with("start: call0\ncall0: \"<tool_call>\" \"\\n\" %json {"),
        "{g}"
    );
    assert!(
        g.contains("\"const\":\"get_weather\"") && g.contains("\"required\":[\"city\"]"),
        "{g}"
    );
    let g = call_grammar(ToolFormat::Harmony, &[&f, &f], &special).unwrap();
    assert!(
        g.starts_with(
            "start: call0 | call1\ncall0: <[7]> \"commentary to=functions.\" \"get_weather\""
        ),
        "{g}"
    );
    assert!(call_grammar(ToolFormat::Glm, &[&f], &special).is_err());
    assert!(call_grammar(ToolFormat::Hermes, &[], &special).is_err());
}

fn weather() -> Tools {
    let list = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]);
    Tools {
        functions: vec![Function {
            name: "get_weather".into(),
            parameters: list[0]["function"]["parameters"].clone(),
        }],
        list,
        choice: ToolChoice::Auto,
        parallel: true,
    }
}

/// A conversation with a call and its result, as the request reader gives it.
fn history() -> Vec<ChatMessage> {
    let msg = |role: &str, content: &str| ChatMessage {
        role: role.into(),
        content: content.into(),
        ..ChatMessage::default()
    };
    let mut call = msg("assistant", "");
    call.tool_calls = Some(
        json!([{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]),
    );
    let mut result = msg("tool", "18 C");
    result.tool_call_id = Some("call_1".into());
    vec![msg("user", "Weather in Paris?"), call, result]
}

/// Qwen 2.5's own template renders the tools, the call and the result itself.
#[test]
fn qwen_template_renders_tools_calls_and_results() {
    let template = include_str!("../../../tests/data/templates/qwen2.5-instruct.jinja");
    assert_eq!(ToolFormat::of_template(template), Some(ToolFormat::Hermes));
    let t = weather();
    let out = ramforge_engine::text::template::render_chat_tools(
        template,
        &history(),
        Some(&t.list),
        true,
        "",
        "<|im_end|>",
    )
    .unwrap();
    assert!(out.starts_with("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n# Tools\n\n"), "{out}");
    assert!(
        out.contains("<tools>\n{") && out.contains("\"name\":\"get_weather\""),
        "{out}"
    );
    assert!(
        out.ends_with("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n18 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"),
        "{out}"
    );
}

/// A template without tools gets them in the system message, and the turns as text.
#[test]
fn a_plain_template_gets_tools_and_turns_as_text() {
    let chatml =
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
    assert_eq!(ToolFormat::of_template(chatml), None);
    let t = weather();
    let messages = plain_messages(history(), Some(&t));
    let out =
        ramforge_engine::text::template::render_chat(chatml, &messages, false, "", "").unwrap();
    let want = format!(
        "<|im_start|>system\n{}<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{{\"name\":\"get_weather\",\"arguments\":{{\"city\":\"Paris\"}}}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n18 C\n</tool_response><|im_end|>\n",
        tools_system_text(&t)
    );
    assert_eq!(out, want);
    assert!(tools_system_text(&t)
        .contains("<tools>\n{\"type\":\"function\",\"function\":{\"name\":\"get_weather\""));
    // A system message keeps its text, the tools after it.
    let mut with_system = history();
    with_system.insert(
        0,
        ChatMessage {
            role: "system".into(),
            content: "Be brief.".into(),
            ..ChatMessage::default()
        },
    );
    let m = plain_messages(with_system, Some(&t));
    assert_eq!(m.len(), 4);
    assert!(m[0].content.starts_with("Be brief.\n\n# Tools"));
    assert!(has_tool_turns(&history()) && !has_tool_turns(&m));
}
