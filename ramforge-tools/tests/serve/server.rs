//! A `ramforge-tools serve` process for a test: started on an ephemeral loopback port (the
//! address read from its stderr line), talked to over HTTP, and always stopped (on drop).

use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The default model, the one the server tests run.
pub fn smollm() -> PathBuf {
    super::common::model_path("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The model's id in the API.
pub const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1";

/// A running server; killed on drop if still running.
pub struct Server {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Server {
    /// Starts `serve` on the default model with `extra` flags, waiting for its address line.
    pub fn start(extra: &[&str]) -> Server {
        Server::start_model(&smollm(), extra)
    }

    /// Starts `serve` on `model` with `extra` flags, waiting for its address line.
    pub fn start_model(model: &std::path::Path, extra: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
            .arg("serve")
            .arg(model)
            .args(["--port", "0", "--threads", "2"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start ramforge-tools serve");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[serve] {line}");
                if let Some(rest) = line.split("listening on http://").nth(1) {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                panic!("the server printed no 'listening on' line within 120 s");
            }
        };
        assert!(
            addr.starts_with("127.0.0.1:"),
            "listening on {addr}, not loopback"
        );
        Server { child, addr }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// GET `path`: status and JSON body.
    pub fn get(&self, path: &str, key: Option<&str>) -> (u16, Value) {
        let mut r = ureq::get(&self.url(path));
        if let Some(k) = key {
            r = r.set("Authorization", &format!("Bearer {k}"));
        }
        answer(r.call())
    }

    /// POST `body` (sent as is) to `path`: status and JSON body.
    pub fn post(&self, path: &str, body: &str) -> (u16, Value) {
        self.post_full(path, body, None).0
    }

    /// POST with an optional API key; also the `Retry-After` header.
    pub fn post_full(
        &self,
        path: &str,
        body: &str,
        key: Option<&str>,
    ) -> ((u16, Value), Option<String>) {
        let mut r = ureq::post(&self.url(path)).set("Content-Type", "application/json");
        if let Some(k) = key {
            r = r.set("Authorization", &format!("Bearer {k}"));
        }
        let response = r.send_string(body);
        let retry = match &response {
            Ok(r) | Err(ureq::Error::Status(_, r)) => r.header("retry-after").map(str::to_string),
            Err(_) => None,
        };
        (answer(response), retry)
    }

    /// POST a streamed request; the `data:` payloads in order, `[DONE]` included.
    pub fn stream(&self, path: &str, body: &str) -> Vec<String> {
        let response = ureq::post(&self.url(path))
            .set("Content-Type", "application/json")
            .send_string(body)
            .expect("streamed request");
        assert_eq!(response.content_type(), "text/event-stream");
        let mut text = String::new();
        response.into_reader().read_to_string(&mut text).unwrap();
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    }

    /// Opens a raw connection and sends `body` to `path` (for hang-ups).
    pub fn raw_post(&self, path: &str, body: &str) -> TcpStream {
        let mut s = TcpStream::connect(&self.addr).unwrap();
        write!(
            s,
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr,
            body.len()
        )
        .unwrap();
        s
    }

    /// The server's peak RSS so far (`VmHWM`), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
            << 10
    }

    /// Sends SIGTERM and waits (at most `limit`) for the exit.
    pub fn terminate(mut self, limit: Duration) -> ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                started.elapsed() < limit,
                "the server did not exit within {limit:?} of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn answer(response: Result<ureq::Response, ureq::Error>) -> (u16, Value) {
    let response = match response {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("request failed: {e}"),
    };
    let status = response.status();
    let text = response.into_string().unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text:?}"));
    (status, body)
}

/// A chat request body for `content`, greedy, with `extra` fields (`"a": 1, ...` or empty).
pub fn chat_body(content: &str, max_tokens: usize, extra: &str) -> String {
    let content = serde_json::to_string(content).unwrap();
    let sep = if extra.is_empty() { "" } else { ", " };
    format!(
        r#"{{"model": "{MODEL}", "messages": [{{"role": "user", "content": {content}}}], "temperature": 0, "max_tokens": {max_tokens}{sep}{extra}}}"#
    )
}

/// A completion request body for `prompt`, greedy.
pub fn completion_body(prompt: &str, max_tokens: usize, extra: &str) -> String {
    let prompt = serde_json::to_string(prompt).unwrap();
    let sep = if extra.is_empty() { "" } else { ", " };
    format!(
        r#"{{"model": "{MODEL}", "prompt": {prompt}, "temperature": 0, "max_tokens": {max_tokens}{sep}{extra}}}"#
    )
}

/// The error object of an error answer, checked for OpenAI's four fields.
pub fn error_of(body: &Value) -> &Value {
    let e = &body["error"];
    assert!(
        e["message"].is_string() && e["type"].is_string(),
        "not an OpenAI error: {body}"
    );
    assert!(
        e.get("param").is_some() && e.get("code").is_some(),
        "not an OpenAI error: {body}"
    );
    e
}
