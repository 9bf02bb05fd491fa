//! How much the tools say on stderr besides errors: set once from `--quiet`/`--verbose`.
//!
//! Conventions (see the crate README): generated text and requested output go to stdout; notes,
//! progress and stats go to stderr; `--quiet` silences notes and progress, `--verbose` adds detail.

use std::sync::atomic::{AtomicU8, Ordering};

/// How much a command says on stderr besides errors, set once by `main` from `--quiet`/`--verbose`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verbosity {
    /// Errors only.
    Quiet = 0,
    /// Notes (what was fetched, loaded, the closing stats) and progress bars.
    Normal = 1,
    /// Everything, including per-step detail.
    Verbose = 2,
}

static VERBOSITY: AtomicU8 = AtomicU8::new(Verbosity::Normal as u8);

/// Set the process-wide verbosity (called by `main` before running a command).
pub fn set_verbosity(v: Verbosity) {
    VERBOSITY.store(v as u8, Ordering::Relaxed);
}

/// The process-wide verbosity.
fn verbosity() -> Verbosity {
    match VERBOSITY.load(Ordering::Relaxed) {
        0 => Verbosity::Quiet,
        1 => Verbosity::Normal,
        _ => Verbosity::Verbose,
    }
}

/// True when `--quiet` was given: print nothing on stderr but errors.
pub fn quiet() -> bool {
    verbosity() == Verbosity::Quiet
}

/// True when `--verbose` was given.
pub fn verbose() -> bool {
    verbosity() == Verbosity::Verbose
}

/// Print a note on stderr unless `--quiet`.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => {
        if !$crate::verbosity::quiet() {
            eprintln!($($arg)*);
        }
    };
}
