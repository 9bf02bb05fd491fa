//! Generation through the server: greedy chat identical to `run --chat`, completions identical
//! to `run`, streamed text identical to plain, usage and finish_reason right, and a later turn
//! of a conversation served from the prompt cache, with peak RSS within the budget + 16 MiB.

use super::server::{chat_body, completion_body, smollm, Server, MODEL};
use serde_json::Value;
use std::process::Command;

/// What `ramforge-tools run` prints for `prompt` (greedy, `max_tokens`), without the final newline.
fn cli(prompt: &str, max_tokens: usize, chat: bool) -> String {
    let n = max_tokens.to_string();
    let mut args = vec![
        "run",
        "-q",
        "--threads",
        "2",
        "--prompt",
        prompt,
        "-n",
        &n,
        "--temperature",
        "0",
    ];
    if chat {
        args.push("--chat");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(&args)
        .arg("--model")
        .arg(smollm())
        .output()
        .expect("run ramforge-tools run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.strip_suffix('\n').unwrap_or(&text).to_string()
}

/// The text of a streamed answer's chunks, and its finish_reason.
pub(super) fn streamed_text(chunks: &[String], chat: bool) -> (String, String) {
    assert_eq!(
        chunks.last().map(String::as_str),
        Some("[DONE]"),
        "{chunks:?}"
    );
    let mut text = String::new();
    let mut finish = String::new();
    for c in &chunks[..chunks.len() - 1] {
        let v: Value = serde_json::from_str(c).unwrap();
        let object = if chat {
            "chat.completion.chunk"
        } else {
            "text_completion"
        };
        assert_eq!(v["object"], object, "{v}");
        let Some(choice) = v["choices"].get(0) else {
            continue;
        };
        let piece = if chat {
            &choice["delta"]["content"]
        } else {
            &choice["text"]
        };
        text.push_str(piece.as_str().unwrap_or(""));
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    (text, finish)
}

#[test]
fn greedy_answers_match_the_cli_and_streams_match_plain() {
    let server = Server::start(&[]);
    let question = "What is the capital of France?";
    let (status, plain) = server.post("/v1/chat/completions", &chat_body(question, 24, ""));
    assert_eq!(status, 200, "{plain}");
    let content = plain["choices"][0]["message"]["content"].as_str().unwrap();
    assert_eq!(
        content,
        cli(question, 24, true),
        "chat differs from run --chat"
    );
    assert_eq!(plain["object"], "chat.completion");
    assert_eq!(plain["model"], MODEL);
    let usage = &plain["usage"];
    let completion_tokens = usage["completion_tokens"].as_u64().unwrap();
    assert!(completion_tokens > 0 && completion_tokens <= 24, "{usage}");
    let finish = plain["choices"][0]["finish_reason"].as_str().unwrap();
    assert_eq!(finish == "length", completion_tokens == 24, "{plain}");
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["prompt_tokens"].as_u64().unwrap() + completion_tokens)
    );

    let chunks = server.stream(
        "/v1/chat/completions",
        &chat_body(
            question,
            24,
            r#""stream": true, "stream_options": {"include_usage": true}"#,
        ),
    );
    assert_eq!(
        streamed_text(&chunks, true),
        (content.to_string(), finish.to_string())
    );
    let usage_chunk: Value = serde_json::from_str(&chunks[chunks.len() - 2]).unwrap();
    assert_eq!(usage_chunk["usage"]["completion_tokens"], completion_tokens);
    // The same prompt again: all but its last token come from the cache.
    let prompt_tokens = usage["prompt_tokens"].as_u64().unwrap();
    assert_eq!(
        usage_chunk["usage"]["prompt_tokens_details"]["cached_tokens"],
        prompt_tokens - 1
    );

    let prompt = "The capital of France is";
    let (status, plain) = server.post("/v1/completions", &completion_body(prompt, 12, ""));
    assert_eq!(status, 200, "{plain}");
    let text = plain["choices"][0]["text"].as_str().unwrap();
    assert_eq!(text, cli(prompt, 12, false), "completion differs from run");
    let chunks = server.stream(
        "/v1/completions",
        &completion_body(prompt, 12, r#""stream": true"#),
    );
    let finish = plain["choices"][0]["finish_reason"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(streamed_text(&chunks, false), (text.to_string(), finish));
}

/// The budget of the test below, and what the HTTP side may add to it.
const RAM: u64 = 48 << 20;
const SLACK: u64 = 16 << 20;

#[test]
fn stop_strings_and_a_conversation_from_the_cache_within_the_budget() {
    // Under a budget half the model file's size: most layers stream.
    let server = Server::start(&["--ram", "48M", "--ctx", "1024"]);
    let (_, plain) = server.post("/v1/completions", &completion_body("1, 2, 3, 4,", 16, ""));
    let text = plain["choices"][0]["text"].as_str().unwrap().to_string();
    // Stop at the first digit after the first few characters of the text.
    let stop = text.trim_start().chars().next().unwrap().to_string();
    let body = completion_body("1, 2, 3, 4,", 16, &format!(r#""stop": ["{stop}"]"#));
    let (_, stopped) = server.post("/v1/completions", &body);
    let cut = stopped["choices"][0]["text"].as_str().unwrap();
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop", "{stopped}");
    assert_eq!(cut, &text[..text.find(&stop).unwrap()]);

    let first = r#"{"role": "user", "content": "Name a colour."}"#;
    let body = |messages: &str| {
        format!(
            r#"{{"model": "{MODEL}", "messages": [{messages}], "temperature": 0, "max_tokens": 12}}"#
        )
    };
    let (_, one) = server.post("/v1/chat/completions", &body(first));
    let reply = one["choices"][0]["message"]["content"].as_str().unwrap();
    let turns = format!(
        r#"{first}, {{"role": "assistant", "content": {}}}, {{"role": "user", "content": "Another one?"}}"#,
        serde_json::to_string(reply).unwrap()
    );
    let (_, two) = server.post("/v1/chat/completions", &body(&turns));
    let cached = two["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        cached >= one["usage"]["prompt_tokens"].as_u64().unwrap(),
        "{two}"
    );
    let peak = server.peak_rss();
    assert!(
        peak <= RAM + SLACK,
        "peak RSS {} MiB over the budget + 16 MiB",
        peak >> 20
    );
}
