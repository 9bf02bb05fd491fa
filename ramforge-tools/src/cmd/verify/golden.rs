//! `verify --golden FILE.jsonl`: teacher-forced logits against llama.cpp's.
//!
//! For each record: feed its prompt `tokens`, then at step s compare our logits for the ids of
//! the record's `top[s]` with llama.cpp's, and feed `generated[s]`. Tolerances are those of
//! `shared/golden/README.md`: float models mean <= 0.02, max <= 0.10, argmax equal where the
//! golden margin >= 0.1; quantized models mean <= 0.50, max <= 3.0, argmax equal where the
//! margin >= 1.0. Outside them the command fails (exit 1).

use crate::error::{CmdError, CmdResult};
use ramforge_engine::budget::human_bytes;
use ramforge_engine::model::is_float_type;
use ramforge_engine::{Engine, EngineOptions, KvType, Model};
use serde::Deserialize;
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::ExitCode;

/// One `gen-*.jsonl` record.
#[derive(Deserialize)]
struct Record {
    model_sha256: Option<String>,
    #[serde(default)]
    text: String,
    tokens: Vec<u32>,
    generated: Vec<u32>,
    /// Per step, the golden top-5 `[id, logit]`.
    top: Vec<Vec<(u32, f32)>>,
}

/// The tolerances of one class of model.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Tolerance {
    pub mean: f64,
    pub max: f64,
    /// Our argmax must equal the golden top-1 where the golden margin is at least this.
    pub margin: f64,
}

pub const FLOAT_TOLERANCE: Tolerance = Tolerance {
    mean: 0.02,
    max: 0.10,
    margin: 0.1,
};
pub const QUANT_TOLERANCE: Tolerance = Tolerance {
    mean: 0.50,
    max: 3.0,
    margin: 1.0,
};

/// Running error statistics.
#[derive(Default, Clone, Copy)]
struct Errors {
    sum: f64,
    count: u64,
    max: f64,
    steps: u64,
    argmax_checked: u64,
    argmax_mismatches: u64,
}

impl Errors {
    fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }
}

/// What to compare: the model, the golden, and how to run the engine.
pub struct Check<'a> {
    pub model: &'a Path,
    pub golden: &'a Path,
    pub json: bool,
    pub threads: usize,
    pub ram: Option<u64>,
    pub kv_type: KvType,
    /// Prompt tokens processed together at most.
    pub batch: usize,
}

impl Check<'_> {
    /// The engine's options for a context of `ctx` positions.
    pub fn options(&self, ctx: usize) -> EngineOptions {
        EngineOptions {
            ram: self.ram,
            ctx: Some(ctx),
            threads: self.threads,
            kv_type: self.kv_type,
            batch: self.batch,
            ..EngineOptions::default()
        }
    }
}

/// The tolerance of `model`'s class (float when every tensor is), and whether it is float.
pub fn tolerance(model: &Model) -> (Tolerance, bool) {
    let float = model
        .file
        .header()
        .tensors
        .iter()
        .all(|t| is_float_type(t.ggml_type));
    (
        if float {
            FLOAT_TOLERANCE
        } else {
            QUANT_TOLERANCE
        },
        float,
    )
}

