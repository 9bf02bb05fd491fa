//! What the engine's integration tests share: where the real model file is (a missing one
//! fails the test with what to do), and the streaming tests' options and greedy run.
// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

use ramforge_engine::{Engine, EngineOptions, GenerationStats, SamplingParams};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// The prompt of the streaming tests.
pub const PROMPT: &str = "The capital of France is";

/// A 64-token context on 2 threads under `ram` (None: unlimited).
pub fn options(ram: Option<u64>) -> EngineOptions {
    EngineOptions {
        ram,
        ctx: Some(64),
        threads: 2,
        ..Default::default()
    }
}

/// `n` greedy tokens after [`PROMPT`].
pub fn greedy(e: &mut Engine, n: usize) -> GenerationStats {
    let prompt = e.model().tokenizer.encode(PROMPT, true, true);
    e.generate(
        &prompt,
        &SamplingParams::greedy(n),
        &mut |_, _| {},
        &AtomicBool::new(false),
    )
    .unwrap()
}

/// SmolLM2-135M-Instruct Q4_1 under `RAMFORGE_MODELS` (default `<workspace root>/models`).
pub fn model() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let dir =
        std::env::var_os("RAMFORGE_MODELS").map_or_else(|| root.join("models"), PathBuf::from);
    let p = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        p.exists(),
        "{} is missing: run scripts/test.sh, which fetches the models",
        p.display()
    );
    p
}
