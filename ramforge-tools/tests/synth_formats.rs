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

use common::judge::{self, verify};
use std::path::PathBuf;

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
        let golden = judge::record_golden(&model, PROMPTS, 8, &tmp(&format!("gen-{name}.jsonl")));
        let size = std::fs::metadata(&model).unwrap().len();
        let resident = verify(&model, &golden, None, 2).steps;
        for (what, ram) in [
            ("all resident", None),
            ("ram 40% of the file", Some(size * 40 / 100)),
        ] {
            let judge::Verified {
                summary: s,
                mismatches,
                steps,
            } = verify(&model, &golden, ram, 2);
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
