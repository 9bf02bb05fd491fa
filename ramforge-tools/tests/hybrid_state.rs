//! A sequence's fixed-size state as its context: a hybrid model's gated delta-net layers
//! (qwen35moe synth file), and DeepSeek V4's window rings and compressors (deepseek4); and a
//! sliding-window model's ring (gemma3), which a context cut back past it can no longer use. It
//! cannot be cut back, so a prompt that shares only part of the held context starts over
//! (cached 0) and gives the logits of a fresh context, while a prompt that extends the whole
//! held context, or the last prompt but not what was generated after it (the state's
//! checkpoint), evaluates only its new tokens; batched decoding gives every sequence the
//! logits of its single run; the state and its checkpoint are charged to the budget with the
//! sequence.

mod common;

use ramforge_engine::{Engine, EngineOptions, Model};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

fn synth(name: &str, args: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ramforge-hybrid-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join(name);
    common::synth(&out, &[args, &["--type", "F32"]].concat());
    out
}

fn hybrid_model() -> PathBuf {
    synth("qwen35moe.gguf", &common::qwen35moe_small())
}

fn engine(path: &PathBuf) -> Engine {
    let o = EngineOptions {
        ctx: Some(128),
        threads: 1,
        sequences: 2,
        ..EngineOptions::default()
    };
    Engine::new(Model::open(path).unwrap(), &o).unwrap()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn a_recurrent_context_is_reused_only_whole_and_batched_rows_equal_single_runs() {
    reused_only_whole_and_batched_rows_equal_single_runs(&hybrid_model());
}

/// The same of DeepSeek V4's state: the prompts (9 to 20 tokens) wrap its 8-position ring,
/// and its ratio-4 layer's indexer chooses among up to 5 compressed rows.
#[test]
fn a_deepseek4_context_is_reused_only_whole_and_batched_rows_equal_single_runs() {
    let path = synth("deepseek4.gguf", &common::deepseek4_small());
    reused_only_whole_and_batched_rows_equal_single_runs(&path);
}

fn reused_only_whole_and_batched_rows_equal_single_runs(path: &PathBuf) {
    let mut e = engine(path);
    let tok = e.model().tokenizer.clone();
    let a = tok.encode("The quick brown fox jumps over the lazy dog", true, true);
    let mut b = a[..4].to_vec();
    b.extend(tok.encode(" and a slow green turtle", false, true));
    let mut longer = a.clone();
    longer.extend(tok.encode(" again and again", false, true));
    let mut turn = longer.clone();
    turn.extend(tok.encode(" until the end", false, true));
    let cancel = AtomicBool::new(false);

    // Fresh logits of each prompt.
    let fresh = |e: &mut Engine, p: &[u32]| {
        e.reset();
        e.eval(p).unwrap().to_vec()
    };
    let fresh_b = fresh(&mut e, &b);
    let fresh_longer = fresh(&mut e, &longer);
    let fresh_a = fresh(&mut e, &a);
    let fresh_turn = fresh(&mut e, &turn);
    e.reset();

    let mut seq = e.new_sequence();
    assert_eq!(e.prefill(&mut seq, &a, &cancel).unwrap(), Some(0));
    assert_eq!(max_diff(e.logits(), &fresh_a), 0.0);
    // Shares 4 tokens with the held 9: the state holds all 9, so nothing is kept.
    assert_eq!(e.prefill(&mut seq, &b, &cancel).unwrap(), Some(0));
    assert_eq!(seq.tokens(), &b[..]);
    assert_eq!(max_diff(e.logits(), &fresh_b), 0.0, "diverged prompt");
    // The same prompt again: its last token cannot be evaluated alone on a state that has
    // seen it, so the whole prompt runs again.
    assert_eq!(e.prefill(&mut seq, &b, &cancel).unwrap(), Some(0));
    assert_eq!(max_diff(e.logits(), &fresh_b), 0.0, "repeated prompt");
    // A next turn extends the held context: only its new tokens run.
    assert_eq!(e.prefill(&mut seq, &a, &cancel).unwrap(), Some(0));
    assert_eq!(
        e.prefill(&mut seq, &longer, &cancel).unwrap(),
        Some(a.len())
    );
    // Evaluated in two batches instead of one: equal up to f32 rounding.
    let d = max_diff(e.logits(), &fresh_longer);
    assert!(d < 1e-3, "extended prompt: max diff {d}");
    // A token generated after that prompt, then a next turn that holds the prompt but not
    // that token: the state goes back to its checkpoint at the prompt's end.
    let generated = a[1];
    assert_ne!(generated, turn[longer.len()]);
    e.decode_batch(&mut [&mut seq], &[generated]).unwrap();
    assert_eq!(seq.len(), longer.len() + 1);
    assert_eq!(
        e.prefill(&mut seq, &turn, &cancel).unwrap(),
        Some(longer.len())
    );
    assert_eq!(seq.tokens(), &turn[..]);
    let d = max_diff(e.logits(), &fresh_turn);
    assert!(d < 1e-3, "next turn from the checkpoint: max diff {d}");
    // Cut anywhere but at the checkpoint, it starts over.
    let mut other = turn[..longer.len() - 1].to_vec();
    other.extend(tok.encode(" or not", false, true));
    assert_eq!(e.prefill(&mut seq, &other, &cancel).unwrap(), Some(0));

    // The engine's own context: truncating a recurrent context starts it over.
    e.reset();
    e.eval(&a).unwrap();
    e.truncate_context(3);
    assert_eq!(e.n_past(), 0);

    // Two sequences decoded together: each row is its single run's logits, bit for bit.
    let mut s1 = e.new_sequence();
    let mut s2 = e.new_sequence();
    e.prefill(&mut s1, &a, &cancel).unwrap();
    e.prefill(&mut s2, &b, &cancel).unwrap();
    let (t1, t2) = (a[1], b[2]);
    let v = e.n_vocab();
    let rows = e
        .decode_batch(&mut [&mut s1, &mut s2], &[t1, t2])
        .unwrap()
        .to_vec();
    for (prompt, t, row) in [(&a, t1, &rows[..v]), (&b, t2, &rows[v..2 * v])] {
        let mut single = e.new_sequence();
        e.prefill(&mut single, prompt, &cancel).unwrap();
        let alone = e.decode_batch(&mut [&mut single], &[t]).unwrap().to_vec();
        assert_eq!(max_diff(row, &alone), 0.0, "batched row");
    }
}

#[test]
fn the_plan_charges_each_sequence_its_recurrent_state() {
    let path = hybrid_model();
    let m = Model::open(&path).unwrap();
    let d = m.config.delta_net.clone().unwrap();
    assert_eq!(
        (d.n_k_heads, d.n_v_heads, d.head_dim, d.d_conv),
        (2, 4, 32, 4)
    );
    assert_eq!(d.recurrent, vec![true, false, true]);
    // Two delta-net layers, each (d_conv - 1) x channels + heads x head_dim^2 floats.
    let per_seq = 2 * 4 * ((4 - 1) * (2 * 64 + 128) + 4 * 32 * 32) as u64;
    let plan = |sequences| {
        m.plan(&EngineOptions {
            ctx: Some(128),
            sequences,
            ..EngineOptions::default()
        })
        .unwrap()
    };
    let (one, three) = (plan(1), plan(3));
    let kv = |p: &ramforge_engine::MemoryPlan| p.kv_bytes;
    // The attention layer's keys and values (f16) plus the one-slot stand-ins of the two
    // delta-net layers, and the state with its checkpoint.
    let kv_per_seq = 2 * 2 * 64 * (128 + 2) + 2 * per_seq;
    assert_eq!(kv(&three) - kv(&one), 2 * kv_per_seq);
}

/// DeepSeek V4's state per sequence, charged with it: each block's window ring (8 rows of the
/// 64-wide key), its compressors' pending tokens (ratio 4: 8 tokens of 128 entries and
/// scores, and the indexer's 8 of 128; ratio 128: 128 of 64), twice (the state and its
/// checkpoint), in f32; and the compressed rows a 128-position context makes (32 of the
/// ratio-4 block, each with its 64-wide indexer key, and 1 of the ratio-128 block), in chunks
/// of 64 rows in f16, beside the one-slot stand-ins of the common cache.
#[test]
fn the_plan_charges_each_deepseek4_sequence_its_rings_compressors_and_rows() {
    let path = synth("deepseek4-plan.gguf", &common::deepseek4_small());
    let m = Model::open(&path).unwrap();
    let plan = |sequences| {
        m.plan(&EngineOptions {
            ctx: Some(128),
            sequences,
            ..EngineOptions::default()
        })
        .unwrap()
        .kv_bytes
    };
    let fixed = 8 * 64 * 3 + (8 * 2 * 128 + 8 * 2 * 2 * 64) + 128 * 2 * 64;
    let rows = 64 * (64 + 64) + 64 * 64;
    let stand_ins = 3 * 2 * 64;
    let per_seq = 2 * 4 * fixed + 2 * rows + 2 * stand_ins;
    assert_eq!(plan(3) - plan(1), 2 * per_seq as u64);
}

/// A sliding-window model's ring (gemma3, window 8): once a context has wrapped it, cutting
/// back to a shorter prefix would need window positions the later tokens overwrote, so such a
/// prompt starts over and gets a fresh context's logits; the same prompt again (cut back by
/// its last token only) and a prompt that extends the held context keep what they can.
#[test]
fn a_wrapped_window_ring_is_cut_back_only_where_its_slots_still_hold() {
    let path = synth(
        "gemma3.gguf",
        &[
            "--arch",
            "gemma3",
            "--layers",
            "4",
            "--embd",
            "128",
            "--ffn",
            "256",
            "--heads",
            "4",
            "--kv-heads",
            "2",
            "--sliding-window",
            "8",
        ],
    );
    let mut e = engine(&path);
    let tok = e.model().tokenizer.clone();
    let a = tok.encode(
        "The quick brown fox jumps over the lazy dog and keeps running through the forest",
        true,
        true,
    );
    assert!(a.len() > 12, "{}", a.len());
    let mut b = a[..a.len() - 4].to_vec();
    b.extend(tok.encode(" into the night", false, true));
    let mut longer = a.clone();
    longer.extend(tok.encode(" again", false, true));
    let cancel = AtomicBool::new(false);
    let fresh = |e: &mut Engine, p: &[u32]| {
        e.reset();
        e.eval(p).unwrap().to_vec()
    };
    let (fresh_a, fresh_b, fresh_longer) =
        (fresh(&mut e, &a), fresh(&mut e, &b), fresh(&mut e, &longer));
    e.reset();
    let mut seq = e.new_sequence();
    assert_eq!(e.prefill(&mut seq, &a, &cancel).unwrap(), Some(0));
    // Shares all but the last 4 tokens: their window is gone from the ring.
    assert_eq!(e.prefill(&mut seq, &b, &cancel).unwrap(), Some(0));
    assert_eq!(max_diff(e.logits(), &fresh_b), 0.0, "diverged prompt");
    assert_eq!(e.prefill(&mut seq, &a, &cancel).unwrap(), Some(0));
    // The same prompt: only its last token runs again.
    assert_eq!(e.prefill(&mut seq, &a, &cancel).unwrap(), Some(a.len() - 1));
    let d = max_diff(e.logits(), &fresh_a);
    assert!(d < 1e-3, "repeated prompt: max diff {d}");
    assert_eq!(
        e.prefill(&mut seq, &longer, &cancel).unwrap(),
        Some(a.len())
    );
    let d = max_diff(e.logits(), &fresh_longer);
    assert!(d < 1e-3, "extended prompt: max diff {d}");
    // The engine's own context: cut back past its wrapped window, it starts over.
    e.reset();
    e.eval(&a).unwrap();
    e.truncate_context(a.len() - 4);
    assert_eq!(e.n_past(), 0);
}
