//! The agent fields end to end: `logprobs` whose top entry is the greedy token, the OpenAI
//! penalties changing what is sampled, and `response_format` holding sampled output to JSON
//! (any object, and a schema), beside a free request.

use super::server::{chat_body, completion_body, Server};
use serde_json::Value;

fn content(body: &Value) -> &str {
    body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no content: {body}"))
}

#[test]
fn logprobs_penalties_and_response_format_work_end_to_end() {
    let server = Server::start(&[]);

    // Logprobs: each chosen token is the top alternative of a greedy request, and the tokens
    // spell the content.
    let (status, body) = server.post(
        "/v1/chat/completions",
        &chat_body(
            "Name a colour.",
            6,
            r#""logprobs": true, "top_logprobs": 3"#,
        ),
    );
    assert_eq!(status, 200, "{body}");
    let entries = body["choices"][0]["logprobs"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no logprobs: {body}"));
    assert!(!entries.is_empty(), "{body}");
    let mut spelled = String::new();
    for e in entries {
        let top = e["top_logprobs"].as_array().unwrap();
        assert_eq!(top.len(), 3, "{e}");
        assert_eq!(
            top[0]["token"], e["token"],
            "greedy pick is not the top entry: {e}"
        );
        let lp = e["logprob"].as_f64().unwrap();
        assert!(lp <= 0.0 && (lp - top[0]["logprob"].as_f64().unwrap()).abs() < 1e-6);
        spelled += e["token"].as_str().unwrap();
    }
    assert!(
        content(&body).starts_with(spelled.trim_end()) || spelled.starts_with(content(&body)),
        "{spelled:?} vs {body}"
    );

    // Penalties: a greedy continuation that repeats itself stops repeating under them.
    let prompt = "the the the the the the the the the the";
    let text = |b: &Value| b["choices"][0]["text"].as_str().unwrap().to_string();
    let (_, plain) = server.post("/v1/completions", &completion_body(prompt, 12, ""));
    let (status, penalized) = server.post(
        "/v1/completions",
        &completion_body(
            prompt,
            12,
            r#""frequency_penalty": 2.0, "presence_penalty": 2.0"#,
        ),
    );
    assert_eq!(status, 200, "{penalized}");
    let repeats = |t: &str| t.matches("the").count();
    assert!(
        repeats(&text(&penalized)) < repeats(&text(&plain)),
        "{:?} vs {:?}",
        text(&plain),
        text(&penalized)
    );

    // Structured output, sampled (temperature 1, several seeds): every answer parses.
    let schema = r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"], "additionalProperties": false}"#;
    for seed in 1..=3 {
        let extra = format!(
            r#""temperature": 1.0, "seed": {seed}, "response_format": {{"type": "json_schema", "json_schema": {{"name": "person", "strict": true, "schema": {schema}}}}}"#
        );
        let body = chat_body("Describe a person as JSON.", 60, &extra)
            .replace(r#""temperature": 0, "#, "");
        let (status, answer) = server.post("/v1/chat/completions", &body);
        assert_eq!(status, 200, "{answer}");
        let v: Value = serde_json::from_str(content(&answer))
            .unwrap_or_else(|e| panic!("seed {seed}: not JSON ({e}): {answer}"));
        let age = v["age"].as_i64().unwrap_or_else(|| panic!("{v}"));
        assert!(
            (0..=120).contains(&age) && v["name"].as_str().is_some_and(|n| n.chars().count() <= 12),
            "{v}"
        );
        assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
    }
    let body = chat_body(
        "Give me a small JSON object with one key.",
        200,
        r#""response_format": {"type": "json_object"}"#,
    );
    let (status, answer) = server.post("/v1/chat/completions", &body);
    assert_eq!(status, 200, "{answer}");
    let v: Value =
        serde_json::from_str(content(&answer)).unwrap_or_else(|e| panic!("{e}: {answer}"));
    assert!(v.is_object(), "{v}");
}
