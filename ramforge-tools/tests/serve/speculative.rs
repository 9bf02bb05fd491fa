//! Speculative decoding in the server (`serve --lookup`, `serve --draft`, `serve --mtp`): the
//! greedy answers of the same requests, whole and streamed, equal plain `serve`'s;
//! `usage.speculation` reports what it did (drafts accepted on a prompt that repeats itself),
//! and `/metrics` counts it.

use super::generation::streamed_text;
use super::server::{chat_body, completion_body, Server};
use serde_json::Value;

/// A prompt that repeats itself, so the context has n-grams to look up.
const PROMPT: &str =
    "one two three four five six seven eight one two three four five six seven eight one two three";

/// One answer: its text, finish_reason and usage.
type Answer = (String, String, Value);

/// The answers of the same requests, in order: a completion, the same completion streamed
/// (its usage chunk asked for), and a chat.
fn answers(server: &Server) -> Vec<Answer> {
    let mut out = Vec::new();
    let (status, v) = server.post("/v1/completions", &completion_body(PROMPT, 40, ""));
    assert_eq!(status, 200, "{v}");
    let choice = &v["choices"][0];
    out.push((
        choice["text"].as_str().unwrap().to_string(),
        choice["finish_reason"].as_str().unwrap().to_string(),
        v["usage"].clone(),
    ));
    let extra = r#""stream": true, "stream_options": {"include_usage": true}"#;
    let chunks = server.stream("/v1/completions", &completion_body(PROMPT, 40, extra));
    let (text, finish) = streamed_text(&chunks, false);
    let usage: Value = serde_json::from_str(&chunks[chunks.len() - 2]).unwrap();
    out.push((text, finish, usage["usage"].clone()));
    let question = format!("Continue the list: {PROMPT}");
    let (status, v) = server.post("/v1/chat/completions", &chat_body(&question, 24, ""));
    assert_eq!(status, 200, "{v}");
    let choice = &v["choices"][0];
    out.push((
        choice["message"]["content"].as_str().unwrap().to_string(),
        choice["finish_reason"].as_str().unwrap().to_string(),
        v["usage"].clone(),
    ));
    out
}

/// A counter's value in the server's `/metrics`.
fn counter(server: &Server, name: &str) -> u64 {
    let text = ureq::get(&server.url("/metrics"))
        .call()
        .expect("GET /metrics")
        .into_string()
        .unwrap();
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no {name} in\n{text}"));
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<f64>()
        .unwrap() as u64
}

/// The answers of a server with `flags` equal plain `serve`'s, each reporting speculation;
/// returns them.
fn equal_to_plain(flags: &[&str]) -> (Server, Vec<Answer>) {
    equal_to_plain_on(&super::server::smollm(), flags, true)
}

/// [`equal_to_plain`] on `model`; with `accepting`, every answer took fewer passes than tokens
/// (some draft was accepted).
fn equal_to_plain_on(
    model: &std::path::Path,
    flags: &[&str],
    accepting: bool,
) -> (Server, Vec<Answer>) {
    let plain = answers(&Server::start_model(model, &["--ctx", "512"]));
    let mut args = vec!["--ctx", "512"];
    args.extend_from_slice(flags);
    let server = Server::start_model(model, &args);
    let spec = answers(&server);
    for (p, s) in plain.iter().zip(&spec) {
        assert_eq!(
            (&p.0, &p.1),
            (&s.0, &s.1),
            "{flags:?} differs from plain serve"
        );
        assert_eq!(p.2["completion_tokens"], s.2["completion_tokens"]);
        assert!(p.2.get("speculation").is_none(), "{}", p.2);
        let x = &s.2["speculation"];
        let passes = x["passes"].as_u64().unwrap_or_else(|| panic!("{}", s.2));
        let completion = s.2["completion_tokens"].as_u64().unwrap();
        assert!(passes >= 1 && passes <= completion, "{}", s.2);
        assert!(!accepting || passes < completion, "{}", s.2);
        assert!(x["accepted"].as_u64().unwrap() <= x["drafted"].as_u64().unwrap());
    }
    let sum = |key: &str| -> u64 {
        spec.iter()
            .map(|a| a.2["speculation"][key].as_u64().unwrap())
            .sum()
    };
    assert_eq!(
        counter(&server, "ramforge_draft_tokens_accepted_total"),
        sum("accepted")
    );
    assert_eq!(
        counter(&server, "ramforge_speculative_passes_total"),
        sum("passes")
    );
    (server, spec)
}

