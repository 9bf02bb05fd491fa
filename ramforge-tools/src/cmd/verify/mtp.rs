//! `verify --mtp-golden FILE.json`: the MTP (nextn) layer's drafts against llama.cpp's.
//!
//! `scripts/mtp_golden.py` records, per prompt, llama.cpp's MTP head teacher-forced: row `p`
//! takes token `x_p` and the model's hidden state at `p - 1`, and gives the logits of `x_{p+1}`
//! (its top ids) and the MTP output a chained draft step takes. Here the engine evaluates the
//! prompt a token at a time and after each asks its MTP layer for the next row
//! ([`Engine::mtp_logits`]), comparing those logits on the golden's top ids, the argmax where
//! the golden margin allows, and the chained hidden state. Row 0 (whose hidden state is
//! llama.cpp's zeros) is not compared. Tolerances as `--golden`'s (float or quantized file).

use super::golden::{report, tolerance, Check};
use crate::error::{CmdError, CmdResult};
use ramforge_engine::{Engine, Model};
use serde::Deserialize;

/// One prompt of the golden.
#[derive(Deserialize)]
struct Record {
    tokens: Vec<u32>,
    /// Per row, llama.cpp's largest `[id, logit]` pairs, largest first.
    top: Vec<Vec<(u32, f32)>>,
    /// Per row, llama.cpp's MTP output (what a chained step takes).
    hidden: Vec<Vec<f32>>,
}

pub fn run(args: &Check) -> CmdResult {
    let text = std::fs::read_to_string(args.golden)
        .map_err(|e| format!("{}: {e}", args.golden.display()))?;
    let records: Vec<Record> = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not an MTP golden: {e}", args.golden.display()))?;
    let mut model = Model::open(args.model)?;
    model.enable_mtp()?;
    let (tol, _) = tolerance(&model);
    let ctx = records
        .iter()
        .map(|r| r.tokens.len() + 1)
        .max()
        .unwrap_or(1);
    let mut engine = Engine::new(model, &args.options(ctx))?;
    let (vocab, embd) = (engine.n_vocab(), engine.config().n_embd);
    let (mut sum, mut count, mut max) = (0f64, 0u64, 0f64);
    let (mut hidden_sum, mut hidden_max) = (0f64, 0f64);
    let (mut rows, mut checked, mut mismatches) = (0u64, 0u64, 0u64);
    for (i, rec) in records.iter().enumerate() {
        let n = rec.tokens.len();
        if rec.top.len() != n || rec.hidden.len() != n {
            return Err(format!(
                "{}: record {i}: one row per token expected",
                args.golden.display()
            )
            .into());
        }
        engine.reset();
        for p in 1..n {
            engine.eval(&rec.tokens[p - 1..p])?;
            let logits = engine
                .mtp_logits(rec.tokens[p])?
                .ok_or("the MTP layer lost the hidden state it starts from")?;
            let top = &rec.top[p];
            for &(id, golden) in top {
                let ours = *logits.get(id as usize).ok_or_else(|| -> CmdError {
                    format!("record {i}: token {id} is past the vocabulary ({vocab})").into()
                })?;
                let d = (ours as f64 - golden as f64).abs();
                sum += d;
                count += 1;
                max = max.max(d);
            }
            if top.len() >= 2 && (top[0].1 - top[1].1) as f64 >= tol.margin {
                checked += 1;
                if ramforge_engine::sampling::argmax(logits) as u32 != top[0].0 {
                    mismatches += 1;
                }
            }
            let golden_hidden = &rec.hidden[p];
            if golden_hidden.len() != embd {
                return Err(format!("record {i}: hidden rows of {embd} expected").into());
            }
            for (a, b) in engine.mtp_hidden().iter().zip(golden_hidden) {
                let d = (*a as f64 - *b as f64).abs();
                hidden_sum += d;
                hidden_max = hidden_max.max(d);
            }
            rows += 1;
        }
    }
    let mean = if count == 0 { 0.0 } else { sum / count as f64 };
    let pass = rows > 0 && mean <= tol.mean && max <= tol.max && mismatches == 0;
    let summary = serde_json::json!({
        "golden": args.golden.display().to_string(),
        "model": args.model.display().to_string(),
        "rows": rows,
        "mean_abs_diff": mean,
        "max_abs_diff": max,
        "hidden_mean_abs_diff": hidden_sum / (rows.max(1) as f64 * embd as f64),
        "hidden_max_abs_diff": hidden_max,
        "argmax_checked": checked,
        "argmax_mismatches": mismatches,
        "tolerance": tol,
        "pass": pass,
    });
    let line = format!(
        "{}: {rows} MTP rows, mean |diff| {mean:.4} (<= {}), max {max:.4} (<= {}), hidden max {hidden_max:.4}, argmax mismatches {mismatches}/{checked}",
        args.golden.display(),
        tol.mean,
        tol.max,
    );
    let failure = format!("{} is outside the tolerance", args.golden.display());
    report(
        &mut std::io::stdout().lock(),
        args.json,
        summary,
        &line,
        pass,
        failure,
    )
}
