//! `ramforge-tools fetch`: download the default model, or with `--hf` a model from the Hugging
//! Face Hub, into the user's cache and print its path.

use crate::default_model::{
    cache_dir, ensure_default_model, is_whole, DEFAULT_MODEL_FILE, DEFAULT_MODEL_SHA256,
};
use crate::error::CmdResult;
use crate::hf::{self, HfSpec};
use crate::verbosity::quiet;
use std::fs;
use std::process::ExitCode;

/// Download a model into the cache and print its path.
#[derive(clap::Args)]
pub struct Args {
    /// Print {"path", "bytes", "sha256", "downloaded"} as JSON (with --hf: {"path", "repo",
    /// "files": [...]}, one entry per file).
    #[arg(long)]
    pub json: bool,
    /// Fetch ORG/REPO[:QUANT or :FILE.gguf] from the Hugging Face Hub instead of the default
    /// model: the GGUF file(s) whose name contains QUANT (default Q4_K_M), every part of a
    /// split model, each checked against the sha256 the repository lists.
    #[arg(long, value_name = "ORG/REPO[:QUANT]", value_parser = HfSpec::parse)]
    pub hf: Option<HfSpec>,
    /// With --hf: use only the cache, no network (also HF_HUB_OFFLINE=1).
    #[arg(long, requires = "hf")]
    pub offline: bool,
}

pub fn run(args: Args) -> CmdResult {
    if let Some(spec) = &args.hf {
        return run_hf(spec, args.offline || hf::offline_from_env(), args.json);
    }
    let cached = cache_dir()?.join(DEFAULT_MODEL_FILE);
    let was_cached = is_whole(&cached);
    let path = ensure_default_model(quiet())?;
    if args.json {
        let out = serde_json::json!({
            "path": path,
            "bytes": fs::metadata(&path)?.len(),
            "sha256": DEFAULT_MODEL_SHA256,
            "downloaded": !was_cached,
        });
        println!("{out}");
    } else {
        println!("{}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// `fetch --hf`: prints the path to load (a split model's first part).
fn run_hf(spec: &HfSpec, offline: bool, json: bool) -> CmdResult {
    let files = hf::ensure(spec, offline, quiet())?;
    let Some(first) = files.first() else {
        return Err(format!("{} gave no files", spec.repo).into());
    };
    if json {
        let list: Vec<_> = files
            .iter()
            .map(|f| {
                serde_json::json!({
                    "path": f.path,
                    "bytes": f.bytes,
                    "sha256": f.sha256,
                    "downloaded": f.downloaded,
                })
            })
            .collect();
        let out = serde_json::json!({ "path": first.path, "repo": spec.repo, "files": list });
        println!("{out}");
    } else {
        println!("{}", first.path.display());
    }
    Ok(ExitCode::SUCCESS)
}
