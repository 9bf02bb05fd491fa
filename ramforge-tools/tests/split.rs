//! Split models end to end: `synth --split-max-size` writes gguf-split's shards, llama.cpp
//! loads them by the first shard and records its golden, and `inspect`, `plan`, `run` and
//! `verify` open the same first shard: logits within the synth goldens' tolerance of
//! llama.cpp's, all resident, at 40% of the files and just above the minimum budget (layers or
//! experts streamed from several shards, a layer in two of them), each bit for bit the unsplit
//! file's, and greedy tokens the same at every budget and as the unsplit file's, and through `serve`. A set of shards that is wrong in any way fails with one
//! line naming the shard, never a panic.

mod common;

use common::judge::{self, fails_cleanly, near_minimum, verify};
use ramforge_gguf::{parse_header, GgmlType, GgufWriter, Metadata, Value};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ramforge-split-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The shards `synth` wrote for `out` (`out` without `.gguf`, then `-NNNNN-of-NNNNN.gguf`), in
/// order.
fn shards_of(out: &Path) -> Vec<PathBuf> {
    let stem = out.file_stem().unwrap().to_str().unwrap().to_string();
    let mut v: Vec<PathBuf> = std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.starts_with(&format!("{stem}-")) && n.contains("-of-")
        })
        .collect();
    v.sort();
    v
}

