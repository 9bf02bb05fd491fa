//! One module per subcommand; each owns its clap `Args` and a `run` function.

pub mod bench;
pub mod chat;
pub mod chat_render;
pub mod fetch;
pub mod golden;
pub mod inspect;
pub mod plan;
pub mod run;
pub mod synth;
pub mod tokenize;
pub mod util;
pub mod verify;

/// The error every command returns: printed as one line by `main`.
pub type CmdError = Box<dyn std::error::Error + Send + Sync>;
/// A command's result: the exit code on success.
pub type CmdResult = Result<std::process::ExitCode, CmdError>;
