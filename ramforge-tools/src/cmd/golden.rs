//! `ramforge-tools verify MODEL --golden FILE.jsonl`: teacher-forced logits against llama.cpp.

use super::CmdResult;

pub fn run(_args: &super::verify::Args) -> CmdResult {
    Err("verify --golden: not built yet".into())
}
