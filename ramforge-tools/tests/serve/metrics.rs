//! `/metrics` read as a Prometheus scraper reads it (the `prometheus-parse` crate): every
//! family typed, and its counters moving with one chat request by exactly what the request's
//! usage says; `/status` carries the same figures as JSON.

use super::server::{chat_body, Server};
use prometheus_parse::{Scrape, Value as Sample};
use serde_json::Value;
use std::collections::HashMap;
use std::io::BufRead;

/// The budget the server runs under, so the budget gauge has a number to show.
const RAM: u64 = 1 << 30;

/// One scrape: the unlabelled samples by name, and the request counts by (route, code).
struct Metrics {
    plain: HashMap<String, f64>,
    requests: HashMap<(String, String), f64>,
    content_type: String,
}

fn scrape(server: &Server) -> Metrics {
    let response = ureq::get(&server.url("/metrics"))
        .call()
        .expect("GET /metrics");
    let content_type = response.header("content-type").unwrap_or("").to_string();
    let text = response.into_string().unwrap();
    let lines = std::io::Cursor::new(text.clone()).lines();
    let parsed = Scrape::parse(lines).expect("/metrics parses as Prometheus text");
    // The parser skips lines it cannot read: every sample line must have become a sample.
    let sample_lines = text
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count();
    assert_eq!(
        parsed.samples.len(),
        sample_lines,
        "unparsed lines in\n{text}"
    );
    // Every family has its HELP line (and so its TYPE, which the parser needs for the values).
    for s in &parsed.samples {
        assert!(
            parsed.docs.contains_key(&s.metric),
            "no HELP for {}",
            s.metric
        );
    }
    let mut plain = HashMap::new();
    let mut requests = HashMap::new();
    for s in parsed.samples {
        let value = match s.value {
            Sample::Counter(v) | Sample::Gauge(v) => v,
            other => panic!("{} is not a counter or gauge: {other:?}", s.metric),
        };
        if s.metric == "ramforge_requests_total" {
            let route = s.labels.get("route").expect("route label").to_string();
            let code = s.labels.get("code").expect("code label").to_string();
            requests.insert((route, code), value);
        } else {
            assert!(
                plain.insert(s.metric.clone(), value).is_none(),
                "{} twice\n{text}",
                s.metric
            );
        }
    }
    Metrics {
        plain,
        requests,
        content_type,
    }
}

impl Metrics {
    fn get(&self, name: &str) -> f64 {
        *self
            .plain
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in /metrics"))
    }

    fn chats(&self) -> f64 {
        let key = ("/v1/chat/completions".to_string(), "200".to_string());
        self.requests.get(&key).copied().unwrap_or(0.0)
    }
}

#[test]
fn metrics_parse_and_move_with_a_request() {
    let ram = format!("{}M", RAM >> 20);
    let server = Server::start(&["--ram", &ram]);
    let before = scrape(&server);
    assert!(
        before.content_type.starts_with("text/plain; version=0.0.4"),
        "{}",
        before.content_type
    );
    assert_eq!(before.get("ramforge_budget_bytes"), RAM as f64);
    assert!(before.get("ramforge_rss_bytes") > 0.0);
    assert!(before.get("ramforge_budget_minimum_bytes") > 0.0);
    let layers = before.get("ramforge_pinned_layers") + before.get("ramforge_streamed_layers");
    assert_eq!(layers, 30.0, "SmolLM2-135M has 30 layers");

    let (status, body) = server.post("/v1/chat/completions", &chat_body("Name a colour.", 6, ""));
    assert_eq!(status, 200, "{body}");
    let usage = &body["usage"];
    let after = scrape(&server);
    let moved = |name: &str| after.get(name) - before.get(name);

    assert_eq!(after.chats() - before.chats(), 1.0);
    // The first scrape was counted too (it had been answered when the second one was taken).
    let metrics_key = ("/metrics".to_string(), "200".to_string());
    assert!(after.requests.get(&metrics_key).copied().unwrap_or(0.0) >= 1.0);
    assert_eq!(
        moved("ramforge_completion_tokens_total"),
        usage["completion_tokens"].as_f64().unwrap()
    );
    assert_eq!(
        moved("ramforge_prompt_tokens_total"),
        usage["prompt_tokens"].as_f64().unwrap()
    );
    assert_eq!(moved("ramforge_finished_requests_total"), 1.0);
    // Greedy to 6 tokens: the first comes from the prefill, each later one from a pass of one row.
    let passes = moved("ramforge_decode_passes_total");
    assert!((1.0..=6.0).contains(&passes), "{passes} passes");
    assert_eq!(
        moved("ramforge_decode_pass_tokens_total"),
        passes,
        "one request: one token a pass"
    );
    let evaluated = usage["prompt_tokens"].as_f64().unwrap() + passes;
    assert_eq!(moved("ramforge_tokens_evaluated_total"), evaluated);
    assert_eq!(after.get("ramforge_active_requests"), 0.0);
    // The request's place in the queue is given back just after its answer was sent.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while scrape(&server).get("ramforge_queue_requests") != 0.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the queue still holds the request"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let peak = after.get("ramforge_managed_peak_bytes");
    assert!(peak > 0.0 && peak <= RAM as f64, "managed peak {peak}");

    // /status: the same figures as JSON, for the chat page.
    let (status, s) = server.get("/status", None);
    assert_eq!(status, 200);
    assert_eq!(s["budget_bytes"], RAM);
    assert_eq!(s["model"], super::server::MODEL);
    let e: &Value = &s["engine"];
    assert_eq!(
        e["completion_tokens"].as_f64(),
        Some(after.get("ramforge_completion_tokens_total"))
    );
    assert_eq!(
        e["passes"].as_f64(),
        Some(after.get("ramforge_decode_passes_total"))
    );
    assert_eq!(
        e["residency"]["pinned_layers"].as_f64(),
        Some(after.get("ramforge_pinned_layers"))
    );
}
