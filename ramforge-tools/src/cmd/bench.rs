//! `ramforge-tools bench`: Quick built-in speed test: prefill and decode tok/s with peak RSS.

use super::CmdResult;

/// Quick built-in speed test: prefill and decode tok/s with peak RSS.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CmdResult {
    Err("bench: not built yet".into())
}
