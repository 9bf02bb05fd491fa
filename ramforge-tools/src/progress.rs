//! Progress bars and spinners on stderr, drawn only at a terminal and never under `--quiet`.

use crate::verbosity::quiet;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// Whether progress bars may be drawn: stderr is a terminal and `--quiet` was not given.
fn progress_visible() -> bool {
    !quiet() && std::io::stderr().is_terminal()
}

/// A progress bar on stderr over `len` units (bytes when `bytes` is true), hidden when
/// stderr is not a terminal or under `--quiet`.
pub fn progress_bar(len: u64, message: &str, bytes: bool) -> ProgressBar {
    if !progress_visible() {
        return ProgressBar::hidden();
    }
    let template = if bytes {
        "{msg} [{bar:30}] {bytes}/{total_bytes} ({eta})"
    } else {
        "{msg} [{bar:30}] {pos}/{len} ({eta})"
    };
    let bar = ProgressBar::new(len).with_message(message.to_string());
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// A spinner on stderr for work of unknown length, hidden like [`progress_bar`].
pub fn spinner(message: &str) -> ProgressBar {
    if !progress_visible() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner().with_message(message.to_string());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}
