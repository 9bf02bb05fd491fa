//! The error and result types every command returns; `main` prints the error as one line.

/// The error every command returns: printed as one line by `main`.
pub type CmdError = Box<dyn std::error::Error + Send + Sync>;
/// A command's result: the exit code on success.
pub type CmdResult = Result<std::process::ExitCode, CmdError>;
