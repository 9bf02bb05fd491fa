//! MoE experts streamed one by one under `--ram`, on synthetic files `synth` writes (qwen3moe
//! Q4_0 with 32 experts of which 4 are used, Mixtral-style llama Q8_0 with 8 experts of which 2
//! are used): the greedy tokens are those of the all-resident run under every budget from the
//! plan's minimum up, with one thread and two; only the router's experts are read (each miss
//! reads one expert's slices, within their alignment, and nothing but embedding rows besides
//! while decoding once the layers and output are resident); the cache serves hits once it has slots;
//! peak RSS stays within the budget + 16 MiB; from a warm file, experts used once are mapped in
//! place, from a cold one read; and a model that fits is not streamed at all.

mod common;

use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;

const PROMPT: &str = "The quick brown fox jumps over the lazy dog and keeps running until";
const CTX: &str = "128";

fn tool(args: &[&str]) -> Value {
    let o = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn synth(name: &str, args: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ramforge-experts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(name);
    common::synth(&file, args);
    file
}

/// `run --json` greedy on `file` with `ram` (None: unlimited) and `threads`.
fn run(file: &str, ram: Option<u64>, threads: &str) -> Value {
    let ram = ram.map(|r| r.to_string());
    let mut args = vec![
        "run",
        file,
        "-p",
        PROMPT,
        "-n",
        "12",
        "--ctx",
        CTX,
        "--threads",
        threads,
        "--json",
        "--ignore-eos",
        // Each run starts from an empty expert cache (tests/expert_history.rs has the rest).
        "--no-expert-history",
    ];
    if let Some(r) = &ram {
        args.extend(["--ram", r]);
    }
    tool(&args)
}

/// Runs the checks on `file`; returns how many experts its streamed runs read ahead of their
/// layers (hash-routed layers).
fn check(file: PathBuf) -> u64 {
    let f = file.to_str().unwrap();
    let file_bytes = std::fs::metadata(&file).unwrap().len();
    let inspect = tool(&["inspect", f, "--json"]);
    let expert_bytes = inspect["experts"]["bytes_per_expert"].as_u64().unwrap();
    let embd = inspect["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "token_embd.weight")
        .unwrap();
    let embd_row = embd["bytes"].as_u64().unwrap() / embd["shape"][1].as_u64().unwrap();
    let plan = tool(&["plan", f, "--ram", "64G", "--ctx", CTX, "--json"]);
    let minimum = plan["minimum_budget_bytes"].as_u64().unwrap();
    let resident = run(f, None, "2");
    let want = &resident["tokens"];
    assert_eq!(want.as_array().unwrap().len(), 12);
    assert!(
        resident["experts"].is_null(),
        "nothing streamed without a budget"
    );

    let mut budgets = vec![minimum];
    budgets.extend([10, 25, 40, 60, 85].map(|pct| file_bytes * pct / 100));
    let (mut hits, mut streamed_runs, mut mapped_warm, mut ahead) = (0, 0, 0, 0);
    for ram in budgets.into_iter().filter(|&b| b >= minimum) {
        // One thread on a warm file (experts used once are mapped in place), two on a cold
        // one (every miss is read).
        for (threads, cold) in [("1", false), ("2", true)] {
            if cold {
                common::evict(&file);
            }
            let got = run(f, Some(ram), threads);
            assert_eq!(&got["tokens"], want, "--ram {ram} --threads {threads}");
            // The tokenizer's tables are not charged (a few MiB for this 49k vocabulary, which
            // at these budgets of a few MiB is the largest thing in the process): the promise
            // is the budget + 16 MiB + what `run` reports of them.
            let peak = got["peak_rss_bytes"].as_u64().unwrap();
            let tokenizer = got["tokenizer_bytes"].as_u64().unwrap();
            assert!(tokenizer > 0);
            assert!(
                peak <= ram + (16 << 20) + tokenizer,
                "peak RSS {peak} over --ram {ram} + 16 MiB + tokenizer {tokenizer}"
            );
            let x = &got["experts"];
            if x.is_null() {
                // The budget holds the whole model.
                assert_eq!(got["streamed_layers"], 0, "--ram {ram}");
                continue;
            }
            streamed_runs += 1;
            ahead += x["read_ahead"].as_u64().unwrap();
            let misses = x["decode_misses"].as_u64().unwrap();
            let read = x["decode_bytes_read"].as_u64().unwrap();
            // Each miss reads its expert's three slices, widened to 4 KiB alignment at
            // most 8 KiB each (and never anything the router did not select).
            assert!(
                read >= misses * expert_bytes && read <= misses * (expert_bytes + 3 * 8192),
                "--ram {ram}: {read} bytes for {misses} misses of {expert_bytes}"
            );
            if got["output_resident"] == true && got["streamed_layers"] == 0 {
                // Besides the experts, one embedding row per decoded token.
                let evals = got["decode_evals"].as_u64().unwrap();
                assert_eq!(
                    got["decode_bytes_read"].as_u64().unwrap(),
                    read + evals * embd_row,
                    "--ram {ram}: decoding read only experts and embedding rows"
                );
            }
            if x["slots_per_layer"].as_u64().unwrap() > 0 {
                hits += x["decode_hits"].as_u64().unwrap();
            }
            let mapped = x["mapped"].as_u64().unwrap();
            assert!(mapped <= x["misses"].as_u64().unwrap() - x["admitted"].as_u64().unwrap());
            if cold {
                assert_eq!(mapped, 0, "--ram {ram}: a cold file is read, not mapped");
            } else {
                mapped_warm += mapped;
            }
        }
    }
    assert!(hits > 0, "the cache never served a hit");
    assert!(
        mapped_warm > 0,
        "no expert was used in place from the warm file"
    );
    assert!(
        streamed_runs >= 8,
        "experts streamed in only {streamed_runs} runs"
    );
    // With room for everything, everything is pinned and nothing streams.
    let all = run(f, Some(file_bytes * 2), "2");
    assert_eq!(&all["tokens"], want);
    assert!(all["experts"].is_null());
    assert_eq!(all["streamed_layers"], 0);
    assert_eq!(all["output_resident"], true);
    ahead
}

#[test]
fn qwen3moe_experts_stream_with_all_resident_tokens() {
    let ahead = check(synth("qwen3moe.gguf", &QWEN3MOE));
    assert_eq!(ahead, 0, "no layer is hash-routed");
}

/// DeepSeek V4 (MXFP4 experts): its first block's experts follow from the token ids, so they
/// are read ahead of the block at the start of each step (counted apart in `run -v`).
#[test]
fn deepseek4_experts_stream_with_all_resident_tokens() {
    let mut args = common::deepseek4_small();
    for (key, value) in [("--embd", "256"), ("--experts", "16")] {
        let at = args.iter().position(|&x| x == key).unwrap();
        args[at + 1] = value;
    }
    args.extend(["--type", "MXFP4", "--seed", "4"]);
    let ahead = check(synth("deepseek4.gguf", &args));
    assert!(ahead > 0, "no hash-routed expert was read ahead");
}

/// The qwen3moe synth of [`qwen3moe_experts_stream_with_all_resident_tokens`] (6 MoE layers,
/// 32 experts, 4 used per token).
const QWEN3MOE: [&str; 20] = [
    "--arch",
    "qwen3moe",
    "--layers",
    "6",
    "--embd",
    "512",
    "--ffn",
    "256",
    "--heads",
    "8",
    "--kv-heads",
    "2",
    "--experts",
    "32",
    "--experts-used",
    "4",
    "--type",
    "Q4_0",
    "--seed",
    "3",
];

/// A prompt longer than the rows a budget holds runs each MoE layer's selected experts once
/// per run of held rows, over all the rows routed to them: the prefill uses each expert of a
/// layer at most once per run (batch by batch, each 16-token batch used ~27 of the 32 again).
/// That its logits are those of the batches run one by one is `synth_goldens`' check.
#[test]
fn a_long_prompt_uses_each_streamed_expert_once_per_run_of_held_rows() {
    let file = synth("qwen3moe-long.gguf", &QWEN3MOE);
    let f = file.to_str().unwrap();
    let (layers, n_expert, prompt) = (6u64, 32u64, 240u64);
    let file_bytes = std::fs::metadata(&file).unwrap().len();
    // bench's context is the prompt and the generated tokens.
    let ctx = (prompt + 2).to_string();
    let (ram, held) = (10..90)
        .map(|pct| file_bytes * pct / 100)
        .find_map(|ram| {
            let r = ram.to_string();
            let plan = tool(&[
                "plan", f, "--ram", &r, "--ctx", &ctx, "--batch", "16", "--json",
            ]);
            let held = plan["held_prompt_rows"].as_u64().unwrap();
            (plan["held_prompt_groups_experts"] == true && (64..prompt).contains(&held))
                .then_some((ram, held))
        })
        .expect("a budget of 10-89% of the file holds 64-239 rows and groups experts");
    let got = tool(&[
        "bench",
        "-m",
        f,
        "--ram",
        &ram.to_string(),
        "-p",
        "240",
        "-n",
        "2",
        "-t",
        "2",
        "--batch",
        "16",
        "--json",
    ]);
    let x = &got["experts"];
    let uses = |k: &str| x[k].as_u64().unwrap();
    let prefill = uses("hits") + uses("misses") - uses("decode_hits") - uses("decode_misses");
    let runs = prompt.div_ceil(held);
    assert!(
        prefill > 0 && prefill <= runs * layers * n_expert,
        "--ram {ram}: {prefill} expert uses in {runs} runs of {held} rows"
    );
}

#[test]
fn mixtral_experts_stream_with_all_resident_tokens() {
    check(synth(
        "mixtral.gguf",
        &[
            "--arch",
            "llama",
            "--layers",
            "4",
            "--embd",
            "512",
            "--ffn",
            "384",
            "--heads",
            "8",
            "--kv-heads",
            "4",
            "--experts",
            "8",
            "--experts-used",
            "2",
            "--type",
            "Q8_0",
            "--seed",
            "5",
        ],
    ));
}

/// A file cut short under a running engine that streams experts: generation ends with one
/// line naming the first tensor the file no longer holds, every charge of the generation is
/// released and the context reset; from a warm file (experts mapped) and a cold one (read).
#[test]
fn a_file_cut_short_ends_expert_streaming_cleanly() {
    cut_short(false);
    cut_short(true);
}

fn cut_short(cold: bool) {
    use ramforge_engine::{Engine, EngineOptions, SamplingParams};
    use std::sync::atomic::AtomicBool;
    let file = synth(
        if cold {
            "cut-cold.gguf"
        } else {
            "cut-warm.gguf"
        },
        &[
            "--arch",
            "qwen3moe",
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
            "--experts",
            "16",
            "--experts-used",
            "2",
            "--type",
            "Q8_0",
            "--seed",
            "9",
        ],
    );
    let options = EngineOptions {
        ram: Some(std::fs::metadata(&file).unwrap().len() / 2),
        ctx: Some(64),
        ..EngineOptions::default()
    };
    if cold {
        common::evict(&file);
    }
    let mut e = Engine::load(&file, &options).unwrap();
    assert!(e.plan().experts.is_some(), "the budget streams experts");
    let held = e.budget().held();
    let prompt = e.model().tokenizer.encode(PROMPT, true, true);
    let gen = |e: &mut Engine| {
        e.generate(
            &prompt,
            &SamplingParams::greedy(8),
            &mut |_, _| {},
            &AtomicBool::new(false),
        )
    };
    gen(&mut e).unwrap();
    let mapped = e.residency().experts_mapped;
    assert_eq!(mapped > 0, !cold, "experts used in place: {mapped}");
    // Cut the file inside the last layer's expert stacks.
    let stacks = e.model().tensors.layers[1].expert_stacks().unwrap();
    let cut = e.model().file.absolute_offset(stacks[0]) + 4096;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(cut)
        .unwrap();
    let err = gen(&mut e).unwrap_err().to_string();
    assert!(!err.contains('\n'), "one line: {err}");
    assert!(
        err.contains("tensor \"blk.1.ffn_gate_exps.weight\": short read"),
        "{err}"
    );
    assert_eq!(e.budget().held(), held, "every charge is released");
    assert_eq!(e.n_past(), 0, "the context was reset");
}
