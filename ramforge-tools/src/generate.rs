//! Small helpers every command shares: how loud to be, human-readable sizes, progress bars.
//!
//! Conventions (see the crate README): generated text and requested output go to stdout; notes,
//! progress and stats go to stderr; `--quiet` silences notes and progress, `--verbose` adds detail.

// A toolbox for every command: not each command uses each helper.
#![allow(dead_code)]

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

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
pub fn verbosity() -> Verbosity {
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
        if !$crate::cmd::util::quiet() {
            eprintln!($($arg)*);
        }
    };
}

/// Sizes for people (`40.0 MiB`, `1.25 GiB`), one formatter for the engine and the tools.
pub use ramforge_engine::budget::human_bytes;

/// Whether progress bars may be drawn: stderr is a terminal and `--quiet` was not given.
pub fn progress_visible() -> bool {
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

/// The process-wide "stop generating" flag, set by Ctrl-C. The first call installs the handler;
/// a second Ctrl-C while the flag is still set exits at once with status 130, as shells expect.
pub fn cancel_flag() -> &'static AtomicBool {
    static FLAG: OnceLock<&'static AtomicBool> = OnceLock::new();
    FLAG.get_or_init(|| {
        let flag: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let installed = ctrlc::set_handler(move || {
            if flag.swap(true, Ordering::SeqCst) {
                std::process::exit(130);
            }
        });
        if let Err(e) = installed {
            note!("note: Ctrl-C will not stop generation cleanly ({e})");
        }
        flag
    })
}

/// Lays `model` out under `options` with a progress bar over the resident weights read.
pub fn load_engine(
    model: ramforge_engine::Model,
    options: &ramforge_engine::EngineOptions,
) -> Result<ramforge_engine::Engine, ramforge_engine::EngineError> {
    let bar = progress_bar(0, "loading", true);
    let engine = ramforge_engine::Engine::new_with_progress(model, options, &|done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    engine
}

/// A progress bar over the prompt's tokens, fed by the engine while it processes them; shown
/// only for prompts of more than one batch (shorter ones finish before a bar is worth it).
/// Clear it with `finish_and_clear` when the first token appears.
fn prompt_bar(
    engine: &mut ramforge_engine::Engine,
    prompt_tokens: usize,
    batch: usize,
) -> ProgressBar {
    if prompt_tokens <= batch {
        engine.set_prompt_progress(None);
        return ProgressBar::hidden();
    }
    let bar = progress_bar(prompt_tokens as u64, "prompt", false);
    let feed = bar.clone();
    engine.set_prompt_progress(Some(Box::new(move |done, _| {
        feed.set_position(done as u64)
    })));
    bar
}

/// Generates from `prompt` with a progress bar over a long prompt, writing the text to stdout
/// as it comes when `echo` (and nothing when not: `--json` prints at the end). A failed write
/// to stdout (a closed pipe) is reported after the generation, which it does not stop.
pub fn generate_to_stdout(
    engine: &mut ramforge_engine::Engine,
    prompt: &[u32],
    params: &ramforge_engine::SamplingParams,
    echo: bool,
) -> Result<ramforge_engine::GenerationStats, super::CmdError> {
    use std::io::Write;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut write_error: Option<std::io::Error> = None;
    let batch = engine.plan().request.batch;
    let bar = prompt_bar(engine, prompt.len(), batch);
    let stats = engine.generate(
        prompt,
        params,
        &mut |_, text| {
            if !bar.is_finished() {
                bar.finish_and_clear();
            }
            if echo && write_error.is_none() {
                if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                    write_error = Some(e);
                }
            }
        },
        cancel_flag(),
    );
    bar.finish_and_clear();
    engine.set_prompt_progress(None);
    let stats = stats?;
    if let Some(e) = write_error {
        return Err(format!("writing to stdout: {e}").into());
    }
    Ok(stats)
}

/// The model of `run` and `chat`: a path, positional or as `--model`, else the default model
/// (fetched on first use).
#[derive(clap::Args)]
pub struct ModelChoice {
    /// The GGUF model (default: SmolLM2-135M-Instruct Q4_1, fetched on first use).
    model: Option<PathBuf>,
    /// The model, as an option (same as the positional MODEL).
    #[arg(long = "model", value_name = "MODEL", conflicts_with = "model")]
    model_opt: Option<PathBuf>,
}

impl ModelChoice {
    /// The path to load: the one given, else the default model's (fetched now if needed,
    /// with progress on stderr unless `quiet`).
    pub fn path(&self, quiet: bool) -> Result<PathBuf, super::CmdError> {
        match self.model.clone().or(self.model_opt.clone()) {
            Some(p) => Ok(p),
            None => super::fetch::ensure_default_model(quiet),
        }
    }
}
