//! Several sequences decoded together ([`Engine::decode_batch`]): prompts of different lengths,
//! admitted at different steps and stopping at different lengths, give exactly the tokens of
//! separate single runs, all-resident and under a budget that streams layers; a streamed
//! layer is read once per step, not once per sequence; the sequences' KV is charged to the
//! budget, which holds.

mod common;

use common::model;
use ramforge_engine::{
    Decoding, Engine, EngineOptions, Next, SamplingParams, Sequence, StopReason,
};
use std::sync::atomic::AtomicBool;

const PROMPTS: [&str; 4] = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea, there lived",
    "1, 2, 3,",
    "The three primary colours are red,",
];
/// Tokens each prompt generates at most.
const LIMITS: [usize; 4] = [14, 9, 16, 11];
/// The step at which each sequence joins the batch.
const JOINS: [usize; 4] = [0, 0, 2, 5];

fn options(ram: Option<u64>) -> EngineOptions {
    EngineOptions {
        ram,
        ctx: Some(64),
        threads: 2,
        sequences: 4,
        ..Default::default()
    }
}

/// One sequence of the batch: its context and its generation (or how it ended).
struct Running<'t> {
    seq: Sequence,
    decoding: Option<Decoding<'t>>,
    next: Option<u32>,
    reason: Option<StopReason>,
}

/// Greedy generation of every prompt, batched: sequence `i` is prefilled at step `JOINS[i]`,
/// then all running sequences decode one token per step. Returns each sequence's tokens and
/// the number of batched steps.
fn batched(e: &mut Engine, prompts: &[Vec<u32>]) -> (Vec<Vec<u32>>, usize) {
    let tok = e.model().tokenizer.clone();
    let cancel = AtomicBool::new(false);
    let mut running: Vec<Running> = prompts
        .iter()
        .map(|_| Running {
            seq: e.new_sequence(),
            decoding: None,
            next: None,
            reason: None,
        })
        .collect();
    let (mut step, mut steps) = (0, 0);
    let ctx = e.context_size();
    loop {
        for (i, r) in running.iter_mut().enumerate() {
            if JOINS[i] == step {
                assert_eq!(
                    e.prefill(&mut r.seq, &prompts[i], &cancel).unwrap(),
                    Some(0)
                );
                let mut d = Decoding::new(&tok, &SamplingParams::greedy(LIMITS[i]));
                let mut logits = e.logits().to_vec();
                match d.next(&mut logits, r.seq.tokens(), ctx, false, &mut |_, _| {}) {
                    Next::Eval(t) => r.next = Some(t),
                    Next::Stop(why) => r.reason = Some(why),
                }
                r.decoding = Some(d);
            }
        }
        let active: Vec<usize> = (0..running.len())
            .filter(|&i| running[i].next.is_some())
            .collect();
        if active.is_empty() && step > *JOINS.iter().max().unwrap() {
            break;
        }
        step += 1;
        if active.is_empty() {
            continue;
        }
        let tokens: Vec<u32> = active.iter().map(|&i| running[i].next.unwrap()).collect();
        let mut seqs: Vec<&mut Sequence> = running
            .iter_mut()
            .filter(|r| r.next.is_some())
            .map(|r| &mut r.seq)
            .collect();
        let logits = e.decode_batch(&mut seqs, &tokens).unwrap().to_vec();
        steps += 1;
        let v = e.n_vocab();
        for (row, &i) in active.iter().enumerate() {
            let r = &mut running[i];
            let d = r.decoding.as_mut().unwrap();
            let mut l = logits[row * v..(row + 1) * v].to_vec();
            r.next = match d.next(&mut l, r.seq.tokens(), ctx, false, &mut |_, _| {}) {
                Next::Eval(t) => Some(t),
                Next::Stop(why) => {
                    r.reason = Some(why);
                    None
                }
            };
        }
    }
    let out = running
        .into_iter()
        .map(|r| {
            let (tokens, _) = r
                .decoding
                .unwrap()
                .finish(r.reason.unwrap(), &mut |_, _| {});
            tokens
        })
        .collect();
    (out, steps)
}

/// Each prompt alone, with [`Engine::generate`]; the engine's own context is released after
/// (it is one of the sequences the plan books).
fn separately(e: &mut Engine, prompts: &[Vec<u32>]) -> Vec<Vec<u32>> {
    let tokens = prompts
        .iter()
        .zip(LIMITS)
        .map(|(p, n)| {
            let params = SamplingParams::greedy(n);
            let cancel = AtomicBool::new(false);
            e.generate(p, &params, &mut |_, _| {}, &cancel)
                .unwrap()
                .tokens
        })
        .collect();
    e.reset();
    tokens
}

