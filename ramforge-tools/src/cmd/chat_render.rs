//! `ramforge-tools chat-render MODEL CONVERSATIONS.json [--template FILE]`: render the model's
//! chat template (or the one in FILE) for each conversation, one JSON line each:
//! `{"rendered": ...}`. CONVERSATIONS.json is a list of
//! `{"messages": [{"role": ..., "content": ...}, ...], "add_generation_prompt": bool}`.

use crate::args::TemplateFile;
use crate::error::CmdResult;
use ramforge_engine::text::{ChatMessage, ChatPrompt};
use ramforge_gguf::GgufFile;
use serde::Deserialize;
use std::io::Write;
use std::path::PathBuf;

/// Render a model's chat template for conversations.
#[derive(clap::Args)]
pub struct Args {
    /// The GGUF model (its template and its BOS/EOS token texts).
    pub model: PathBuf,
    /// JSON list of {"messages": [...], "add_generation_prompt": bool}.
    pub conversations: PathBuf,
    #[command(flatten)]
    pub template: TemplateFile,
}

/// One conversation of the input list.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Conversation {
    messages: Vec<ChatMessage>,
    #[serde(default)]
    add_generation_prompt: bool,
}

pub fn run(args: Args) -> CmdResult {
    let read = |path: &PathBuf| {
        std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    let conversations: Vec<Conversation> = serde_json::from_str(&read(&args.conversations)?)
        .map_err(|e| format!("{}: {e}", args.conversations.display()))?;
    let file = GgufFile::open(&args.model)?;
    let md = &file.header().metadata;
    let prompt = ChatPrompt::new(md, args.template.read()?)?;
    // Render everything first, so a failure prints nothing on stdout.
    let rendered = conversations
        .iter()
        .map(|c| prompt.render(&c.messages, c.add_generation_prompt))
        .collect::<Result<Vec<_>, _>>()?;
    let mut out = std::io::stdout().lock();
    for text in rendered {
        writeln!(out, "{}", serde_json::json!({ "rendered": text }))?;
    }
    out.flush()?;
    Ok(std::process::ExitCode::SUCCESS)
}
