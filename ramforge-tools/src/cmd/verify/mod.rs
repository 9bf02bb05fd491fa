//! `ramforge-tools verify MODEL.gguf`: the flags, and the check they ask for.
//!
//! Without `--golden`, the kernel check on every tensor (`kernels`); with `--golden FILE.jsonl`,
//! teacher-forced logits against llama.cpp (`golden`).

mod golden;
mod kernels;

use crate::error::CmdResult;
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
    /// With --golden: worker threads (0 = one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// With --golden: memory budget (e.g. 40M, 1.5G; powers of 1024); default unlimited.
    #[arg(long, value_parser = crate::args::parse_ram)]
    pub ram: Option<u64>,
    /// With --golden: KV cache element type (the shared goldens were recorded with f16).
    #[arg(long, default_value = "f16")]
    pub kv_type: ramforge_engine::KvType,
}

pub fn run(args: Args) -> CmdResult {
    match &args.golden {
        Some(golden) => golden::run(&golden::Check {
            model: &args.model,
            golden,
            json: args.json,
            threads: args.threads,
            ram: args.ram,
            kv_type: args.kv_type,
        }),
        None => kernels::run(&args.model, args.json),
    }
}