fn prompts(e: &Engine) -> Vec<Vec<u32>> {
    let tok = &e.model().tokenizer;
    PROMPTS.iter().map(|p| tok.encode(p, true, true)).collect()
}

#[test]
fn batched_sequences_decode_exactly_as_each_alone_all_resident() {
    let mut e = Engine::load(model(), &options(None)).unwrap();
    assert_eq!(e.max_sequences(), 4);
    let prompts = prompts(&e);
    let want = separately(&mut e, &prompts);
    let (got, steps) = batched(&mut e, &prompts);
    assert_eq!(got, want);
    assert!(want.iter().all(|t| !t.is_empty()));
    assert!(
        steps < want.iter().map(Vec::len).sum::<usize>(),
        "the steps were batched"
    );
}

#[test]
fn batched_sequences_under_a_streaming_budget_read_each_layer_once_per_step() {
    let ram = 30 << 20;
    let mut e = Engine::load(model(), &options(Some(ram))).unwrap();
    let streamed = e.residency().streamed_layers;
    assert!(streamed > 0, "the budget streams layers");
    let prompts = prompts(&e);
    let want = separately(&mut e, &prompts);

    let before = *e.residency();
    let (got, steps) = batched(&mut e, &prompts);
    let traffic = e.residency().since(&before);
    assert_eq!(got, want, "batched under streaming = each alone");

    // Passes: one per batched step plus one per prompt; the prefetch thread may have read a
    // few layers ahead of the last pass.
    let passes = (steps + prompts.len()) as u64;
    let depth = e.plan().stream_buffers as u64;
    assert!(
        traffic.layers_loaded >= passes * streamed
            && traffic.layers_loaded <= (passes + 1) * streamed + depth,
        "{} layers read for {passes} passes of {streamed} streamed layers",
        traffic.layers_loaded
    );
    let decoded: usize = want.iter().map(|t| t.len().saturating_sub(1)).sum();
    assert!(
        steps < decoded,
        "{steps} steps for {decoded} decoded tokens"
    );

    // Every sequence's KV was charged, and the budget held.
    assert!(
        e.budget().peak() <= ram,
        "peak {} over {ram}",
        e.budget().peak()
    );
}

#[test]
fn the_plan_books_a_context_of_kv_for_every_sequence() {
    let m = ramforge_engine::Model::open(model()).unwrap();
    let one = m
        .plan(&EngineOptions {
            sequences: 1,
            ..options(None)
        })
        .unwrap();
    let four = m.plan(&options(None)).unwrap();
    assert_eq!(four.kv_bytes, 4 * one.kv_bytes);
    assert_eq!(four.logits_bytes, 4 * one.logits_bytes);
    assert_eq!(
        four.minimum - one.minimum,
        3 * (one.kv_bytes + one.logits_bytes)
    );

    // A sequence holding a whole context is charged what the plan booked for one.
    let mut e = Engine::load(model(), &options(Some(30 << 20))).unwrap();
    let kv = |e: &Engine| {
        let holders = e.budget().holders();
        holders
            .iter()
            .find(|(l, _)| l == "KV cache")
            .map_or(0, |h| h.1)
    };
    assert_eq!(
        kv(&e),
        0,
        "nothing is charged before a sequence holds tokens"
    );
    let mut seq = e.new_sequence();
    let prompt: Vec<u32> = (0..64).map(|i| 100 + i).collect();
    e.prefill(&mut seq, &prompt, &AtomicBool::new(false))
        .unwrap();
    assert_eq!(kv(&e), one.kv_bytes);
    seq.clear();
    assert_eq!(kv(&e), 0);
}

#[test]
fn more_sequences_than_the_plan_booked_is_an_error() {
    let mut e = Engine::load(model(), &options(None)).unwrap();
    let mut seqs: Vec<Sequence> = (0..5).map(|_| e.new_sequence()).collect();
    let mut refs: Vec<&mut Sequence> = seqs.iter_mut().collect();
    let err = e.decode_batch(&mut refs, &[1, 2, 3, 4, 5]).unwrap_err();
    assert!(err.to_string().contains("laid out for 4"), "{err}");
}
