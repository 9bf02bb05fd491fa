//! `ramforge-tools chat`: Interactive chat with a model.

use super::CmdResult;

/// Interactive chat with a model.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CmdResult {
    Err("chat: not built yet".into())
}
