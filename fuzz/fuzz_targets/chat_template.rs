#![no_main]
//! Chat template fuzzing: any template text and conversation renders or fails with one line,
//! never a panic, a hang or unbounded memory (the limits of `ramforge_engine::text::limits`).
//! Input: the template, then NUL-separated role/content pairs (so real templates are seeds).
//! The render runs in a forked child (one `RenderServer` child for many inputs, under the same
//! memory and time limits as `render_chat`'s child per render), where the fuzzer cannot see
//! coverage; so a render the child finished within the memory and time limits runs again
//! here, and must agree.

use libfuzzer_sys::fuzz_target;
use ramforge_engine::text::render_server::RenderServer;
use ramforge_engine::text::template::{input_limits, render_in_process, ChatError, ChatMessage};
use std::cell::RefCell;

thread_local! {
    static SERVER: RefCell<RenderServer> = RefCell::new(RenderServer::new());
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\0');
    let template = parts.next().unwrap_or_default();
    let rest: Vec<&str> = parts.collect();
    let messages: Vec<ChatMessage> = rest
        .chunks(2)
        .map(|p| ChatMessage {
            role: p[0].to_string(),
            content: p.get(1).copied().unwrap_or_default().to_string(),
            ..ChatMessage::default()
        })
        .collect();
    let (bos, eos) = ("<|im_start|>", "<|im_end|>");
    let agp = rest.len() % 2 == 0;
    let isolated = SERVER.with(|s| s.borrow_mut().render(template, &messages, agp, bos, eos));
    match &isolated {
        Ok(out) => assert!(out.len() <= input_limits(&messages, bos, eos).output_bytes),
        Err(e) => assert!(!e.to_string().contains('\n'), "multi-line error: {e}"),
    }
    let child_limit = matches!(&isolated, Err(ChatError::Limit(m)) if m.contains("memory limit") || m.contains("time limit"));
    if !child_limit {
        let here = render_in_process(template, &messages, agp, bos, eos);
        assert_eq!(
            here.map_err(|e| e.to_string()),
            isolated.map_err(|e| e.to_string()),
            "the child and this process disagree"
        );
    }
});
