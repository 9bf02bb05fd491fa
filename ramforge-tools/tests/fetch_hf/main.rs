//! `fetch --hf` and `run --hf` against a loopback stand-in for the Hugging Face Hub
//! (`fake_hub`, pointed at through HF_ENDPOINT): a single file, a split model, a resumed
//! download, a checksum mismatch, a missing quant, the token, offline use of the cache, and a
//! real model fetched and run. No request leaves 127.0.0.1.

#[path = "../common/mod.rs"]
mod common;
mod fake_hub;

use fake_hub::{sha256_hex, FakeHub, Repo};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Bytes that differ from file to file (a model's content does not matter to fetching).
fn content(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3] ^ seed)
        .collect()
}

/// `ramforge-tools ARGS` with the cache in `cache` and the Hub at `endpoint`.
fn tool(cache: &Path, endpoint: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(args)
        .env("XDG_CACHE_HOME", cache)
        .env("HF_ENDPOINT", endpoint)
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .expect("spawn ramforge-tools")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_of(o: &Output) -> Value {
    assert!(o.status.success(), "stderr: {}", stderr(o));
    serde_json::from_slice(&o.stdout).expect("stdout is JSON")
}

/// Asserts a runtime failure whose only error line is the last line on stderr; returns it.
fn one_line_error(o: &Output) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "stderr: {err}");
    assert!(o.stdout.is_empty());
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("error")).count(),
        1,
        "{err}"
    );
    let last = lines.last().expect("an error line").to_string();
    assert!(last.starts_with("error: "), "{err}");
    last
}

fn cached(cache: &Path, repo: &str, file: &str) -> PathBuf {
    cache
        .join("ramforge/hf")
        .join(repo)
        .join("files")
        .join(file)
}

fn part_of(path: &Path) -> PathBuf {
    PathBuf::from(format!("{}.part", path.display()))
}

/// The paths of the `resolve` requests (downloads) the hub saw.
fn downloads(hub: &FakeHub) -> Vec<String> {
    hub.seen()
        .into_iter()
        .filter(|s| s.path.contains("/resolve/main/"))
        .map(|s| s.path)
        .collect()
}

fn single_repo() -> Repo {
    let mut r = Repo::default();
    r.files
        .insert("README.md".into(), b"# a model card\n".to_vec());
    r.files.insert("m-Q4_K_M.gguf".into(), content(1, 70_000));
    r.files.insert("m-Q8_0.gguf".into(), content(2, 90_000));
    r
}

