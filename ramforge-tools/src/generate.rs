//! The engine at work, with progress on stderr and generated text streamed to stdout.
//!
//! `run`, `chat` and `bench` load through [`load_engine`]; `run` and `chat` generate through
//! [`generate_to_stdout`].

use crate::args::Speculation;
use crate::cancel::cancel_flag;
use crate::error::CmdError;
use crate::progress::progress_bar;
use indicatif::ProgressBar;
use ramforge_engine::{
    draft_options, split_budget, vocabulary_difference, Drafter, Engine, EngineOptions, Model,
};

/// [`load_engine`] with the drafter `spec` asks for set on the engine: with `--draft`, the
/// draft model (its vocabulary checked against the target's) gets its share of the one budget
/// first ([`split_budget`]) and the target the rest; with `--mtp`, the model holds its MTP
/// layer ([`Model::enable_mtp`]).
pub fn load_speculative(
    mut model: Model,
    options: &EngineOptions,
    spec: &Speculation,
) -> Result<Engine, CmdError> {
    if !spec.lookup && !spec.mtp && spec.draft.is_none() {
        return Ok(load_engine(model, options)?);
    }
    if spec.mtp {
        model.enable_mtp()?;
    }
    let mut options = EngineOptions {
        draft: usize::from(spec.draft_max.max(1)),
        ..options.clone()
    };
    let drafter =
        match &spec.draft {
            None if spec.mtp => Drafter::Mtp,
            None => Drafter::Lookup,
            Some(path) => {
                let draft = Model::open(path)?;
                if let Some(why) = vocabulary_difference(&model.tokenizer, &draft.tokenizer) {
                    return Err(format!("--draft {}: {why}", path.display()).into());
                }
                let split = split_budget(&model, &draft, &options, options.ram)?;
                if !split.draft_resident && !crate::verbosity::quiet() {
                    eprintln!(
                    "warning: --draft {}: the draft model needs {} to stay resident, and beside \
                     it the target would not fit in --ram or would stream more; in its share \
                     ({}) it streams, so every drafted token reads its streamed layers too \
                     (`run --json`'s bytes_read_per_generated_token counts them)",
                    path.display(),
                    ramforge_engine::budget::human_bytes(split.draft_whole),
                    split.draft.map_or("-".into(), ramforge_engine::budget::human_bytes),
                );
                }
                options.ram = split.target;
                let draft_options = EngineOptions {
                    ram: split.draft,
                    ..draft_options(&options)
                };
                Drafter::Model(Box::new(load_engine(draft, &draft_options)?))
            }
        };
    let mut engine = load_engine(model, &options)?;
    engine.set_drafter(Some(drafter));
    Ok(engine)
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
/// With `reuse_context`, the prefix the context already holds is not evaluated again
/// (`chat`'s later turns). A `constraint` (`run --json-schema`, `--grammar`) holds the output
/// to its grammar (in a fresh context).
pub fn generate_to_stdout(
    engine: &mut ramforge_engine::Engine,
    prompt: &[u32],
    params: &ramforge_engine::SamplingParams,
    constraint: Option<ramforge_engine::Constraint>,
    echo: bool,
    reuse_context: bool,
) -> Result<ramforge_engine::GenerationStats, CmdError> {
    use std::io::Write;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut write_error: Option<std::io::Error> = None;
    let batch = engine.plan().request.batch;
    let bar = prompt_bar(engine, prompt.len(), batch);
    let mut on_token = |_: u32, text: &str| {
        if !bar.is_finished() {
            bar.finish_and_clear();
        }
        if echo && write_error.is_none() {
            if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                write_error = Some(e);
            }
        }
    };
    let stats = match constraint {
        Some(c) => engine.generate_constrained(prompt, params, c, &mut on_token, cancel_flag()),
        None if reuse_context => {
            engine.generate_reusing(prompt, params, &mut on_token, cancel_flag())
        }
        None => engine.generate(prompt, params, &mut on_token, cancel_flag()),
    };
    bar.finish_and_clear();
    engine.set_prompt_progress(None);
    let stats = stats?;
    if let Some(e) = write_error {
        return Err(format!("writing to stdout: {e}").into());
    }
    Ok(stats)
}
