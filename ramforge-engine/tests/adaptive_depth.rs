//! The prefetch depth at run time, on the real model under a budget that streams: it is what
//! the residency policy says for the measured read and compute times, within the plan's ring;
//! a shallower ring hands its buffers back to the budget and a deeper one takes them again
//! only if the budget has room; and no depth changes the greedy tokens.

mod common;

use common::{greedy, model, options};
use ramforge_engine::residency::prefetch_depth;
use ramforge_engine::stream::WINDOW_PASSES;
use ramforge_engine::Engine;

/// A budget under which the model streams through a ring of more than one buffer.
const RAM: u64 = 32 << 20;
const TOKENS: usize = 16;

/// The streaming engine, checked to have a ring deep enough to adapt.
fn streaming_engine() -> Engine {
    let e = Engine::load(model(), &options(Some(RAM))).unwrap();
    let plan = e.plan();
    assert!(
        plan.stream_buffers >= 2 && plan.streamed_layers() >= plan.stream_buffers,
        "the test budget must give a ring of 2 or more buffers: {plan:?}"
    );
    e
}

/// Budget bytes held by the prefetch ring's buffers.
fn ring_held(e: &Engine) -> u64 {
    e.budget()
        .holders()
        .iter()
        .filter(|(what, _)| what.starts_with("layer streaming buffer"))
        .map(|(_, b)| b)
        .sum()
}

#[test]
fn the_depth_in_use_is_what_the_policy_says_for_the_measured_times() {
    let resident = greedy(&mut Engine::load(model(), &options(None)).unwrap(), TOKENS);
    let mut e = streaming_engine();
    let plan = e.plan().clone();
    assert_eq!(e.residency().prefetch_depth, plan.stream_buffers as u64);
    assert!(e.prefetch_decision().is_none(), "nothing measured yet");

    let s = greedy(&mut e, TOKENS);
    assert_eq!(
        s.tokens, resident.tokens,
        "the adapted ring gives the same tokens"
    );
    // Prompt + TOKENS passes cover at least one window.
    assert!(TOKENS as u64 >= WINDOW_PASSES);
    let decision = e
        .prefetch_decision()
        .expect("a window of passes was measured");
    assert!(
        decision.timing.read_secs_per_byte > 0.0 && decision.timing.compute_secs_per_layer > 0.0
    );
    let want = prefetch_depth(
        &plan.pinned,
        &plan.layer_bytes,
        plan.stream_buffers,
        &decision.timing,
    );
    assert_eq!(decision.depth, want);
    assert!(want >= 1 && want <= plan.stream_buffers, "{want}");
    // In use: a shallower ring has dropped its surplus within the pass that followed.
    let r = e.residency();
    assert_eq!(r.prefetch_depth, want as u64, "{decision:?}");
    assert_eq!(ring_held(&e), want as u64 * plan.stream_buffer_charge());
    assert_eq!(r.stream_buffers, plan.stream_buffers as u64);
    assert!(e.budget().peak() <= RAM);

    // Decoded tokens, one pass each, keep adapting and keep every streamed layer read once.
    let before = *e.residency();
    let mut next = *s.tokens.last().unwrap();
    for _ in 0..2 * WINDOW_PASSES {
        let logits = e.eval(&[next]).unwrap();
        next = ramforge_engine::sampling::argmax(logits) as u32;
    }
    let d = e.residency().since(&before);
    assert_eq!(
        d.layers_loaded,
        2 * WINDOW_PASSES * plan.streamed_layers() as u64
    );
    assert_eq!(d.prefetch_hits + d.prefetch_late, d.layers_loaded);
    let decision = e.prefetch_decision().unwrap();
    assert_eq!(
        decision.depth,
        prefetch_depth(
            &plan.pinned,
            &plan.layer_bytes,
            plan.stream_buffers,
            &decision.timing
        )
    );
    assert_eq!(e.residency().prefetch_depth, decision.depth as u64);
}

#[test]
fn a_shallower_ring_returns_its_charge_and_a_deeper_one_takes_it_back_if_there_is_room() {
    let mut e = streaming_engine();
    let plan = e.plan().clone();
    let ring = plan.stream_buffers;
    let charge = plan.stream_buffer_charge();

    assert_eq!(e.set_prefetch_depth(Some(ring)), ring);
    let full = greedy(&mut e, 8);
    let held_full = e.budget().held();
    assert_eq!(ring_held(&e), ring as u64 * charge);

    // One buffer: the others go back to the budget during the next pass.
    assert_eq!(e.set_prefetch_depth(Some(1)), 1);
    let one = greedy(&mut e, 8);
    assert_eq!(one.tokens, full.tokens);
    assert_eq!(e.residency().prefetch_depth, 1);
    assert_eq!(ring_held(&e), charge);
    assert_eq!(e.budget().held(), held_full - (ring as u64 - 1) * charge);
    assert!(
        one.residency.prefetch_late >= full.residency.prefetch_late,
        "one buffer never reads ahead more than {ring}"
    );

    // No room in the budget: the ring stays at one buffer, and still works.
    let hog = e
        .budget()
        .charge("test: the rest of the budget", e.budget().available())
        .unwrap();
    assert_eq!(e.set_prefetch_depth(Some(ring)), 1);
    assert_eq!(greedy(&mut e, 8).tokens, full.tokens);
    drop(hog);

    // Room again: the buffers are charged back at once.
    assert_eq!(
        e.set_prefetch_depth(Some(ring + 5)),
        ring,
        "never past the ring"
    );
    assert_eq!(ring_held(&e), ring as u64 * charge);
    let again = greedy(&mut e, 8);
    assert_eq!(again.tokens, full.tokens);
    assert_eq!(e.budget().held(), held_full);
    assert!(e.budget().peak() <= RAM);

    // Adapting again starts from a fresh window.
    e.set_prefetch_depth(None);
    assert_eq!(greedy(&mut e, TOKENS).tokens.len(), TOKENS);
    let depth = e.residency().prefetch_depth as usize;
    assert!(depth >= 1 && depth <= ring);
}