pub fn run(args: &Check) -> CmdResult {
    let golden = args.golden;
    let records = read_records(golden)?;
    if records.is_empty() {
        return Err(format!("{}: no records", golden.display()).into());
    }
    let model = Model::open(args.model)?;
    check_sha256(args.model, &records)?;
    let (tol, all_float) = tolerance(&model);
    let ctx = records
        .iter()
        .map(|r| r.tokens.len() + r.generated.len())
        .max()
        .unwrap_or(1);
    let mut engine = Engine::new(model, &args.options(ctx))?;
    let vocab = engine.n_vocab();

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut total = Errors::default();
    for (i, rec) in records.iter().enumerate() {
        check_record(rec, i, vocab)?;
        let mut errs = Errors::default();
        engine.reset();
        let mut logits = engine.eval(&rec.tokens)?.to_vec();
        for (s, top) in rec.top.iter().enumerate() {
            let argmax = ramforge_engine::sampling::argmax(&logits) as u32;
            if args.json {
                let ours: Vec<(u32, f32)> = top
                    .iter()
                    .map(|&(id, _)| (id, logits[id as usize]))
                    .collect();
                let line =
                    serde_json::json!({"prompt": i, "step": s, "argmax": argmax, "logits": ours});
                writeln!(out, "{line}")?;
            }
            for &(id, golden_logit) in top {
                let d = (logits[id as usize] as f64 - golden_logit as f64).abs();
                errs.sum += d;
                errs.count += 1;
                errs.max = errs.max.max(d);
            }
            errs.steps += 1;
            if top.len() >= 2 && (top[0].1 - top[1].1) as f64 >= tol.margin {
                errs.argmax_checked += 1;
                if argmax != top[0].0 {
                    errs.argmax_mismatches += 1;
                }
            }
            if s + 1 < rec.top.len() {
                logits.copy_from_slice(engine.eval(&[rec.generated[s]])?);
            }
        }
        if !args.json {
            writeln!(
                out,
                "prompt {i} ({} tokens, {} steps): mean |diff| {:.4}, max {:.4}, argmax mismatches {}/{}  {:?}",
                rec.tokens.len(),
                errs.steps,
                errs.mean(),
                errs.max,
                errs.argmax_mismatches,
                errs.argmax_checked,
                truncate(&rec.text, 40)
            )?;
        }
        total.sum += errs.sum;
        total.count += errs.count;
        total.max = total.max.max(errs.max);
        total.steps += errs.steps;
        total.argmax_checked += errs.argmax_checked;
        total.argmax_mismatches += errs.argmax_mismatches;
    }
    let pass = total.mean() <= tol.mean && total.max <= tol.max && total.argmax_mismatches == 0;
    let class = if all_float { "float" } else { "quantized" };
    let summary = serde_json::json!({"summary": {
        "golden": golden.display().to_string(),
        "model": args.model.display().to_string(),
        "records": records.len(),
        "steps": total.steps,
        "mean_abs_diff": total.mean(),
        "max_abs_diff": total.max,
        "argmax_checked": total.argmax_checked,
        "argmax_mismatches": total.argmax_mismatches,
        "class": class,
        "tolerance": tol,
        "pass": pass,
        "peak_managed_bytes": engine.budget().peak(),
    }});
    let line = format!(
        "{}: {} records, {} steps, mean |diff| {:.4} (<= {}), max {:.4} (<= {}), argmax mismatches {}/{} ({class} model, peak managed {})",
        golden.display(),
        records.len(),
        total.steps,
        total.mean(),
        tol.mean,
        total.max,
        tol.max,
        total.argmax_mismatches,
        total.argmax_checked,
        human_bytes(engine.budget().peak()),
    );
    let failure = format!(
        "{} is outside the tolerance: mean {:.4} (limit {}), max {:.4} (limit {}), {} argmax mismatches",
        golden.display(),
        total.mean(),
        tol.mean,
        total.max,
        tol.max,
        total.argmax_mismatches
    );
    report(&mut out, args.json, summary, &line, pass, failure)
}

/// Ends a golden check: the summary as one JSON line (`--json`) or `line` with its verdict,
/// then success, or `failure` as the error.
pub fn report(
    out: &mut impl Write,
    json: bool,
    summary: serde_json::Value,
    line: &str,
    pass: bool,
    failure: String,
) -> CmdResult {
    if json {
        writeln!(out, "{summary}")?;
    } else {
        writeln!(out, "{line}: {}", if pass { "PASS" } else { "FAIL" })?;
    }
    out.flush()?;
    if pass {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(failure.into())
    }
}

fn read_records(path: &Path) -> Result<Vec<Record>, CmdError> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut records = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let rec: Record = serde_json::from_str(&line)
            .map_err(|e| format!("{} line {}: {e}", path.display(), n + 1))?;
        records.push(rec);
    }
    Ok(records)
}

/// Every id in range and one generated token per step.
fn check_record(rec: &Record, i: usize, vocab: usize) -> Result<(), CmdError> {
    if rec.tokens.is_empty() {
        return Err(format!("record {i}: no prompt tokens").into());
    }
    if rec.generated.len() < rec.top.len() {
        return Err(format!(
            "record {i}: {} steps of top logits but {} generated tokens",
            rec.top.len(),
            rec.generated.len()
        )
        .into());
    }
    let ids = rec
        .tokens
        .iter()
        .chain(&rec.generated)
        .chain(rec.top.iter().flatten().map(|(id, _)| id));
    for &id in ids {
        if id as usize >= vocab {
            return Err(
                format!("record {i}: token id {id} is outside the vocabulary of {vocab}").into(),
            );
        }
    }
    Ok(())
}

/// The golden was recorded on one exact file: refuse to compare against another.
fn check_sha256(model: &Path, records: &[Record]) -> Result<(), CmdError> {
    let Some(want) = records.iter().find_map(|r| r.model_sha256.as_deref()) else {
        return Ok(());
    };
    let file = std::fs::File::open(model).map_err(|e| format!("{}: {e}", model.display()))?;
    let got = crate::sha256::hex_digest(file).map_err(|e| format!("{}: {e}", model.display()))?;
    if !got.eq_ignore_ascii_case(want) {
        return Err(format!(
            "{} has sha256 {got}, but the golden was recorded on {want}",
            model.display()
        )
        .into());
    }
    Ok(())
}

fn truncate(s: &str, n: usize) -> String {
    let mut t: String = s.chars().take(n).collect();
    if s.chars().count() > n {
        t.push('…');
    }
    t
}
