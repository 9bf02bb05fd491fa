//! Reusing the context's keys and values for a prompt that starts with it: the second turn of a
//! conversation evaluates only its new tokens and generates what a fresh context would.

mod common;

use common::{model, options};
use ramforge_engine::{Engine, GenerationStats, SamplingParams, StopReason};
use std::sync::atomic::AtomicBool;

fn run(e: &mut Engine, prompt: &[u32], reuse: bool) -> GenerationStats {
    let (params, cancel) = (SamplingParams::greedy(12), AtomicBool::new(false));
    if reuse {
        e.generate_reusing(prompt, &params, &mut |_, _| {}, &cancel)
    } else {
        e.generate(prompt, &params, &mut |_, _| {}, &cancel)
    }
    .unwrap()
}

#[test]
fn a_second_turn_evaluates_only_its_new_tokens_with_the_same_result() {
    let mut e = Engine::load(model(), &options(None)).unwrap();
    let tok = e.model().tokenizer.clone();
    let first = tok.encode("The capital of France is", true, true);
    let one = run(&mut e, &first, true);
    assert_eq!(one.cached_tokens, 0, "nothing to reuse in a new engine");

    // The next turn: the first prompt, its reply, and a question.
    let mut second = first.clone();
    second.extend_from_slice(&one.tokens);
    second.extend(tok.encode(" And of Italy?", false, true));
    let held = e.n_past();
    // Stopped by the token limit, every generated token was evaluated.
    assert_eq!(one.stop_reason, StopReason::MaxTokens);
    assert_eq!(held, first.len() + one.tokens.len());
    let cached = run(&mut e, &second, true);
    assert_eq!(cached.cached_tokens, held);
    assert_eq!(
        cached.residency.tokens as usize,
        second.len() - held + cached.generated_tokens
    );

    let fresh = run(&mut e, &second, false);
    assert_eq!(fresh.cached_tokens, 0);
    assert_eq!(
        cached.tokens, fresh.tokens,
        "reused keys and values give the same reply"
    );

    // A prompt that diverges early keeps only the common prefix; an identical one still
    // evaluates its last token.
    let other = tok.encode("The capital of Spain is", true, true);
    let common = first.iter().zip(&other).take_while(|(a, b)| a == b).count();
    let diverged = run(&mut e, &other, true);
    assert!(diverged.cached_tokens <= common);
    let again = run(&mut e, &other, true);
    assert_eq!(again.cached_tokens, other.len() - 1);
    assert_eq!(again.tokens, diverged.tokens);
}