#[test]
fn a_single_file_is_fetched_verified_cached_and_used_offline() {
    let hub = FakeHub::start(vec![("org/single", single_repo())]);
    let cache = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"));
    let o = cmd
        .args(["fetch", "--hf", "org/single:q8_0", "--json"])
        .env("XDG_CACHE_HOME", cache.path())
        .env("HF_ENDPOINT", &hub.endpoint)
        .env("HF_TOKEN", "hf_test_token")
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .unwrap();
    let j = json_of(&o);
    let want = cached(cache.path(), "org/single", "m-Q8_0.gguf");
    assert_eq!(j["path"], want.to_str().unwrap());
    assert_eq!(j["files"].as_array().unwrap().len(), 1);
    assert_eq!(j["files"][0]["downloaded"], true);
    assert_eq!(j["files"][0]["sha256"], sha256_hex(&content(2, 90_000)));
    assert_eq!(fs::read(&want).unwrap(), content(2, 90_000));
    assert!(!part_of(&want).exists());
    // The listing was paged (2 entries a page) and every request to the Hub carried the token.
    let seen = hub.seen();
    assert!(
        seen.iter()
            .filter(|s| s.path.ends_with("/tree/main"))
            .count()
            >= 2,
        "{seen:?}"
    );
    for s in seen.iter().filter(|s| !s.path.starts_with("/cdn/")) {
        assert_eq!(
            s.authorization.as_deref(),
            Some("Bearer hf_test_token"),
            "{s:?}"
        );
    }
    assert_eq!(downloads(&hub), ["/org/single/resolve/main/m-Q8_0.gguf"]);

    // Again: from the cache, nothing downloaded; plain output is the path alone.
    hub.clear_seen();
    let o = tool(
        cache.path(),
        &hub.endpoint,
        &["fetch", "--hf", "org/single:Q8_0"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        want.to_str().unwrap()
    );
    assert!(downloads(&hub).is_empty());

    // Offline: no request at all, by flag or by HF_HUB_OFFLINE; and a Hub that cannot be
    // reached falls back to the cache with a note.
    hub.clear_seen();
    let o = tool(
        cache.path(),
        &hub.endpoint,
        &["fetch", "--hf", "org/single:Q8_0", "--offline"],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let closed = closed_endpoint();
    let o = tool(cache.path(), &closed, &["fetch", "--hf", "org/single:Q8_0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("using the cached copy of org/single"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        want.to_str().unwrap()
    );
    assert!(hub.seen().is_empty(), "{:?}", hub.seen());
    // Offline, a quant that was never downloaded is a one-line error naming it.
    let o = tool(
        cache.path(),
        &closed,
        &["fetch", "--hf", "org/single:Q4_K_M", "--offline"],
    );
    let err = one_line_error(&o);
    assert!(
        err.contains("offline, and m-Q4_K_M.gguf of org/single is not in the cache"),
        "{err}"
    );
}

/// An endpoint on a loopback port nothing listens on.
fn closed_endpoint() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}")
}

#[test]
fn a_split_model_is_fetched_whole_and_its_first_part_printed() {
    let mut r = Repo::default();
    let parts: Vec<(String, Vec<u8>)> = (1..=3)
        .map(|i| {
            (
                format!("Q6_K/m-Q6_K-{i:05}-of-00003.gguf"),
                content(10 + i as u8, 40_000 + i * 1000),
            )
        })
        .collect();
    for (p, b) in &parts {
        r.files.insert(p.clone(), b.clone());
    }
    r.files.insert("m-Q4_K_M.gguf".into(), content(1, 5000));
    let hub = FakeHub::start(vec![("org/split", r)]);
    let cache = tempfile::tempdir().unwrap();
    let j = json_of(&tool(
        cache.path(),
        &hub.endpoint,
        &["fetch", "--hf", "org/split:q6_k", "--json"],
    ));
    let first = cached(cache.path(), "org/split", &parts[0].0);
    assert_eq!(j["path"], first.to_str().unwrap());
    let files = j["files"].as_array().unwrap();
    assert_eq!(files.len(), 3);
    for ((p, bytes), f) in parts.iter().zip(files) {
        let local = cached(cache.path(), "org/split", p);
        assert_eq!(f["path"], local.to_str().unwrap());
        assert_eq!(f["bytes"], bytes.len());
        assert_eq!(&fs::read(&local).unwrap(), bytes);
    }
    assert_eq!(downloads(&hub).len(), 3);
    assert!(!cached(cache.path(), "org/split", "m-Q4_K_M.gguf").exists());
}

#[test]
fn a_cut_download_resumes_where_it_stopped() {
    let mut r = Repo::default();
    let bytes = content(3, 300_000);
    r.files.insert("m-Q4_K_M.gguf".into(), bytes.clone());
    r.cut_after.insert("m-Q4_K_M.gguf".into(), 100_000);
    let hub = FakeHub::start(vec![("org/cut", r)]);
    let cache = tempfile::tempdir().unwrap();
    let o = tool(cache.path(), &hub.endpoint, &["fetch", "--hf", "org/cut"]);
    assert!(
        !o.status.success(),
        "the cut download succeeded: {:?}",
        hub.seen()
    );
    let err = one_line_error(&o);
    assert!(err.contains("run the command again to resume"), "{err}");
    let dest = cached(cache.path(), "org/cut", "m-Q4_K_M.gguf");
    let part = part_of(&dest);
    let kept = fs::metadata(&part)
        .expect("the partial download is kept")
        .len();
    assert!(kept > 0 && kept <= 100_000, "kept {kept} bytes");
    assert!(!dest.exists());

    hub.clear_seen();
    let o = tool(cache.path(), &hub.endpoint, &["fetch", "--hf", "org/cut"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read(&dest).unwrap(), bytes);
    assert!(!part.exists());
    // The Range survives the redirect: the CDN is asked for the rest only.
    let cdn: Vec<_> = hub
        .seen()
        .into_iter()
        .filter(|s| s.path.starts_with("/cdn/"))
        .map(|s| s.range)
        .collect();
    assert_eq!(cdn, [Some(format!("bytes={kept}-"))]);
}

#[test]
fn a_checksum_mismatch_is_one_line_and_keeps_the_download() {
    let mut r = single_repo();
    let wrong = sha256_hex(b"something else");
    r.wrong_sha.insert("m-Q4_K_M.gguf".into(), wrong.clone());
    let hub = FakeHub::start(vec![("org/bad", r)]);
    let cache = tempfile::tempdir().unwrap();
    let o = tool(
        cache.path(),
        &hub.endpoint,
        &["fetch", "--hf", "org/bad:Q4_K_M"],
    );
    let err = one_line_error(&o);
    let good = sha256_hex(&content(1, 70_000));
    assert!(
        err.contains(&format!(
            "m-Q4_K_M.gguf has sha256 {good}, but the repository lists {wrong}"
        )),
        "{err}"
    );
    let dest = cached(cache.path(), "org/bad", "m-Q4_K_M.gguf");
    assert!(err.contains(&part_of(&dest).display().to_string()), "{err}");
    assert_eq!(fs::read(part_of(&dest)).unwrap(), content(1, 70_000));
    assert!(!dest.exists(), "an unverified file is never in the cache");
}

#[test]
fn a_missing_quant_names_the_files_there_are() {
    let hub = FakeHub::start(vec![("org/single", single_repo())]);
    let cache = tempfile::tempdir().unwrap();
    let o = tool(
        cache.path(),
        &hub.endpoint,
        &["fetch", "--hf", "org/single:IQ2_XS"],
    );
    let err = one_line_error(&o);
    assert_eq!(
        err,
        "error: no GGUF file in org/single matches quant IQ2_XS; the GGUF files there: m-Q4_K_M.gguf, m-Q8_0.gguf"
    );
    let o = tool(
        cache.path(),
        &hub.endpoint,
        &["fetch", "--hf", "org/nothere:Q4_K_M"],
    );
    let err = one_line_error(&o);
    assert!(err.contains("HTTP 404"), "{err}");
    // A malformed reference is a usage error (exit 2), before any request.
    let o = tool(
        cache.path(),
        &hub.endpoint,
        &["fetch", "--hf", "../etc:Q4_K_M"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn run_hf_generates_what_run_on_the_same_file_does() {
    let model = common::model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    let mut r = Repo::default();
    r.files.insert(
        "SmolLM2-135M-Instruct.Q4_1.gguf".into(),
        fs::read(&model).unwrap(),
    );
    let hub = FakeHub::start(vec![("org/smol", r)]);
    let cache = tempfile::tempdir().unwrap();
    let args = ["--prompt", "The capital of France is", "-n", "8", "--json"];
    let direct = json_of(&tool(
        cache.path(),
        &hub.endpoint,
        &[&["run", model.to_str().unwrap()][..], &args].concat(),
    ));
    let via_hub = json_of(&tool(
        cache.path(),
        &hub.endpoint,
        &[&["run", "--hf", "org/smol:Q4_1"][..], &args].concat(),
    ));
    assert!(!direct["text"].as_str().unwrap().is_empty());
    assert_eq!(via_hub["text"], direct["text"]);
    assert_eq!(downloads(&hub).len(), 1);
}
