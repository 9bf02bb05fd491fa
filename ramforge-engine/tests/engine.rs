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

/// The prompt batch: the default's 256 tokens with no budget or where the model fits; under a
/// budget halved (down to 64) until its plan keeps resident what the 64-token batch's keeps, so
/// a longer batch never makes decoding read more: over budgets from the minimum to the whole
/// model, each plan keeps the 64-token plan's residency and twice its batch would not. The
/// minimum budget is the 64-token batch's; the engine loads and generates there.
#[test]
fn a_budget_halves_the_prompt_batch_and_never_takes_residency_from_decoding() {
    let m = ramforge_engine::Model::open(model()).unwrap();
    let at = |ram: Option<u64>, batch: usize| EngineOptions {
        ram,
        ctx: Some(2048),
        threads: 2,
        batch,
        ..Default::default()
    };
    let full = m.plan(&at(None, ramforge_engine::DEFAULT_BATCH)).unwrap();
    let p64 = m.plan(&at(None, 64)).unwrap();
    assert_eq!((full.request.batch, p64.request.batch), (256, 64));
    assert_eq!(
        full.minimum, p64.minimum,
        "the minimum is the 64-token batch's"
    );
    assert!(p64.scratch_bytes < full.scratch_bytes);
    assert!(matches!(
        m.plan(&at(Some(p64.minimum - 1), 256)),
        Err(ramforge_engine::EngineError::BudgetTooSmall { .. })
    ));
    let (lo, hi) = (p64.minimum, full.total_bytes() + (1 << 20));
    let mut seen = std::collections::BTreeSet::new();
    for k in 0..=40u64 {
        let ram = lo + (hi - lo) * k / 40;
        let p = m.plan(&at(Some(ram), 256)).unwrap();
        let base = m.plan(&at(Some(ram), 64)).unwrap();
        let b = p.request.batch;
        seen.insert(b);
        assert!([64, 128, 256].contains(&b), "ram {ram}: batch {b}");
        assert!(
            p.keeps_resident(&base),
            "ram {ram}: batch {b} {p:?} {base:?}"
        );
        assert_eq!(p.minimum, p64.minimum);
        if b < 256 {
            // Twice the batch would stream more, or not load.
            let longer = m.plan(&at(Some(ram), 2 * b)).unwrap_or(base.clone());
            assert!(
                longer.request.batch < 2 * b || !longer.keeps_resident(&base),
                "ram {ram}: {} tokens would keep the residency",
                2 * b
            );
        }
    }
    assert_eq!(m.plan(&at(Some(hi), 256)).unwrap().request.batch, 256);
    assert_eq!(m.plan(&at(Some(lo), 256)).unwrap().request.batch, 64);
    assert!(seen.len() >= 2, "budgets gave batches {seen:?}");
    // A batch asked for below 64 is kept.
    assert_eq!(m.plan(&at(Some(lo), 16)).unwrap().request.batch, 16);

    let mut e = Engine::new(m, &at(Some(lo), 256)).unwrap();
    assert_eq!(e.plan().request.batch, 64);
    let (tokens, _, _) = generate(&mut e, "The capital of France is", 4);
    assert_eq!(tokens.len(), 4);
    assert!(e.budget().peak() <= lo);
}
