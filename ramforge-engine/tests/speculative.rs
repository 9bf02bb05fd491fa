//! Speculative verification ([`Engine::eval_verify`], [`Engine::rollback`]): each row of a
//! verify pass equals, bit for bit, evaluating its token alone, and a rolled-back context
//! continues exactly as one that never held the rejected tokens.

mod common;

use common::model;
use ramforge_engine::{Engine, EngineOptions};

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
    tokens.iter().map(|&t| e.eval(&[t]).unwrap().to_vec()).collect()
}

fn check_rows(e: &mut Engine) {
    let prompt = e.model().tokenizer.encode(common::PROMPT, true, true);
    let tokens = e
        .model()
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
    let plan = Engine::load(model(), &options(None)).unwrap().plan().minimum;
    let mut e = Engine::load(model(), &options(Some(plan + file / 4))).unwrap();
    assert!(e.residency().streamed_layers > 0, "nothing streamed");
    check_rows(&mut e);
}
