//! `ramforge-tools fetch`: Download the default model into the cache.

use super::CmdResult;

/// Download the default model into the cache.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CmdResult {
    Err("fetch: not built yet".into())
}
