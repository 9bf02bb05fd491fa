//! `ramforge-tools fetch`: download the default model into the user's cache and print its path.

use crate::default_model::{
    cache_dir, ensure_default_model, is_whole, DEFAULT_MODEL_FILE, DEFAULT_MODEL_SHA256,
};
use crate::error::CmdResult;
use crate::verbosity::quiet;
use std::fs;
use std::process::ExitCode;

/// Download the default model into the cache and print its path.
#[derive(clap::Args)]
pub struct Args {
    /// Print {"path", "bytes", "sha256", "downloaded"} as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> CmdResult {
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
