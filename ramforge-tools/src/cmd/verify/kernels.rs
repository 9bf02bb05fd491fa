//! `verify`'s kernel check: every tensor's fast `matvec` against the scalar reference.

use crate::error::CmdResult;
use crate::progress::progress_bar;
use ramforge_gguf::{GgmlType, GgufFile};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

/// The kernel check: for every tensor, the fast (parallel) `matvec` on a random vector
/// against the reference dequantization followed by an f64 dot, per row.
///
/// Tolerance: `ramforge_quant::matvec_tolerance`, i.e. the error that quantizing the
/// activations to 8 bits can cause (`sum_i |W[o][i]| * (d/2 + f16 rounding of d)` with `d` the
/// activation block's scale) plus `1e-5 * sum_i |W[o][i] x[i]|` for f32 summation. The
/// reported relative error is `|y - exact| / sum_i |W[o][i] x[i]|`. Integer tensors are
/// tables, not weights (DeepSeek V4's experts per token id): no kernel reads them, so they are
/// counted and left out.
pub fn run(model: &Path, json: bool) -> CmdResult {
    let file = GgufFile::open(model)?;
    let mut stats: BTreeMap<GgmlType, TypeStats> = BTreeMap::new();
    let mut rng = StdRng::seed_from_u64(0x5eed_f00d);
    let mut failures = Vec::new();
    let mut tables = 0u64;
    let tensors = &file.header().tensors;
    let bar = progress_bar(tensors.len() as u64, "checking tensors", false);
    for t in tensors {
        bar.inc(1);
        let ty = t.ggml_type;
        if matches!(
            ty,
            GgmlType::I8 | GgmlType::I16 | GgmlType::I32 | GgmlType::I64
        ) {
            tables += 1;
            continue;
        }
        if !ramforge_quant::is_supported(ty) {
            return Err(format!("tensor {:?}: ggml type {ty} is not supported", t.name).into());
        }
        let cols = usize::try_from(t.row_len())?;
        let rows = usize::try_from(t.n_rows())?;
        let map = file.map_tensor(t)?;
        let weights = map.bytes();
        let x: Vec<f32> = (0..cols).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        let mut y = vec![0f32; rows];
        ramforge_quant::matvec(ty, weights, rows, cols, &x, &mut y)
            .map_err(|e| format!("tensor {:?}: {e}", t.name))?;
        let row_bytes = weights.len() / rows.max(1);
        let s = stats.entry(ty).or_default();
        s.tensors += 1;
        s.elements += t.n_elements;
        let mut w = vec![0f32; cols];
        for (o, row) in weights.chunks_exact(row_bytes).enumerate() {
            ramforge_quant::dequantize_row(ty, row, &mut w)
                .map_err(|e| format!("tensor {:?} row {o}: {e}", t.name))?;
            let exact: f64 = w.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
            let scale: f64 = w
                .iter()
                .zip(&x)
                .map(|(a, b)| (*a as f64 * *b as f64).abs())
                .sum();
            let tol = ramforge_quant::matvec_tolerance(ty, &w, &x)? as f64;
            let err = (y[o] as f64 - exact).abs();
            let rel = if scale > 0.0 { err / scale } else { err };
            s.max_abs = s.max_abs.max(err);
            s.max_rel = s.max_rel.max(rel);
            if err.is_nan() || err > tol {
                s.failed += 1;
                if failures.len() < 10 {
                    failures.push(format!(
                        "tensor {:?} ({ty}) row {o}: matvec {} vs reference {exact} (tolerance {tol})",
                        t.name, y[o]
                    ));
                }
            }
        }
    }
    bar.finish_and_clear();
    let failed: u64 = stats.values().map(|s| s.failed).sum();
    if json {
        let types: Vec<_> = stats
            .iter()
            .map(|(ty, s)| {
                serde_json::json!({
                    "type": ty.name(), "tensors": s.tensors, "elements": s.elements,
                    "max_abs_err": s.max_abs, "max_rel_err": s.max_rel,
                    "failed_rows": s.failed, "pass": s.failed == 0,
                })
            })
            .collect();
        let out = serde_json::json!({
            "model": model.display().to_string(),
            "types": types,
            "integer_tables": tables,
            "pass": failed == 0,
        });
        println!("{out}");
    } else {
        println!(
            "{:<8} {:>8} {:>14} {:>12} {:>12}  result",
            "type", "tensors", "elements", "max abs err", "max rel err"
        );
        for (ty, s) in &stats {
            println!(
                "{:<8} {:>8} {:>14} {:>12.3e} {:>12.3e}  {}",
                ty.name(),
                s.tensors,
                s.elements,
                s.max_abs,
                s.max_rel,
                if s.failed == 0 { "pass" } else { "FAIL" }
            );
        }
        if tables > 0 {
            println!("({tables} integer tables: no kernel reads them)");
        }
    }
    for f in &failures {
        eprintln!("{f}");
    }
    if failed > 0 {
        return Err(format!("verify: {failed} rows outside the kernel tolerance").into());
    }
    Ok(ExitCode::SUCCESS)
}

/// Per-type totals of the kernel check.
#[derive(Default)]
struct TypeStats {
    tensors: u64,
    elements: u64,
    max_abs: f64,
    max_rel: f64,
    failed: u64,
}
