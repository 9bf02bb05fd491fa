//! What the engine's integration tests share: where the real model file is. A missing one
//! fails the test with what to do.

use std::path::{Path, PathBuf};

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
