//! Hostile chat templates and model metadata at the command line: under a 1 GiB address-space
//! limit each fails within 10 s with exit status 1 and one line on stderr naming the limit or
//! the key, never a panic.

mod common;

use common::judge::fails_cleanly;
use common::model_path;
use ramforge_gguf::{GgufFile, GgufWriter, Value};
use std::path::{Path, PathBuf};

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ramforge-hostile-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn hostile_templates_fail_with_the_limit_named() {
    let dir = scratch("templates");
    let conversations = dir.join("conversations.json");
    std::fs::write(
        &conversations,
        r#"[{"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true}]"#,
    )
    .unwrap();
    let model = model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    // `set` inside a loop is scoped to the iteration, so the doubling is written out.
    let doubling = format!(
        "{{% set s = 'ab' %}}{}{{{{ s }}}}",
        "{% set s = s ~ s %}".repeat(40)
    );
    let cases = [
        ("doubling", doubling.as_str(), "chat template exceeded"),
        (
            "nested",
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            "chat template exceeded",
        ),
        (
            "recursion",
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
            "chat template exceeded",
        ),
        ("method", "{{ messages.no_such_method() }}", "chat template"),
    ];
    for (name, text, expect) in cases {
        let file = dir.join(format!("{name}.jinja"));
        std::fs::write(&file, text).unwrap();
        let (m, c, f) = (path(&model), path(&conversations), path(&file));
        fails_cleanly(&["chat-render", m, c, "--template", f], expect);
        fails_cleanly(
            &[
                "run",
                m,
                "--chat",
                "--prompt",
                "hi",
                "-n",
                "1",
                "--template",
                f,
            ],
            expect,
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn inconsistent_metadata_fails_with_the_key_named() {
    let dir = scratch("metadata");
    let src = GgufFile::open(model_path("SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let cases: [(&str, &str, Value, &str); 3] = [
        (
            "bos",
            "tokenizer.ggml.bos_token_id",
            Value::U32(1 << 30),
            "tokenizer.ggml.bos_token_id",
        ),
        (
            "ctx",
            "llama.context_length",
            Value::U32(u32::MAX),
            "llama.context_length",
        ),
        (
            "experts",
            "llama.expert_count",
            Value::U32(1 << 20),
            "llama.expert_count",
        ),
    ];
    for (tag, key, value, expect) in cases {
        let mut w = GgufWriter::copy_of(&src).unwrap();
        w.metadata_mut().remove(key);
        w.metadata_mut().insert(key.into(), value);
        let file = dir.join(format!("{tag}.gguf"));
        w.write_to(std::fs::File::create(&file).unwrap()).unwrap();
        fails_cleanly(&["run", path(&file), "--prompt", "hi", "-n", "1"], expect);
    }
    std::fs::remove_dir_all(&dir).ok();
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `src` with metadata `key` set to `value`, written to `file`: `run` on it fails in one line
/// containing `expect`.
fn fails_with_key_set(src: &Path, file: &Path, key: &str, value: Value, expect: &str) {
    let src = GgufFile::open(src).unwrap();
    let mut w = GgufWriter::copy_of(&src).unwrap();
    w.metadata_mut().remove(key);
    w.metadata_mut().insert(key.into(), value);
    w.write_to(std::fs::File::create(file).unwrap()).unwrap();
    fails_cleanly(&["run", path(file), "--prompt", "hi", "-n", "1"], expect);
}

/// The MoE families' keys and per-layer tensors: a synthetic glm4moe (a dense leading layer,
/// a shared expert, an MTP layer), gpt-oss (alternating windows) and deepseek2 (expert groups,
/// latent attention) with one key changed
/// each fail in one line naming the key, or the tensor the change leaves unexplained.
#[test]
fn inconsistent_moe_family_metadata_fails_with_the_key_or_tensor_named() {
    let dir = scratch("moe-metadata");
    let shape = [
        "--layers",
        "3",
        "--embd",
        "64",
        "--ffn",
        "32",
        "--heads",
        "2",
        "--kv-heads",
        "1",
        "--experts",
        "4",
        "--experts-used",
        "2",
        "--type",
        "Q8_0",
    ];
    let glm = dir.join("glm4moe.gguf");
    common::synth(
        &glm,
        &[&["--arch", "glm4moe", "--nextn", "1"], &shape[..]].concat(),
    );
    let gpt = dir.join("gpt-oss.gguf");
    common::synth(&gpt, &[&["--arch", "gpt-oss"], &shape[..]].concat());
    let ds = dir.join("deepseek2.gguf");
    common::synth(
        &ds,
        &[
            "--arch",
            "deepseek2",
            "--layers",
            "2",
            "--embd",
            "64",
            "--ffn",
            "32",
            "--heads",
            "2",
            "--kv-heads",
            "1",
            "--head-dim",
            "48",
            "--rope-dim",
            "16",
            "--kv-lora-rank",
            "32",
            "--v-head-dim",
            "32",
            "--experts",
            "8",
            "--experts-used",
            "2",
            "--expert-groups",
            "4:2",
            "--type",
            "Q8_0",
        ],
    );
    let cases: [(&Path, &str, &str, Value, &str); 10] = [
        (
            &glm,
            "nextn",
            "glm4moe.nextn_predict_layers",
            Value::U32(4),
            "glm4moe.nextn_predict_layers = 4",
        ),
        (
            &glm,
            "lead",
            "glm4moe.leading_dense_block_count",
            Value::U32(0),
            "\"blk.0.ffn_gate.weight\" is not used by layer 0",
        ),
        (
            &glm,
            "lead-many",
            "glm4moe.leading_dense_block_count",
            Value::U32(7),
            "glm4moe.leading_dense_block_count = 7",
        ),
        (
            &glm,
            "shared",
            "glm4moe.expert_shared_count",
            Value::U32(0),
            "\"blk.1.ffn_gate_shexp.weight\" is not used",
        ),
        (
            &glm,
            "gating",
            "glm4moe.expert_gating_func",
            Value::U32(77),
            "glm4moe.expert_gating_func = 77",
        ),
        (
            &gpt,
            "pattern",
            "gpt-oss.attention.sliding_window_pattern",
            Value::U32(0),
            "gpt-oss.attention.sliding_window_pattern = 0",
        ),
        (
            &gpt,
            "experts",
            "gpt-oss.expert_count",
            Value::U32(5),
            "\"blk.0.ffn_gate_inp.weight\" has shape",
        ),
        (
            &ds,
            "groups",
            "deepseek2.expert_group_count",
            Value::U32(3),
            "deepseek2.expert_group_count = 3 must divide deepseek2.expert_count = 8",
        ),
        (
            &ds,
            "groups-used",
            "deepseek2.expert_group_used_count",
            Value::U32(9),
            "deepseek2.expert_group_used_count = 9 must lie in 1..=4",
        ),
        (
            &ds,
            "latent",
            "deepseek2.attention.kv_lora_rank",
            Value::U32(1 << 30),
            "deepseek2.attention.kv_lora_rank",
        ),
    ];
    for (src, tag, key, value, expect) in cases {
        fails_with_key_set(src, &dir.join(format!("{tag}.gguf")), key, value, expect);
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// DeepSeek V4's keys and its hash-routing table: a synthetic deepseek4 with one key changed,
/// or one expert id of `ffn_gate_tid2eid` out of range, fails in one line naming the key or
/// the tensor and element.
#[test]
fn inconsistent_deepseek4_metadata_and_tables_fail_with_the_key_or_tensor_named() {
    let dir = scratch("deepseek4");
    let src_path = dir.join("deepseek4.gguf");
    common::synth(
        &src_path,
        &[&common::deepseek4_small()[..], &["--type", "Q8_0"]].concat(),
    );
    let i32s = |v: &[i32]| {
        Value::Array(
            ramforge_gguf::ValueType::I32,
            v.iter().map(|&x| Value::I32(x)).collect(),
        )
    };
    let cases: [(&str, &str, Value, &str); 6] = [
        (
            "ratio",
            "deepseek4.attention.compress_ratios",
            i32s(&[0, 4, 64]),
            "compress ratio 64",
        ),
        (
            "ratios",
            "deepseek4.attention.compress_ratios",
            i32s(&[0, 4]),
            "deepseek4.attention.compress_ratios has 2 values",
        ),
        (
            "streams",
            "deepseek4.hyper_connection.count",
            Value::U32(3),
            "deepseek4.hyper_connection.count = 3",
        ),
        (
            "hash",
            "deepseek4.hash_layer_count",
            Value::U32(9),
            "deepseek4.hash_layer_count = 9",
        ),
        (
            "groups",
            "deepseek4.attention.output_group_count",
            Value::U32(3),
            "deepseek4.attention.output_group_count = 3 does not divide",
        ),
        (
            "window",
            "deepseek4.attention.sliding_window",
            Value::U32(0),
            "deepseek4.attention.sliding_window = 0",
        ),
    ];
    for (tag, key, value, expect) in cases {
        fails_with_key_set(
            &src_path,
            &dir.join(format!("{tag}.gguf")),
            key,
            value,
            expect,
        );
    }
    let src = GgufFile::open(&src_path).unwrap();
    // Token 5's second expert: 99 of 8.
    let table = src.tensor("blk.0.ffn_gate_tid2eid.weight").unwrap();
    let at = src.absolute_offset(table) + 4 * (5 * 2 + 1);
    let bad = dir.join("tid2eid.gguf");
    std::fs::copy(&src_path, &bad).unwrap();
    {
        use std::io::{Seek, SeekFrom, Write};
        let mut f = std::fs::OpenOptions::new().write(true).open(&bad).unwrap();
        f.seek(SeekFrom::Start(at)).unwrap();
        f.write_all(&99i32.to_le_bytes()).unwrap();
    }
    fails_cleanly(
        &["run", path(&bad), "--prompt", "hi", "-n", "1"],
        "\"blk.0.ffn_gate_tid2eid.weight\": element 11 is 99, not an expert index below 8",
    );
    std::fs::remove_dir_all(&dir).ok();
}
