//! `ramforge-tools plan`: Show how a model would be laid out under a RAM budget.

use super::CmdResult;

/// Show how a model would be laid out under a RAM budget.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CmdResult {
    Err("plan: not built yet".into())
}
