//! `ramforge-tools verify MODEL.gguf`: the flags, and the check they ask for.
//!
//! Without `--golden`, the kernel check on every tensor (`kernels`); with `--golden FILE.jsonl`,
//! teacher-forced logits against llama.cpp (`golden`); with `--mtp-golden FILE.json`, the MTP
//! layer's drafts against llama.cpp's (`mtp`).

mod golden;
mod kernels;
mod mtp;

use crate::error::CmdResult;
use std::path::PathBuf;

/// Check every tensor's kernels against the scalar reference (and, with --golden, logits).
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file.
    pub model: PathBuf,
    /// Compare teacher-forced logits against a llama.cpp golden file (gen-*.jsonl).
    #[arg(long, conflicts_with = "mtp_golden")]
    pub golden: Option<PathBuf>,
    /// Compare the MTP (nextn) layer's teacher-forced drafts against llama.cpp's
    /// (`scripts/mtp_golden.py`'s output).
    #[arg(long, value_name = "FILE.json")]
    pub mtp_golden: Option<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// With --golden or --mtp-golden: worker threads (0 = one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// With --golden or --mtp-golden: memory budget (e.g. 40M, 1.5G; powers of 1024); default unlimited.
    #[arg(long, value_parser = crate::args::parse_ram)]
    pub ram: Option<u64>,
    /// With --golden or --mtp-golden: KV cache element type (the shared goldens were recorded with f16).
    #[arg(long, default_value = "f16")]
    pub kv_type: ramforge_engine::KvType,
    #[command(flatten)]
    pub prefill: crate::args::PromptBatch,
}

pub fn run(args: Args) -> CmdResult {
    let check = |golden| golden::Check {
        model: &args.model,
        golden,
        json: args.json,
        threads: args.threads,
        ram: args.ram,
        kv_type: args.kv_type,
        batch: args.prefill.batch,
    };
    match (&args.mtp_golden, &args.golden) {
        (Some(golden), _) => mtp::run(&check(golden)),
        (None, Some(golden)) => golden::run(&check(golden)),
        (None, None) => kernels::run(&args.model, args.json),
    }
}
