//! Command-line conventions every command follows: `--help` with examples, exit status 2 for
//! usage errors and 1 for runtime failures, runtime errors as one `error:` line on stderr with
//! nothing on stdout.

use std::process::{Command, Output};

/// Every command the issue names, as typed on the command line.
const COMMANDS: &[&str] = &[
    "run",
    "chat",
    "inspect",
    "plan",
    "verify",
    "tokenize",
    "chat-render",
    "synth",
    "fetch",
    "bench",
    "serve",
];

fn tool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(args)
        .output()
        .expect("spawn ramforge-tools")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Exit 2, nothing on stdout, and stderr that starts with `error:` (clap adds the usage after it).
fn assert_usage_error(args: &[&str]) -> String {
    let o = tool(args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: stderr {err}");
    assert!(o.stdout.is_empty(), "{args:?}: stdout {}", text(&o.stdout));
    assert!(err.starts_with("error: "), "{args:?}: {err}");
    err
}

/// Exit 1, nothing on stdout, exactly one line on stderr: `error: ...`.
fn assert_runtime_error(args: &[&str]) -> String {
    let o = tool(args);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{args:?}: stderr {err}");
    assert!(o.stdout.is_empty(), "{args:?}: stdout {}", text(&o.stdout));
    assert_eq!(
        err.lines().count(),
        1,
        "{args:?}: want one line, got {err:?}"
    );
    assert!(err.starts_with("error: "), "{args:?}: {err}");
    err
}

#[test]
fn top_level_help_lists_every_command_with_examples() {
    let o = tool(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = text(&o.stdout);
    for c in COMMANDS {
        assert!(
            help.contains(&format!("  {c} ")),
            "--help does not list {c}:\n{help}"
        );
    }
    assert!(help.contains("Examples:"), "{help}");
    assert!(
        help.contains("--quiet") && help.contains("--verbose"),
        "{help}"
    );
}

#[test]
fn every_command_has_help_with_examples() {
    for c in COMMANDS {
        let o = tool(&[c, "--help"]);
        let help = text(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "{c} --help: {}", text(&o.stderr));
        assert!(
            help.contains("Examples:"),
            "{c} --help has no examples:\n{help}"
        );
        assert!(
            help.contains(&format!("ramforge-tools {c}")),
            "{c}:\n{help}"
        );
    }
}

#[test]
fn version_prints_and_exits_zero() {
    let o = tool(&["--version"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(text(&o.stdout).starts_with("ramforge-tools "));
}

#[test]
fn usage_errors_exit_2() {
    // No command at all: the help, on stderr, exit 2.
    let o = tool(&[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
    assert!(text(&o.stderr).contains("Usage:"));

    let err = assert_usage_error(&["frobnicate"]);
    assert!(err.contains("frobnicate"), "{err}");
    assert_usage_error(&["inspect"]);
    let err = assert_usage_error(&["inspect", "--no-such-flag", "x.gguf"]);
    assert!(err.contains("--no-such-flag"), "{err}");
    assert_usage_error(&["--quiet", "--verbose", "fetch"]);
}

#[test]
fn runtime_errors_are_one_line_and_exit_1() {
    let err = assert_runtime_error(&["inspect", "/nonexistent/model.gguf"]);
    assert!(err.contains("/nonexistent/model.gguf"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"this is not a gguf file at all, just text\n").unwrap();
    assert_runtime_error(&["inspect", junk.to_str().unwrap()]);

    let empty = dir.path().join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    assert_runtime_error(&["inspect", empty.to_str().unwrap()]);

    // --quiet never hides the error itself.
    assert_runtime_error(&["--quiet", "inspect", "/nonexistent/model.gguf"]);
}
