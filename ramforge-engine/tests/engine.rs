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

/// The prompt batch: the default's 256 tokens with no budget; under a budget halved until its
/// activations take at most a sixteenth of it, and further where the longer batch's working
/// set would not fit (down to 64); the minimum budget is the 64-token batch's, and the engine
/// loads and generates there.
#[test]
fn a_budget_halves_the_prompt_batch_and_the_minimum_is_the_least_batchs() {
    let m = ramforge_engine::Model::open(model()).unwrap();
    let at = |ram: Option<u64>, batch: usize, ctx: usize| EngineOptions {
        ram,
        ctx: Some(ctx),
        threads: 2,
        batch,
        ..Default::default()
    };
    let unlimited = |batch, ctx| m.plan(&at(None, batch, ctx)).unwrap();
    for ctx in [512, 8192] {
        let full = unlimited(ramforge_engine::DEFAULT_BATCH, ctx);
        assert_eq!(full.request.batch, 256);
        let (p64, p128) = (unlimited(64, ctx), unlimited(128, ctx));
        assert_eq!(
            full.minimum, p64.minimum,
            "the minimum is the 64-token batch's"
        );
        assert!(p64.scratch_bytes < p128.scratch_bytes);
        assert!(p128.scratch_bytes < full.scratch_bytes);
        let p = m.plan(&at(Some(p64.minimum), 256, ctx)).unwrap();
        assert_eq!((p.request.batch, p.minimum), (64, p64.minimum));
        assert!(matches!(
            m.plan(&at(Some(p64.minimum - 1), 256, ctx)),
            Err(ramforge_engine::EngineError::BudgetTooSmall { .. })
        ));
        // A batch asked for below 64 is kept.
        let p = m.plan(&at(Some(p64.minimum), 16, ctx)).unwrap();
        assert_eq!(p.request.batch, 16);
        if ctx == 512 {
            // A sixteenth of the budget holds 128 tokens' activations but not 256's (and the
            // 128-token working set fits).
            let ram = 16 * p128.scratch_bytes;
            let working_set = p64.minimum + p128.scratch_bytes - p64.scratch_bytes;
            assert!(16 * full.scratch_bytes > ram && working_set <= ram);
            let p = m.plan(&at(Some(ram), 256, ctx)).unwrap();
            assert_eq!(
                (p.request.batch, p.scratch_bytes),
                (128, p128.scratch_bytes)
            );
            assert_eq!(p.minimum, p64.minimum);
        } else {
            // The KV cache dominates: at the minimum the scratch rule allows 256 tokens, but
            // only 64's working set fits.
            assert!(16 * full.scratch_bytes <= p64.minimum);
            let mut e = Engine::new(
                ramforge_engine::Model::open(model()).unwrap(),
                &at(Some(p64.minimum), 256, ctx),
            )
            .unwrap();
            assert_eq!(e.plan().request.batch, 64);
            let (tokens, _, _) = generate(&mut e, "The capital of France is", 4);
            assert_eq!(tokens.len(), 4);
            assert!(e.budget().peak() <= p64.minimum);
        }
    }
}
