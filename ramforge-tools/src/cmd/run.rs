//! `ramforge-tools run`: Generate text from a model (the default model if none is given).

use super::CmdResult;

/// Generate text from a model (the default model if none is given).
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CmdResult {
    Err("run: not built yet".into())
}
