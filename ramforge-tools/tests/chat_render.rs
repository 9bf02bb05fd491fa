//! `ramforge-tools chat-render` against the Hugging Face renderings in ../shared/golden.

mod common;

use common::{golden, model, tool};

fn json_lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn smollm2_template_reproduces_hugging_face() {
    let o = tool(&[
        "chat-render",
        &model("SmolLM2-135M-Instruct.Q4_1.gguf"),
        &golden("inputs/conv_public.json"),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let got = json_lines(&String::from_utf8(o.stdout).unwrap());
    let want = json_lines(
        &std::fs::read_to_string(golden("chat-SmolLM2-135M-Instruct.Q4_1.jsonl")).unwrap(),
    );
    assert_eq!(got.len(), want.len());
    assert!(!want.is_empty());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g["rendered"], w["rendered"], "{}", w["messages"]);
    }
}

#[test]
fn model_without_template_needs_a_template_file() {
    let gemma = model("gemma-3-270m-q4_k_m.gguf");
    let convs = golden("inputs/conv_public.json");
    let o = tool(&["chat-render", &gemma, &convs]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no chat template") && err.contains("--template FILE"),
        "{err}"
    );

    let dir = std::env::temp_dir().join(format!("ramforge-chat-render-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tmpl = dir.join("t.jinja");
    std::fs::write(
        &tmpl,
        "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}",
    )
    .unwrap();
    let o = tool(&[
        "chat-render",
        &gemma,
        &convs,
        "--template",
        tmpl.to_str().unwrap(),
    ]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let got = json_lines(&String::from_utf8(o.stdout).unwrap());
    assert_eq!(got.len(), 4);
    assert_eq!(
        got[0]["rendered"],
        "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn template_errors_are_one_line() {
    let dir = std::env::temp_dir().join(format!("ramforge-chat-render-err-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tmpl = dir.join("bad.jinja");
    std::fs::write(&tmpl, "{{ raise_exception('roles must alternate') }}").unwrap();
    let o = tool(&[
        "chat-render",
        &model("SmolLM2-135M-Instruct.Q4_1.gguf"),
        &golden("inputs/conv_public.json"),
        "--template",
        tmpl.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());
    let err = String::from_utf8(o.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("roles must alternate"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}
