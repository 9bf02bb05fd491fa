//! The chat page at `/` in a real browser: headless Chromium (driven by `page_check.py` over
//! the DevTools pipe) loads it, a message is typed and sent, and the answer the page streamed
//! must be the API's greedy answer to the same message; the same through the `?q=` parameter.
//! A screenshot is kept as `serve-page.png` in cargo's test scratch folder (under target/).

use super::server::{chat_body, Server};
use std::path::PathBuf;
use std::process::Command;

const PROMPT: &str = "What is the capital of France?";
const MAX_TOKENS: usize = 24;

#[test]
fn the_page_streams_the_greedy_answer_in_chromium() {
    let server = Server::start(&[]);
    let (status, body) = server.post("/v1/chat/completions", &chat_body(PROMPT, MAX_TOKENS, ""));
    assert_eq!(status, 200, "{body}");
    let api = body["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!api.is_empty());

    let (status, page) = page_html(&server);
    assert_eq!(status, 200);
    assert!(page.contains("<title>RAMforge</title>"));
    // Self-contained: nothing loaded from another host.
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "the page links elsewhere"
    );

    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("serve-page.png");
    let _ = std::fs::remove_file(&shot);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/serve/page_check.py");
    let url = server.url(&format!("/?temperature=0&max_tokens={MAX_TOKENS}"));
    let out = Command::new("python3")
        .arg(&script)
        .args(["--url", &url, "--prompt", PROMPT, "--timeout", "150"])
        .arg("--screenshot")
        .arg(&shot)
        .output()
        .expect("python3 runs page_check.py");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "page_check.py failed (chromium is needed: scripts/test.sh installs it): {stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(report["error"], false, "{report}");
    assert_eq!(report["answer"], api.as_str(), "typed and sent in the page");
    assert_eq!(report["answer_q"], api.as_str(), "sent by ?q=");
    // The live panel showed the engine's figures.
    let panel = &report["panel"];
    assert!(
        panel["budget"]
            .as_str()
            .is_some_and(|b| b.contains("unlimited")),
        "{panel}"
    );
    assert!(
        panel["pinned"]
            .as_str()
            .is_some_and(|p| p.starts_with("30 layers")),
        "{panel}"
    );
    let passes: f64 = panel["decode passes"].as_str().unwrap().parse().unwrap();
    assert!(passes >= 1.0, "{panel}");
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(png.starts_with(b"\x89PNG"), "not a PNG");
    eprintln!("screenshot: {}", shot.display());
}

fn page_html(server: &Server) -> (u16, String) {
    let response = ureq::get(&server.url("/")).call().expect("GET /");
    assert!(response.content_type().starts_with("text/html"));
    (response.status(), response.into_string().unwrap())
}