/// A tool run that must succeed; its stdout as JSON.
fn tool_json(args: &[&str]) -> serde_json::Value {
    let o = common::tool(args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

const PROMPTS: &str = "The quick brown fox jumps over the lazy dog and keeps running through the forest until night falls\n\
Hello\n\
Une phrase en français, pour changer un peu de langue et de tokens.\n";

fn tokens(report: &serde_json::Value) -> Vec<u64> {
    report["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

/// Writes the model of `args` whole and split at 1M, and holds the split one to llama.cpp and
/// to the whole one.
fn check(tag: &str, args: &[&str]) {
    let dir = scratch(tag);
    let whole = dir.join("whole.gguf");
    common::synth(&whole, args);
    let out = dir.join("model.gguf");
    common::synth(&out, &[args, &["--split-max-size", "1M"]].concat());
    assert!(!out.exists(), "a split writes shards only");
    let shards = shards_of(&out);
    let n = shards.len();
    assert!(n >= 3, "{tag}: {n} shards");
    let first = &shards[0];
    assert!(first.ends_with(format!("model-00001-of-{n:05}.gguf")));
    let total: u64 = shards
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    let arg = |p: &Path| p.to_str().unwrap().to_string();

    // inspect: every shard, every tensor's shard, the files' total.
    let j = tool_json(&["inspect", &arg(first), "--json"]);
    assert_eq!(j["shards"].as_array().unwrap().len(), n);
    assert_eq!(j["totals"]["file_bytes"], total);
    let used: std::collections::BTreeSet<u64> = j["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["shard"].as_u64().unwrap())
        .collect();
    assert_eq!(used.len(), n, "every shard holds tensors");
    let mut layer_shards: std::collections::BTreeMap<&str, std::collections::BTreeSet<u64>> =
        Default::default();
    for t in j["tensors"].as_array().unwrap() {
        let name = t["name"].as_str().unwrap();
        if let Some(rest) = name.strip_prefix("blk.") {
            let layer = rest.split('.').next().unwrap();
            layer_shards
                .entry(layer)
                .or_default()
                .insert(t["shard"].as_u64().unwrap());
        }
    }
    assert!(
        layer_shards.values().any(|s| s.len() > 1),
        "{tag}: no layer lies in two shards: {layer_shards:?}"
    );
    let whole_j = tool_json(&["inspect", &arg(&whole), "--json"]);
    assert_eq!(j["tensor_count"], whole_j["tensor_count"]);
    assert_eq!(
        j["totals"]["weight_bytes"],
        whole_j["totals"]["weight_bytes"]
    );
    // plan: the same plan as the whole file's.
    let forty = (total * 40 / 100).to_string();
    // plan: the whole file's plan, but for the minimum, which may be a few aligned blocks
    // more: a layer in two shards is read as a segment in each.
    let plan = |p: &Path| {
        let mut j = tool_json(&["plan", &arg(p), "--ram", &forty, "--json"]);
        let o = j.as_object_mut().unwrap();
        o.remove("model");
        let minimum = o.remove("minimum_budget_bytes").unwrap().as_u64().unwrap();
        (j, minimum)
    };
    let ((split_plan, split_min), (whole_plan, whole_min)) = (plan(first), plan(&whole));
    assert_eq!(split_plan, whole_plan, "{tag}: plans differ");
    assert!(
        (whole_min..=whole_min + n as u64 * 4096).contains(&split_min),
        "{tag}: minimum {split_min} split, {whole_min} whole"
    );

    // verify against llama.cpp, which loads the split by its first shard.
    let golden = judge::record_golden(first, PROMPTS, 16, &dir.join("golden.jsonl"));
    // The same golden for the whole file: without the (first shard's) checksum.
    let unchecked = dir.join("golden-unchecked.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&golden)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("model_sha256");
            v.to_string()
        })
        .collect();
    std::fs::write(&unchecked, lines.join("\n") + "\n").unwrap();
    let whole_steps = verify(&whole, &unchecked, None, 2).steps;
    assert!(!whole_steps.is_empty());
    for (what, ram) in [
        ("all resident", None),
        ("ram 40% of the files", Some(total * 40 / 100)),
        (
            "ram near the minimum",
            Some(near_minimum(first, &golden, 64 << 10)),
        ),
    ] {
        let judge::Verified {
            summary: s,
            mismatches,
            steps,
        } = verify(first, &golden, ram, 2);
        assert_eq!(
            steps, whole_steps,
            "{tag}, {what}: logits differ from whole"
        );
        let mean = s["mean_abs_diff"].as_f64().unwrap();
        eprintln!(
            "{tag} in {n} shards, {what}: mean |diff| {mean:.4}, max {}, mismatches {mismatches}, {} steps",
            s["max_abs_diff"], s["steps"]
        );
        assert_eq!(s["pass"], true, "{tag}, {what}: {s}");
        assert!(mean <= 0.05, "{tag}, {what}: mean {mean}");
        assert_eq!(mismatches, 0, "{tag}, {what}");
    }

    // run: greedy tokens the same whole, split, and split at 40% of the files.
    let run = |p: &Path, ram: Option<&str>| {
        let mut a = vec![
            "run".to_string(),
            arg(p),
            "--json".into(),
            "--prompt".into(),
            "Once upon a time".into(),
            "--max-tokens".into(),
            "12".into(),
            "--threads".into(),
            "2".into(),
        ];
        if let Some(r) = ram {
            a.extend(["--ram".to_string(), r.to_string()]);
        }
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        tool_json(&a)
    };
    let resident = run(first, None);
    assert_eq!(tokens(&resident), tokens(&run(&whole, None)));
    assert_eq!(tokens(&run(first, Some(&forty))), tokens(&resident));
    let least = near_minimum(first, &golden, 64 << 10).to_string();
    let streamed = run(first, Some(&least));
    assert_eq!(tokens(&streamed), tokens(&resident));
    assert!(
        streamed["streamed_layers"].as_u64().unwrap() > 0
            || streamed["experts"]["misses"].as_u64().unwrap_or(0) > 0,
        "{tag}: near the minimum, layers or experts stream: {streamed}"
    );

    // serve: the first shard at 40% of the files answers a greedy completion as `run` does.
    let text = serve_completion(first, &forty, "Once upon a time", 12);
    assert_eq!(text, resident["text"].as_str().unwrap(), "{tag}: serve");
    std::fs::remove_dir_all(&dir).ok();
}

/// `serve MODEL --ram RAM` on an ephemeral loopback port: one greedy `/v1/completions` request,
/// its text; the server is stopped after it (killed if the test fails first).
fn serve_completion(model: &Path, ram: &str, prompt: &str, max_tokens: usize) -> String {
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .arg("serve")
        .arg(model)
        .args(["--port", "0", "--threads", "2", "--ram", ram])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let server = Stop(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("[serve] {line}");
            if let Some(rest) = line.split("listening on http://").nth(1) {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("serve printed no 'listening on' line within 120 s");
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    // The model is named without its shard numbers: `model`, not `model-00001-of-0000n`.
    let body = serde_json::json!({
        "model": "model", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0
    });
    let response = match ureq::post(&format!("http://{addr}/v1/completions"))
        .timeout(Duration::from_secs(120))
        .send_json(body)
    {
        Ok(r) => r,
        Err(ureq::Error::Status(code, r)) => {
            panic!("status {code}: {}", r.into_string().unwrap_or_default())
        }
        Err(e) => panic!("{e}"),
    };
    let v: serde_json::Value = serde_json::from_str(&response.into_string().unwrap()).unwrap();
    drop(server);
    v["choices"][0]["text"].as_str().unwrap().to_string()
}

#[test]
fn a_split_qwen3moe_matches_llama_cpp_and_its_unsplit_file() {
    check(
        "qwen3moe",
        &[
            "--arch",
            "qwen3moe",
            "--layers",
            "6",
            "--embd",
            "128",
            "--ffn",
            "64",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--experts",
            "16",
            "--experts-used",
            "4",
            "--type",
            "Q4_0",
        ],
    );
}

#[test]
fn a_split_dense_qwen3_matches_llama_cpp_and_its_unsplit_file() {
    check(
        "qwen3",
        &[
            "--arch",
            "qwen3",
            "--layers",
            "4",
            "--embd",
            "256",
            "--ffn",
            "512",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--type",
            "Q8_0",
        ],
    );
}

/// Rewrites shard `path` (read whole: these are small) with `edit` applied to its metadata and
/// tensor names.
fn rewrite(path: &Path, edit: impl FnOnce(&mut Metadata, &mut Vec<String>)) {
    let bytes = std::fs::read(path).unwrap();
    let h = parse_header(&bytes, bytes.len() as u64).unwrap();
    let mut md = h.metadata.clone();
    let mut names: Vec<String> = h.tensors.iter().map(|t| t.name.clone()).collect();
    edit(&mut md, &mut names);
    let mut w = GgufWriter::new(md);
    for (t, name) in h.tensors.iter().zip(names) {
        let at = (h.data_offset + t.offset) as usize;
        let data = bytes[at..at + t.n_bytes as usize].to_vec();
        let ty: GgmlType = t.ggml_type;
        w.add_tensor(name, ty, &t.shape, data).unwrap();
    }
    w.write_file(path).unwrap();
}

#[test]
fn a_wrong_set_of_shards_fails_with_one_line_naming_the_shard() {
    let dir = scratch("hostile");
    let out = dir.join("m.gguf");
    common::synth(
        &out,
        &[
            "--arch",
            "llama",
            "--layers",
            "2",
            "--embd",
            "64",
            "--ffn",
            "128",
            "--heads",
            "2",
            "--kv-heads",
            "1",
            "--type",
            "Q8_0",
            "--split-max-size",
            "1M",
        ],
    );
    let good = shards_of(&out);
    let n = good.len();
    assert!(n >= 3, "{n} shards");
    let name = |p: &Path| p.file_name().unwrap().to_str().unwrap().to_string();
    let s = |p: &Path| p.to_str().unwrap().to_string();
    // A fresh copy of the set for each case.
    let case = |tag: &str| -> Vec<PathBuf> {
        let d = dir.join(tag);
        std::fs::create_dir_all(&d).unwrap();
        good.iter()
            .map(|p| {
                let q = d.join(p.file_name().unwrap());
                std::fs::copy(p, &q).unwrap();
                q
            })
            .collect()
    };
    let each = |p: &[PathBuf], expect: &str| {
        for cmd in ["inspect", "plan", "run", "verify"] {
            let first = s(&p[0]);
            let mut args = vec![cmd, first.as_str()];
            match cmd {
                "run" => args.extend(["--prompt", "hi", "--max-tokens", "1"]),
                "plan" => args.extend(["--ram", "1G"]),
                _ => {}
            }
            fails_cleanly(&args, expect);
        }
    };
    assert!(tool_json(&["inspect", &s(&good[0]), "--json"])["shards"].is_array());

    let p = case("missing");
    std::fs::remove_file(&p[1]).unwrap();
    each(&p, &format!("shard 2 of {n} is missing: {}", s(&p[1])));

    let p = case("count");
    rewrite(&p[2], |md, _| {
        md.set("split.count", Value::U16(n as u16 + 1))
    });
    each(&p, &format!("shard {}: split.count is {}", s(&p[2]), n + 1));

    let p = case("number");
    rewrite(&p[2], |md, _| md.set("split.no", Value::U16(1)));
    each(
        &p,
        &format!("shard {}: split.no is 1, expected 2", s(&p[2])),
    );

    let p = case("duplicate");
    let first_tensor = {
        let b = std::fs::read(&p[0]).unwrap();
        parse_header(&b, b.len() as u64).unwrap().tensors[0]
            .name
            .clone()
    };
    let dup = first_tensor.clone();
    rewrite(&p[n - 1], move |_, names| names[0] = dup);
    each(
        &p,
        &format!("tensor {first_tensor:?} is in two shards: {}", s(&p[0])),
    );

    let p = case("total");
    for q in &p {
        rewrite(q, |md, _| md.set("split.tensors.count", Value::I32(1000)));
    }
    each(&p, "split.tensors.count says 1000 tensors");

    let p = case("extra");
    let extra = p[0].with_file_name(format!("m-{:05}-of-{n:05}.gguf", n + 1));
    std::fs::copy(&p[1], &extra).unwrap();
    each(&p, &format!("{} is named as a shard", s(&extra)));

    let p = case("second");
    fails_cleanly(
        &["inspect", &s(&p[1])],
        &format!("is shard 2 of {n}; open the first shard ({})", s(&p[0])),
    );
    let p = case("renamed");
    let renamed = p[0].with_file_name("model.gguf");
    std::fs::rename(&p[0], &renamed).unwrap();
    fails_cleanly(&["run", &s(&renamed), "--prompt", "hi"], "cannot be found");
    assert!(name(&renamed).ends_with(".gguf"));
    std::fs::remove_dir_all(&dir).ok();
}
