//! Gemma 3's published chat format (`templates/gemma3.jinja`, the turn format of Google's
//! instruction-tuned Gemma 3 checkpoints) on the real Gemma 3 270M file, which carries no
//! `tokenizer.chat_template`: a copy of the file with the template set (gguf-py's
//! `gguf_new_metadata`) is rendered by Hugging Face's way (`../shared/reference/chat_golden.py`,
//! jinja2) and by `chat-render`, from the copy's metadata and from the original with
//! `--template`; and `chat` with the template keeps a multi-turn conversation.

mod common;

use common::{golden, golden_dir, model_path, reference_python, root, tool};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

fn template() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/gemma3.jinja")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ramforge-gemma3-chat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The Gemma 3 file with `tokenizer.chat_template` set to the published template (made once).
fn templated_copy() -> &'static Path {
    static COPY: OnceLock<PathBuf> = OnceLock::new();
    COPY.get_or_init(|| {
        let copy = tmp("gemma-3-270m-chat.gguf");
        let o = Command::new(reference_python())
            .args(["-m", "gguf.scripts.gguf_new_metadata", "--force"])
            .arg("--chat-template-file")
            .arg(template())
            .arg(model_path("gemma-3-270m-q4_k_m.gguf"))
            .arg(&copy)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        copy
    })
}

fn reference_script(name: &str) -> PathBuf {
    let s = golden_dir().join("../reference").join(name);
    if s.is_file() {
        s
    } else {
        root().join("../shared/reference").join(name)
    }
}

fn rendered(jsonl: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(jsonl)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["rendered"].clone())
        .collect()
}

#[test]
fn published_template_renders_as_hugging_face() {
    let copy = templated_copy();
    let ours = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/conv-gemma3.json");
    for convs in [
        golden("inputs/conv_public.json"),
        ours.display().to_string(),
    ] {
        let o = Command::new(reference_python())
            .arg(reference_script("chat_golden.py"))
            .arg(copy)
            .arg(&convs)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let want = rendered(&o.stdout);
        assert!(want.len() >= 3, "{convs}");
        // A system message becomes the first user turn's prefix, assistant turns are "model".
        assert!(
            want.iter().all(|w| w
                .as_str()
                .unwrap()
                .starts_with("<bos><start_of_turn>user\n")),
            "{want:?}"
        );

        let from_metadata = tool(&["chat-render", copy.to_str().unwrap(), &convs]);
        let with_flag = tool(&[
            "chat-render",
            model_path("gemma-3-270m-q4_k_m.gguf").to_str().unwrap(),
            &convs,
            "--template",
            template().to_str().unwrap(),
        ]);
        for o in [from_metadata, with_flag] {
            assert_eq!(
                o.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&o.stderr)
            );
            assert_eq!(rendered(&o.stdout), want, "{convs}");
        }
    }
}

#[test]
fn chat_keeps_a_conversation_in_the_published_format() {
    let copy = templated_copy();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ramforge-tools"))
        .args(["--verbose", "chat"])
        .arg(copy)
        .args(["--temperature", "0", "-n", "12", "--threads", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"What is the capital of France?\nAnd of Italy?\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    // Two turns' stats: the second prompt holds the first exchange, and that prefix was reused.
    let turns: Vec<(usize, usize)> = err
        .lines()
        .filter_map(|l| {
            let rest = l.split("prompt ").nth(1)?;
            let prompt = rest.split(' ').next()?.parse().ok()?;
            let reused = rest.split('(').nth(1)?.split(' ').next()?.parse().ok()?;
            Some((prompt, reused))
        })
        .collect();
    assert_eq!(turns.len(), 2, "{err}");
    assert!(turns[1].0 > turns[0].0, "{err}");
    assert!(
        turns[1].1 >= turns[0].0,
        "the first turn's prompt is reused: {err}"
    );
    assert!(!out.trim().is_empty(), "{out:?}");
    assert!(
        !out.contains("<end_of_turn>"),
        "the end-of-turn token is not text: {out:?}"
    );
}
