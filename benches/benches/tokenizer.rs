//! Tokenizer speed on pathological inputs, which must stay well under a second: 100k repeated
//! characters, 1 MB of text without spaces, 1 MB of spaces; plus a typical prompt. Run on the
//! real SmolLM2 (byte-level BPE) and Gemma 3 (SentencePiece) vocabularies.
//!
//! `RAMFORGE_MODELS` names the model directory (default `<workspace>/models`, filled by
//! `scripts/test.sh`).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ramforge_engine::text::tokenizer::Tokenizer;
use ramforge_gguf::GgufFile;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn tokenizer(file: &str) -> Tokenizer {
    let dir = std::env::var_os("RAMFORGE_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../models"));
    let path = dir.join(file);
    let gguf = GgufFile::open(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run scripts/test.sh or set RAMFORGE_MODELS)",
            path.display()
        )
    });
    Tokenizer::from_gguf(&gguf.header().metadata).expect("tokenizer")
}

fn inputs() -> Vec<(&'static str, String)> {
    const MB: usize = 1 << 20;
    let mixed = "abcdefghij0123456789.,;!?éü日本🙂ABCxyz";
    vec![
        (
            "prompt",
            "The quick brown fox jumps over the lazy dog. ".repeat(20),
        ),
        ("100k_same_char", "a".repeat(100_000)),
        (
            "1MB_no_spaces",
            mixed
                .chars()
                .cycle()
                .scan(0, |n, c| {
                    *n += c.len_utf8();
                    (*n <= MB).then_some(c)
                })
                .collect(),
        ),
        ("1MB_spaces", " ".repeat(MB)),
    ]
}

fn bench(c: &mut Criterion) {
    let inputs = inputs();
    for (model, file) in [
        ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
        ("gemma3", "gemma-3-270m-q4_k_m.gguf"),
    ] {
        let tok = tokenizer(file);
        let mut group = c.benchmark_group(format!("tokenize/{model}"));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(3));
        for (name, text) in &inputs {
            group.throughput(Throughput::Bytes(text.len() as u64));
            group.bench_with_input(BenchmarkId::from_parameter(name), text, |b, t| {
                b.iter(|| tok.encode(t, true, false))
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
