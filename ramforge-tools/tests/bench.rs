//! `ramforge-tools bench` on the real SmolLM2 model: the counts it reports are the ones asked
//! for, speeds and RSS are real measurements, a budget is honoured, and Ctrl-C stops it with the
//! figures so far.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn model() -> PathBuf {
    common::model_path("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// Waits (at most two minutes) until process `pid` holds most of the model's `bytes` in memory,
/// i.e. has read its weights, however slow the machine is today; elsewhere than Linux, 3 s.
fn wait_until_loaded(pid: u32, bytes: u64) {
    if !cfg!(target_os = "linux") {
        std::thread::sleep(Duration::from_secs(3));
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss_kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        if rss_kib * 1024 >= bytes / 10 * 9 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "bench never loaded the model: {status}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn bench(args: &[&str]) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .arg("bench")
        .arg("--model")
        .arg(model())
        .args(args)
        .args(["--json", "--threads", "1"])
        .output()
        .expect("spawn ramforge-tools");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "bench failed: {err}");
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("bench --json: {e}; stderr {err}"))
}

#[test]
fn reports_what_it_measured() {
    let v = bench(&["-p", "16", "-n", "4"]);
    assert_eq!(v["prompt_tokens"], 16);
    assert_eq!(v["gen_tokens"], 4);
    assert_eq!(v["cancelled"], false);
    assert_eq!(v["architecture"], "llama");
    assert_eq!(v["layers"], 30);
    for key in [
        "prefill_tokens_per_sec",
        "decode_tokens_per_sec",
        "prefill_secs",
        "decode_secs",
    ] {
        let x = v[key].as_f64().unwrap();
        assert!(x.is_finite() && x > 0.0, "{key} = {x}");
    }
    let tps = v["prefill_tokens_per_sec"].as_f64().unwrap();
    let secs = v["prefill_secs"].as_f64().unwrap();
    assert!(
        (tps * secs - 16.0).abs() < 1e-6,
        "tok/s is tokens over seconds"
    );
    // Everything resident without a budget: the whole file's weights are in RSS, nothing streams.
    let rss = v["peak_rss_bytes"].as_u64().unwrap();
    assert!(
        rss > v["model_bytes"].as_u64().unwrap() / 2,
        "peak RSS {rss}"
    );
    assert_eq!(v["streamed_layers"], 0);
    assert_eq!(v["bytes_read_per_token"], 0.0);
}

#[test]
fn honours_a_budget_smaller_than_the_model() {
    let ram: u64 = 48 << 20;
    let v = bench(&["-p", "8", "-n", "2", "--ram", "48M"]);
    assert_eq!(v["ram_budget"], ram);
    assert!(v["budget_peak_bytes"].as_u64().unwrap() <= ram);
    assert!(v["streamed_layers"].as_u64().unwrap() > 0, "{v}");
    assert!(v["bytes_read_per_token"].as_f64().unwrap() > 0.0, "{v}");
    let depth = v["prefetch_depth"].as_u64().unwrap();
    assert!(
        depth >= 1 && depth <= v["stream_buffers"].as_u64().unwrap(),
        "{v}"
    );
    let rss = v["peak_rss_bytes"].as_u64().unwrap();
    assert!(
        rss <= ram + (16 << 20),
        "peak RSS {rss} over budget {ram} + 16 MiB"
    );
}

#[test]
fn ctrl_c_stops_and_prints_the_figures_so_far() {
    let child = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .arg("bench")
        .arg("--model")
        .arg(model())
        .args(["-p", "8", "-n", "4000", "--threads", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Past loading (Ctrl-C during the load ends the process at once, as a user expects) and
    // decoding (4000 tokens take far longer); each decode step is short, so the flag is seen
    // soon after the signal.
    wait_until_loaded(child.id(), std::fs::metadata(model()).unwrap().len());
    std::thread::sleep(Duration::from_secs(1));
    let started = Instant::now();
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took too long to stop"
    );
    assert_eq!(
        o.status.code(),
        Some(130),
        "stderr {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("interrupted"), "{out}");
    assert!(out.contains("prefill") && out.contains("peak RSS"), "{out}");
}
