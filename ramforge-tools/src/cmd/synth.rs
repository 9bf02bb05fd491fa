//! `ramforge-tools synth`: Write a synthetic GGUF model with seeded random weights.

use super::CmdResult;

/// Write a synthetic GGUF model with seeded random weights.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CmdResult {
    Err("synth: not built yet".into())
}
