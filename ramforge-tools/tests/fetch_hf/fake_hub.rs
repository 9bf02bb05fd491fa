//! A loopback stand-in for the Hugging Face Hub that answers its real URL shapes:
//! `GET /api/models/{org}/{repo}/tree/main?recursive=true` (paged with a `Link: rel="next"`
//! header, entries with `type`, `path`, `size`, `lfs: {oid, size}`) and
//! `GET /{org}/{repo}/resolve/main/{path}`, redirected (302) to a CDN path that honours
//! `Range: bytes=N-` with a 206. It logs every request, and can list a wrong sha256 for a
//! file or cut a file's first download short.

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One request the hub saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
}

/// A repository's files and how the hub misbehaves with them.
#[derive(Default)]
pub struct Repo {
    pub files: BTreeMap<String, Vec<u8>>,
    /// Files listed with this sha256 instead of their own.
    pub wrong_sha: BTreeMap<String, String>,
    /// Files whose first download stops after this many bytes.
    pub cut_after: BTreeMap<String, usize>,
}

#[derive(Default)]
struct State {
    repos: BTreeMap<String, Repo>,
    seen: Vec<Seen>,
    cut_done: Vec<String>,
}

/// The running hub; it stops with the test process.
pub struct FakeHub {
    pub endpoint: String,
    state: Arc<Mutex<State>>,
}

impl FakeHub {
    /// Serves `repos` (by `org/name`) on an ephemeral loopback port.
    pub fn start(repos: Vec<(&str, Repo)>) -> FakeHub {
        let state = Arc::new(Mutex::new(State {
            repos: repos.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
            ..State::default()
        }));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let shared = state.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let app = Router::new().fallback(move |uri: Uri, headers: HeaderMap| {
                    let state = shared.clone();
                    async move { answer(&state, &uri, &headers) }
                });
                axum::serve(listener, app).await.unwrap();
            });
        });
        FakeHub { endpoint, state }
    }

    /// The requests so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.state.lock().unwrap().seen.clone()
    }

    /// Forgets the requests so far.
    pub fn clear_seen(&self) {
        self.state.lock().unwrap().seen.clear();
    }
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Entries per listing page, so that every listing of more than this many files is paged.
const PAGE: usize = 2;

fn answer(state: &Mutex<State>, uri: &Uri, headers: &HeaderMap) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let mut st = state.lock().unwrap();
    st.seen.push(Seen {
        path: uri.path().to_string(),
        range: header("range"),
        authorization: header("authorization"),
    });
    let path = uri.path();
    if let Some(rest) = path.strip_prefix("/api/models/") {
        let Some(repo) = rest.strip_suffix("/tree/main") else {
            return StatusCode::NOT_FOUND.into_response();
        };
        let page: usize = uri
            .query()
            .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("cursor=")))
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        return listing(&st, repo, page, uri);
    }
    if let Some(rest) = path.strip_prefix("/cdn/") {
        let (repo, file) = split_repo(rest);
        let range = header("range");
        return file_body(&mut st, &repo, &file, range.as_deref());
    }
    let (repo, rest) = split_repo(path.trim_start_matches('/'));
    match rest.strip_prefix("resolve/main/") {
        Some(file)
            if st
                .repos
                .get(&repo)
                .is_some_and(|r| r.files.contains_key(file)) =>
        {
            Response::builder()
                .status(StatusCode::FOUND)
                .header("Location", format!("/cdn/{repo}/{file}"))
                .body(Body::empty())
                .unwrap()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// `org/name/rest...` as (`org/name`, `rest...`).
fn split_repo(path: &str) -> (String, String) {
    let mut parts = path.splitn(3, '/');
    let org = parts.next().unwrap_or("");
    let name = parts.next().unwrap_or("");
    (
        format!("{org}/{name}"),
        parts.next().unwrap_or("").to_string(),
    )
}

fn listing(st: &State, repo: &str, page: usize, uri: &Uri) -> Response {
    let Some(r) = st.repos.get(repo) else {
        return (StatusCode::NOT_FOUND, "Repository not found").into_response();
    };
    let mut entries = Vec::new();
    let mut dirs = std::collections::BTreeSet::new();
    for (path, bytes) in &r.files {
        if let Some((dir, _)) = path.rsplit_once('/') {
            if dirs.insert(dir.to_string()) {
                entries.push(
                    serde_json::json!({"type": "directory", "oid": "0", "size": 0, "path": dir}),
                );
            }
        }
        let mut e =
            serde_json::json!({"type": "file", "oid": "1", "size": bytes.len(), "path": path});
        if path.ends_with(".gguf") {
            let sha = r
                .wrong_sha
                .get(path)
                .cloned()
                .unwrap_or_else(|| sha256_hex(bytes));
            e["size"] = serde_json::json!(134);
            e["lfs"] = serde_json::json!({"oid": sha, "size": bytes.len(), "pointerSize": 134});
        }
        entries.push(e);
    }
    let chunk: Vec<_> = entries.iter().skip(page * PAGE).take(PAGE).collect();
    let mut response = axum::Json(chunk).into_response();
    if (page + 1) * PAGE < entries.len() {
        let next = format!(
            "<{}?recursive=true&cursor={}>; rel=\"next\"",
            uri.path(),
            page + 1
        );
        response.headers_mut().insert("Link", next.parse().unwrap());
    }
    response
}

fn file_body(st: &mut State, repo: &str, file: &str, range: Option<&str>) -> Response {
    let key = format!("{repo}/{file}");
    let Some(r) = st.repos.get(repo) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let Some(bytes) = r.files.get(file).cloned() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let cut = r.cut_after.get(file).copied();
    let start = range
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<usize>().ok());
    let len = bytes.len();
    let (status, start) = match start {
        Some(s) if s < len => (StatusCode::PARTIAL_CONTENT, s),
        Some(_) => return StatusCode::RANGE_NOT_SATISFIABLE.into_response(),
        None => (StatusCode::OK, 0),
    };
    let mut builder = Response::builder()
        .status(status)
        .header("Content-Length", len - start)
        .header("Accept-Ranges", "bytes");
    if status == StatusCode::PARTIAL_CONTENT {
        builder = builder.header("Content-Range", format!("bytes {start}-{}/{len}", len - 1));
    }
    let body = match cut {
        Some(n) if !st.cut_done.contains(&key) => {
            st.cut_done.push(key);
            // The promised length, then a failed stream: the connection drops mid-body.
            let head = bytes[start..start + n].to_vec();
            let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
                vec![Ok(head), Err(std::io::Error::other("cut by the fake hub"))];
            // The error waits a moment, so the head has been sent when the connection drops
            // (an error at once would abort before the response, which a client retries).
            let paced =
                futures_util::StreamExt::then(futures_util::stream::iter(chunks), |c| async {
                    if c.is_err() {
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    }
                    c
                });
            Body::from_stream(paced)
        }
        _ => Body::from(bytes[start..].to_vec()),
    };
    builder.body(body).unwrap()
}
