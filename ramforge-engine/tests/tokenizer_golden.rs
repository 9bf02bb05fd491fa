//! The tokenizers against llama.cpp's own output (../shared/golden): every `tok-*.jsonl` record
//! (plain text, BOS per the model) gives identical ids and decodes back to its text, and every
//! `gen-*.jsonl` prompt (special tokens parsed) gives identical ids.

mod common;

use common::{golden_dir, model_file};
use ramforge_engine::text::tokenizer::Tokenizer;
use ramforge_gguf::GgufFile;
use std::path::{Path, PathBuf};

/// Loads `<models>/<name>.gguf`'s tokenizer; a missing file fails the test with what to do.
fn tokenizer(name: &str) -> Tokenizer {
    let path = model_file(&format!("{name}.gguf"));
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Tokenizer::from_gguf(&file.header().metadata).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The golden files named `<prefix><model>.jsonl`, by model name.
fn golden_files(prefix: &str) -> Vec<(String, PathBuf)> {
    let dir = golden_dir();
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| {
        panic!(
            "golden directory {} unreadable ({e}): set RAMFORGE_GOLDEN or run scripts/test.sh",
            dir.display()
        )
    });
    let mut files: Vec<_> = entries
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            let model = name
                .strip_prefix(prefix)?
                .strip_suffix(".jsonl")?
                .to_string();
            Some((model, p))
        })
        .collect();
    files.sort();
    files
}

struct Record {
    text: String,
    tokens: Vec<u32>,
}

fn records(path: &Path) -> Vec<Record> {
    let body = std::fs::read_to_string(path).unwrap();
    body.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            Record {
                text: v["text"].as_str().unwrap().to_string(),
                tokens: v["tokens"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_u64().unwrap() as u32)
                    .collect(),
            }
        })
        .collect()
}

#[test]
fn plain_text_ids_and_round_trip_match_llama_cpp() {
    let files = golden_files("tok-");
    let models: Vec<_> = files.iter().map(|(m, _)| m.as_str()).collect();
    assert!(
        models.contains(&"SmolLM2-135M-Instruct.Q4_1") && models.contains(&"gemma-3-270m-q4_k_m"),
        "expected tok- goldens for SmolLM2 and Gemma 3, found {models:?}"
    );
    let mut failures = Vec::new();
    let mut checked = 0;
    for (model, path) in &files {
        let tok = tokenizer(model);
        for r in records(path) {
            let ids = tok.encode(&r.text, true, false);
            if ids != r.tokens {
                failures.push(format!(
                    "{model} {:?}: got {ids:?}, want {:?}",
                    r.text, r.tokens
                ));
            }
            let back = tok.decode(&ids);
            if back != r.text {
                failures.push(format!("{model} {:?}: decodes to {back:?}", r.text));
            }
            checked += 1;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 40, "only {checked} records checked");
}

#[test]
fn prompt_ids_with_special_tokens_match_llama_cpp() {
    let files = golden_files("gen-");
    assert!(
        files.len() >= 17,
        "expected a gen- golden per model, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    let mut checked = 0;
    for (model, path) in &files {
        let tok = tokenizer(model);
        for r in records(path) {
            let ids = tok.encode(&r.text, true, true);
            if ids != r.tokens {
                failures.push(format!(
                    "{model} {:?}: got {ids:?}, want {:?}",
                    r.text, r.tokens
                ));
            }
            checked += 1;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 80, "only {checked} records checked");
}
