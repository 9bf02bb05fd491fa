//! `ramforge-tools verify MODEL.gguf`: kernel checks on every tensor (this module), and with
//! `--golden FILE.jsonl` teacher-forced logits against llama.cpp (the `golden` module).

use super::CmdResult;
use std::path::PathBuf;

/// Check every tensor's kernels against the scalar reference (and, with --golden, logits).
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file.
    pub model: PathBuf,
    /// Compare teacher-forced logits against a llama.cpp golden file (gen-*.jsonl).
    #[arg(long)]
    pub golden: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> CmdResult {
    if args.golden.is_some() {
        return super::golden::run(&args);
    }
    Err("verify: not built yet".into())
}
