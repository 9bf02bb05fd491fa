//! `ramforge-tools verify MODEL.gguf` (kernel part) on every real model file, and its
//! one-line failure on input it cannot check.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

use common::{models_dir, MODEL_FILES};

fn verify(path: &Path, json: bool) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"));
    cmd.arg("verify").arg(path);
    if json {
        cmd.arg("--json");
    }
    cmd.output().expect("run ramforge-tools")
}

#[test]
fn kernels_pass_on_every_model_file() {
    let dir = models_dir();
    let files: Vec<PathBuf> = MODEL_FILES.iter().map(|f| dir.join(f)).collect();
    for f in &files {
        assert!(
            f.is_file(),
            "model file {} not found: run scripts/test.sh",
            f.display()
        );
    }
    let mut seen_types = std::collections::BTreeSet::new();
    for f in &files {
        let out = verify(f, true);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {}{}",
            f.display(),
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        let report: serde_json::Value = serde_json::from_str(&stdout).expect("JSON report");
        assert_eq!(report["pass"], true, "{}: {report}", f.display());
        for t in report["types"].as_array().unwrap() {
            assert!(t["tensors"].as_u64().unwrap() > 0);
            assert_eq!(t["pass"], true, "{}: {t}", f.display());
            seen_types.insert(t["type"].as_str().unwrap().to_string());
        }
    }
    // Every weight format the files hold was exercised.
    for ty in [
        "F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
        "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS",
    ] {
        assert!(
            seen_types.contains(ty),
            "no tensor of type {ty} was checked"
        );
    }
}

/// A minimal GGUF v3 file holding one 256-element tensor of ggml type `type_id`.
fn tiny_gguf(type_id: u32, data_len: usize) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"GGUF");
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes()); // tensors
    b.extend_from_slice(&0u64.to_le_bytes()); // metadata
    let name = b"blk.0.weight";
    b.extend_from_slice(&(name.len() as u64).to_le_bytes());
    b.extend_from_slice(name);
    b.extend_from_slice(&1u32.to_le_bytes()); // dims
    b.extend_from_slice(&256u64.to_le_bytes());
    b.extend_from_slice(&type_id.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes()); // offset
    while b.len() % 32 != 0 {
        b.push(0);
    }
    b.resize(b.len() + data_len, 0);
    b
}

fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ramforge-verify-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn assert_one_line_error(out: &std::process::Output, needle: &str) {
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "stderr: {err}");
    assert!(
        err.starts_with("error: ") && err.contains(needle),
        "stderr: {err}"
    );
}

#[test]
fn unsupported_type_fails_with_one_line() {
    // F64 (id 28): 8 bytes an element, a float type without kernels.
    let path = temp_file("f64.gguf", &tiny_gguf(28, 2048));
    let out = verify(&path, false);
    assert_one_line_error(&out, "F64");
    // I16 (id 25): an integer table (no kernel reads one), counted and left out.
    let path = temp_file("i16.gguf", &tiny_gguf(25, 512));
    let out = verify(&path, false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1 integer tables"), "{text}");
}

#[test]
fn truncated_file_fails_with_one_line() {
    // A Q4_0 tensor whose data is cut short.
    let mut bytes = tiny_gguf(2, 8 * 18);
    bytes.truncate(bytes.len() - 20);
    let path = temp_file("truncated.gguf", &bytes);
    let out = verify(&path, false);
    assert_one_line_error(&out, "blk.0.weight");
}

#[test]
fn a_supported_tiny_file_passes() {
    // 256 Q4_0 elements of zero bytes: every weight is 0 * (q - 8) = 0.
    let path = temp_file("q4_0.gguf", &tiny_gguf(2, 8 * 18));
    let out = verify(&path, false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Q4_0") && text.contains("pass"), "{text}");
}
