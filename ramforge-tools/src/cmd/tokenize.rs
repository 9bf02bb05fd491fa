//! `ramforge-tools tokenize`: Tokenize text with a model's tokenizer.

use super::CmdResult;

/// Tokenize text with a model's tokenizer.
#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> CmdResult {
    Err("tokenize: not built yet".into())
}
