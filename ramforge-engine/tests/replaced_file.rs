//! A model file replaced by rename while an engine streams from it: the engine's handles still
//! read the old file, so nothing fails on its own; the engine sees the path name another file
//! and ends the generation with an error naming the file and the tensor and offset it was about
//! to read, releases every charge of that generation, and runs again once the loaded file is
//! back at the path. A file written in place ends generation the same way, between passes or
//! during one (whose result is then discarded).

mod common;

use common::model;
use ramforge_engine::{Engine, EngineOptions, GenerationStats, SamplingParams};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

/// A budget under which most layers stream.
const RAM: u64 = 24 << 20;
const PROMPT: &str = "The capital of France is";

fn generate(
    e: &mut Engine,
    on_token: &mut dyn FnMut(u32, &str),
) -> Result<GenerationStats, ramforge_engine::EngineError> {
    let prompt = e.model().tokenizer.encode(PROMPT, true, true);
    e.generate(
        &prompt,
        &SamplingParams::greedy(8),
        on_token,
        &AtomicBool::new(false),
    )
}

/// A scratch directory with a copy of the model, removed when dropped.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("ramforge-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// Moves a new file over `path`: `bytes` written under another name, then renamed.
fn replace_with(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("new");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Moves the loaded file back to `path` (through a fresh link to it, `kept`).
fn move_back(kept: &Path, path: &Path) {
    let tmp = path.with_extension("back");
    std::fs::hard_link(kept, &tmp).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Checks that a generation over a changed file failed as it should: a one-line `err` that
/// names `path` and a tensor, every charge of the generation released (the budget holds
/// `held_after_load` again) and the context reset.
fn assert_failed_cleanly(err: &str, e: &Engine, path: &Path, held_after_load: u64) {
    assert!(!err.contains('\n'), "one line: {err}");
    assert_names_the_file_and_a_tensor(err, e, path);
    assert_eq!(
        e.budget().held(),
        held_after_load,
        "every charge is released"
    );
    assert_eq!(e.n_past(), 0, "the context was reset");
}

/// Checks that `err` names `path` and a tensor of the model with a file offset inside that
/// tensor.
fn assert_names_the_file_and_a_tensor(err: &str, e: &Engine, path: &Path) {
    assert!(err.contains(&path.display().to_string()), "{err}");
    let name = err
        .split("tensor \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no tensor named: {err}"));
    let offset: u64 = err
        .split("at file offset ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no offset: {err}"));
    let file = &e.model().file;
    let t = file
        .header()
        .tensors
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("{name} is not a tensor of the model: {err}"));
    let start = file.absolute_offset(t);
    assert!(
        (start..start + t.n_bytes).contains(&offset),
        "offset {offset} is outside {name} ({start}, {} bytes)",
        t.n_bytes
    );
}

#[test]
fn a_file_replaced_by_rename_ends_generation_with_an_error_and_the_engine_recovers() {
    let scratch = Scratch::new("replaced");
    let path = scratch.path("model.gguf");
    let kept = scratch.path("loaded.gguf");
    let bytes = std::fs::read(model()).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    // A second name for the loaded file, to move it back later.
    std::fs::hard_link(&path, &kept).unwrap();

    let mut e = Engine::load(&path, &options()).unwrap();
    assert!(e.plan().streamed_layers() > 0, "the test budget streams");
    let held_after_load = e.budget().held();
    let baseline = generate(&mut e, &mut |_, _| {}).unwrap();

    // A modified copy: the streamed layers' matrices zeroed (whatever it holds, it is not
    // the loaded file).
    let mut modified = bytes.clone();
    {
        let file = &e.model().file;
        for (l, _) in e
            .model()
            .tensors
            .layers
            .iter()
            .zip(&e.plan().pinned)
            .filter(|(_, &p)| !p)
        {
            for t in l.matrices() {
                let at = file.absolute_offset(t) as usize;
                modified[at..at + t.n_bytes as usize].fill(0);
            }
        }
    }

    // Replaced between generations: the next one fails before reading anything.
    replace_with(&path, &modified);
    let err = match generate(&mut e, &mut |_, _| {}) {
        Ok(s) => panic!("generation over a replaced file succeeded: {:?}", s.tokens),
        Err(err) => err.to_string(),
    };
    assert!(err.contains("was replaced"), "{err}");
    assert_failed_cleanly(&err, &e, &path, held_after_load);

    // Moved back, the same engine generates the same tokens.
    move_back(&kept, &path);
    assert_eq!(
        generate(&mut e, &mut |_, _| {}).unwrap().tokens,
        baseline.tokens
    );

    // Replaced mid-generation, after the third token: the generation ends at the next pass.
    let mut seen = Vec::new();
    let result = generate(&mut e, &mut |id, _| {
        seen.push(id);
        if seen.len() == 3 {
            replace_with(&path, &modified);
        }
    });
    let err = match result {
        Ok(s) => panic!("generation over a replaced file succeeded: {:?}", s.tokens),
        Err(err) => err.to_string(),
    };
    assert_eq!(
        seen,
        baseline.tokens[..3],
        "it ended at the pass after the swap"
    );
    assert!(err.contains("was replaced"), "{err}");
    assert_failed_cleanly(&err, &e, &path, held_after_load);

    move_back(&kept, &path);
    let again = generate(&mut e, &mut |_, _| {}).unwrap();
    assert_eq!(again.tokens, baseline.tokens);
    assert!(again.residency.layers_loaded > 0);

    // Removed: the same, with the path gone.
    std::fs::remove_file(&path).unwrap();
    let err = generate(&mut e, &mut |_, _| {}).unwrap_err().to_string();
    assert!(
        err.contains("is gone") && err.contains("tensor \""),
        "{err}"
    );
    move_back(&kept, &path);
    assert_eq!(
        generate(&mut e, &mut |_, _| {}).unwrap().tokens,
        baseline.tokens
    );
}

