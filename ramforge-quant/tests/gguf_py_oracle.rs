//! Runs the independent oracle, `scripts/dequant_oracle.py`: gguf-py's dequantization against
//! ours on random edge-case blocks of every format and on sampled rows of every tensor of
//! every model file. Needs the reference Python and the models that `scripts/test.sh` fetches.

use std::path::PathBuf;
use std::process::Command;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crate has a parent")
        .to_path_buf()
}

fn env_path(var: &str, default: PathBuf) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or(default)
}

#[test]
fn dequantization_agrees_with_gguf_py() {
    let root = workspace_root();
    let python = env_path(
        "RAMFORGE_REFERENCE_PY",
        root.join("models/.venv-reference/bin/python"),
    );
    let models = env_path("RAMFORGE_MODELS", root.join("models"));
    assert!(
        python.exists(),
        "reference python {} not found: run scripts/test.sh (or set RAMFORGE_REFERENCE_PY)",
        python.display()
    );
    assert!(
        models.is_dir(),
        "model directory {} not found: run scripts/test.sh (or set RAMFORGE_MODELS)",
        models.display()
    );
    let status = Command::new(&python)
        .arg(root.join("scripts/dequant_oracle.py"))
        .arg(env!("CARGO_BIN_EXE_dequant-stdio"))
        .arg("--models")
        .arg(&models)
        .args(["--max-rows", "64"])
        .status()
        .expect("run the oracle script");
    assert!(
        status.success(),
        "the gguf-py oracle found mismatches (see above)"
    );
}
