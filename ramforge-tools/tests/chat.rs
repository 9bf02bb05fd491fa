//! `ramforge-tools chat` driven through a pipe on the real SmolLM2 model: replies go to stdout one
//! per turn, the conversation carries over between turns, `/reset` forgets it, end of input quits,
//! and the first reply is exactly what `run --chat` gives for the same message.

mod common;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

const QUESTION: &str = "What is the capital of France?";

fn model() -> PathBuf {
    common::model_path("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// `chat` (greedy, short replies, verbose stats) with `input` on stdin.
fn chat(input: &str, extra: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .arg("--verbose")
        .arg("chat")
        .arg(model())
        .args(["--temperature", "0", "-n", "6", "--threads", "1"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ramforge-tools");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The prompt and reply token counts of each turn, from the verbose stats on stderr.
fn turns(stderr: &str) -> Vec<(usize, usize)> {
    stderr
        .lines()
        .filter_map(|l| {
            let rest = l.split("prompt ").nth(1)?;
            let prompt = rest.split(' ').next()?.parse().ok()?;
            let reply = l.split("reply ").nth(1)?.split(' ').next()?.parse().ok()?;
            Some((prompt, reply))
        })
        .collect()
}

#[test]
fn history_carries_over_and_reset_forgets_it() {
    let o = chat(
        &format!("{QUESTION}\nAnd of Italy?\n/reset\n{QUESTION}\n"),
        &[],
    );
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{err}");
    let replies: Vec<&str> = out.lines().collect();
    assert_eq!(replies.len(), 3, "one line per reply: {out:?}");
    assert!(!replies[0].trim().is_empty(), "empty reply: {out:?}");
    let t = turns(&err);
    assert_eq!(t.len(), 3, "{err}");
    // The second prompt holds the first question, the first reply and the new question.
    assert!(
        t[1].0 > t[0].0 + t[0].1,
        "second prompt ({}) must contain the first turn ({} + {} tokens)",
        t[1].0,
        t[0].0,
        t[0].1
    );
    // After /reset the same question is the whole prompt again, and gets the same reply.
    assert!(err.contains("(conversation cleared)"), "{err}");
    assert_eq!(t[2].0, t[0].0, "{err}");
    assert_eq!(replies[2], replies[0]);
}

#[test]
fn first_reply_matches_run_chat() {
    let o = chat(&format!("{QUESTION}\n"), &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let run = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .arg("run")
        .arg(model())
        .args(["--chat", "--prompt", QUESTION, "-n", "6", "--threads", "1"])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", text(&run.stderr));
    assert_eq!(text(&o.stdout).trim_end(), text(&run.stdout).trim_end());
}

#[test]
fn end_of_input_quits_quietly() {
    let o = chat("", &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(o.stdout.is_empty());
}

#[test]
fn unreadable_template_is_a_one_line_error() {
    let o = chat(QUESTION, &["--template", "/nonexistent/template.jinja"]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("/nonexistent/template.jinja"),
        "{err}"
    );
}

#[test]
fn ctrl_c_stops_the_reply_prints_its_stats_and_the_chat_goes_on() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .arg("chat")
        .arg(model())
        .args(["--temperature", "0", "-n", "2000", "--threads", "1"])
        .args(["--system", "Answer at great length, in many paragraphs."])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"Tell me the whole history of France.\n")
        .unwrap();
    stdin.flush().unwrap();
    // Interrupt once the reply is coming out (however slow the machine is today): the first
    // bytes on stdout are the reply's.
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(k) => {
                    out.extend_from_slice(&buf[..k]);
                    let _ = tx.send(());
                }
            }
        }
        out
    });
    rx.recv_timeout(std::time::Duration::from_secs(120))
        .expect("the reply never started");
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    drop(stdin); // end of input: the chat ends after the interrupted reply
    let o = child.wait_with_output().unwrap();
    let reply = reader.join().unwrap();
    assert!(!reply.is_empty());
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("[interrupted; prompt "),
        "stats of the stopped reply: {err}"
    );
}
