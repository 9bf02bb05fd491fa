//! The expert history across processes, on a synthetic qwen3moe whose routing `synth
//! --router-skew` skews as trained routers are skewed, under a budget that streams its experts
//! through a cache of about a third of each layer's experts: a run saves its routing into the
//! cache directory (`XDG_CACHE_HOME`, a temporary one here); a restarted run preloads the hot
//! experts, so its first 32 decoded tokens hit the cache at least as often as the previous
//! run's last 32 (the same job restarted), and more often than a restarted run without
//! history (the same job, or another prompt); greedy tokens are the same either way. Hostile
//! history files (cut short, garbage, another model's, another shape, huge, a directory) are
//! each one warning line and a run like one without history, never a failure.

mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Short prompts: the prompt's pass warms the cache little, so the first decoded tokens show
/// how warm it started.
const PROMPT: &str = "The";
const LATER_PROMPT: &str = "Once";

/// A test's model and cache directory, in a temporary directory removed on drop (a failed
/// test included).
struct Setup {
    file: PathBuf,
    cache: PathBuf,
    ram: String,
    slots: u64,
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(dir) = self.file.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// `run --json` on the setup's file and budget with `XDG_CACHE_HOME` at its cache; the JSON
/// and stderr.
fn run(s: &Setup, prompt: &str, extra: &[&str]) -> (Value, String) {
    let f = s.file.to_str().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .env("XDG_CACHE_HOME", &s.cache)
        .args(["run", f, "-p", prompt, "-n", "64", "--ctx", "128"])
        .args(["--ram", &s.ram, "--threads", "2", "--json", "--ignore-eos"])
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{stderr}");
    (serde_json::from_slice(&o.stdout).unwrap(), stderr)
}

fn tool_json(args: &[&str]) -> Value {
    let o = common::tool(args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The one history file under the cache directory.
fn history_file(cache: &Path) -> PathBuf {
    let dir = cache.join("ramforge").join("expert-history");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

fn rate(v: &Value, key: &str) -> f64 {
    v["experts"][key].as_f64().unwrap()
}

/// A skewed qwen3moe of 8 layers, 32 experts of which 4 are used, and the smallest budget
/// (in steps of 1 MiB from 4 MiB) whose expert cache has 12 to 16 slots per layer (most
/// of such a budget goes to the output projection); a cache directory of its own.
fn setup(tag: &str) -> Setup {
    let dir = std::env::temp_dir().join(format!("ramforge-history-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("skewed.gguf");
    common::synth(
        &file,
        &[
            "--arch",
            "qwen3moe",
            "--layers",
            "8",
            "--embd",
            "256",
            "--ffn",
            "256",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--experts",
            "32",
            "--experts-used",
            "4",
            "--router-skew",
            "1.5",
            "--type",
            "Q8_0",
            "--seed",
            "7",
        ],
    );
    let f = file.to_str().unwrap();
    let (ram, slots) = (4..64)
        .map(|mib| format!("{mib}M"))
        .find_map(|ram| {
            let plan = tool_json(&["plan", f, "--ram", &ram, "--ctx", "128", "--json"]);
            let slots = plan["expert_cache"]["slots_per_layer"].as_u64()?;
            (12..=16).contains(&slots).then_some((ram, slots))
        })
        .expect("a budget with 12 to 16 expert slots per layer");
    Setup {
        file,
        cache: dir.join("cache"),
        ram,
        slots,
    }
}

#[test]
fn a_restarted_run_starts_with_the_hot_experts_and_the_same_tokens() {
    let s = setup("restart");
    let (first, stderr) = run(&s, PROMPT, &[]);
    assert!(!stderr.contains("warning"), "{stderr}");
    assert_eq!(first["experts"]["slots_per_layer"], s.slots);
    assert_eq!(first["experts"]["preloaded"], 0, "nothing to preload yet");
    let saved = history_file(&s.cache);
    // Bounded: a header, the key (the model's path, size, time, shards), 8 layers x 32 f32.
    let len = std::fs::metadata(&saved).unwrap().len();
    assert!(len <= 24 + 4096 + 4 * 8 * 32 + 8, "{len} bytes");
    // The hit rate the first run reports at its end (its whole decoding), and that of its last
    // 32 decoded tokens (its cache at its warmest).
    let (ended, last) = (
        rate(&first, "decode_hit_rate"),
        rate(&first, "last_decode_hit_rate"),
    );

    // The same job restarted: without the history (which neither loads nor saves it), then
    // with it.
    let mtime = std::fs::metadata(&saved).unwrap().modified().unwrap();
    let (without, _) = run(&s, PROMPT, &["--no-expert-history"]);
    assert_eq!(
        std::fs::metadata(&saved).unwrap().modified().unwrap(),
        mtime,
        "--no-expert-history does not save"
    );
    let (with, stderr) = run(&s, PROMPT, &[]);
    assert!(!stderr.contains("warning"), "{stderr}");
    assert_eq!(
        with["tokens"], first["tokens"],
        "the history changes no token"
    );
    assert_eq!(without["tokens"], first["tokens"]);
    let preloaded = with["experts"]["preloaded"].as_u64().unwrap();
    assert!(
        preloaded >= 8 * s.slots / 2 && preloaded <= 8 * s.slots,
        "{preloaded} preloaded into {} slots of 8 layers",
        s.slots
    );
    assert_eq!(without["experts"]["preloaded"], 0);
    let (w, wo) = (
        rate(&with, "first_decode_hit_rate"),
        rate(&without, "first_decode_hit_rate"),
    );
    eprintln!(
        "hit rates: first run {ended:.3} (its last 32 tokens {last:.3}); restarted, first 32 tokens: with history {w:.3}, without {wo:.3}"
    );
    assert!(w >= ended, "with history {w} < the previous run's {ended}");
    // Its last 32 tokens ran in the cache their own routing had just filled: within a few of
    // the 1024 expert uses of 32 tokens (4 experts in 8 layers).
    assert!(
        w >= last - 4.0 / 1024.0,
        "with history {w} < the previous run's last 32 tokens' {last}"
    );
    assert!(w > wo, "with history {w} <= without {wo}");

    // Another prompt: the router's preferences carry over.
    let (other, _) = run(&s, LATER_PROMPT, &[]);
    let (other_without, _) = run(&s, LATER_PROMPT, &["--no-expert-history"]);
    assert_eq!(other["tokens"], other_without["tokens"]);
    let (w, wo) = (
        rate(&other, "first_decode_hit_rate"),
        rate(&other_without, "first_decode_hit_rate"),
    );
    eprintln!("another prompt, first 32 tokens: with history {w:.3}, without {wo:.3}");
    assert!(w > wo, "another prompt: with history {w} <= without {wo}");
}

#[test]
fn hostile_history_files_are_one_warning_and_ignored() {
    use ramforge_engine::ExpertHistory;
    let s = setup("hostile");
    let (clean, _) = run(&s, PROMPT, &["--no-expert-history"]);
    run(&s, PROMPT, &[]);
    let path = history_file(&s.cache);
    let good = std::fs::read(&path).unwrap();
    // The key the file was saved under (it names this model) sits after the 24-byte header.
    let key_len = u32::from_le_bytes(good[12..16].try_into().unwrap()) as usize;
    let key = std::str::from_utf8(&good[24..24 + key_len])
        .unwrap()
        .to_string();
    let counts = |n: usize| (0..n).map(|i| (i % 7) as f32 / 64.0).collect::<Vec<f32>>();
    let mut flipped = good.clone();
    flipped[30] ^= 0xff;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("cut short", good[..good.len() - 5].to_vec(), "malformed"),
        ("header only", good[..20].to_vec(), "malformed"),
        (
            "garbage",
            b"{\"not\": \"a history\"}".repeat(9),
            "malformed",
        ),
        ("a flipped byte", flipped, "malformed"),
        (
            "another model",
            ExpertHistory::new(8, 32, counts(256))
                .unwrap()
                .encode(&key.replace("bytes=", "bytes=1")),
            "another model",
        ),
        (
            "other counts",
            ExpertHistory::new(8, 64, counts(512)).unwrap().encode(&key),
            "8 MoE layers of 64 experts",
        ),
        (
            "other layers",
            ExpertHistory::new(3, 32, counts(96)).unwrap().encode(&key),
            "3 MoE layers of 32 experts",
        ),
    ];
    for (what, bytes, says) in cases {
        std::fs::write(&path, &bytes).unwrap();
        let (got, stderr) = run(&s, PROMPT, &[]);
        let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
        assert_eq!(warnings.len(), 1, "{what}: {stderr}");
        assert!(
            warnings[0].starts_with("warning: expert history ")
                && warnings[0].contains(says)
                && warnings[0].ends_with("; ignored"),
            "{what}: {}",
            warnings[0]
        );
        assert_eq!(got["tokens"], clean["tokens"], "{what}");
        assert_eq!(got["experts"]["preloaded"], 0, "{what}");
        // The run leaves a good history in its place.
        let again = std::fs::read(&path).unwrap();
        assert!(ExpertHistory::decode(&again, &key, 8, 32).is_ok(), "{what}");
    }
    // Huge (sparse, never read): refused by its size.
    std::fs::File::create(&path)
        .unwrap()
        .set_len(1 << 40)
        .unwrap();
    let (got, stderr) = run(&s, PROMPT, &[]);
    assert!(stderr.contains("bytes, over the limit of"), "{stderr}");
    assert_eq!(got["tokens"], clean["tokens"]);
    // A directory where the file should be: loading and saving each warn, the run succeeds.
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let (got, stderr) = run(&s, PROMPT, &[]);
    assert_eq!(
        stderr.matches("warning: expert history").count(),
        2,
        "{stderr}"
    );
    assert_eq!(got["tokens"], clean["tokens"]);
}

/// A `serve` process on the setup's file (its cache directory), its address read from stderr.
struct Serve(std::process::Child, String);

impl Serve {
    fn start(s: &Setup) -> Serve {
        use std::io::BufRead;
        let mut child = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
            .env("XDG_CACHE_HOME", &s.cache)
            .arg("serve")
            .arg(&s.file)
            .args([
                "--port",
                "0",
                "--threads",
                "2",
                "--ctx",
                "128",
                "--ram",
                &s.ram,
            ])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|l| {
                let rest = l.split("listening on http://").nth(1)?;
                Some(rest.split_whitespace().next()?.to_string())
            })
            .expect("a 'listening on' line");
        // Keep draining stderr so the server never blocks on it.
        std::thread::spawn(move || lines.for_each(drop));
        Serve(child, addr)
    }

    fn complete(&self, prompt: &str) -> Value {
        let body = serde_json::json!({"model": "skewed", "prompt": prompt, "max_tokens": 32, "temperature": 0});
        let url = format!("http://{}/v1/completions", self.1);
        ureq::post(&url)
            .send_json(body)
            .unwrap()
            .into_json()
            .unwrap()
    }

    fn preloaded(&self) -> f64 {
        let text = ureq::get(&format!("http://{}/metrics", self.1))
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("ramforge_experts_preloaded "))
            .and_then(|v| v.trim().parse().ok())
            .expect("ramforge_experts_preloaded in /metrics")
    }

    /// SIGTERM, then the exit status (it saves the history on the way out).
    fn stop(mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        self.0.wait().unwrap()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `serve` saves the history when SIGTERM stops it, and a restarted `serve` preloads from it
/// (`ramforge_experts_preloaded` in /metrics) and answers with the same tokens.
#[test]
fn a_restarted_server_preloads_what_the_last_one_used() {
    let s = setup("serve");
    let first = Serve::start(&s);
    assert_eq!(first.preloaded(), 0.0);
    let answer = first.complete(PROMPT);
    assert!(first.stop().success());
    history_file(&s.cache);
    let again = Serve::start(&s);
    assert!(again.preloaded() > 0.0, "nothing preloaded after a restart");
    assert_eq!(
        again.complete(PROMPT)["choices"][0]["text"],
        answer["choices"][0]["text"]
    );
    assert!(again.stop().success());
}
