//! Every error class of the server, each an OpenAI-style `{"error": {...}}` with its status:
//! 400 (bad JSON, missing or ill-typed fields, unsupported or unknown fields, a prompt over the
//! context), 401, 404, 405, 413 and 503 with Retry-After.

use super::server::{chat_body, completion_body, error_of, Server, MODEL};
use serde_json::Value;
use std::io::Read;
use std::time::Duration;

/// Status, `param` and `code` of an error answer.
fn fails(answer: (u16, serde_json::Value)) -> (u16, String, String) {
    let (status, body) = answer;
    let e = error_of(&body);
    let s = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
    (status, s(&e["param"]), s(&e["code"]))
}

#[test]
fn bad_requests_are_400_naming_the_field() {
    let server = Server::start(&["--ctx", "96"]);
    let chat = "/v1/chat/completions";
    let cases: Vec<(&str, String, &str)> = vec![
        (chat, "{not json".into(), ""),
        (chat, "[1, 2]".into(), ""),
        (chat, format!(r#"{{"model": "{MODEL}"}}"#), "messages"),
        (
            chat,
            r#"{"messages": [{"role": "user", "content": "hi"}]}"#.into(),
            "model",
        ),
        (
            chat,
            chat_body("hi", 4, r#""temperature": "hot""#).replace(r#""temperature": 0, "#, ""),
            "temperature",
        ),
        (chat, chat_body("hi", 4, r#""top_p": 0"#), "top_p"),
        (chat, chat_body("hi", 0, ""), "max_tokens"),
        (chat, chat_body("hi", 4, r#""stop": 7"#), "stop"),
        (chat, chat_body("hi", 4, r#""n": 2"#), "n"),
        (
            chat,
            chat_body("hi", 4, r#""tools": [{"type": "function"}]"#),
            "tools[0].function",
        ),
        (
            chat,
            chat_body("hi", 4, r#""response_format": {"type": "xml"}"#),
            "response_format.type",
        ),
        (
            chat,
            chat_body("hi", 4, r#""logprobs": true, "top_logprobs": 21"#),
            "top_logprobs",
        ),
        (
            chat,
            chat_body("hi", 4, r#""logit_bias": {"50": 10}"#),
            "logit_bias",
        ),
        (
            chat,
            chat_body("hi", 4, r#""presence_penalty": 2.5"#),
            "presence_penalty",
        ),
        (
            chat,
            chat_body("hi", 4, r#""frequency_penalty": -3"#),
            "frequency_penalty",
        ),
        (
            chat,
            chat_body("hi", 4, r#""stream_options": {"include_usage": true}"#),
            "stream_options",
        ),
        (
            chat,
            chat_body("hi", 4, r#""max_completion_tokens": 4"#),
            "max_tokens",
        ),
        (chat, chat_body("hi", 4, r#""frobnicate": 1"#), "frobnicate"),
        (
            chat,
            chat_body("hi", 4, "").replace(r#""role": "user""#, r#""role": "function""#),
            "messages[0].role",
        ),
        (
            chat,
            chat_body("hi", 4, "").replace(
                r#""content": "hi""#,
                r#""content": [{"type": "image_url"}]"#,
            ),
            "messages[0].content[0].type",
        ),
        (
            chat,
            chat_body("hi", 4, "")
                .replace(r#""content": "hi""#, r#""content": "hi", "name": "bob""#),
            "messages[0].name",
        ),
        (
            chat,
            chat_body(&"many words ".repeat(60), 4, ""),
            "messages",
        ),
        (
            "/v1/completions",
            completion_body("hi", 4, r#""echo": true"#),
            "echo",
        ),
        (
            "/v1/completions",
            completion_body("hi", 4, r#""best_of": 3"#),
            "best_of",
        ),
        (
            "/v1/completions",
            completion_body("hi", 4, "").replace(r#""hi""#, "[1, 2]"),
            "prompt",
        ),
    ];
    for (path, body, param) in &cases {
        let (status, got, code) = fails(server.post(path, body));
        assert_eq!(
            (status, got.as_str()),
            (400, *param),
            "{body} -> code {code}"
        );
    }
    // The long prompt's error says why.
    let (_, body) = server.post(chat, &chat_body(&"many words ".repeat(60), 4, ""));
    assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
    // And the server still answers a good request after all of them.
    let (status, body) = server.post(chat, &chat_body("hi", 2, ""));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn api_key_not_found_too_large_and_wrong_method() {
    let server = Server::start(&["--api-key", "sesame"]);
    let body = completion_body("Hello", 2, "");
    assert_eq!(server.get("/health", None).0, 200, "/health stays open");
    for key in [None, Some("wrong")] {
        let (status, _, code) = fails(server.get("/v1/models", key));
        assert_eq!((status, code.as_str()), (401, "invalid_api_key"));
        let (status, _, _) = fails(server.post_full("/v1/completions", &body, key).0);
        assert_eq!(status, 401);
    }
    let (status, models) = server.get("/v1/models", Some("sesame"));
    assert_eq!(status, 200);
    assert_eq!(models["data"][0]["id"], MODEL, "{models}");
    let ((status, _), _) = server.post_full("/v1/completions", &body, Some("sesame"));
    assert_eq!(status, 200);

    let (status, _, code) = fails(server.get("/v2/nothing", Some("sesame")));
    assert_eq!((status, code.as_str()), (404, "unknown_url"));
    let other = body.replace(MODEL, "gpt-4o");
    let (status, _, code) = fails(
        server
            .post_full("/v1/completions", &other, Some("sesame"))
            .0,
    );
    assert_eq!((status, code.as_str()), (404, "model_not_found"));
    let (status, _, _) = fails(server.get("/v1/completions", Some("sesame")));
    assert_eq!(status, 405);

    // The server answers 413 as soon as it has read past the limit and closes the
    // connection, so a client still writing the body may see its write fail: the body goes
    // out on its own thread while this one reads the answer, which arrives before any reset.
    let huge = completion_body(&"x".repeat(2 << 20), 2, "");
    let mut stream = std::net::TcpStream::connect(&server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let request = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Authorization: Bearer sesame\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{huge}",
        server.addr,
        huge.len()
    );
    let sender = std::thread::spawn(move || {
        use std::io::Write;
        // A failed write is the server having answered and closed: not an error here.
        let _ = writer.write_all(request.as_bytes());
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // Until the server closes (or resets, after its answer): the whole answer is in hand.
    while let Ok(n) = stream.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    drop(stream);
    sender.join().unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let (_, body) = answer.split_once("\r\n\r\n").expect("a whole answer");
    let body: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"));
    assert_eq!(body["error"]["code"], "request_too_large", "{body}");
}

/// Sends a long streaming completion and waits for its first bytes: a 200 means the server
/// holds it (running or waiting); what else it answered otherwise.
fn start_long(server: &Server) -> Result<std::net::TcpStream, String> {
    let long = completion_body("1, 2, 3, 4, 5,", 400, r#""stream": true"#);
    let mut stream = server.raw_post("/v1/completions", &long);
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut first = [0u8; 64];
    let n = stream.read(&mut first).unwrap();
    if first[..n].starts_with(b"HTTP/1.1 200") {
        Ok(stream)
    } else {
        Err(String::from_utf8_lossy(&first[..n]).into_owned())
    }
}

#[test]
fn a_full_queue_is_503_with_retry_after() {
    // No waiting room: while one request generates, the next is turned away. The first is
    // taken at once, even just after the server announced itself.
    let server = Server::start(&["--queue", "0"]);
    let busy = start_long(&server).expect("the first request of an idle server is taken");
    let ((status, body), retry) =
        server.post_full("/v1/completions", &completion_body("Hi", 2, ""), None);
    assert_eq!(status, 503, "{body}");
    error_of(&body);
    assert_eq!(retry.as_deref(), Some("1"));
    drop(busy);
    // Once the engine is free (the hung-up stream is cancelled), requests are served again.
    let mut served = false;
    for _ in 0..100 {
        let (status, _) = server.post("/v1/completions", &completion_body("Hi", 2, ""));
        if status == 200 {
            served = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(served, "the server never became free again");
}

#[test]
fn a_free_slot_takes_a_request_without_waiting_room() {
    // `--queue 0 --parallel 2`: the second request runs beside the first; a third, with both
    // slots running, is a 503.
    let server = Server::start(&["--queue", "0", "--parallel", "2"]);
    let first = start_long(&server).expect("the first request is taken");
    let second = start_long(&server).expect("the second request takes the free slot");
    let ((status, body), _) =
        server.post_full("/v1/completions", &completion_body("Hi", 2, ""), None);
    assert_eq!(status, 503, "{body}");
    drop((first, second));
}
