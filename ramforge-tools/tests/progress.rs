//! Progress bars (drawn on a terminal, hidden otherwise) and Ctrl-C during generation.

mod common;

use common::{model, tool};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SMOLLM: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_ramforge-tools")
}

/// Runs `args` with stdout and stderr on a pseudo-terminal (util-linux `script`), returning
/// everything the terminal showed.
fn on_a_terminal(args: &[&str]) -> String {
    let quoted: Vec<String> = std::iter::once(bin())
        .chain(args.iter().copied())
        .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
        .collect();
    let out = Command::new("script")
        .args(["-qec", &quoted.join(" "), "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("util-linux `script` runs the tool on a pseudo-terminal");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn long_prompt() -> String {
    "The quick brown fox jumps over the lazy dog. ".repeat(40)
}

#[test]
fn the_prompt_phase_of_a_long_prompt_shows_a_bar_on_a_terminal_only() {
    let m = model(SMOLLM);
    let prompt = long_prompt();
    let args = [
        "run",
        &m,
        "--prompt",
        &prompt,
        "--batch",
        "16",
        "--max-tokens",
        "2",
        "--ignore-eos",
    ];
    let shown = on_a_terminal(&args);
    assert!(
        shown.contains("prompt ["),
        "no prompt bar on the terminal:\n{shown}"
    );

    let piped = tool(&args);
    assert!(piped.status.success());
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(
        !stderr.contains('['),
        "a bar was drawn into a pipe: {stderr}"
    );
}

#[test]
fn synth_shows_a_write_bar_on_a_terminal_and_quiet_hides_it() {
    let dir = std::env::temp_dir().join(format!("ramforge-progress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("tiny.gguf");
    let donor = model(SMOLLM);
    let base = [
        "synth",
        "-o",
        out.to_str().unwrap(),
        "--arch",
        "llama",
        "--layers",
        "2",
        "--embd",
        "64",
        "--ffn",
        "128",
        "--heads",
        "4",
        "--kv-heads",
        "2",
        "--type",
        "Q8_0",
        "--vocab-from",
        &donor,
    ];
    let shown = on_a_terminal(&base);
    assert!(
        shown.contains("writing ["),
        "no write bar on the terminal:\n{shown}"
    );
    let mut quiet = base.to_vec();
    quiet.push("--quiet");
    let silent = on_a_terminal(&quiet);
    assert!(
        !silent.contains("writing"),
        "--quiet still drew a bar:\n{silent}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn ctrl_c_during_generation_prints_the_stats_so_far_and_exits_cleanly() {
    let m = model(SMOLLM);
    let mut child = Command::new(bin())
        .args([
            "run",
            &m,
            "--prompt",
            "Once upon a time",
            "--max-tokens",
            "100000",
        ])
        .args(["--ignore-eos", "--ctx", "8192"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for generated text, then interrupt.
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    let n = stdout.read(&mut first).unwrap();
    assert!(n > 0, "no text before Ctrl-C");
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) on our own child's pid with a valid signal number.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let started = Instant::now();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "did not stop promptly"
    );
    assert!(status.success(), "exit {status:?}, stderr: {stderr}");
    assert!(
        stderr.contains("decode:"),
        "no stats after Ctrl-C: {stderr}"
    );
    assert!(
        stderr.contains("Cancelled"),
        "stats do not say it was interrupted: {stderr}"
    );
    assert!(stderr.contains("peak RSS"), "{stderr}");
}
