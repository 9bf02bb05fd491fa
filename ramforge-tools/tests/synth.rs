//! `ramforge-tools synth`: the file it writes is valid, seeded, shaped as asked, carries the
//! donor's tokenizer, and llama.cpp (the reference venv's llama_cpp) loads and evaluates it.

mod common;

use common::reference_python;
use ramforge_gguf::{GgmlType, GgufFile};
use std::path::{Path, PathBuf};
use std::process::Command;

fn donor() -> PathBuf {
    common::model_path("SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ramforge-synth-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Runs synth for a small model; returns (exit status, stderr).
fn synth(out: &Path, arch: &str, ty: &str, seed: u64) -> (Option<i32>, String) {
    let shape = "--layers 2 --embd 64 --ffn 96 --heads 4 --kv-heads 2";
    let seed = seed.to_string();
    synth_with(out, shape, &["--arch", arch, "--type", ty, "--seed", &seed])
}

/// Runs `synth -q -o OUT ARGS EXTRA --vocab-from DONOR` (`args` split at spaces); returns
/// (exit status, stderr).
fn synth_with(out: &Path, args: &str, extra: &[&str]) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(["synth", "-q", "-o"])
        .arg(out)
        .args(args.split(' '))
        .args(extra)
        .arg("--vocab-from")
        .arg(donor())
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// llama.cpp loads the file, evaluates a prompt, and the last logits are finite with a
/// spread near 1 (the weights are scaled for unit-variance outputs).
fn llama_cpp_logit_std(path: &Path) -> f64 {
    const SCRIPT: &str = r#"
import sys, numpy as np
from llama_cpp import Llama
m = Llama(model_path=sys.argv[1], n_ctx=64, n_threads=2, verbose=False, logits_all=True)
toks = m.tokenize(b"Hello world, this is a test", add_bos=False)
m.eval(toks)
logits = np.array(m.scores[m.n_tokens - 1])
assert logits.shape == (49152,), logits.shape
assert np.isfinite(logits).all()
print(float(logits.std()))
"#;
    llama_cpp_stdout(SCRIPT, path).trim().parse().unwrap()
}

/// Runs `script` in the reference python with the file as its argument; asserts it succeeded
/// and returns what it printed.
fn llama_cpp_stdout(script: &str, path: &Path) -> String {
    let o = Command::new(reference_python())
        .args(["-c", script])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "llama.cpp could not run {}: {}",
        path.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn llama_and_qwen2_files_are_valid_and_run_in_llama_cpp() {
    let donor_file = GgufFile::open(donor()).unwrap();
    let donor_tokens = donor_file
        .header()
        .metadata
        .get_str_array("tokenizer.ggml.tokens")
        .unwrap();
    for (arch, ty, gty, n_tensors) in [
        ("llama", "Q8_0", GgmlType::Q8_0, 2 + 9 * 2 + 1),
        ("qwen2", "Q4_0", GgmlType::Q4_0, 2 + 12 * 2 + 1),
    ] {
        let path = tmp(&format!("{arch}.gguf"));
        let (code, err) = synth(&path, arch, ty, 7);
        assert_eq!(code, Some(0), "{err}");
        let f = GgufFile::open(&path).unwrap();
        let h = f.header();
        let m = &h.metadata;
        assert_eq!(m.get_str("general.architecture").unwrap(), arch);
        assert_eq!(m.get_u32(&format!("{arch}.block_count")).unwrap(), 2);
        assert_eq!(
            m.get_u32(&format!("{arch}.attention.head_count_kv"))
                .unwrap(),
            2
        );
        assert_eq!(
            m.get_str_array("tokenizer.ggml.tokens").unwrap(),
            donor_tokens
        );
        assert_eq!(h.tensors.len(), n_tensors);
        let k = f.tensor("blk.1.attn_k.weight").unwrap();
        assert_eq!((k.ggml_type, k.shape.clone()), (gty, vec![64, 32]));
        assert_eq!(f.tensor("output.weight").unwrap().shape, vec![64, 49152]);
        assert_eq!(
            f.tensor("blk.0.ffn_down.weight").unwrap().shape,
            vec![96, 64]
        );
        assert_eq!(arch == "qwen2", f.tensor("blk.0.attn_q.bias").is_ok());

        // Weights are uniform in ±sqrt(3/fan_in): check the dequantized down projection.
        let down = f.tensor("blk.1.ffn_down.weight").unwrap();
        let mut raw = vec![0; down.n_bytes as usize];
        f.read_tensor_into(down, &mut raw).unwrap();
        let mut w = vec![0f32; down.n_elements as usize];
        for (src, dst) in raw.chunks(down.row_bytes() as usize).zip(w.chunks_mut(96)) {
            ramforge_quant::dequantize_row(gty, src, dst).unwrap();
        }
        let bound = (3.0f32 / 96.0).sqrt();
        assert!(
            w.iter().all(|v| v.abs() <= bound * 1.01),
            "weights out of range"
        );
        let var = w.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / w.len() as f64;
        assert!(
            (var * 96.0 - 1.0).abs() < 0.15,
            "fan-in scaled variance {}",
            var * 96.0
        );
        let mut norm = vec![0u8; 256];
        f.read_tensor_into(f.tensor("blk.0.attn_norm.weight").unwrap(), &mut norm)
            .unwrap();
        assert!(norm
            .chunks(4)
            .all(|b| f32::from_le_bytes(b.try_into().unwrap()) == 1.0));

        let std = llama_cpp_logit_std(&path);
        assert!((0.3..3.0).contains(&std), "{arch}: logit std {std}");
    }
}

#[test]
fn the_seed_decides_the_bytes() {
    let a = tmp("a.gguf");
    let b = tmp("b.gguf");
    let c = tmp("c.gguf");
    for (p, seed) in [(&a, 3), (&b, 3), (&c, 4)] {
        let (code, err) = synth(p, "llama", "Q4_0", seed);
        assert_eq!(code, Some(0), "{err}");
    }
    let read = |p: &Path| std::fs::read(p).unwrap();
    assert!(read(&a) == read(&b), "same seed, same file");
    let (fa, fc) = (GgufFile::open(&a).unwrap(), GgufFile::open(&c).unwrap());
    assert_eq!(fa.header().tensors, fc.header().tensors, "same layout");
    let t = fa.tensor("blk.0.attn_q.weight").unwrap();
    let (mut x, mut y) = (vec![0; t.n_bytes as usize], vec![0; t.n_bytes as usize]);
    fa.read_tensor_into(t, &mut x).unwrap();
    fc.read_tensor_into(t, &mut y).unwrap();
    assert!(x != y, "another seed, other weights");
}

#[test]
fn bad_shapes_are_refused_in_one_line() {
    let out = tmp("bad.gguf");
    // 64-wide rows are not whole Q4_K blocks (256).
    let (code, err) = synth(&out, "llama", "Q4_K", 0);
    assert_eq!(code, Some(1));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: ") && err.contains("Q4_K"), "{err}");
    let (code, err) = synth(&out, "llama", "Q9_9", 0);
    assert_eq!(code, Some(1));
    assert!(err.contains("unknown type"), "{err}");
}

/// `--router-skew S`: seeded like every tensor, S = 0 is the file without the flag, and only
/// the embedding (shifted) and the routers (a bias per expert) differ from it; refused
/// without experts or below 0. Its effect on routing is measured in expert_history.rs.
#[test]
fn router_skew_is_seeded_and_touches_only_the_embedding_and_the_routers() {
    let write = |name: &str, extra: &[&str]| {
        let out = tmp(name);
        let base = "--arch qwen3moe --layers 2 --embd 64 --ffn 64 --heads 4 --kv-heads 2 --type Q8_0 --experts 8 --experts-used 2 --seed 3";
        let (code, err) = synth_with(&out, base, extra);
        (out, code, err)
    };
    let (plain, _, _) = write("plain.gguf", &[]);
    let (zero, _, _) = write("zero.gguf", &["--router-skew", "0"]);
    let (a, code, err) = write("skew-a.gguf", &["--router-skew", "1.5"]);
    assert_eq!(code, Some(0), "{err}");
    let (b, _, _) = write("skew-b.gguf", &["--router-skew", "1.5"]);
    let read = |p: &Path| std::fs::read(p).unwrap();
    assert!(
        read(&plain) == read(&zero),
        "S = 0 writes the unskewed file"
    );
    assert!(read(&a) == read(&b), "same seed, same skew, same file");
    let (fp, fa) = (GgufFile::open(&plain).unwrap(), GgufFile::open(&a).unwrap());
    assert_eq!(fp.header().tensors, fa.header().tensors, "same layout");
    let mut changed = Vec::new();
    for t in &fp.header().tensors {
        let (mut x, mut y) = (vec![0; t.n_bytes as usize], vec![0; t.n_bytes as usize]);
        fp.read_tensor_into(t, &mut x).unwrap();
        fa.read_tensor_into(t, &mut y).unwrap();
        if x != y {
            changed.push(t.name.clone());
        }
    }
    assert_eq!(
        changed,
        [
            "token_embd.weight",
            "blk.0.ffn_gate_inp.weight",
            "blk.1.ffn_gate_inp.weight"
        ]
    );
    let (_, code, err) = write("neg.gguf", &["--router-skew=-1"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("--router-skew -1"), "{err}");
    let (code, err) = synth_with(
        &tmp("dense.gguf"),
        "--arch llama --layers 1 --embd 64 --ffn 64 --heads 4 --kv-heads 2 --type Q8_0 --router-skew 1",
        &[],
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("needs --experts"), "{err}");
}

/// deepseek4 (DeepSeek V4): a file with every kind of block (the window only, ratio 4 with
/// the lightning indexer, ratio 128), a hash-routed first block and MXFP4 experts loads in
/// llama.cpp, which evaluates a prompt past the 8-position window and past 128 positions (a
/// ratio-128 row) to finite logits of spread near 1 that differ from row to row; `run`
/// generates from it (its logits against llama.cpp's: `synth_goldens`) and `verify` checks
/// its kernels, leaving out the hash-routing table; a bad ratio list or output grouping is
/// refused in one line.
#[test]
fn deepseek4_runs_in_llama_cpp_and_bad_shapes_are_refused_in_one_line() {
    let write = |name: &str, extra: &[&str]| {
        let out = tmp(name);
        let base = "--arch deepseek4 --layers 3 --embd 64 --ffn 64 --heads 4 --kv-heads 1 --head-dim 64 --rope-dim 16 --q-lora-rank 64 --experts 8 --experts-used 2 --sliding-window 8 --indexer-heads 2 --indexer-dim 64 --indexer-top-k 4 --hash-layers 1 --o-lora-rank 32 --type MXFP4";
        let (code, err) = synth_with(&out, base, extra);
        (out, code, err)
    };
    let (path, code, err) = write(
        "deepseek4.gguf",
        &["--compress-ratios", "0,4,128", "--o-groups", "2"],
    );
    assert_eq!(code, Some(0), "{err}");
    let f = GgufFile::open(&path).unwrap();
    let ids = f.tensor("blk.0.ffn_gate_tid2eid.weight").unwrap();
    assert_eq!(
        (ids.ggml_type, ids.shape.clone()),
        (GgmlType::I32, vec![2, 49152])
    );
    let mut raw = vec![0; ids.n_bytes as usize];
    f.read_tensor_into(ids, &mut raw).unwrap();
    let ids: Vec<i32> = raw
        .chunks(4)
        .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    assert!(
        ids.chunks(2)
            .all(|p| p[0] != p[1] && p.iter().all(|&e| (0..8).contains(&e))),
        "each token's two experts distinct and below 8"
    );
    assert!(f.tensor("blk.1.indexer_compressor_ape.weight").is_ok());
    assert!(f.tensor("blk.2.indexer.proj.weight").is_err());
    assert!(f.tensor("blk.1.exp_probs_b.bias").is_ok());

    const SCRIPT: &str = r#"
import sys, numpy as np
from llama_cpp import Llama
m = Llama(model_path=sys.argv[1], n_ctx=512, n_threads=2, verbose=False, logits_all=True)
text = b"In the old harbour town the fishermen rose before dawn and checked their nets. " * 12
toks = m.tokenize(text, add_bos=True)[:160]
assert len(toks) == 160, len(toks)
m.eval(toks)
L = np.array(m.scores[:m.n_tokens])
assert L.shape == (160, 49152), L.shape
assert np.isfinite(L).all()
std = L.std(axis=1)
print(float(std.min()), float(std.max()), float(np.abs(np.diff(L, axis=0)).max(axis=1).min()))
"#;
    let figures: Vec<f64> = llama_cpp_stdout(SCRIPT, &path)
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    let (std_min, std_max, step_min) = (figures[0], figures[1], figures[2]);
    assert!(
        std_min > 0.3 && std_max < 3.0 && step_min > 0.1,
        "logit std {std_min}..{std_max}, least change between rows {step_min}"
    );

    let o = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(["run", "-q", "-n", "12", "--temperature", "0", "-p", "Hello"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(!o.stdout.is_empty(), "no text generated: {err}");
    // `verify`'s kernel check passes over the integer table no kernel reads.
    let o = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(["verify", "-q", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (v["pass"].as_bool(), v["integer_tables"].as_u64()),
        (Some(true), Some(1))
    );

    for (ratios, extra, expect) in [
        ("0,4", "", "one 0, 4 or 128 per layer (3)"),
        ("0,4,4", "", "at least one 4 and one 128"),
        ("0,4,64", "", "\"64\" is not 0, 4 or 128"),
        (
            "0,4,128",
            "--o-groups=3",
            "--o-groups 3 must divide --heads 4",
        ),
    ] {
        let mut args = vec!["--compress-ratios", ratios];
        args.extend(Some(extra).filter(|e| !e.is_empty()));
        let (_, code, err) = write("bad-deepseek4.gguf", &args);
        assert_eq!(code, Some(1), "{ratios} {extra}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("error: ") && err.contains(expect), "{err}");
    }
}

/// `--quantized-rows N`: each block-quantized matrix's first N rows are the ones a full write
/// gives (the same seed), every later row is made of their blocks only, norms stay as they
/// were, and llama.cpp runs the file to finite logits of a sane spread.
#[test]
fn quantized_rows_build_the_other_rows_of_real_blocks() {
    let full = tmp("pool-full.gguf");
    let pooled = tmp("pool-2.gguf");
    let write = |out: &Path, extra: &[&str]| {
        let base = "--arch llama --layers 2 --embd 256 --ffn 512 --heads 4 --kv-heads 2 --type Q4_K --seed 3";
        let (code, err) = synth_with(out, base, extra);
        assert_eq!(code, Some(0), "{err}");
    };
    write(&full, &[]);
    write(&pooled, &["--quantized-rows", "2"]);
    let (a, b) = (
        GgufFile::open(&full).unwrap(),
        GgufFile::open(&pooled).unwrap(),
    );
    let bytes = |f: &GgufFile, name: &str| {
        let t = f.tensor(name).unwrap();
        let mut raw = vec![0; t.n_bytes as usize];
        f.read_tensor_into(t, &mut raw).unwrap();
        (raw, t.ggml_type)
    };
    for name in ["blk.1.ffn_down.weight", "token_embd.weight"] {
        let ((x, ty), (y, _)) = (bytes(&a, name), bytes(&b, name));
        assert_eq!(ty, GgmlType::Q4_K);
        assert_ne!(x, y, "{name}: later rows differ from a full write");
        let row = x.len() / a.tensor(name).unwrap().shape[1..].iter().product::<u64>() as usize;
        assert_eq!(x[..2 * row], y[..2 * row], "{name}: the quantized rows");
        let block = ty.type_size();
        let pool: std::collections::HashSet<&[u8]> = y[..2 * row].chunks(block).collect();
        assert!(
            y[2 * row..].chunks(block).all(|b| pool.contains(b)),
            "{name}: every later block is one of the first rows'"
        );
    }
    let (x, _) = bytes(&a, "blk.0.attn_norm.weight");
    assert_eq!(x, bytes(&b, "blk.0.attn_norm.weight").0);
    let std = llama_cpp_logit_std(&pooled);
    assert!(std.is_finite() && std > 0.05, "logit std {std}");
}