/// The file range (offset, length) of the first matrix of the first streamed layer.
fn first_streamed_matrix(e: &Engine) -> (u64, usize) {
    let (layer, _) = e
        .model()
        .tensors
        .layers
        .iter()
        .zip(&e.plan().pinned)
        .find(|(_, &p)| !p)
        .expect("a streamed layer");
    let t = layer.matrices().next().unwrap();
    (e.model().file.absolute_offset(t), t.n_bytes as usize)
}

/// Writes zeros over `range` of the file at `path`, in place (the same file, the same size).
fn zero_in_place(path: &Path, (offset, len): (u64, usize)) {
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset)).unwrap();
    f.write_all(&vec![0u8; len]).unwrap();
}

#[test]
fn a_file_written_in_place_ends_generation_between_passes_or_after_the_pass_it_changed_under() {
    let scratch = Scratch::new("written");
    let path = scratch.path("model.gguf");
    std::fs::copy(model(), &path).unwrap();

    // Between passes: written after the third token, the next pass does not start.
    let mut e = Engine::load(&path, &options()).unwrap();
    assert!(e.plan().streamed_layers() > 0, "the test budget streams");
    let held_after_load = e.budget().held();
    let matrix = first_streamed_matrix(&e);
    let baseline = generate(&mut e, &mut |_, _| {}).unwrap();
    let mut seen = Vec::new();
    let err = generate(&mut e, &mut |id, _| {
        seen.push(id);
        if seen.len() == 3 {
            zero_in_place(&path, matrix);
        }
    })
    .unwrap_err()
    .to_string();
    assert_eq!(seen, baseline.tokens[..3], "it ended at the next pass");
    assert!(
        err.contains("was modified in place") && err.contains("stopped before reading"),
        "{err}"
    );
    assert_failed_cleanly(&err, &e, &path, held_after_load);
    // It stays refused: the loaded weights and the file differ for good.
    let err = generate(&mut e, &mut |_, _| {}).unwrap_err().to_string();
    assert!(err.contains("was modified in place"), "{err}");

    // During a pass (the prompt's, from its progress callback, called between layers): that
    // pass's logits are discarded and no token comes out.
    std::fs::copy(model(), &path).unwrap();
    let mut e = Engine::load(&path, &options()).unwrap();
    let written_path = path.clone();
    let mut written = false;
    e.set_prompt_progress(Some(Box::new(move |_, _| {
        if !written {
            written = true;
            zero_in_place(&written_path, matrix);
        }
    })));
    let mut seen = Vec::new();
    let err = generate(&mut e, &mut |id, _| seen.push(id))
        .unwrap_err()
        .to_string();
    assert!(seen.is_empty(), "no token from the changed pass: {seen:?}");
    assert!(
        err.contains("was modified in place")
            && err.contains("discarded the pass that started reading"),
        "{err}"
    );
    assert_failed_cleanly(&err, &e, &path, held_after_load);
}

fn options() -> EngineOptions {
    EngineOptions {
        ram: Some(RAM),
        ctx: Some(64),
        threads: 2,
        ..Default::default()
    }
}
