//! `ramforge-tools tokenize MODEL (--text T | --file F)`: text to token ids with a model's
//! tokenizer, exactly as llama.cpp tokenizes it.
//!
//! Text output: one line per token, `id<TAB>piece` (the piece as it prints, quoted and
//! escaped), a blank line between texts. `--json`: one object per text,
//! `{"text": ..., "tokens": [...]}`. With `--file`, every line is one text and the escapes
//! `\n`, `\t`, `\\` are decoded (the golden inputs' convention).

use crate::error::CmdResult;
use ramforge_engine::text::tokenizer::Tokenizer;
use ramforge_gguf::GgufFile;
use std::io::Write;
use std::path::PathBuf;

/// Tokenize text with a model's tokenizer.
#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["text", "file"])))]
pub struct Args {
    /// The GGUF model whose tokenizer to use.
    pub model: PathBuf,
    /// The text to tokenize.
    #[arg(long)]
    pub text: Option<String>,
    /// A file with one text per line; `\n`, `\t` and `\\` in it are decoded.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Recognise control tokens such as <|im_start|> in the text (as prompts from chat
    /// templates need); plain text does not.
    #[arg(long)]
    pub parse_special: bool,
    /// Do not add BOS/EOS even where the model's flags ask for them.
    #[arg(long)]
    pub no_bos: bool,
    /// One JSON object per text: {"text": ..., "tokens": [...]}.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> CmdResult {
    let texts = match (&args.text, &args.file) {
        (Some(t), _) => vec![t.clone()],
        (None, Some(path)) => {
            let body = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            body.lines().map(unescape).collect()
        }
        (None, None) => unreachable!("clap requires --text or --file"),
    };
    let file = GgufFile::open(&args.model)?;
    let tok = Tokenizer::from_gguf(&file.header().metadata)?;
    let mut out = std::io::stdout().lock();
    for (i, text) in texts.iter().enumerate() {
        let ids = tok.encode(text, !args.no_bos, args.parse_special);
        if args.json {
            let line = serde_json::json!({ "text": text, "tokens": ids });
            writeln!(out, "{line}")?;
            continue;
        }
        if i > 0 {
            writeln!(out)?;
        }
        for id in ids {
            writeln!(out, "{id}\t{}", show_piece(&tok.token_bytes(id)))?;
        }
    }
    out.flush()?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// Decodes the golden inputs' escapes: `\n`, `\t`, `\\`; any other backslash stays as it is.
pub fn unescape(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// A token's bytes, quoted, with control characters and bytes that are not UTF-8 escaped.
fn show_piece(bytes: &[u8]) -> String {
    let mut s = String::from("\"");
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            s.extend(c.escape_debug());
        }
        for b in chunk.invalid() {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_decodes_the_three_escapes_only() {
        assert_eq!(unescape(r"a\nb\tc\\d\qe\"), "a\nb\tc\\d\\qe\\");
        assert_eq!(unescape(r"\\n"), "\\n");
    }

    #[test]
    fn pieces_show_partial_characters_as_bytes() {
        assert_eq!(show_piece(" world\n".as_bytes()), "\" world\\n\"");
        assert_eq!(show_piece(&[0xF0, 0x9F]), "\"\\xf0\\x9f\"");
    }
}
