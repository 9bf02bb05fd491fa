//! Tool calls and reasoning end to end. SmolLM2's own template renders no tools, so the server
//! describes them in the system message and reads Hermes `<tool_call>` calls; with
//! `--template` Qwen 2.5's template renders them itself (its `tools` variable, `tool` turns,
//! assistant `tool_calls`). The tiny model does not call tools by itself, so the calls here
//! are `tool_choice: required` or a named function: constrained to the parameters schema, they
//! must parse and validate, greedy and sampled, whole and streamed. Then the tool's result is
//! fed back and answered, and thinking is split into `reasoning_content`.

use super::server::{chat_body, error_of, Server, MODEL};
use serde_json::{json, Value};
use std::path::PathBuf;

fn template(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/templates")
        .join(name)
}

fn weather_tools() -> Value {
    json!([
        {"type": "function", "function": {
            "name": "get_weather",
            "description": "The current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 24},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
                },
                "required": ["city", "unit"],
                "additionalProperties": false
            }
        }},
        {"type": "function", "function": {
            "name": "get_time",
            "description": "The local time in a time zone.",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"type": "string", "maxLength": 24}},
                "required": ["zone"],
                "additionalProperties": false
            }
        }}
    ])
}

fn body(messages: Value, extra: Value) -> String {
    let mut b = json!({"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 80});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b.to_string()
}

fn ask() -> Value {
    json!([{"role": "user", "content": "What is the weather in Paris?"}])
}

/// The one call of an answer, checked against the weather schema or the time schema.
fn the_call(answer: &Value) -> (String, Value, String) {
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{answer}");
    assert_eq!(choice["message"]["content"], Value::Null, "{answer}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1, "{answer}");
    let call = &calls[0];
    assert_eq!(call["type"], "function");
    let id = call["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("call_") && id.len() > 8, "{call}");
    let name = call["function"]["name"].as_str().unwrap().to_string();
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().unwrap())
        .unwrap_or_else(|e| panic!("arguments are not JSON ({e}): {call}"));
    let obj = args.as_object().unwrap();
    match name.as_str() {
        "get_weather" => {
            assert_eq!(obj.len(), 2, "{args}");
            assert!(
                args["city"]
                    .as_str()
                    .is_some_and(|c| c.chars().count() <= 24),
                "{args}"
            );
            assert!(
                ["celsius", "fahrenheit"].contains(&args["unit"].as_str().unwrap()),
                "{args}"
            );
        }
        "get_time" => {
            assert_eq!(obj.len(), 1, "{args}");
            assert!(args["zone"].is_string(), "{args}");
        }
        other => panic!("called {other}"),
    }
    (name, args, id)
}

/// A streamed answer's tool calls (from `delta.tool_calls`) and its finish reason.
fn streamed_calls(chunks: &[String]) -> (Vec<Value>, String, String) {
    assert_eq!(chunks.last().map(String::as_str), Some("[DONE]"));
    let mut calls = Vec::new();
    let mut content = String::new();
    let mut finish = String::new();
    for c in &chunks[..chunks.len() - 1] {
        let v: Value = serde_json::from_str(c).unwrap();
        let choice = &v["choices"][0];
        if let Some(list) = choice["delta"]["tool_calls"].as_array() {
            calls.extend(list.iter().cloned());
        }
        if let Some(t) = choice["delta"]["content"].as_str() {
            content.push_str(t);
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    (calls, content, finish)
}

#[test]
fn required_and_named_tool_calls_validate_whole_and_streamed() {
    let server = Server::start(&[]);
    let tools = weather_tools();

    // Required, greedy: a call of one of the tools whose arguments validate.
    let (status, answer) = server.post(
        "/v1/chat/completions",
        &body(ask(), json!({"tools": tools, "tool_choice": "required"})),
    );
    assert_eq!(status, 200, "{answer}");
    let (name, args, _) = the_call(&answer);

    // Sampled (temperature 1, two seeds): still valid calls.
    for seed in [1, 2] {
        let (status, sampled) = server.post(
            "/v1/chat/completions",
            &body(
                ask(),
                json!({"tools": tools, "tool_choice": "required", "temperature": 1.0, "seed": seed}),
            ),
        );
        assert_eq!(status, 200, "{sampled}");
        the_call(&sampled);
    }

    // A named function is the one called.
    let named = json!({"type": "function", "function": {"name": "get_time"}});
    let (status, answer) = server.post(
        "/v1/chat/completions",
        &body(ask(), json!({"tools": tools, "tool_choice": named})),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(the_call(&answer).0, "get_time");

    // Streamed: the same greedy call as `delta.tool_calls`, no content, finish tool_calls.
    let mut b: Value = serde_json::from_str(&body(
        ask(),
        json!({"tools": tools, "tool_choice": "required", "stream": true}),
    ))
    .unwrap();
    b["stream"] = true.into();
    let chunks = server.stream("/v1/chat/completions", &b.to_string());
    let (calls, content, finish) = streamed_calls(&chunks);
    assert_eq!(finish, "tool_calls", "{chunks:?}");
    assert_eq!(content, "", "{chunks:?}");
    assert_eq!(calls.len(), 1, "{chunks:?}");
    assert_eq!(calls[0]["index"], 0);
    assert!(calls[0]["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(calls[0]["function"]["name"], name.as_str());
    let streamed_args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(streamed_args, args);

    // `tool_choice: none`: no call, plain content.
    let (status, answer) = server.post(
        "/v1/chat/completions",
        &body(
            ask(),
            json!({"tools": tools, "tool_choice": "none", "max_tokens": 8}),
        ),
    );
    assert_eq!(status, 200, "{answer}");
    assert!(
        answer["choices"][0]["message"]["content"].is_string(),
        "{answer}"
    );
    assert!(
        answer["choices"][0]["message"].get("tool_calls").is_none(),
        "{answer}"
    );

    // The call and its result fed back: the template's conversation grows by both, and the
    // model answers in text.
    let history = |result: &str| {
        json!([
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}
            }]},
            {"role": "tool", "tool_call_id": "call_1", "content": result}
        ])
    };
    let (status, short) = server.post(
        "/v1/chat/completions",
        &body(history("18"), json!({"tools": tools, "max_tokens": 24})),
    );
    assert_eq!(status, 200, "{short}");
    let (_, long) = server.post(
        "/v1/chat/completions",
        &body(
            history("18 degrees, light rain, wind from the west"),
            json!({"tools": tools, "max_tokens": 24}),
        ),
    );
    let prompt_tokens = |a: &Value| a["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        prompt_tokens(&long) > prompt_tokens(&short),
        "{short} {long}"
    );
    let (_, bare) = server.post(
        "/v1/chat/completions",
        &body(ask(), json!({"tools": tools})),
    );
    assert!(
        prompt_tokens(&short) > prompt_tokens(&bare) + 10,
        "{short} {bare}"
    );
    let message = &short["choices"][0]["message"];
    assert!(
        message["content"].is_string() || message["tool_calls"].is_array(),
        "{short}"
    );

    // Refused with a 400 naming the field.
    let bad = [
        (
            json!({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "nope"}}}),
            "tool_choice.function.name",
        ),
        (json!({"tools": {"a": 1}}), "tools"),
        (
            json!({"tools": [{"type": "function", "function": {"name": "bad name"}}]}),
            "tools[0].function.name",
        ),
        (json!({"tools": [{"type": "retrieval"}]}), "tools[0].type"),
        (json!({"tool_choice": "required"}), "tool_choice"),
        (
            json!({"tools": tools, "tool_choice": "required", "response_format": {"type": "json_object"}}),
            "tool_choice",
        ),
        (json!({"reasoning_format": "maybe"}), "reasoning_format"),
    ];
    for (extra, param) in bad {
        let (status, answer) = server.post("/v1/chat/completions", &body(ask(), extra.clone()));
        assert_eq!(status, 400, "{extra}: {answer}");
        assert_eq!(error_of(&answer)["param"], param, "{extra}: {answer}");
    }
    let (status, answer) = server.post(
        "/v1/chat/completions",
        &body(json!([{"role": "tool", "content": "18"}]), json!({})),
    );
    assert_eq!(status, 400, "{answer}");
    assert_eq!(error_of(&answer)["param"], "messages[0].tool_call_id");
}

/// Qwen 2.5's template renders the tools and the tool turns itself.
#[test]
fn a_template_that_renders_tools_gets_them_and_its_calls_are_parsed() {
    let t = template("qwen2.5-instruct.jinja");
    let server = Server::start(&["--template", t.to_str().unwrap()]);
    let tools = weather_tools();
    let (status, answer) = server.post(
        "/v1/chat/completions",
        &body(ask(), json!({"tools": tools, "tool_choice": "required"})),
    );
    assert_eq!(status, 200, "{answer}");
    let (_, _, id) = the_call(&answer);
    let call = answer["choices"][0]["message"]["tool_calls"][0].clone();
    // The tools are in the prompt: more tokens than without them.
    let (_, plain) = server.post(
        "/v1/chat/completions",
        &body(ask(), json!({"max_tokens": 4})),
    );
    let prompt_tokens = |a: &Value| a["usage"]["prompt_tokens"].as_u64().unwrap();
    assert!(
        prompt_tokens(&answer) > prompt_tokens(&plain) + 100,
        "{answer} {plain}"
    );
    // Fed back as the client library sends it: the call, then its result.
    let mut messages = ask();
    let list = messages.as_array_mut().unwrap();
    list.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
    list.push(json!({"role": "tool", "tool_call_id": id, "content": "{\"temperature\": 18}"}));
    let (status, after) = server.post(
        "/v1/chat/completions",
        &body(messages, json!({"tools": tools, "max_tokens": 16})),
    );
    assert_eq!(status, 200, "{after}");
    assert!(
        prompt_tokens(&after) > prompt_tokens(&answer) + 10,
        "{after}"
    );
}

/// A template whose generation prompt opens `<think>`: the answer is reasoning, split out
/// (whole and streamed) or kept inline.
#[test]
fn thinking_goes_to_reasoning_content() {
    let t = template("chatml-think.jinja");
    let server = Server::start(&["--template", t.to_str().unwrap()]);
    let request = chat_body("What is two plus two?", 10, "");
    let (status, split) = server.post("/v1/chat/completions", &request);
    assert_eq!(status, 200, "{split}");
    let (status, inline) = server.post(
        "/v1/chat/completions",
        &chat_body("What is two plus two?", 10, r#""reasoning_format": "none""#),
    );
    assert_eq!(status, 200, "{inline}");
    let text = inline["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(!text.is_empty(), "{inline}");
    assert!(inline["choices"][0]["message"]
        .get("reasoning_content")
        .is_none());
    // Ten tokens do not close the thinking: all of it is reasoning.
    assert_eq!(
        split["choices"][0]["message"]["reasoning_content"], text,
        "{split}"
    );
    assert_eq!(split["choices"][0]["message"]["content"], "", "{split}");

    let streamed = request.replace(r#""temperature": 0"#, r#""stream": true, "temperature": 0"#);
    let chunks = server.stream("/v1/chat/completions", &streamed);
    let mut reasoning = String::new();
    for c in &chunks[..chunks.len() - 1] {
        let v: Value = serde_json::from_str(c).unwrap();
        if let Some(r) = v["choices"][0]["delta"]["reasoning_content"].as_str() {
            reasoning.push_str(r);
        }
        assert!(
            v["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or("")
                .is_empty(),
            "{c}"
        );
    }
    assert_eq!(reasoning, text, "{chunks:?}");
}
