//! `ramforge-tools`: the command-line front end of RAMforge.
//!
//! One module per command under `cmd/`; each owns its clap `Args` and a `run` function.
//! Errors are printed as one line on stderr; runtime failures exit 1, usage errors exit 2.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ramforge-tools",
    version,
    about = "Run GGUF language models larger than memory, on CPU, under a hard RAM budget",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Run(cmd::run::Args),
    Chat(cmd::chat::Args),
    Inspect(cmd::inspect::Args),
    Plan(cmd::plan::Args),
    Verify(cmd::verify::Args),
    Tokenize(cmd::tokenize::Args),
    ChatRender(cmd::chat_render::Args),
    Synth(cmd::synth::Args),
    Fetch(cmd::fetch::Args),
    Bench(cmd::bench::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
