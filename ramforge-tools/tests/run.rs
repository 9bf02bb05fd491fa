//! `ramforge-tools run` end to end on the real model: out-of-core generation under a budget far
//! below the model's size, identical greedy tokens across thread counts and budgets, seeded
//! sampling, and one-line errors for bad input.

use ramforge_gguf::{GgmlType, GgufWriter, Metadata, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const MIB: u64 = 1 << 20;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn model(name: &str) -> PathBuf {
    let dir =
        std::env::var_os("RAMFORGE_MODELS").map_or_else(|| root().join("models"), PathBuf::from);
    let p = dir.join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/test.sh, which fetches the models",
        p.display()
    );
    p
}

fn smollm() -> PathBuf {
    model("SmolLM2-135M-Instruct.Q4_1.gguf")
}

fn tool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(args)
        .output()
        .expect("run ramforge-tools")
}

/// Runs `run --json` and returns the report.
fn run_json(model: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["run", model.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let out = tool(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run {extra:?} failed: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn tokens(report: &serde_json::Value) -> Vec<u64> {
    report["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

const PROMPT: &str = "The capital of France is";

#[test]
fn out_of_core_40m_generates_the_1g_tokens_within_budget_plus_16_mib() {
    let m = smollm();
    let file_len = std::fs::metadata(&m).unwrap().len();
    let common = ["--prompt", PROMPT, "--max-tokens", "24", "--threads", "2"];
    let big = run_json(&m, &[&common[..], &["--ram", "1G"]].concat());
    let small = run_json(&m, &[&common[..], &["--ram", "40M"]].concat());
    assert_eq!(tokens(&big).len(), 24);
    assert_eq!(
        tokens(&small),
        tokens(&big),
        "same greedy tokens under 40M as under 1G"
    );
    assert_eq!(small["text"], big["text"]);
    let peak_rss = small["peak_rss_bytes"].as_u64().unwrap();
    let peak_managed = small["peak_managed_bytes"].as_u64().unwrap();
    eprintln!(
        "--ram 40M on a {:.1} MiB model: peak managed {:.1} MiB, peak RSS (VmHWM) {:.1} MiB, read {:.1} MiB/token",
        file_len as f64 / MIB as f64,
        peak_managed as f64 / MIB as f64,
        peak_rss as f64 / MIB as f64,
        small["bytes_read_per_token"].as_f64().unwrap() / MIB as f64
    );
    assert!(peak_managed <= 40 * MIB);
    assert!(
        peak_rss <= 56 * MIB,
        "peak RSS {peak_rss} exceeds 40 MiB + 16 MiB"
    );
    // It really streamed: layers were read while generating, far more than the file once.
    assert!(small["streamed_layers"].as_u64().unwrap() > 0);
    assert!(small["bytes_read"].as_u64().unwrap() > file_len);
    // The prefetch depth in use is adapted within the plan's ring; nothing streams under 1G.
    let ring = small["stream_buffers"].as_u64().unwrap();
    let depth = small["prefetch_depth"].as_u64().unwrap();
    assert!(depth >= 1 && depth <= ring, "depth {depth}, ring {ring}");
    assert_eq!(big["prefetch_depth"], 0);
    assert_eq!(
        big["bytes_read"].as_u64().unwrap(),
        0,
        "all resident under 1G"
    );
}

#[test]
fn a_budget_below_the_minimum_fails_stating_the_minimum() {
    let m = smollm();
    let out = tool(&[
        "run",
        m.to_str().unwrap(),
        "--prompt",
        PROMPT,
        "--max-tokens",
        "4",
        "--ram",
        "2M",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: ") && stderr.trim_end().lines().count() == 1,
        "{stderr}"
    );
    assert!(stderr.contains("below the minimum of"), "{stderr}");
    // The stated minimum works, one byte less does not: plan and engine share the arithmetic.
    let plan = tool(&[
        "plan",
        m.to_str().unwrap(),
        "--ram",
        "1G",
        "--ctx",
        "10",
        "--json",
    ]);
    assert!(plan.status.success());
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let minimum = plan["minimum_budget_bytes"].as_u64().unwrap();
    let at = |bytes: u64| {
        tool(&[
            "run",
            m.to_str().unwrap(),
            "--prompt",
            PROMPT,
            "--max-tokens",
            "4",
            "--ctx",
            "10",
            "--ram",
            &bytes.to_string(),
        ])
    };
    let ok = at(minimum);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let below = at(minimum - 1);
    assert_eq!(below.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&below.stderr).contains(&format!("({minimum} bytes)")));
}

#[test]
fn greedy_tokens_are_identical_for_one_and_two_threads() {
    let m = smollm();
    let args = |t: &'static str| {
        vec![
            "--prompt",
            "Once upon a time, in a small village,",
            "--max-tokens",
            "20",
            "--threads",
            t,
        ]
    };
    let one = run_json(&m, &args("1"));
    let two = run_json(&m, &args("2"));
    assert_eq!(tokens(&one), tokens(&two));
    assert_eq!(one["threads"], 1);
    assert_eq!(two["threads"], 2);
}

/// `run --json` with `RAMFORGE_ISA` set to `isa`.
fn run_json_on(isa: &str, model: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["run", model.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(&args)
        .env("RAMFORGE_ISA", isa)
        .output()
        .expect("run ramforge-tools");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run on {isa} failed: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn every_simd_instruction_set_gives_the_same_greedy_tokens_and_is_reported() {
    use ramforge_quant::isa::Isa;
    // The VNNI kernels equal the AVX2 ones bit for bit, so the tokens must too (the scalar
    // reference sums in another order, so it is left out).
    let m = smollm();
    let args = [
        "--prompt",
        "The three primary colors are",
        "--max-tokens",
        "16",
        "--threads",
        "2",
    ];
    let isas: Vec<Isa> = [Isa::Avx2, Isa::AvxVnni, Isa::Avx512Vnni]
        .into_iter()
        .filter(|i| i.is_available())
        .collect();
    assert!(
        isas.contains(&Isa::Avx2),
        "this test needs a CPU with AVX2, FMA and F16C"
    );
    let base = run_json_on("avx2", &m, &args);
    assert_eq!(base["isa"], "avx2");
    for isa in &isas[1..] {
        let other = run_json_on(isa.name(), &m, &args);
        assert_eq!(other["isa"], isa.name());
        assert_eq!(tokens(&other), tokens(&base), "{isa} against avx2");
    }
    // A value that cannot be honoured is refused, with the value and the choices named.
    let out = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args([
            "run",
            m.to_str().unwrap(),
            "--prompt",
            "Hi",
            "--max-tokens",
            "1",
        ])
        .env("RAMFORGE_ISA", "avx1024")
        .output()
        .expect("run ramforge-tools");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("\"avx1024\"") && stderr.contains("avx512vnni"),
        "{stderr}"
    );
}

#[test]
fn all_resident_and_40_percent_of_the_file_give_identical_tokens() {
    // Q8_0 layers (and a Q8_0 tied output) on a second file, and a budget small enough to
    // stream the output projection in chunks too.
    let m = model("smollm2-Q8_0.gguf");
    let file_len = std::fs::metadata(&m).unwrap().len();
    let forty = (file_len * 2 / 5).to_string();
    let args = [
        "--prompt",
        "def fibonacci(n):\n    ",
        "--max-tokens",
        "16",
        "--threads",
        "2",
    ];
    let resident = run_json(&m, &args);
    let streamed = run_json(&m, &[&args[..], &["--ram", &forty]].concat());
    let tiny = run_json(&m, &[&args[..], &["--ram", "12M"]].concat());
    assert_eq!(tokens(&streamed), tokens(&resident));
    assert_eq!(tokens(&tiny), tokens(&resident));
    assert!(streamed["streamed_layers"].as_u64().unwrap() > 0);
    assert_eq!(
        tiny["output_resident"], false,
        "12M cannot hold the 34 MB output projection"
    );
}

#[test]
fn seeded_sampling_repeats_and_stop_strings_cut_the_text() {
    let m = smollm();
    let args = |seed: &'static str| {
        vec![
            "--prompt",
            "Once upon a time",
            "--max-tokens",
            "24",
            "--temperature",
            "0.9",
            "--top-k",
            "0",
            "--top-p",
            "1.0",
            "--min-p",
            "0",
            "--seed",
            seed,
        ]
    };
    let a = run_json(&m, &args("11"));
    let b = run_json(&m, &args("11"));
    let c = run_json(&m, &args("12"));
    assert_eq!(tokens(&a), tokens(&b));
    assert_ne!(tokens(&a), tokens(&c), "another seed, another text");
    let greedy = run_json(&m, &["--prompt", PROMPT, "--max-tokens", "24"]);
    let full = greedy["text"].as_str().unwrap();
    assert!(full.contains('\n'), "{full:?}");
    let stopped = run_json(
        &m,
        &["--prompt", PROMPT, "--max-tokens", "24", "--stop", "\n"],
    );
    assert_eq!(stopped["stop_reason"], "stop_string");
    assert_eq!(
        stopped["text"].as_str().unwrap(),
        &full[..full.find('\n').unwrap()]
    );
}

/// A bad input exits 1 with one `error:` line on stderr and no panic.
fn assert_one_line_error(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("error: ") && stderr.contains(needle),
        "want {needle:?} in {stderr}"
    );
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ramforge-run-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn bad_inputs_are_one_line_errors() {
    let dir = temp_dir("bad");
    // A truncated file: the header says more data than there is.
    let bytes = std::fs::read(smollm()).unwrap();
    let truncated = dir.join("truncated.gguf");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    assert_one_line_error(
        &tool(&["run", truncated.to_str().unwrap(), "--prompt", "hi"]),
        "runs past the end of the file",
    );

    // An architecture the engine does not run: the file says rwkv7 (a recurrent family).
    let relabelled = dir.join("rwkv7.gguf");
    let src = ramforge_gguf::GgufFile::open(smollm()).unwrap();
    let mut w = GgufWriter::copy_of(&src).unwrap();
    w.metadata_mut().remove("general.architecture");
    w.metadata_mut()
        .insert("general.architecture".into(), Value::String("rwkv7".into()));
    w.write_to(std::fs::File::create(&relabelled).unwrap())
        .unwrap();
    assert_one_line_error(
        &tool(&["run", relabelled.to_str().unwrap(), "--prompt", "hi"]),
        "architecture \"rwkv7\"",
    );

    // A weight of a type without kernels (I8), in an otherwise valid tiny llama file.
    let odd = dir.join("i8.gguf");
    write_tiny_llama(&odd, GgmlType::I8);
    assert_one_line_error(
        &tool(&["run", odd.to_str().unwrap(), "--prompt", "hi"]),
        "blk.0.attn_q.weight",
    );

    // A prompt longer than the context.
    let long = "word ".repeat(200);
    assert_one_line_error(
        &tool(&[
            "run",
            smollm().to_str().unwrap(),
            "--prompt",
            &long,
            "--ctx",
            "32",
        ]),
        "context holds 32",
    );
    // A missing file.
    assert_one_line_error(
        &tool(&["run", "/nonexistent/model.gguf", "--prompt", "hi"]),
        "nonexistent",
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A one-layer llama with every tensor F32 except `attn_q`, which has type `q_type`, and the
/// SmolLM2 tokenizer metadata.
fn write_tiny_llama(path: &Path, q_type: GgmlType) {
    let src = ramforge_gguf::GgufFile::open(smollm()).unwrap();
    let mut md = Metadata::new();
    for (k, v) in src.header().metadata.iter() {
        if k.starts_with("tokenizer.") || k == "general.architecture" {
            md.insert(k.to_string(), v.clone());
        }
    }
    let (e, ff, vocab) = (64u64, 128u64, 49152u64);
    for (k, v) in [
        ("llama.block_count", 1u32),
        ("llama.embedding_length", e as u32),
        ("llama.feed_forward_length", ff as u32),
        ("llama.attention.head_count", 4),
        ("llama.context_length", 256),
    ] {
        md.insert(k.to_string(), Value::U32(v));
    }
    md.insert(
        "llama.attention.layer_norm_rms_epsilon".into(),
        Value::F32(1e-5),
    );
    let mut w = GgufWriter::new(md);
    let f32s = |n: u64| -> Vec<u8> {
        (0..n)
            .flat_map(|i| ((i % 7) as f32 * 0.01).to_le_bytes())
            .collect()
    };
    let tensors: Vec<(String, GgmlType, Vec<u64>)> = vec![
        ("token_embd.weight".into(), GgmlType::F32, vec![e, vocab]),
        ("output_norm.weight".into(), GgmlType::F32, vec![e]),
        ("blk.0.attn_norm.weight".into(), GgmlType::F32, vec![e]),
        ("blk.0.attn_q.weight".into(), q_type, vec![e, e]),
        ("blk.0.attn_k.weight".into(), GgmlType::F32, vec![e, e]),
        ("blk.0.attn_v.weight".into(), GgmlType::F32, vec![e, e]),
        ("blk.0.attn_output.weight".into(), GgmlType::F32, vec![e, e]),
        ("blk.0.ffn_norm.weight".into(), GgmlType::F32, vec![e]),
        ("blk.0.ffn_gate.weight".into(), GgmlType::F32, vec![e, ff]),
        ("blk.0.ffn_up.weight".into(), GgmlType::F32, vec![e, ff]),
        ("blk.0.ffn_down.weight".into(), GgmlType::F32, vec![ff, e]),
    ];
    for (name, ty, shape) in tensors {
        let n: u64 = shape.iter().product();
        let data = if ty == GgmlType::F32 {
            f32s(n)
        } else {
            vec![1u8; (n / ty.block_size() as u64 * ty.type_size() as u64) as usize]
        };
        w.add_tensor(name, ty, &shape, data).unwrap();
    }
    let file = std::fs::File::create(path).unwrap();
    w.write_to(std::io::BufWriter::new(file)).unwrap();
}

#[test]
fn a_tiny_f32_llama_runs() {
    // The same writer with a supported type produces a model that loads and generates, so the
    // I8 failure above is about the type and nothing else.
    let dir = temp_dir("tiny");
    let p = dir.join("tiny.gguf");
    write_tiny_llama(&p, GgmlType::F32);
    let r = run_json(&p, &["--prompt", "hi", "--max-tokens", "3", "--ignore-eos"]);
    assert_eq!(tokens(&r).len(), 3);
    std::fs::remove_dir_all(&dir).ok();
}

/// `--json-schema` holds sampled output to the schema; `--grammar` to a GBNF or Lark grammar;
/// a bad schema or grammar is a one-line error naming the file.
#[test]
fn json_schema_and_grammar_files_constrain_the_output() {
    let dir = temp_dir("grammar");
    let schema = dir.join("person.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "age": {"type": "integer", "minimum": 0, "maximum": 120}}, "required": ["name", "age"], "additionalProperties": false}"#,
    )
    .unwrap();
    let s = schema.to_str().unwrap();
    for seed in ["1", "2"] {
        let report = run_json(
            &smollm(),
            &[
                "--chat",
                "--prompt",
                "Describe a person as JSON.",
                "--json-schema",
                s,
                "--temperature",
                "1.0",
                "--seed",
                seed,
                "-n",
                "60",
            ],
        );
        let text = report["text"].as_str().unwrap();
        let v: serde_json::Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("seed {seed}: not JSON ({e}): {text:?}"));
        let age = v["age"].as_i64().unwrap_or_else(|| panic!("{v}"));
        assert!((0..=120).contains(&age) && v["name"].is_string(), "{v}");
        assert_eq!(v.as_object().unwrap().len(), 2, "{v}");
    }
    let gbnf = dir.join("answer.gbnf");
    std::fs::write(
        &gbnf,
        "root ::= (\"yes\" | \"no\") \", because \" [a-z ]{1,20} \".\"\n",
    )
    .unwrap();
    let lark = dir.join("answer.lark");
    std::fs::write(
        &lark,
        "start: (\"yes\" | \"no\") \", because \" /[a-z ]{1,20}/ \".\"\n",
    )
    .unwrap();
    for g in [&gbnf, &lark] {
        let report = run_json(
            &smollm(),
            &[
                "--prompt",
                "Is the sky blue?",
                "--grammar",
                g.to_str().unwrap(),
                "-n",
                "40",
            ],
        );
        let text = report["text"].as_str().unwrap();
        let rest = text
            .strip_prefix("yes, because ")
            .or_else(|| text.strip_prefix("no, because "))
            .unwrap_or_else(|| panic!("{g:?}: {text:?}"));
        let body = rest.strip_suffix('.').unwrap_or_else(|| panic!("{text:?}"));
        assert!(
            (1..=20).contains(&body.len())
                && body.chars().all(|c| c.is_ascii_lowercase() || c == ' '),
            "{text:?}"
        );
    }
    let broken = dir.join("broken.gbnf");
    std::fs::write(&broken, "root ::= \"a").unwrap();
    let m = smollm();
    let out = tool(&[
        "run",
        m.to_str().unwrap(),
        "--prompt",
        "x",
        "--grammar",
        broken.to_str().unwrap(),
    ]);
    assert_one_line_error(
        &out,
        "broken.gbnf: GBNF grammar, character 9: a string is not closed",
    );
    let not_json = dir.join("bad.json");
    std::fs::write(&not_json, "{\"type\": ").unwrap();
    let out = tool(&[
        "run",
        m.to_str().unwrap(),
        "--prompt",
        "x",
        "--json-schema",
        not_json.to_str().unwrap(),
    ]);
    assert_one_line_error(&out, "bad.json: not JSON");
    let _ = std::fs::remove_dir_all(&dir);
}
