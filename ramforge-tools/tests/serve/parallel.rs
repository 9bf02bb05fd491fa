//! `--parallel 4`: concurrent requests decoded together (one pass over the weights per step,
//! under a budget that streams layers) get exactly the answers they get one at a time, the
//! steps really served several requests at once (`/health`'s `busiest_step`), a request still
//! reuses the kept context of an earlier one, and the peak RSS stays within the budget + 16 MiB.

use super::server::{chat_body, completion_body, Server};
use serde_json::Value;

const RAM: u64 = 48 << 20;
const SLACK: u64 = 16 << 20;

/// A mix of completions and chats of different lengths.
fn requests() -> Vec<(&'static str, String)> {
    vec![
        ("/v1/completions", completion_body("1, 2, 3, 4,", 20, "")),
        (
            "/v1/completions",
            completion_body("The capital of France is", 12, ""),
        ),
        ("/v1/chat/completions", chat_body("Name a colour.", 16, "")),
        (
            "/v1/chat/completions",
            chat_body("Write one sentence about the sea.", 24, ""),
        ),
        (
            "/v1/completions",
            completion_body("Once upon a time", 18, ""),
        ),
        ("/v1/chat/completions", chat_body("What is 2 + 2?", 10, "")),
    ]
}

/// The answer's text and its usage's completion tokens.
fn answer(server: &Server, path: &str, body: &str) -> (String, u64) {
    let (status, v): (u16, Value) = server.post(path, body);
    assert_eq!(status, 200, "{v}");
    let choice = &v["choices"][0];
    let text = choice["text"]
        .as_str()
        .or_else(|| choice["message"]["content"].as_str())
        .unwrap()
        .to_string();
    (text, v["usage"]["completion_tokens"].as_u64().unwrap())
}

#[test]
fn concurrent_requests_decoded_together_equal_sequential_ones() {
    let server = Server::start(&["--parallel", "4", "--ram", "48M", "--ctx", "256"]);
    let (_, health) = server.get("/health", None);
    assert_eq!(health["parallel"], 4, "{health}");
    assert_eq!(health["busiest_step"], 0, "{health}");
    let sequential: Vec<_> = requests()
        .iter()
        .map(|(path, body)| answer(&server, path, body))
        .collect();
    assert_eq!(server.get("/health", None).1["busiest_step"], 1);

    let concurrent: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = requests()
            .into_iter()
            .map(|(path, body)| {
                let server = &server;
                s.spawn(move || answer(server, path, &body))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(concurrent, sequential);
    let (_, health) = server.get("/health", None);
    let busiest = health["busiest_step"].as_u64().unwrap();
    assert!(
        (2..=4).contains(&busiest),
        "the concurrent requests were not decoded together: {health}"
    );

    // The same prompt again goes to the slot that kept it: all but its last token cached.
    let (path, body) = &requests()[3];
    let (_, again) = server.post(path, body);
    let usage = &again["usage"];
    assert_eq!(
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
            + 1,
        usage["prompt_tokens"].as_u64().unwrap(),
        "{again}"
    );

    let peak = server.peak_rss();
    assert!(
        peak <= RAM + SLACK,
        "peak RSS {} MiB over the budget + 16 MiB",
        peak >> 20
    );
}
