//! Holding a model file to llama.cpp: record its teacher-forced golden with the reference
//! python (`../shared/reference/golden.py`), compare with `verify --golden --json`, find the
//! smallest budget the file plans under, and check that hostile input fails in one line.
#![allow(dead_code)] // each test file uses only some of these

use super::{golden_dir, reference_python, root};
use ramforge_engine::{EngineError, EngineOptions, KvType, Model};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// llama.cpp's golden for `model` (a file, or a split model's first shard): `prompts` (one per
/// line), `n_gen` greedy tokens after each, written to `out`.
pub fn record_golden(model: &Path, prompts: &str, n_gen: usize, out: &Path) -> PathBuf {
    let prompts_file = out.with_extension("prompts.txt");
    std::fs::write(&prompts_file, prompts).unwrap();
    let script = golden_dir().join("../reference/golden.py");
    let script = if script.is_file() {
        script
    } else {
        root().join("../shared/reference/golden.py")
    };
    let o = Command::new(reference_python())
        .arg(&script)
        .arg("gen")
        .arg(model)
        .arg(&prompts_file)
        .arg(n_gen.to_string())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "llama.cpp on {}: {}",
        model.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    std::fs::write(out, &o.stdout).unwrap();
    out.to_path_buf()
}

/// What `verify --golden --json` says.
pub struct Verified {
    pub summary: serde_json::Value,
    /// Steps whose golden margin is at least 0.2 where our argmax differs from llama.cpp's.
    pub mismatches: usize,
    /// Every step's line: our argmax and our logits for the golden top-5 ids.
    pub steps: Vec<serde_json::Value>,
}

/// `verify --golden --json` of `model` under `ram` (all resident when `None`) on `threads`.
pub fn verify(model: &Path, golden: &Path, ram: Option<u64>, threads: usize) -> Verified {
    verify_with(model, golden, ram, threads, &[])
}

/// [`verify`] with `extra` arguments (e.g. `--kv-type f32`).
pub fn verify_with(
    model: &Path,
    golden: &Path,
    ram: Option<u64>,
    threads: usize,
    extra: &[&str],
) -> Verified {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"));
    cmd.args([
        "verify",
        "--threads",
        &threads.to_string(),
        "--json",
        "--golden",
    ])
    .arg(golden)
    .arg(model);
    if let Some(r) = ram {
        cmd.args(["--ram", &r.to_string()]);
    }
    cmd.args(extra);
    let o = cmd.output().unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let summary = lines
        .iter()
        .find_map(|v| v.get("summary").cloned())
        .unwrap_or_else(|| panic!("no summary: {}", String::from_utf8_lossy(&o.stderr)));
    let records: Vec<serde_json::Value> = std::fs::read_to_string(golden)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let steps: Vec<serde_json::Value> = lines
        .into_iter()
        .filter(|v| v.get("step").is_some())
        .collect();
    let mismatches = steps
        .iter()
        .filter(|step| {
            let top = &records[step["prompt"].as_u64().unwrap() as usize]["top"]
                [step["step"].as_u64().unwrap() as usize];
            let margin = top[0][1].as_f64().unwrap() - top[1][1].as_f64().unwrap();
            margin >= 0.2 && step["argmax"] != top[0][0]
        })
        .count();
    Verified {
        summary,
        mismatches,
        steps,
    }
}

/// The context `verify` runs `golden` in, and its longest prompt.
fn golden_ctx(golden: &Path) -> (usize, usize) {
    let records: Vec<serde_json::Value> = std::fs::read_to_string(golden)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let len = |v: &serde_json::Value, k: &str| v[k].as_array().unwrap().len();
    (
        records
            .iter()
            .map(|v| len(v, "tokens") + len(v, "generated"))
            .max()
            .unwrap(),
        records.iter().map(|v| len(v, "tokens")).max().unwrap(),
    )
}

/// A budget of at least 40% of `model` (`size` bytes) under which, with prompt batches of
/// `batch` tokens, the plan streams (layers or experts) and holds rows for a layer-major
/// prefill (an MoE model's streamed experts grouped over them), and `golden`'s longest prompt
/// spans several batches (all asserted), with a `kv_type` cache; for a model that never
/// prefills layer by layer, 40% (holding no rows).
pub fn layer_major_budget(
    model: &Path,
    golden: &Path,
    size: u64,
    batch: usize,
    kv_type: KvType,
) -> u64 {
    let (ctx, longest) = golden_ctx(golden);
    assert!(
        longest > batch,
        "no prompt of {golden:?} spans two {batch}-token batches"
    );
    let m = Model::open(model).unwrap();
    let o = |ram| EngineOptions {
        ram: Some(ram),
        ctx: Some(ctx),
        batch,
        kv_type,
        ..EngineOptions::default()
    };
    if !m.config.prefills_layer_major() {
        // Such a model holds none: its prompt runs batch by batch under the budget.
        let ram = size * 40 / 100;
        assert_eq!(m.plan(&o(ram)).unwrap().held_rows, 0, "{model:?}");
        return ram;
    }
    // An MoE model (but DeepSeek V4) runs each expert once over the held rows routed to it
    // where experts stream one by one: the budget must be such a one.
    let groups = m.config.n_expert > 0 && m.config.dsv4.is_none();
    // From 40% of the file up, 0.1% at a time (a small file's output chunk takes most of
    // the leftover until the projection is resident): the first budget whose leftover holds
    // rows.
    (400..1000)
        .map(|permille| size * permille / 1000)
        .find(|&ram| {
            m.plan(&o(ram)).is_ok_and(|p| {
                (p.streamed_layers() > 0 || p.experts.is_some())
                    && p.held_rows >= 2 * batch
                    && p.held_groups_experts == groups
            })
        })
        .unwrap_or_else(|| panic!("{model:?}: no budget of 40-99% holds prompt rows"))
}

/// The smallest budget `model` plans under for `golden`'s context, plus `extra`: layers
/// streamed whole, or an MoE model's experts one by one (asserted).
pub fn near_minimum(model: &Path, golden: &Path, extra: u64) -> u64 {
    let (ctx, _) = golden_ctx(golden);
    let m = Model::open(model).unwrap();
    let o = EngineOptions {
        ram: Some(1),
        ctx: Some(ctx),
        ..EngineOptions::default()
    };
    match m.plan(&o) {
        Err(EngineError::BudgetTooSmall { minimum, .. }) => {
            let plan = m
                .plan(&EngineOptions {
                    ram: Some(minimum + extra),
                    ..o
                })
                .unwrap();
            assert!(
                plan.streamed_layers() > 0 || plan.experts.is_some(),
                "{plan:?}"
            );
            minimum + extra
        }
        other => panic!("a 1-byte budget: {other:?}"),
    }
}

/// Runs the tool under a 1 GiB address-space limit: it must fail within 10 s with status 1 and
/// one stderr line containing `expect`, never a panic.
pub fn fails_cleanly(args: &[&str], expect: &str) {
    let started = Instant::now();
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 1048576 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(args)
        .output()
        .unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains(expect),
        "{args:?}: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(took < Duration::from_secs(10), "{args:?} took {took:?}");
}
