//! Cancelling: a raised flag stops the prompt phase between batches and generation between
//! tokens; either way the stats so far come back and the engine stays usable.

mod common;

use common::model;
use ramforge_engine::{Engine, EngineOptions, SamplingParams, StopReason};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

#[test]
fn cancelling_during_the_prompt_stops_between_batches_and_the_engine_recovers() {
    let opts = EngineOptions {
        ctx: Some(256),
        threads: 2,
        batch: 16,
        ..Default::default()
    };
    let mut e = Engine::load(model(), &opts).unwrap();
    let prompt = e.model().tokenizer.encode(
        &"one two three four five six seven eight ".repeat(10),
        true,
        true,
    );
    assert!(prompt.len() > 3 * 16, "the prompt spans several batches");
    let before = e.budget().held();

    // The progress callback raises the flag once the first batch is through.
    let cancel = Arc::new(AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (flag, log) = (Arc::clone(&cancel), Arc::clone(&seen));
    e.set_prompt_progress(Some(Box::new(move |done, total| {
        log.lock().unwrap().push((done, total));
        if done >= 16 {
            flag.store(true, Ordering::SeqCst);
        }
    })));
    let mut shown = 0;
    let stats = e
        .generate(
            &prompt,
            &SamplingParams::greedy(8),
            &mut |_, _| shown += 1,
            &cancel,
        )
        .unwrap();
    assert_eq!(stats.stop_reason, StopReason::Cancelled);
    assert_eq!((stats.generated_tokens, shown), (0, 0));
    assert_eq!(
        e.n_past(),
        0,
        "a cancelled prompt leaves no partial context"
    );
    let reports = seen.lock().unwrap().clone();
    assert_eq!(
        reports.last(),
        Some(&(16, prompt.len())),
        "stopped after the first batch"
    );
    assert!(
        reports.windows(2).all(|w| w[0].0 <= w[1].0),
        "progress only grows"
    );
    assert_eq!(
        e.budget().held(),
        before,
        "the KV cache charge went with the context"
    );

    // The same engine then generates normally, and matches a fresh engine.
    e.set_prompt_progress(None);
    cancel.store(false, Ordering::SeqCst);
    let again = e
        .generate(&prompt, &SamplingParams::greedy(8), &mut |_, _| {}, &cancel)
        .unwrap();
    let mut fresh = Engine::load(model(), &opts).unwrap();
    let reference = fresh
        .generate(&prompt, &SamplingParams::greedy(8), &mut |_, _| {}, &cancel)
        .unwrap();
    assert_eq!(again.tokens, reference.tokens);
    assert_eq!(again.generated_tokens, 8);
}