#[test]
fn lookup_answers_equal_plain_and_accept_drafts() {
    let (_server, spec) = equal_to_plain(&["--lookup"]);
    for a in &spec[..2] {
        let x = &a.2["speculation"];
        assert!(x["accepted"].as_u64().unwrap() > 0, "{x}");
    }
}

/// `serve --mtp` on a glm4moe synth with an MTP layer (the tokenizer and chat template of
/// SmolLM2, whose file name it takes so that the requests' model id is the one served).
#[test]
fn mtp_answers_equal_plain() {
    let dir = std::env::temp_dir().join(format!("ramforge-serve-mtp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let glm4moe = ["--arch", "glm4moe", "--kv-heads", "2"];
    let mtp = ["--nextn", "1", "--type", "Q8_0"];
    super::common::synth(
        &model,
        &[&glm4moe[..], &super::common::MOE_SMALL, &mtp].concat(),
    );
    // Its random MTP layer rarely agrees with the model: drafts, nearly all rejected.
    let (_server, spec) = equal_to_plain_on(&model, &["--mtp", "--draft-max", "4"], false);
    for a in &spec {
        let x = &a.2["speculation"];
        assert!(x["drafted"].as_u64().unwrap() > 0, "{x}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn draft_model_answers_equal_plain() {
    // Another quantization of the same model: the same vocabulary, mostly the same tokens.
    let draft = super::common::model("smollm2-Q4_0.gguf");
    let (_server, spec) = equal_to_plain(&["--draft", &draft, "--draft-max", "6"]);
    let accepted: u64 = spec
        .iter()
        .map(|a| a.2["speculation"]["accepted"].as_u64().unwrap())
        .sum();
    assert!(accepted > 0, "{spec:?}");
}

#[test]
fn logprobs_requests_decode_plainly() {
    let server = Server::start(&["--ctx", "512", "--lookup"]);
    let extra = r#""logprobs": true, "top_logprobs": 2"#;
    let (status, v) = server.post("/v1/chat/completions", &chat_body(PROMPT, 8, extra));
    assert_eq!(status, 200, "{v}");
    assert!(v["usage"].get("speculation").is_none(), "{v}");
    let entries = v["choices"][0]["logprobs"]["content"].as_array().unwrap();
    let completion = v["usage"]["completion_tokens"].as_u64().unwrap();
    assert_eq!(entries.len() as u64, completion, "{v}");
}

/// A completion request body for `model`, greedy.
fn body_for(model: &str, prompt: &str, max_tokens: usize) -> String {
    let prompt = serde_json::to_string(prompt).unwrap();
    format!(
        r#"{{"model": "{model}", "prompt": {prompt}, "temperature": 0, "max_tokens": {max_tokens}}}"#
    )
}

/// The texts of one request alone, then of two together (the second sent once the first,
/// streamed, has sent its first chunk): a request decoded alone speculates, two together step
/// plainly, and the first's context passes from one to the other mid-answer.
fn alone_then_together(server: &Server, model: &str) -> Vec<String> {
    let text = |v: &Value| v["choices"][0]["text"].as_str().unwrap().to_string();
    let (status, a) = server.post("/v1/completions", &body_for(model, PROMPT, 48));
    assert_eq!(status, 200, "{a}");
    let url = server.url("/v1/completions");
    let first = body_for(model, PROMPT, 200).replace(r#""prompt""#, r#""stream": true, "prompt""#);
    let (started, begun) = std::sync::mpsc::channel();
    let together = std::thread::spawn(move || {
        let response = ureq::post(&url)
            .set("Content-Type", "application/json")
            .send_string(&first)
            .expect("first request");
        let mut chunks = Vec::new();
        for line in std::io::BufRead::lines(std::io::BufReader::new(response.into_reader())) {
            if let Some(data) = line.unwrap().strip_prefix("data: ") {
                chunks.push(data.to_string());
                let _ = started.send(());
            }
        }
        chunks
    });
    begun.recv().expect("a first chunk");
    let (status, b) = server.post("/v1/completions", &body_for(model, "seven eight nine", 24));
    assert_eq!(status, 200, "{b}");
    let (first, _) = streamed_text(&together.join().unwrap(), false);
    let (_, health) = server.get("/health", None);
    assert_eq!(
        health["busiest_step"], 2,
        "the two requests were not decoded together"
    );
    vec![text(&a), first, text(&b)]
}

/// A hybrid model (qwen35moe synth: a recurrent state rolled back after a rejected draft)
/// drafted for by its own Q4_0 copy, with two slots: answers equal plain `serve`'s.
#[test]
fn hybrid_draft_answers_equal_plain_alone_and_together() {
    let dir = std::env::temp_dir().join(format!("ramforge-serve-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (target, draft) = (dir.join("target.gguf"), dir.join("draft.gguf"));
    for (file, ty) in [(&target, "Q8_0"), (&draft, "Q4_0")] {
        let args = [&super::common::qwen35moe_small()[..], &["--type", ty]].concat();
        super::common::synth(file, &args);
    }
    let flags = ["--ctx", "256", "--parallel", "2"];
    let plain = alone_then_together(&Server::start_model(&target, &flags), "target");
    let draft_arg = draft.to_str().unwrap();
    let mut spec_flags = flags.to_vec();
    spec_flags.extend(["--draft", draft_arg]);
    let server = Server::start_model(&target, &spec_flags);
    let spec = alone_then_together(&server, "target");
    assert_eq!(spec, plain);
    // Drafts both accepted and rejected: recurrent states rolled back.
    let accepted = counter(&server, "ramforge_draft_tokens_accepted_total");
    let drafted = counter(&server, "ramforge_draft_tokens_total");
    assert!(
        0 < accepted && accepted < drafted,
        "{accepted} of {drafted} accepted"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A schema-constrained chat answer and a completion cut by a stop string, from `server`.
fn constrained_and_stopped(server: &Server) -> (String, String, Value) {
    let schema = r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"], "additionalProperties": false}"#;
    let extra = format!(
        r#""response_format": {{"type": "json_schema", "json_schema": {{"name": "person", "strict": true, "schema": {schema}}}}}"#
    );
    let question = "Describe a person as JSON.";
    let (status, v) = server.post("/v1/chat/completions", &chat_body(question, 60, &extra));
    assert_eq!(status, 200, "{v}");
    let json = v["choices"][0]["message"]["content"].as_str().unwrap();
    serde_json::from_str::<Value>(json).unwrap_or_else(|e| panic!("not JSON ({e}): {v}"));
    let (status, s) = server.post(
        "/v1/completions",
        &completion_body(PROMPT, 40, r#""stop": ["eight one"]"#),
    );
    assert_eq!(status, 200, "{s}");
    let stopped = &s["choices"][0];
    assert_eq!(stopped["finish_reason"], "stop", "{s}");
    (
        json.to_string(),
        stopped["text"].as_str().unwrap().to_string(),
        v["usage"].clone(),
    )
}

#[test]
fn constrained_and_stopped_answers_equal_plain() {
    let plain = constrained_and_stopped(&Server::start(&["--ctx", "512"]));
    let server = Server::start(&["--ctx", "512", "--lookup"]);
    let spec = constrained_and_stopped(&server);
    assert_eq!((&spec.0, &spec.1), (&plain.0, &plain.1));
    assert!(
        spec.2["speculation"]["passes"].as_u64().unwrap() > 0,
        "{}",
        spec.2
    );
}
