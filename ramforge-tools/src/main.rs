//! `ramforge-tools`: the command-line front end of RAMforge.
//!
//! One module per command under `cmd/`; each owns its clap `Args` and a `run` function. What
//! several commands share sits beside `cmd/`: `args` (flags), `generate` (the engine at work),
//! `default_model`, `hf` (models from the Hugging Face Hub), `progress`, `cancel`, `verbosity`, `sha256`, `error`, `expert_stats`, `expert_history`.
//! Errors are printed as one line on stderr; runtime failures exit 1, usage errors exit 2.

mod args;
mod cancel;
mod cmd;
mod default_model;
mod error;
mod examples;
mod expert_history;
mod expert_stats;
mod generate;
mod hf;
mod progress;
mod sha256;
mod verbosity;

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use verbosity::Verbosity;

#[derive(Parser)]
#[command(
    name = "ramforge-tools",
    version,
    about = "Run GGUF language models larger than memory, on CPU, under a hard RAM budget",
    propagate_version = true,
    after_help = examples::TOP
)]
struct Cli {
    /// Print nothing on stderr but errors (no notes, progress bars or stats).
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
    /// Print more detail on stderr.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    // long_about = None: the examples belong in the after-help, where clap keeps their lines.
    #[command(after_help = examples::RUN, long_about = None)]
    Run(cmd::run::Args),
    #[command(after_help = examples::CHAT)]
    Chat(cmd::chat::Args),
    #[command(after_help = examples::INSPECT)]
    Inspect(cmd::inspect::Args),
    #[command(after_help = examples::PLAN)]
    Plan(cmd::plan::Args),
    #[command(after_help = examples::VERIFY)]
    Verify(cmd::verify::Args),
    #[command(after_help = examples::TOKENIZE)]
    Tokenize(cmd::tokenize::Args),
    #[command(after_help = examples::CHAT_RENDER)]
    ChatRender(cmd::chat_render::Args),
    #[command(after_help = examples::SYNTH)]
    Synth(cmd::synth::Args),
    #[command(after_help = examples::FETCH)]
    Fetch(cmd::fetch::Args),
    #[command(after_help = examples::BENCH)]
    Bench(cmd::bench::Args),
    #[command(after_help = examples::SERVE)]
    Serve(cmd::serve::Args),
}

fn main() -> ExitCode {
    restore_default_sigpipe();
    let cli = Cli::parse();
    verbosity::set_verbosity(match (cli.quiet, cli.verbose) {
        (true, _) => Verbosity::Quiet,
        (false, true) => Verbosity::Verbose,
        (false, false) => Verbosity::Normal,
    });
    // A kernel choice that cannot be honoured is refused, not replaced by the detected one.
    if let Err(e) = ramforge_quant::isa::requested() {
        eprintln!("error: RAMFORGE_ISA: {e}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Run(a) => cmd::run::run(a),
        Command::Chat(a) => cmd::chat::run(a),
        Command::Inspect(a) => cmd::inspect::run(a),
        Command::Plan(a) => cmd::plan::run(a),
        Command::Verify(a) => cmd::verify::run(a),
        Command::Tokenize(a) => cmd::tokenize::run(a),
        Command::ChatRender(a) => cmd::chat_render::run(a),
        Command::Synth(a) => cmd::synth::run(a),
        Command::Fetch(a) => cmd::fetch::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Serve(a) => cmd::serve::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", one_line(&*e));
            ExitCode::from(1)
        }
    }
}

/// An error and its causes on one line: `outer: cause: root cause`, newlines folded.
fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Die quietly on a closed pipe (`ramforge-tools inspect m.gguf | head`), as C tools do, instead
/// of Rust's default of panicking on the next write to stdout.
fn restore_default_sigpipe() {
    // SAFETY: called first thing in main, before any other thread exists; SIG_DFL is a valid handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        // Catches clashing flags between the global --quiet/--verbose and a command's own.
        Cli::command().debug_assert();
    }

    /// Splits an example command line into words, honouring '...' and "..." quoting.
    fn shell_words(line: &str) -> Vec<String> {
        let (mut words, mut word, mut quote, mut in_word) =
            (Vec::new(), String::new(), None, false);
        for c in line.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), c) => word.push(c),
                (None, '"' | '\'') => {
                    quote = Some(c);
                    in_word = true;
                }
                (None, c) if c.is_whitespace() => {
                    if in_word {
                        words.push(std::mem::take(&mut word));
                        in_word = false;
                    }
                }
                (None, c) => {
                    word.push(c);
                    in_word = true;
                }
            }
        }
        if in_word {
            words.push(word);
        }
        words
    }

    #[test]
    fn every_command_has_examples_that_parse() {
        let top = Cli::command();
        let top_help = top
            .get_after_help()
            .map(|h| h.to_string())
            .unwrap_or_default();
        let mut sections = vec![(None, top_help)];
        for sub in top.get_subcommands() {
            let help = sub
                .get_after_help()
                .map(|h| h.to_string())
                .unwrap_or_default();
            sections.push((Some(sub.get_name().to_string()), help));
        }
        for (name, help) in sections {
            let lines = examples::command_lines(&help);
            assert!(!lines.is_empty(), "{name:?} has no examples in its --help");
            for line in lines {
                let words = shell_words(&line);
                let start = words
                    .iter()
                    .position(|w| w == "ramforge-tools")
                    .unwrap_or_else(|| panic!("example {line:?} does not run ramforge-tools"));
                // Up to a pipe into another program.
                let end = words[start..]
                    .iter()
                    .position(|w| w == "|")
                    .map_or(words.len(), |i| start + i);
                let argv = &words[start..end];
                if let Some(name) = &name {
                    assert_eq!(argv.get(1), Some(name), "example {line:?} is under {name}");
                }
                if let Err(e) = Cli::try_parse_from(argv) {
                    panic!("example {line:?} does not parse: {e}");
                }
            }
        }
    }
}
