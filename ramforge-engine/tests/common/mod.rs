//! What the engine's integration tests share: where the real model files and goldens are (a
//! missing model fails the test with what to do), and the streaming tests' options and greedy
//! run.
// Each test binary compiles this module and uses a part of it.
#![allow(dead_code)]

pub mod golden;

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

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn env_dir(var: &str, default: PathBuf) -> PathBuf {
    std::env::var_os(var).map_or(default, PathBuf::from)
}

/// Where the model files are: `RAMFORGE_MODELS`, default `<workspace root>/models`.
pub fn models_dir() -> PathBuf {
    env_dir("RAMFORGE_MODELS", workspace_root().join("models"))
}

/// Where llama.cpp's goldens are: `RAMFORGE_GOLDEN`, default `<workspace root>/../shared/golden`.
pub fn golden_dir() -> PathBuf {
    env_dir("RAMFORGE_GOLDEN", workspace_root().join("../shared/golden"))
}

/// The model file `name` under [`models_dir`]; a missing one fails the test.
pub fn model_file(name: &str) -> PathBuf {
    let p = models_dir().join(name);
    assert!(
        p.is_file(),
        "model {} not found: run scripts/test.sh (it fetches the models) or set RAMFORGE_MODELS",
        p.display()
    );
    p
}

/// SmolLM2-135M-Instruct Q4_1, the streaming tests' model.
pub fn model() -> PathBuf {
    model_file("SmolLM2-135M-Instruct.Q4_1.gguf")
}
