//! Every low-bit format against llama.cpp: `synth` writes a small llama file whose layer
//! matrices are in the format (token_embd and output too for the cheap-to-quantize ones; Q8_0
//! for the codebook formats, whose grid-search quantizers are slow on vocabulary-sized
//! matrices, as real low-bit files keep those wider), llama.cpp records its teacher-forced
//! logits at test time, and `verify --golden` compares all-resident and at 40% of the file.
//!
//! As in `synth_goldens.rs`, random weights spread the logits about 1, so the files are held to
//! mean |diff| <= 0.05 (measured 0.012-0.019) and to llama.cpp's argmax wherever its margin is
//! at least 0.2; a wrong layout or scale gives differences of the logits' own size.

mod common;

use common::{golden_dir, reference_python, root};
use std::path::{Path, PathBuf};
use std::process::Command;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ramforge-synth-formats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

const PROMPTS: &str = "The quick brown fox jumps over the lazy dog\nHello\n";

/// (weight type, type of token_embd and output)
const FORMATS: &[(&str, &str)] = &[
    ("IQ1_S", "Q8_0"),
    ("IQ1_M", "Q8_0"),
    ("IQ2_XXS", "Q8_0"),
    ("IQ2_XS", "Q8_0"),
    ("IQ2_S", "Q8_0"),
    ("IQ3_XXS", "Q8_0"),
    ("IQ3_S", "Q8_0"),
    ("TQ1_0", "TQ1_0"),
    ("TQ2_0", "TQ2_0"),
    ("NVFP4", "NVFP4"),
    ("MXFP4", "MXFP4"),
];

fn record(model: &Path, name: &str) -> PathBuf {
    let prompts = tmp(&format!("{name}.prompts.txt"));
    std::fs::write(&prompts, PROMPTS).unwrap();
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
        .arg(&prompts)
        .arg("8")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "llama.cpp on {name}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let golden = tmp(&format!("gen-{name}.jsonl"));
    std::fs::write(&golden, &o.stdout).unwrap();
    golden
}

/// `verify --golden --json` under `ram`: the summary, the per-step lines, and the steps whose
/// golden margin is at least 0.2 where our argmax differs from llama.cpp's.
fn verify(
    model: &Path,
    golden: &Path,
    ram: Option<u64>,
) -> (serde_json::Value, Vec<serde_json::Value>, usize) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"));
    cmd.args(["verify", "--threads", "2", "--json", "--golden"])
        .arg(golden)
        .arg(model);
    if let Some(r) = ram {
        cmd.args(["--ram", &r.to_string()]);
    }
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
            let (p, s) = (
                step["prompt"].as_u64().unwrap() as usize,
                step["step"].as_u64().unwrap() as usize,
            );
            let top = &records[p]["top"][s];
            let margin = top[0][1].as_f64().unwrap() - top[1][1].as_f64().unwrap();
            margin >= 0.2 && step["argmax"] != top[0][0]
        })
        .count();
    (summary, steps, mismatches)
}

#[test]
fn llama_files_in_every_low_bit_format_match_llama_cpp() {
    for &(ty, embd_ty) in FORMATS {
        let name = format!("llama-{ty}");
        let model = tmp(&format!("{name}.gguf"));
        common::synth(
            &model,
            &[
                "--arch",
                "llama",
                "--layers",
                "2",
                "--embd",
                "256",
                "--ffn",
                "256",
                "--heads",
                "4",
                "--kv-heads",
                "2",
                "--type",
                ty,
                "--embd-type",
                embd_ty,
            ],
        );
        let golden = record(&model, &name);
        let size = std::fs::metadata(&model).unwrap().len();
        let (_, resident, _) = verify(&model, &golden, None);
        for (what, ram) in [
            ("all resident", None),
            ("ram 40% of the file", Some(size * 40 / 100)),
        ] {
            let (s, steps, mismatches) = verify(&model, &golden, ram);
            assert_eq!(
                steps, resident,
                "{name}, {what}: logits differ from all resident"
            );
            let mean = s["mean_abs_diff"].as_f64().unwrap();
            eprintln!(
                "{name}, {what}: mean |diff| {mean:.4}, max {:.4}, argmax mismatches (margin >= 0.2) {mismatches}, {} steps",
                s["max_abs_diff"], s["steps"]
            );
            assert_eq!(s["pass"], true, "{name}, {what}: {s}");
            assert!(s["steps"].as_u64().unwrap() > 0, "{name}, {what}: {s}");
            assert!(mean <= 0.05, "{name}, {what}: mean {mean}");
            assert_eq!(mismatches, 0, "{name}, {what}");
        }
        std::fs::remove_file(&model).unwrap();
    }
}
