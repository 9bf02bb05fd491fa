//! Speculative verification ([`Engine::eval_verify`], [`Engine::rollback`]): each row of a
//! verify pass equals, bit for bit, evaluating its token alone, and a rolled-back context
//! continues exactly as one that never held the rejected tokens.

mod common;

use common::model;
use ramforge_engine::{
    Drafter, Engine, EngineOptions, GenerationStats, SamplingParams, SpeculationStats,
};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

fn options(ram: Option<u64>) -> EngineOptions {
    EngineOptions {
        ram,
        ctx: Some(64),
        threads: 2,
        draft: 7,
        ..Default::default()
    }
}

/// The logits after each of `tokens`, evaluated one at a time after `prompt`.
fn one_by_one(e: &mut Engine, prompt: &[u32], tokens: &[u32]) -> Vec<Vec<f32>> {
    e.reset();
    e.eval(prompt).unwrap();
    tokens
        .iter()
        .map(|&t| e.eval(&[t]).unwrap().to_vec())
        .collect()
}

fn check_rows(e: &mut Engine) {
    let prompt = e.model().tokenizer.encode(common::PROMPT, true, true);
    let tokens =
        e.model()
            .tokenizer
            .encode(" Paris. The capital of Germany is Berlin", false, false);
    assert!(tokens.len() >= 6);
    let tokens = &tokens[..6];
    let alone = one_by_one(e, &prompt, tokens);
    let v = e.n_vocab();
    e.reset();
    e.eval(&prompt).unwrap();
    let rows = e.eval_verify(tokens).unwrap().to_vec();
    for (i, want) in alone.iter().enumerate() {
        assert!(
            rows[i * v..(i + 1) * v] == want[..],
            "row {i} of the verify pass differs from evaluating it alone"
        );
    }
    // Keep three of six, then go on: the same as never having held the other three.
    let n = prompt.len() + 3;
    e.rollback(n).unwrap();
    assert_eq!(e.n_past(), n);
    let next = e.eval_verify(&tokens[3..5]).unwrap().to_vec();
    assert!(next[..v] == alone[3][..] && next[v..] == alone[4][..]);
    e.rollback(n + 1).unwrap();
    assert!(e.eval(&[tokens[4]]).unwrap() == &alone[4][..]);
}

#[test]
fn verify_rows_equal_single_evaluation_all_resident() {
    let mut e = Engine::load(model(), &options(None)).unwrap();
    check_rows(&mut e);
}

#[test]
fn verify_rows_equal_single_evaluation_streamed() {
    let file = std::fs::metadata(model()).unwrap().len();
    let plan = Engine::load(model(), &options(None))
        .unwrap()
        .plan()
        .minimum;
    let mut e = Engine::load(model(), &options(Some(plan + file / 4))).unwrap();
    assert!(e.residency().streamed_layers > 0, "nothing streamed");
    check_rows(&mut e);
}

/// A prompt whose continuation repeats it, so prompt lookup's drafts get accepted.
const REPEAT: &str = "Copy the list exactly.\nList: apples, pears, plums, cherries, grapes, lemons, limes, figs.\nCopy: apples, pears,";

fn generate(
    e: &mut Engine,
    prompt: &[u32],
    params: &SamplingParams,
    drafter: Option<Drafter>,
) -> GenerationStats {
    e.set_drafter(drafter);
    // Reusing the prompt's keys and values from the previous run: many runs stay cheap.
    let stats = e
        .generate_reusing(prompt, params, &mut |_, _| {}, &AtomicBool::new(false))
        .unwrap();
    e.set_drafter(None);
    stats
}

/// Greedy tokens with prompt lookup equal plain decoding, and drafts were accepted.
fn lookup_is_identical(e: &mut Engine) {
    let prompt = e.model().tokenizer.encode(REPEAT, true, true);
    let params = SamplingParams::greedy(24);
    e.reset();
    let plain = generate(e, &prompt, &params, None);
    e.reset();
    let spec = generate(e, &prompt, &params, Some(Drafter::Lookup));
    assert_eq!(spec.tokens, plain.tokens);
    assert_eq!(spec.text, plain.text);
    let s = spec.speculation.unwrap();
    assert!(s.accepted > 0, "no draft accepted: {s:?}");
    assert!(s.passes < plain.generated_tokens as u64, "{s:?}");
}

#[test]
fn lookup_greedy_equals_plain_all_resident() {
    let mut e = Engine::load(model(), &options(None)).unwrap();
    lookup_is_identical(&mut e);
}

#[test]
fn lookup_greedy_equals_plain_streamed() {
    let file = std::fs::metadata(model()).unwrap().len();
    let plan = Engine::load(model(), &options(None))
        .unwrap()
        .plan()
        .minimum;
    let mut e = Engine::load(model(), &options(Some(plan + file / 4))).unwrap();
    assert!(e.residency().streamed_layers > 0, "nothing streamed");
    lookup_is_identical(&mut e);
}

/// Sampled output with drafts follows the target's distribution: the first two tokens of many
/// seeded runs at temperature 1, with and without lookup, agree by a two-sample chi-square
/// test (rare outcomes pooled; the seeds are fixed, so it never flakes), and drafts were both
/// accepted and rejected along the way.
#[test]
fn lookup_sampling_keeps_the_distribution() {
    let mut e = Engine::load(model(), &options(None)).unwrap();
    let prompt = e.model().tokenizer.encode(REPEAT, true, true);
    let runs = 300;
    let mut counts: HashMap<Vec<u32>, [usize; 2]> = HashMap::new();
    let mut total = SpeculationStats::default();
    for seed in 0..runs {
        let params = SamplingParams {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed,
            max_tokens: 2,
            ..SamplingParams::default()
        };
        for (which, drafter) in [(0, None), (1, Some(Drafter::Lookup))] {
            let s = generate(&mut e, &prompt, &params, drafter);
            if let Some(sp) = s.speculation {
                total.drafted += sp.drafted;
                total.accepted += sp.accepted;
            }
            counts.entry(s.tokens).or_default()[which] += 1;
        }
    }
    assert!(
        total.accepted > 0 && total.accepted < total.drafted,
        "{total:?}"
    );
    let (mut chi2, mut cells, mut rare) = (0.0, 0usize, [0usize; 2]);
    for c in counts.values() {
        if c[0] + c[1] < 10 {
            rare[0] += c[0];
            rare[1] += c[1];
            continue;
        }
        chi2 += (c[0] as f64 - c[1] as f64).powi(2) / (c[0] + c[1]) as f64;
        cells += 1;
    }
    if rare[0] + rare[1] > 0 {
        chi2 += (rare[0] as f64 - rare[1] as f64).powi(2) / (rare[0] + rare[1]) as f64;
        cells += 1;
    }
    let df = cells.saturating_sub(1).max(1) as f64;
    // About the 1e-4 tail of chi-square with df degrees of freedom.
    let bound = df + 5.0 * (2.0 * df).sqrt() + 8.0;
    assert!(
        chi2 < bound,
        "chi2 {chi2} over {cells} cells (bound {bound}): {counts:?}"
    );
}
