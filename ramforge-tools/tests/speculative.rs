//! Speculative decoding end to end: greedy tokens with prompt lookup and with a draft model equal
//! plain decoding on a hybrid synth (qwen35moe: recurrent state rolled back), a deepseek2
//! synth (latent cache) and a deepseek4 synth (rings, compressors and compressed rows),
//! all-resident and streamed; a real draft model (Qwen2.5-Coder 0.5B for 1.5B) gives the
//! target's greedy tokens; a draft with another vocabulary is refused in one line; `run
//! --lookup --json` reports what speculation did. MTP drafts (`--mtp`: glm4moe, deepseek2, glm-dsa
//! and qwen35moe synths) leave greedy tokens those of plain decoding, all-resident and streamed; a
//! file without an MTP layer is refused in one line.

mod common;

use ramforge_engine::{Drafter, Engine, EngineOptions, GenerationStats, Model, SamplingParams};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

/// A prompt that repeats itself, so the context has n-grams to look up.
const PROMPT: &str =
    "one two three four five six seven eight one two three four five six seven eight one two three";

fn synth(name: &str, args: &[&str]) -> PathBuf {
    let arch = args[1];
    let dir = std::env::temp_dir().join(format!("ramforge-spec-{arch}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(format!("{name}.gguf"));
    common::synth(&out, args);
    out
}

fn options(ram: Option<u64>) -> EngineOptions {
    EngineOptions {
        ram,
        ctx: Some(128),
        threads: 2,
        draft: 6,
        ..EngineOptions::default()
    }
}

fn generate(e: &mut Engine, prompt: &[u32], n: usize, drafter: Option<Drafter>) -> GenerationStats {
    e.set_drafter(drafter);
    let s = e
        .generate(
            prompt,
            &SamplingParams::greedy(n),
            &mut |_, _| {},
            &AtomicBool::new(false),
        )
        .unwrap();
    e.set_drafter(None);
    s
}

/// Greedy decoding with drafts equals plain decoding, all-resident and under a budget that
/// streams: prompt lookup (a random synth model rarely repeats itself, so its drafts are few),
/// and a draft model that is the same synth in Q4_0 (the same seed: mostly the target's tokens,
/// not always), so drafts are both accepted and rejected and every rollback path runs.
fn speculation_is_identical(args: &[&str]) {
    let mut target_args = args.to_vec();
    target_args.extend(["--type", "Q8_0"]);
    let path = synth("target", &target_args);
    let mut draft_args = args.to_vec();
    draft_args.extend(["--type", "Q4_0"]);
    let draft = synth("draft", &draft_args);
    let unlimited = Engine::new(Model::open(&path).unwrap(), &options(None)).unwrap();
    let minimum = unlimited.plan().minimum;
    drop(unlimited);
    // An MoE model streams its experts a little above the minimum (the plan's minimum without
    // a budget is that of its streamed experts); a dense one streams every layer at it.
    let file = std::fs::metadata(&path).unwrap().len();
    let streamed = if args.contains(&"--experts") {
        minimum + file / 8
    } else {
        minimum
    };
    for ram in [None, Some(streamed)] {
        let mut e = Engine::new(Model::open(&path).unwrap(), &options(ram)).unwrap();
        if ram.is_some() {
            let r = e.residency();
            assert!(
                r.streamed_layers > 0 || e.plan().experts.is_some(),
                "nothing streamed"
            );
        }
        let prompt = e.model().tokenizer.encode(PROMPT, true, true);
        let plain = generate(&mut e, &prompt, 40, None);
        let spec = generate(&mut e, &prompt, 40, Some(Drafter::Lookup));
        assert_eq!(spec.tokens, plain.tokens, "lookup, ram {ram:?}");
        let d = Engine::new(
            Model::open(&draft).unwrap(),
            &ramforge_engine::draft_options(&options(None)),
        )
        .unwrap();
        let spec = generate(&mut e, &prompt, 40, Some(Drafter::Model(Box::new(d))));
        assert_eq!(spec.tokens, plain.tokens, "draft model, ram {ram:?}");
        let s = spec.speculation.unwrap();
        assert!(s.accepted > 0, "ram {ram:?}: no draft accepted: {s:?}");
        assert!(
            s.accepted < s.drafted,
            "ram {ram:?}: no draft rejected: {s:?}"
        );
    }
    let _ = std::fs::remove_dir_all(path.parent().unwrap());
}

#[test]
fn hybrid_speculation_greedy_equals_plain() {
    speculation_is_identical(&common::qwen35moe_small());
}

#[test]
fn deepseek2_speculation_greedy_equals_plain() {
    let arch = ["--arch", "deepseek2"];
    speculation_is_identical(&[&arch[..], &common::MOE_SMALL, &common::MLA_SMALL].concat());
}

/// DeepSeek V4's rings and compressors are a fixed state rolled back whole (with the hybrid's
/// machinery), its compressed rows by the position they end at: a 40-token run wraps the
/// 8-position window, makes ten ratio-4 rows and lets the indexer choose among them.
#[test]
fn deepseek4_speculation_greedy_equals_plain() {
    speculation_is_identical(&common::deepseek4_small());
}

/// Sliding-window layers keep a ring of their window: a verify pass overwrites slots a rolled
/// back context still needs (put back from the copy `KvCache::save` made). A window of 8
/// wraps many times over 40 tokens.
#[test]
fn sliding_window_speculation_greedy_equals_plain() {
    speculation_is_identical(&[
        "--arch",
        "gemma3",
        "--layers",
        "4",
        "--embd",
        "128",
        "--ffn",
        "256",
        "--heads",
        "4",
        "--kv-heads",
        "2",
        "--sliding-window",
        "8",
    ]);
}

/// `--mtp`: a synth's own MTP layer drafts (its random weights rarely agree with the model,
/// so nearly every draft is rejected and rolled back) and greedy tokens stay plain decoding's,
/// all-resident, with the experts streamed, and at the minimum budget (wide dense layers
/// streamed through the ring besides), for glm4moe, deepseek2 (latent attention), glm-dsa
/// (sparse attention) and the hybrid qwen35moe (recurrent state rolled back); the hidden state a draft starts from
/// follows every pass, so every pass drafts.
#[test]
fn mtp_speculation_greedy_equals_plain() {
    let small = [&common::MOE_SMALL[..], &["--nextn", "1", "--type", "Q8_0"]].concat();
    // The last: wide dense leading layers, streamed through the ring at the minimum budget.
    let dense = [
        "--kv-heads",
        "2",
        "--dense-lead",
        "2",
        "--dense-ffn",
        "2048",
    ];
    let families: [(&str, &[&str]); 5] = [
        ("glm4moe", &["--kv-heads", "2"]),
        ("deepseek2", &common::MLA_SMALL),
        ("glm-dsa", &common::DSA_SMALL),
        (
            "qwen35moe",
            &["--kv-heads", "2", "--full-attention-interval", "2"],
        ),
        ("glm4moe", &dense),
    ];
    let mut files = Vec::new();
    for (i, (arch, extra)) in families.into_iter().enumerate() {
        let args = [&["--arch", arch][..], &small, extra].concat();
        let path = synth(&format!("mtp-{i}"), &args);
        let mtp_model = || {
            let mut m = Model::open(&path).unwrap();
            m.enable_mtp().unwrap();
            m
        };
        let minimum = Engine::new(mtp_model(), &options(None))
            .unwrap()
            .plan()
            .minimum;
        let file = std::fs::metadata(&path).unwrap().len();
        for ram in [None, Some(minimum + file / 8), Some(minimum)] {
            let mut e = Engine::new(mtp_model(), &options(ram)).unwrap();
            assert_eq!(e.plan().pinned.len(), 4, "{arch}: the MTP layer is planned");
            assert!(e.plan().pinned[3], "{arch}: the MTP layer is pinned");
            if ram.is_some() {
                assert!(e.plan().experts.is_some(), "{arch}: nothing streamed");
            }
            if extra == dense && ram == Some(minimum) {
                assert!(e.plan().streamed_layers() > 0, "no layer streamed");
            }
            let prompt = e.model().tokenizer.encode(PROMPT, true, true);
            let plain = generate(&mut e, &prompt, 40, None);
            let spec = generate(&mut e, &prompt, 40, Some(Drafter::Mtp));
            assert_eq!(spec.tokens, plain.tokens, "{arch}: mtp, ram {ram:?}");
            let s = spec.speculation.unwrap();
            // A hybrid's rolled-back passes leave tokens to evaluate again; when they fill a
            // pass, it drafts nothing.
            let least = if arch == "qwen35moe" {
                s.passes / 2
            } else {
                s.passes
            };
            assert!(
                s.drafted >= least,
                "{arch}, ram {ram:?}: passes without drafts: {s:?}"
            );
        }
        files.push(path);
    }
    let path = &files[0];
    // The CLI: `run --mtp --json` says who drafted; a file without an MTP layer is refused.
    let o = common::tool(&[
        "run",
        path.to_str().unwrap(),
        "--mtp",
        "--json",
        "-t",
        "2",
        "-n",
        "8",
        "-p",
        PROMPT,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["speculation"]["drafter"], "mtp", "{j}");
    let o = common::tool(&["plan", path.to_str().unwrap(), "--mtp", "--ram", "1G"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("its first MTP layer drafts"), "{text}");
    let plain_file = common::model("SmolLM2-135M-Instruct.Q4_1.gguf");
    let o = common::tool(&["run", &plain_file, "--mtp", "-n", "1", "-p", "Hi"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("no MTP (nextn) layer"), "{err}");
    for f in &files {
        let _ = std::fs::remove_dir_all(f.parent().unwrap());
    }
}

/// Qwen2.5-Coder 0.5B drafting for 1.5B (one tokenizer): the 1.5B's greedy tokens.
#[test]
fn draft_model_greedy_equals_plain() {
    let (target, draft) = (
        common::model_path("qwen25-coder-1.5b.gguf"),
        common::model_path("qwen25-coder-0.5b.gguf"),
    );
    let o = EngineOptions {
        ctx: Some(96),
        ..options(None)
    };
    let mut e = Engine::new(Model::open(&target).unwrap(), &o).unwrap();
    let d = Engine::new(
        Model::open(&draft).unwrap(),
        &ramforge_engine::draft_options(&o),
    )
    .unwrap();
    let prompt = e.model().tokenizer.encode(
        "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
        false,
        true,
    );
    let plain = generate(&mut e, &prompt, 24, None);
    let spec = generate(&mut e, &prompt, 24, Some(Drafter::Model(Box::new(d))));
    assert_eq!(spec.tokens, plain.tokens);
    let s = spec.speculation.unwrap();
    assert!(s.accepted > 0, "no draft accepted: {s:?}");
}

#[test]
fn a_draft_with_another_vocabulary_is_refused_in_one_line() {
    let o = common::tool(&[
        "run",
        &common::model("qwen25-coder-0.5b.gguf"),
        "--draft",
        &common::model("SmolLM2-135M-Instruct.Q4_1.gguf"),
        "-p",
        "x",
        "-n",
        "1",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("vocabularies differ"), "{err}");
}

#[test]
fn run_lookup_json_reports_speculation() {
    let o = common::tool(&[
        "run",
        &common::model("SmolLM2-135M-Instruct.Q4_1.gguf"),
        "--lookup",
        "--json",
        "-t",
        "2",
        "-n",
        "16",
        "-p",
        "Copy the list exactly.\nList: apples, pears, plums, cherries, grapes, lemons, limes, figs.\nCopy: apples, pears,",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = &j["speculation"];
    assert_eq!(s["drafter"], "lookup");
    assert!(s["accepted"].as_u64().unwrap() > 0, "{s}");
    assert!(s["tokens_per_pass"].as_f64().unwrap() > 1.0, "{s}");
    assert!(j["bytes_read_per_generated_token"].is_number());
}

#[test]
fn plan_draft_shows_the_split() {
    let o = common::tool(&[
        "plan",
        &common::model("qwen25-coder-1.5b.gguf"),
        "--ram",
        "2G",
        "--ctx",
        "256",
        "--draft",
        &common::model("qwen25-coder-0.5b.gguf"),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = &j["draft"];
    assert_eq!(d["resident"], true, "{d}");
    let (draft, target) = (
        d["budget_bytes"].as_u64().unwrap(),
        d["target_budget_bytes"].as_u64().unwrap(),
    );
    assert_eq!(draft + target, 2 << 30);
    assert_eq!(j["budget_bytes"].as_u64(), Some(target));
    assert_eq!(j["verify_rows"], 9);
    let whole = d["whole_bytes"].as_u64().unwrap();
    assert_eq!(draft, whole, "a resident draft takes what it needs whole");

    // Under 1 GiB the 0.5B model resident whole leaves the 1.5B enough: a pass then streams
    // less than with the draft in a quarter (the target's layers once, not the draft's k times).
    let target = common::model("qwen25-coder-1.5b.gguf");
    let draft_model = common::model("qwen25-coder-0.5b.gguf");
    let mid = ["--ram", "1G", "--ctx", "256", "--draft"];
    let o = common::tool(&[&["plan", &target][..], &mid, &[&draft_model, "--json"]].concat());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["draft"]["resident"], true, "{}", j["draft"]);
    assert_eq!(j["draft"]["budget_bytes"].as_u64(), Some(whole));
    // Under 400 MiB the target does not fit beside it: the draft streams in its quarter,
    // and `run` says so.
    let small = ["--ram", "400M", "--ctx", "256", "--draft"];
    let o = common::tool(&[&["plan", &target][..], &small, &[&draft_model, "--json"]].concat());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["draft"]["resident"], false, "{}", j["draft"]);
    assert_eq!(j["draft"]["whole_bytes"].as_u64(), Some(whole));
    let o = common::tool(
        &[
            &["run", &target][..],
            &small,
            &[&draft_model, "-n", "1", "-p", "def"],
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.lines()
            .any(|l| l.starts_with("warning: --draft") && l.contains("streams")),
        "{err}"
    );
}
