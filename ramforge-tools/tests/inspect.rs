//! `ramforge-tools inspect`: its output, its errors, and agreement with gguf-py on every
//! real model file (through scripts/inspect_oracle.py).

use std::path::PathBuf;
use std::process::Command;

mod common;

use common::{model_path as model, reference_python, root, MODEL_FILES};

fn inspect(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .arg("inspect")
        .args(args)
        .output()
        .unwrap()
}

fn json_of(name: &str) -> serde_json::Value {
    let out = inspect(&[model(name).as_os_str(), "--json".as_ref()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn listing_matches_gguf_py_on_every_real_file() {
    let models: Vec<PathBuf> = MODEL_FILES.iter().map(|m| model(m)).collect();
    let out = Command::new(reference_python())
        .arg(root().join("scripts/inspect_oracle.py"))
        .arg("--tool")
        .arg(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(&models)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "inspect_oracle.py failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("18/18 files agree with gguf-py"),
        "{stdout}"
    );
}

#[test]
fn json_is_exact_and_in_file_order() {
    let j = json_of("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert_eq!(j["version"], 3);
    assert_eq!(j["alignment"], 32);
    assert_eq!(j["data_offset"], 1785664);
    assert_eq!(j["totals"]["file_bytes"], 98362432);
    let md = j["metadata"].as_object().unwrap();
    // serde_json's map sorts keys, so order is checked on the raw text below.
    assert_eq!(md["llama.block_count"], 30);
    assert_eq!(md["llama.rope.freq_base"], 100000.0);
    assert_eq!(md["tokenizer.ggml.add_bos_token"], false);
    assert_eq!(md["general.languages"], serde_json::json!(["en"]));
    let tokens = &md["tokenizer.ggml.tokens"];
    assert_eq!(tokens["array_of"], "string");
    assert_eq!(tokens["len"], 49152);
    assert_eq!(tokens["first"][0], "<|endoftext|>");
    assert_eq!(tokens["first"].as_array().unwrap().len(), 8);

    let t0 = &j["tensors"][0];
    assert_eq!(t0["name"], "token_embd.weight");
    assert_eq!(t0["type"], "Q8_0");
    assert_eq!(t0["shape"], serde_json::json!([576, 49152]));
    assert_eq!(t0["offset"], 0);
    assert_eq!(t0["bytes"], 576 / 32 * 34 * 49152);
    assert_eq!(j["tensors"].as_array().unwrap().len(), 272);

    let types = j["types"].as_array().unwrap();
    let count: u64 = types.iter().map(|t| t["count"].as_u64().unwrap()).sum();
    assert_eq!(count, 272);
    let share: f64 = types.iter().map(|t| t["share"].as_f64().unwrap()).sum();
    assert!((share - 1.0).abs() < 1e-9);
    assert_eq!(
        j["totals"]["elements"].as_u64().unwrap() * 4,
        j["totals"]["f32_bytes"]
    );

    let out = inspect(&[
        model("SmolLM2-135M-Instruct.Q4_1.gguf").as_os_str(),
        "--json".as_ref(),
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    let pos = |k: &str| text.find(&format!("\"{k}\"")).unwrap();
    assert!(pos("general.architecture") < pos("llama.block_count"));
    assert!(pos("llama.block_count") < pos("tokenizer.ggml.tokens"));
    assert!(pos("tokenizer.ggml.tokens") < pos("general.quantization_version"));
}

#[test]
fn text_is_human_readable() {
    let out = inspect(&[model("gemma-3-270m-q4_k_m.gguf").as_os_str()]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("GGUF version   3"), "{text}");
    assert!(text.contains("tensors        236"));
    assert!(text.contains("data offset    6525120 (6.2 MiB)"), "{text}");
    let tokens = text
        .lines()
        .find(|l| l.contains("tokenizer.ggml.tokens"))
        .unwrap();
    assert!(
        tokens.contains("262144 items: [") && tokens.ends_with(", ...]"),
        "{tokens}"
    );
    assert!(tokens.len() < 200, "long arrays are summarized: {tokens}");
    assert!(text.contains("\ntypes:\n"));
    assert!(text.contains("  file            241.4 MiB"), "{text}");
    assert!(
        text.contains("  chat template  none (no tokenizer.chat_template)"),
        "{text}"
    );
    let out = inspect(&[model("SmolLM2-135M-Instruct.Q4_1.gguf").as_os_str()]);
    let text = String::from_utf8(out.stdout).unwrap();
    let template = text
        .lines()
        .find(|l| l.contains("tokenizer.chat_template"))
        .unwrap();
    assert!(
        template.contains("chars)"),
        "long strings are cut: {template}"
    );
    let size = text
        .lines()
        .find(|l| l.starts_with("  chat template"))
        .unwrap();
    assert!(size.contains("bytes)") && !size.contains("none"), "{size}");
    let j = json_of("SmolLM2-135M-Instruct.Q4_1.gguf");
    let template = j["metadata"]["tokenizer.chat_template"].as_str().unwrap();
    assert_eq!(j["chat_template_bytes"], template.len());
    assert!(json_of("gemma-3-270m-q4_k_m.gguf")["chat_template_bytes"].is_null());
}

#[test]
fn bad_input_is_one_line_on_stderr() {
    let dir = std::env::temp_dir().join(format!("ramforge-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.gguf");
    std::fs::write(&bad, b"GGUF\x01\x00\x00\x00 and then some").unwrap();
    let out = inspect(&[bad.as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: unsupported GGUF version 1"),
        "{err}"
    );
    assert!(out.stdout.is_empty());

    let out = inspect(&[dir.join("missing.gguf").as_os_str()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.gguf"));

    let out = inspect(&[]);
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
    std::fs::remove_dir_all(&dir).unwrap();
}
