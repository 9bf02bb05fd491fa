//! `plan` describes what shapes the layout beyond layers: the experts of an MoE model (count,
//! used per token, bytes of one expert, as the file's expert tensors hold them) and a
//! sliding window; `inspect` describes the same experts from the header alone; `--parallel`
//! books a KV cache and logits per sequence; a latent-attention (deepseek2) model books its
//! latent cache beside the full keys and values it replaces; the weight bytes a decoded token
//! reads.

mod common;

use common::model_path;
use std::process::Command;

fn tool(args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn plan_shows_experts_and_their_size() {
    let dir = std::env::temp_dir().join(format!("ramforge-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("moe.gguf");
    let donor = model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    common::synth(
        &file,
        &[
            "--arch",
            "qwen3moe",
            "--layers",
            "2",
            "--embd",
            "256",
            "--ffn",
            "128",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--experts",
            "8",
            "--experts-used",
            "2",
            "--type",
            "Q8_0",
        ],
    );
    let f = file.to_str().unwrap();
    let plan = tool(&["plan", f, "--ram", "1G", "--json"]);
    let inspect = tool(&["inspect", f, "--json"]);
    let exps: u64 = inspect["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            t["name"].as_str().unwrap().starts_with("blk.0.ffn_")
                && t["name"].as_str().unwrap().contains("_exps")
        })
        .map(|t| t["bytes"].as_u64().unwrap())
        .sum();
    assert!(exps > 0);
    assert_eq!(plan["experts"]["count"], 8);
    assert_eq!(plan["experts"]["used"], 2);
    assert_eq!(plan["experts"]["bytes_per_expert"], exps / 8);
    assert!(plan["sliding_window"].is_null());
    let e = &inspect["experts"];
    assert_eq!(e["count"], 8);
    assert_eq!(e["used"], 2);
    assert_eq!(e["feed_forward_length"], 128);
    assert_eq!(e["layers"], 2);
    assert_eq!(e["bytes_per_expert"], exps / 8);
    assert_eq!(e["bytes"], 2 * exps);
    let out = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(["inspect", f])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("experts"))
        .unwrap();
    assert!(
        line.contains("8 per layer, 2 used per token, width 128") && line.contains("2 layers"),
        "{line}"
    );
    // A dense model has none.
    let dense = tool(&["plan", donor.to_str().unwrap(), "--ram", "1G", "--json"]);
    assert!(dense["experts"].is_null());
    let dense = tool(&["inspect", donor.to_str().unwrap(), "--json"]);
    assert!(dense["experts"].is_null());
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn plan_shows_gemma3s_sliding_window() {
    let gemma = model_path("gemma-3-270m-q4_k_m.gguf");
    let plan = tool(&["plan", gemma.to_str().unwrap(), "--ram", "1G", "--json"]);
    assert_eq!(plan["sliding_window"], 512);
}

/// `weight_bytes_per_token` (what the benchmarks' bandwidth roofs divide by): every tensor of
/// the file but the norms, the tied output projection being the embedding, plus the one
/// embedding row a token reads.
#[test]
fn plan_gives_the_weight_bytes_a_decoded_token_reads() {
    let f = model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    let plan = tool(&["plan", f.to_str().unwrap(), "--ram", "1T", "--json"]);
    assert_eq!(plan["output_tied"], true);
    let file = ramforge_gguf::GgufFile::open(&f).unwrap();
    let tensors: u64 = file.header().tensors.iter().map(|t| t.n_bytes).sum();
    let want = tensors - plan["vector_bytes"].as_u64().unwrap()
        + plan["embedding_row_bytes"].as_u64().unwrap();
    assert_eq!(
        plan["weight_bytes_per_token"].as_u64(),
        Some(want),
        "{plan}"
    );
}

/// `plan --parallel N` books what `serve --parallel N` charges: a whole context of KV cache
/// and a row of logits per sequence, so the minimum grows by both for each extra sequence.
#[test]
fn plan_books_kv_and_logits_for_each_parallel_sequence() {
    let f = model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    let f = f.to_str().unwrap();
    let plan = |n: &str| {
        tool(&[
            "plan",
            f,
            "--ram",
            "1G",
            "--ctx",
            "256",
            "--parallel",
            n,
            "--json",
        ])
    };
    let (one, four) = (plan("1"), plan("4"));
    let n = |p: &serde_json::Value, k: &str| p[k].as_u64().unwrap();
    assert_eq!(one["parallel"], 1);
    assert_eq!(four["parallel"], 4);
    assert_eq!(n(&four, "kv_cache_bytes"), 4 * n(&one, "kv_cache_bytes"));
    assert_eq!(n(&four, "logits_bytes"), 4 * n(&one, "logits_bytes"));
    assert_eq!(
        n(&four, "minimum_budget_bytes") - n(&one, "minimum_budget_bytes"),
        3 * (n(&one, "kv_cache_bytes") + n(&one, "logits_bytes"))
    );
    let out = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(["plan", f, "--ram", "1G", "--ctx", "256", "--parallel", "4"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("4 sequences in parallel"), "{text}");
}

/// A deepseek2 model's cache is one latent and one RoPE key per position and layer: `plan`
/// books that (2 layers x 4096 positions x (64 + 16) x 2 bytes in F16) and shows what full
/// keys and values of its 4 heads would take (4 x (48 + 32) per position and layer).
#[test]
fn plan_books_deepseek2s_latent_cache_not_full_keys_and_values() {
    let dir = std::env::temp_dir().join(format!("ramforge-plan-mla-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("deepseek2.gguf");
    // Two layers (the sizes below count them) of common::MLA_SMALL's latent attention.
    let shape = "--arch deepseek2 --layers 2 --embd 128 --ffn 64 --heads 4 --experts 8 \
                 --experts-used 2 --type Q8_0";
    let shape: Vec<&str> = shape.split_whitespace().collect();
    common::synth(&file, &[&shape[..], &common::MLA_SMALL].concat());
    let f = file.to_str().unwrap();
    let plan = tool(&["plan", f, "--ram", "1G", "--ctx", "4096", "--json"]);
    assert_eq!(plan["latent_cache"], true, "{plan}");
    assert_eq!(plan["kv_cache_bytes"], 2 * 4096 * (64 + 16) * 2, "{plan}");
    assert_eq!(
        plan["full_kv_cache_bytes"],
        2 * 4096 * 4 * (48 + 32) * 2,
        "{plan}"
    );
    let text = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(["plan", f, "--ram", "1G", "--ctx", "4096"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("multi-head latent attention") && text.contains("latent cache 1.2 MiB"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
