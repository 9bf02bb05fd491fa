//! Helpers shared by the ramforge-tools integration tests: where the real model files and
//! the goldens are, and how to run the binary. A missing model fails the test with what to do.
#![allow(dead_code)] // each test file uses only some of these

pub mod judge;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The model files listed in ../shared/golden/README.md.
pub const MODEL_FILES: [&str; 18] = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "gemma-3-270m-q4_k_m.gguf",
    "qwen2ish-Q4_1.gguf",
    "qwen2ish-Q8_0.gguf",
    "smollm2-BF16.gguf",
    "smollm2-F16.gguf",
    "smollm2-IQ4_NL.gguf",
    "smollm2-IQ4_XS.gguf",
    "smollm2-Q2_K-pure.gguf",
    "smollm2-Q3_K_M.gguf",
    "smollm2-Q3_K_S-pure.gguf",
    "smollm2-Q4_0.gguf",
    "smollm2-Q4_K_M.gguf",
    "smollm2-Q5_0.gguf",
    "smollm2-Q5_1.gguf",
    "smollm2-Q5_K_M.gguf",
    "smollm2-Q6_K.gguf",
    "smollm2-Q8_0.gguf",
];

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn env_dir(var: &str, default: PathBuf) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or(default)
}

/// Where the model files are: `RAMFORGE_MODELS`, default `<root>/models`.
pub fn models_dir() -> PathBuf {
    env_dir("RAMFORGE_MODELS", root().join("models"))
}

/// Where the goldens are: `RAMFORGE_GOLDEN`, default `<root>/../shared/golden`.
pub fn golden_dir() -> PathBuf {
    env_dir("RAMFORGE_GOLDEN", root().join("../shared/golden"))
}

/// A model file under [`models_dir`]; a missing one fails the test.
pub fn model_path(name: &str) -> PathBuf {
    let p = models_dir().join(name);
    assert!(
        p.is_file(),
        "model file {} is missing: run scripts/test.sh (it fetches the models) or set RAMFORGE_MODELS",
        p.display()
    );
    p
}

/// [`model_path`] as a string, for argument lists.
pub fn model(name: &str) -> String {
    model_path(name).to_str().unwrap().to_string()
}

/// A file under [`golden_dir`].
pub fn golden(name: &str) -> String {
    let p = golden_dir().join(name);
    p.to_str().unwrap().to_string()
}

/// The reference venv's python (llama_cpp, gguf-py): `RAMFORGE_REFERENCE_PY`, default
/// `<root>/models/.venv-reference/bin/python`; a missing one fails the test.
pub fn reference_python() -> PathBuf {
    let p = env_dir(
        "RAMFORGE_REFERENCE_PY",
        root().join("models/.venv-reference/bin/python"),
    );
    assert!(
        p.is_file(),
        "reference python {} is missing: run scripts/test.sh (it sets up the venv) or set RAMFORGE_REFERENCE_PY",
        p.display()
    );
    p
}

/// Runs `ramforge-tools` with `args`.
pub fn tool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(args)
        .output()
        .expect("spawn ramforge-tools")
}

/// `synth` arguments of the small MoE synths (the architecture, key/value heads and weight
/// type are the caller's): three layers 128 wide, 4 heads, 8 experts 64 wide, 2 used.
pub const MOE_SMALL: [&str; 12] = [
    "--layers",
    "3",
    "--embd",
    "128",
    "--ffn",
    "64",
    "--heads",
    "4",
    "--experts",
    "8",
    "--experts-used",
    "2",
];

/// `synth` arguments of the small deepseek2-shaped latent attention: one key/value head,
/// query heads of 48 of which RoPE rotates 16, a q-LoRA and a key/value latent of 64, value
/// heads of 32.
pub const MLA_SMALL: [&str; 12] = [
    "--kv-heads",
    "1",
    "--head-dim",
    "48",
    "--rope-dim",
    "16",
    "--q-lora-rank",
    "64",
    "--kv-lora-rank",
    "64",
    "--v-head-dim",
    "32",
];

/// `synth` arguments of a small glm-dsa-shaped sparse attention: [`MLA_SMALL`] with query heads
/// of 64 of which RoPE rotates 32, half the indexer's key of 64 as in GLM-5 (llama.cpp views
/// the indexer's unrotated part right only then), each query attending to its 4 best positions.
pub const DSA_SMALL: [&str; 14] = [
    "--kv-heads",
    "1",
    "--head-dim",
    "64",
    "--rope-dim",
    "32",
    "--q-lora-rank",
    "64",
    "--kv-lora-rank",
    "64",
    "--v-head-dim",
    "32",
    "--indexer-top-k",
    "4",
];

/// `synth` arguments of a small qwen35moe (hybrid) model: three layers, the middle one full
/// attention, the others gated delta-net; 8 experts, 2 used (the weight type is the caller's).
pub fn qwen35moe_small() -> Vec<&'static str> {
    let hybrid = ["--kv-heads", "2", "--full-attention-interval", "2"];
    [&["--arch", "qwen35moe"][..], &MOE_SMALL, &hybrid].concat()
}

/// `synth` arguments of a small deepseek4 (DeepSeek V4) model in MOE_SMALL's shape: one block
/// of each compress ratio (the window only, 4 with the lightning indexer, 128), an 8-position
/// window, the first block hash-routed, two output groups; 8 indexer heads choosing 4
/// compressed rows (with fewer heads the indexer's scores tie at 0 often enough for llama.cpp's
/// top-k, whose order among equals is its own, to choose other rows).
pub fn deepseek4_small() -> Vec<&'static str> {
    let v4 = [
        "--arch",
        "deepseek4",
        "--kv-heads",
        "1",
        "--head-dim",
        "64",
        "--rope-dim",
        "16",
        "--q-lora-rank",
        "64",
        "--sliding-window",
        "8",
        "--indexer-heads",
        "8",
        "--indexer-dim",
        "64",
        "--indexer-top-k",
        "4",
        "--hash-layers",
        "1",
        "--o-lora-rank",
        "32",
        "--o-groups",
        "2",
        "--compress-ratios",
        "0,4,128",
    ];
    [&v4[..], &MOE_SMALL].concat()
}

/// Writes `file` with `ramforge-tools synth` and `args`, taking the vocabulary from the real
/// SmolLM2 file.
pub fn synth(file: &Path, args: &[&str]) {
    let o = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(["synth", "-q", "-o"])
        .arg(file)
        .args(args)
        .arg("--vocab-from")
        .arg(model_path("SmolLM2-135M-Instruct.Q4_1.gguf"))
        .output()
        .expect("spawn ramforge-tools");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Drops `file` from the page cache (written pages are synced first: only clean ones can be
/// dropped), so the next reader finds it cold.
#[cfg(target_os = "linux")]
pub fn evict(file: &Path) {
    let f = std::fs::File::open(file).unwrap();
    f.sync_all().unwrap();
    // SAFETY: posix_fadvise only reads its integer arguments; the descriptor is open.
    let rc = unsafe {
        libc::posix_fadvise(
            std::os::unix::io::AsRawFd::as_raw_fd(&f),
            0,
            0,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    assert_eq!(rc, 0, "posix_fadvise on {}", file.display());
}

/// Only Linux can drop one file from the page cache (macOS has no per-file drop).
#[cfg(not(target_os = "linux"))]
pub fn evict(file: &Path) {
    panic!(
        "cannot drop {} from the page cache on this system",
        file.display()
    );
}
