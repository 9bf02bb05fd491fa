//! A three-turn conversation with a hybrid model (qwen35moe synth, whose delta-net layers keep
//! a recurrent state that cannot be cut back) through `serve`: each turn is served from the
//! last one's context (`cached_tokens` at least the previous prompt, from the state's
//! checkpoint at the end of that prompt, as the client sends back answers other than the
//! tokens generated), and each answer equals a fresh context's, asked of a second server in an
//! order that leaves it nothing to reuse.

use super::common;
use super::server::Server;
use serde_json::{json, Value};
use std::time::Duration;

/// Asks `server` (greedy, 8 tokens) to answer `messages`: the answer, the prompt's tokens and
/// how many of them were cached.
fn ask(server: &Server, messages: &[Value]) -> (String, u64, u64) {
    let (_, models) = server.get("/v1/models", None);
    let model = &models["data"][0]["id"];
    let body = json!({"model": model, "messages": messages, "temperature": 0, "max_tokens": 8});
    let (status, answer) = server.post("/v1/chat/completions", &body.to_string());
    assert_eq!(status, 200, "{answer}");
    let usage = &answer["usage"];
    (
        answer["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string(),
        usage["prompt_tokens"].as_u64().unwrap(),
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap(),
    )
}

#[test]
fn a_hybrid_conversation_reuses_each_turn_and_answers_as_fresh() {
    let dir = std::env::temp_dir().join(format!("ramforge-serve-hybrid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("qwen35moe.gguf");
    common::synth(
        &model,
        &[&common::qwen35moe_small()[..], &["--type", "F32"]].concat(),
    );
    let flags = ["--ctx", "512"];

    let server = Server::start_model(&model, &flags);
    let mut turns: Vec<(Vec<Value>, String)> = Vec::new();
    let mut messages = vec![json!({"role": "user", "content": "Name a colour."})];
    let mut previous_prompt = None;
    // The client sends back answers of its own (as one that edits or trims them would), so
    // each next prompt holds the last prompt but not the tokens generated after it.
    let replies = ["Blue.", "Green, I think.", ""];
    for (next, reply) in ["Another one?", "And a third?", ""]
        .into_iter()
        .zip(replies)
    {
        let (answer, prompt, cached) = ask(&server, &messages);
        if let Some(previous) = previous_prompt {
            assert!(
                cached >= previous,
                "turn {}: {cached} tokens cached, the previous prompt had {previous}",
                turns.len() + 1
            );
        }
        previous_prompt = Some(prompt);
        turns.push((messages.clone(), answer.clone()));
        messages.push(json!({"role": "assistant", "content": reply}));
        messages.push(json!({"role": "user", "content": next}));
    }
    server.terminate(Duration::from_secs(10));

    // Last turn first: each earlier prompt ends inside the later one's, before its checkpoint,
    // so nothing is reused.
    let fresh = Server::start_model(&model, &flags);
    for (i, (messages, answer)) in turns.iter().enumerate().rev() {
        let (alone, _, cached) = ask(&fresh, messages);
        assert_eq!(cached, 0, "turn {} was not fresh", i + 1);
        assert_eq!(&alone, answer, "turn {}", i + 1);
    }
    fresh.terminate(Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
}
