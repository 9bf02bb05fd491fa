//! Hostile chat templates: each class of runaway template fails render with one line naming
//! the limit it hit, fast, in a child under a 1 GiB address-space limit; the real SmolLM2
//! template still renders llama.cpp's golden conversations exactly.

mod common;
mod hostile;

use common::{golden_dir, model};
use hostile::{limited, one_line_naming};
use ramforge_engine::text::template::{model_chat_template, render_chat, ChatMessage};
use ramforge_gguf::GgufFile;
use std::time::{Duration, Instant};

/// How soon a limit must stop a render: well under a second on an idle machine; the margin is
/// for a loaded one (the tests share two cores with builds).
const QUICK: Duration = Duration::from_secs(5);

/// The error of rendering `template` for one user message, checked to come within `within`.
fn render_error(template: &str, within: Duration) -> String {
    let messages = [ChatMessage {
        role: "user".into(),
        content: "hello".into(),
        ..ChatMessage::default()
    }];
    let start = Instant::now();
    let e = render_chat(template, &messages, true, "<s>", "</s>")
        .expect_err("the template is refused")
        .to_string();
    assert!(start.elapsed() < within, "took {:?}: {e}", start.elapsed());
    e
}

#[test]
fn a_string_doubled_forty_times_hits_the_memory_limit() {
    limited("a_string_doubled_forty_times_hits_the_memory_limit", || {
        let t = "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}";
        let e = render_error(t, QUICK);
        one_line_naming(&e, &["chat template exceeded", "TEMPLATE_MEMORY_BASE"]);
        // Unrolled, without a loop: still the memory limit, not the instruction budget.
        let mut t = String::from("{% set s0 = 'ab' %}");
        for i in 0..40 {
            t.push_str(&format!("{{% set s{} = s{i} ~ s{i} %}}", i + 1));
        }
        t.push_str("{{ s40|length }}");
        let e = render_error(&t, QUICK);
        one_line_naming(&e, &["memory limit", "TEMPLATE_MEMORY_BASE"]);
    });
}

#[test]
fn nested_loops_of_ten_to_the_fifth_run_out_of_fuel() {
    limited("nested_loops_of_ten_to_the_fifth_run_out_of_fuel", || {
        let t = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
        let e = render_error(t, QUICK);
        one_line_naming(&e, &["instruction budget", "TEMPLATE_FUEL = 1000000"]);
    });
}

#[test]
fn a_range_over_the_loop_limit_is_refused() {
    limited("a_range_over_the_loop_limit_is_refused", || {
        let e = render_error("{% for i in range(10**9) %}x{% endfor %}", QUICK);
        one_line_naming(&e, &["loop limit", "TEMPLATE_LOOP_LIMIT = 100000"]);
    });
}

#[test]
fn a_self_recursive_macro_hits_the_recursion_limit() {
    limited("a_self_recursive_macro_hits_the_recursion_limit", || {
        let t = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
        let e = render_error(t, QUICK);
        one_line_naming(&e, &["recursion limit", "TEMPLATE_RECURSION_LIMIT = 100"]);
    });
}

#[test]
fn output_past_the_limit_is_refused() {
    limited("output_past_the_limit_is_refused", || {
        let t = "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}";
        let e = render_error(t, QUICK);
        one_line_naming(
            &e,
            &["output limit", "1048608 bytes", "TEMPLATE_OUTPUT_BASE"],
        );
    });
}

#[test]
fn a_slow_filter_hits_the_time_limit() {
    limited("a_slow_filter_hits_the_time_limit", || {
        // Few instructions, each slow: 20 MB reversed a thousand times.
        let t = "{% for i in range(1000) %}{% set x = ('ab' * 10000000)|reverse %}{% endfor %}";
        let e = render_error(t, Duration::from_secs(8));
        one_line_naming(&e, &["time limit", "TEMPLATE_TIME_LIMIT = 2 s"]);
    });
}

#[test]
fn calls_of_undefined_methods_are_errors() {
    limited("calls_of_undefined_methods_are_errors", || {
        for t in [
            "{{ messages[0].content.frobnicate() }}",
            "{{ messages.nosuch(1, 2) }}",
            "{{ undefined_thing.method() }}",
        ] {
            let e = render_error(t, QUICK);
            one_line_naming(&e, &["chat template failed to render"]);
        }
    });
}

/// One conversation of the golden file and llama.cpp's rendering of it.
#[derive(serde::Deserialize)]
struct Golden {
    messages: Vec<ChatMessage>,
    add_generation_prompt: bool,
    rendered: String,
}

#[test]
fn the_real_template_renders_the_goldens_exactly() {
    let file = GgufFile::open(model()).unwrap();
    let meta = &file.header().metadata;
    let template = model_chat_template(meta).unwrap();
    let (bos, eos) = ramforge_engine::text::template::bos_eos_texts(meta);
    let path = golden_dir().join("chat-SmolLM2-135M-Instruct.Q4_1.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut n = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let g: Golden = serde_json::from_str(line).unwrap();
        let out = render_chat(template, &g.messages, g.add_generation_prompt, &bos, &eos).unwrap();
        assert_eq!(out, g.rendered);
        n += 1;
    }
    assert!(n >= 3, "{n} golden conversations in {}", path.display());
}

#[test]
fn a_long_conversation_renders_within_the_limits() {
    let file = GgufFile::open(model()).unwrap();
    let template = model_chat_template(&file.header().metadata).unwrap();
    let messages: Vec<ChatMessage> = (0..5000)
        .map(|i| ChatMessage {
            role: if i % 2 == 0 { "user" } else { "assistant" }.into(),
            content: format!("message {i}: {}", "words ".repeat(30)),
            ..ChatMessage::default()
        })
        .collect();
    let out = render_chat(template, &messages, true, "", "").unwrap();
    assert_eq!(out.matches("<|im_start|>user").count(), 2500);
    assert!(
        out.ends_with("<|im_start|>assistant\n"),
        "{}",
        &out[out.len() - 40..]
    );
}
