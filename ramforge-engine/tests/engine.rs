//! The engine API on the real model: repeated generation, charges, streaming vs resident.

mod common;

use common::model;
use ramforge_engine::{Engine, EngineOptions, SamplingParams, StopReason};
use std::sync::atomic::AtomicBool;

fn generate(e: &mut Engine, text: &str, n: usize) -> (Vec<u32>, String, StopReason) {
    let prompt = e.model().tokenizer.encode(text, true, true);
    let mut streamed = String::new();
    let stats = e
        .generate(
            &prompt,
            &SamplingParams::greedy(n),
            &mut |_, t| streamed.push_str(t),
            &AtomicBool::new(false),
        )
        .unwrap();
    assert_eq!(
        streamed, stats.text,
        "the streamed text is the reported text"
    );
    (stats.tokens, stats.text, stats.stop_reason)
}

#[test]
fn repeated_generation_is_identical_and_leaves_no_stale_charges() {
    let opts = EngineOptions {
        ram: Some(24 << 20),
        ctx: Some(64),
        threads: 2,
        ..Default::default()
    };
    let mut e = Engine::load(model(), &opts).unwrap();
    let resident = e.budget().held();
    let first = generate(&mut e, "The capital of France is", 12);
    let during_peak = e.budget().peak();
    assert!(
        during_peak > resident,
        "the KV cache was charged while generating"
    );
    assert_eq!(
        e.budget().held() - resident,
        e.plan().kv_bytes.min(e.budget().held() - resident)
    );
    let other = generate(&mut e, "Once upon a time", 6);
    let again = generate(&mut e, "The capital of France is", 12);
    assert_eq!(first, again);
    assert_ne!(first.0, other.0);
    e.reset();
    assert_eq!(e.budget().held(), resident, "reset releases the KV cache");
    assert!(e.budget().peak() <= 24 << 20);
    assert!(e.residency().layers_loaded > 0, "24 MiB streams layers");
}

#[test]
fn cancel_and_context_limits_stop_generation() {
    let opts = EngineOptions {
        ctx: Some(12),
        threads: 2,
        ..Default::default()
    };
    let mut e = Engine::load(model(), &opts).unwrap();
    let prompt = e
        .model()
        .tokenizer
        .encode("The capital of France is", true, true);
    let full = e
        .generate(
            &prompt,
            &SamplingParams::greedy(100),
            &mut |_, _| {},
            &AtomicBool::new(false),
        )
        .unwrap();
    assert_eq!(full.stop_reason, StopReason::ContextFull);
    // The last token is sampled from the logits at the last position and needs no slot.
    assert_eq!(full.prompt_tokens + full.generated_tokens, 13);
    let cancelled = e
        .generate(
            &prompt,
            &SamplingParams::greedy(100),
            &mut |_, _| {},
            &AtomicBool::new(true),
        )
        .unwrap();
    assert_eq!(cancelled.stop_reason, StopReason::Cancelled);
    assert_eq!(cancelled.generated_tokens, 0);
    let too_long = vec![1u32; 13];
    let err = e.generate(
        &too_long,
        &SamplingParams::greedy(1),
        &mut |_, _| {},
        &AtomicBool::new(false),
    );
    assert!(err.unwrap_err().to_string().contains("context holds 12"));
    // Still usable after the error.
    let ok = e
        .generate(
            &prompt,
            &SamplingParams::greedy(2),
            &mut |_, _| {},
            &AtomicBool::new(false),
        )
        .unwrap();
    assert_eq!(ok.tokens, full.tokens[..2]);
}
