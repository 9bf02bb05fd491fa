//! llama.cpp goldens recorded at test time: the reference python runs
//! `shared/reference/golden.py gen` on a model file and prompts, and the engine's teacher-forced
//! logits are compared with the record under the tolerances of `shared/golden/README.md`.

use super::{models_dir, workspace_root};
use ramforge_engine::Engine;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One `gen` record: the prompt as llama.cpp tokenized it, its greedy continuation, and per
/// step the top-5 `(id, logit)`.
#[derive(Clone, Debug, Deserialize)]
pub struct Record {
    pub tokens: Vec<u32>,
    pub generated: Vec<u32>,
    pub top: Vec<Vec<(u32, f32)>>,
}

/// How far the engine is from a set of records.
#[derive(Clone, Copy, Debug, Default)]
pub struct Figures {
    pub mean: f64,
    pub max: f64,
    pub steps: u64,
    /// Steps whose golden margin (top1 - top2) reached the tolerance's margin.
    pub argmax_checked: u64,
    pub argmax_mismatches: u64,
}

/// The tolerances of quantized models (README: mean <= 0.50, max <= 3.0, argmax equal where
/// the golden margin >= 1.0).
pub const QUANT: (f64, f64, f64) = (0.50, 3.0, 1.0);

/// `shared/`: `RAMFORGE_SHARED`, default `<workspace root>/../shared`.
fn shared_dir() -> PathBuf {
    std::env::var_os("RAMFORGE_SHARED")
        .map_or_else(|| workspace_root().join("../shared"), PathBuf::from)
}

/// The reference venv's python: `RAMFORGE_REFERENCE_PY`, default
/// `<models>/.venv-reference/bin/python`; a missing one fails the test.
pub fn reference_python() -> PathBuf {
    let p = std::env::var_os("RAMFORGE_REFERENCE_PY").map_or_else(
        || models_dir().join(".venv-reference/bin/python"),
        PathBuf::from,
    );
    assert!(
        p.is_file(),
        "reference python {} is missing: run scripts/test.sh (it sets up the venv) or set RAMFORGE_REFERENCE_PY",
        p.display()
    );
    p
}

/// Records llama.cpp's `steps` greedy steps after each prompt (prompts: one per line, `\n`
/// escaped as golden.py reads them).
pub fn record(model: &Path, prompts: &[&str], steps: usize) -> Vec<Record> {
    let dir = std::env::temp_dir().join(format!("ramforge-golden-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let name = model.file_name().unwrap().to_string_lossy().to_string();
    let list = dir.join(format!("{name}.prompts.txt"));
    let escaped: Vec<String> = prompts
        .iter()
        .map(|p| {
            p.replace('\\', "\\\\")
                .replace('\n', "\\n")
                .replace('\t', "\\t")
        })
        .collect();
    std::fs::write(&list, escaped.join("\n") + "\n").unwrap();
    let script = shared_dir().join("reference/golden.py");
    let out = Command::new(reference_python())
        .arg(&script)
        .arg("gen")
        .arg(model)
        .arg(&list)
        .arg(steps.to_string())
        .output()
        .expect("run the reference python");
    assert!(
        out.status.success(),
        "{} gen {} failed: {}",
        script.display(),
        model.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let records: Vec<Record> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), prompts.len());
    records
}

/// Teacher-forced comparison: each record's prompt, then its generated tokens one by one,
/// the engine's logits for the golden top-5 ids against llama.cpp's.
pub fn compare(engine: &mut Engine, records: &[Record], margin: f64) -> Figures {
    let (mut sum, mut count) = (0.0f64, 0u64);
    let mut f = Figures::default();
    for rec in records {
        engine.reset();
        let mut logits = engine.eval(&rec.tokens).unwrap().to_vec();
        for (s, top) in rec.top.iter().enumerate() {
            for &(id, golden) in top {
                let d = (logits[id as usize] as f64 - golden as f64).abs();
                sum += d;
                count += 1;
                f.max = f.max.max(d);
            }
            f.steps += 1;
            if (top[0].1 - top[1].1) as f64 >= margin {
                f.argmax_checked += 1;
                if ramforge_engine::sampling::argmax(&logits) as u32 != top[0].0 {
                    f.argmax_mismatches += 1;
                }
            }
            if s + 1 < rec.top.len() {
                logits.copy_from_slice(engine.eval(&[rec.generated[s]]).unwrap());
            }
        }
    }
    f.mean = sum / count as f64;
    f
}

/// Fails unless `f` is within the quantized tolerance.
pub fn assert_within_quant(what: &str, f: &Figures) {
    let (mean, max, _) = QUANT;
    eprintln!(
        "{what}: mean |diff| {:.4}, max {:.4}, argmax mismatches {}/{} over {} steps",
        f.mean, f.max, f.argmax_mismatches, f.argmax_checked, f.steps
    );
    assert!(
        f.mean <= mean && f.max <= max && f.argmax_mismatches == 0,
        "{what}: {f:?} is outside the quantized tolerance (mean <= {mean}, max <= {max}, argmax equal)"
    );
    assert!(f.argmax_checked > 0, "{what}: no step had a clear margin");
}
