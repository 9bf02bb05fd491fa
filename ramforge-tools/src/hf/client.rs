//! The HTTP side of `--hf`: where the Hub is (`HF_ENDPOINT`), who we are (`HF_TOKEN`), and
//! one-line errors for what a request can answer.

use std::time::Duration;

/// The Hub's address when `HF_ENDPOINT` is not set (the variable huggingface_hub reads too).
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// A Hub client: the HTTP agent, the base URL and the token, read from the environment once.
pub struct Hub {
    agent: ureq::Agent,
    /// Base URL without a trailing slash.
    pub endpoint: String,
    token: Option<String>,
}

/// Why a request failed: the difference matters, since only an unreachable Hub lets
/// `--hf` fall back to what is cached.
#[derive(Debug)]
pub enum HubError {
    /// No answer at all (connection refused, DNS, TLS, timeout).
    Unreachable(String),
    /// An answer that is not what we need (an HTTP error status, a malformed body).
    Refused(String),
}

impl std::fmt::Display for HubError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HubError::Unreachable(m) | HubError::Refused(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for HubError {}

impl Hub {
    /// The client for `HF_ENDPOINT` (default [`DEFAULT_ENDPOINT`]) with `HF_TOKEN` if set.
    pub fn from_env() -> Hub {
        let endpoint = std::env::var("HF_ENDPOINT")
            .ok()
            .filter(|e| !e.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_string());
        let token = std::env::var("HF_TOKEN")
            .ok()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(Duration::from_secs(30))
            // Per read, not for the whole body: a large file may take hours, a stalled one not.
            .timeout_read(Duration::from_secs(60))
            // The Hub redirects downloads to a CDN with a signed URL: the token stays home.
            .redirect_auth_headers(ureq::RedirectAuthHeaders::SameHost)
            .user_agent(concat!("ramforge-tools/", env!("CARGO_PKG_VERSION")))
            .build();
        Hub {
            agent,
            endpoint: endpoint.trim_end_matches('/').to_string(),
            token,
        }
    }

    /// A GET of `url` (absolute), carrying the token when there is one.
    pub fn get(&self, url: &str) -> ureq::Request {
        let request = self.agent.get(url);
        match &self.token {
            Some(token) => request.set("Authorization", &format!("Bearer {token}")),
            None => request,
        }
    }

    /// `url` fetched, or a [`HubError`] that says what happened in one line; `what` names
    /// the thing asked for.
    pub fn call(&self, request: ureq::Request, what: &str) -> Result<ureq::Response, HubError> {
        let url = request.url().to_string();
        request.call().map_err(|e| match e {
            ureq::Error::Status(code, _) => HubError::Refused(format!(
                "{what}: HTTP {code} from {url}{}",
                status_hint(code, self.token.is_some())
            )),
            ureq::Error::Transport(t) => {
                HubError::Unreachable(format!("{what}: cannot reach {}: {t}", self.endpoint))
            }
        })
    }
}

/// What an error status most likely means on the Hub.
fn status_hint(code: u16, has_token: bool) -> &'static str {
    match (code, has_token) {
        (401 | 403, false) => " (a gated or private repository: set HF_TOKEN)",
        (401 | 403, true) => " (HF_TOKEN is not allowed to read this repository)",
        (404, false) => " (no such repository or file, or it is private: set HF_TOKEN)",
        (404, true) => " (no such repository or file)",
        (429, _) => " (rate limited: try again later)",
        _ => "",
    }
}

/// `path` with each byte outside URL-safe characters percent-encoded; `/` stays a separator.
pub fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_only_what_a_path_cannot_hold() {
        assert_eq!(encode_path("a/b-c_d.gguf"), "a/b-c_d.gguf");
        assert_eq!(encode_path("my model+1.gguf"), "my%20model%2B1.gguf");
        assert_eq!(encode_path("é"), "%C3%A9");
    }
}
