//! `ramforge-tools chat-render`: Render a model's chat template for conversations.

use super::CmdResult;

/// Render a model's chat template for conversations.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CmdResult {
    Err("chat-render: not built yet".into())
}
