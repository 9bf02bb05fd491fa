//! deepseek2's latent cache as a sequence's state (and glm-dsa's, the indexer's keys in the
//! same rows): sequences decoded together ([`Engine::decode_batch`]) get exactly the logits
//! each gets alone, and a prompt that extends what a sequence holds reuses its cached latents
//! and gets the logits of a fresh prefill.

mod common;

use ramforge_engine::{Engine, EngineOptions};
use std::sync::atomic::AtomicBool;

#[test]
fn deepseek2_batched_decoding_and_prompt_reuse_equal_single_runs() {
    batched_decoding_and_prompt_reuse_equal_single_runs("deepseek2", &[]);
}

/// glm-dsa with a top-k of 4: the prompts' later positions and every decoded step attend
/// sparsely, each row of a batch over its own sequence's positions.
#[test]
fn glm_dsa_batched_decoding_and_prompt_reuse_equal_single_runs() {
    batched_decoding_and_prompt_reuse_equal_single_runs("glm-dsa", &["--indexer-top-k", "4"]);
}

/// The same with GLM-5.2's shared indexer layers: layers 1 and 2 reuse each row's choice of
/// layer 0, kept per row of the batch.
#[test]
fn glm_dsa_shared_layers_batched_decoding_and_prompt_reuse_equal_single_runs() {
    batched_decoding_and_prompt_reuse_equal_single_runs(
        "glm-dsa",
        &["--indexer-top-k", "4", "--indexer-types", "1,0,0"],
    );
}

fn batched_decoding_and_prompt_reuse_equal_single_runs(arch: &str, extra: &[&str]) {
    let dir = std::env::temp_dir().join(format!(
        "ramforge-mla-seq-{arch}-{}-{}",
        extra.len(),
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{arch}.gguf"));
    let mut args = [
        &["--arch", arch][..],
        &common::MOE_SMALL,
        &common::MLA_SMALL,
    ]
    .concat();
    args.extend(["--type", "Q8_0"]);
    args.extend_from_slice(extra);
    common::synth(&file, &args);
    let opts = EngineOptions {
        ctx: Some(64),
        threads: 2,
        sequences: 4,
        ..Default::default()
    };
    let mut e = Engine::load(&file, &opts).unwrap();
    let tok = e.model().tokenizer.clone();
    let prompts: Vec<Vec<u32>> = ["The capital of France is", "1, 2, 3,"]
        .iter()
        .map(|s| tok.encode(s, true, true))
        .collect();
    // Longer than glm-dsa's top-k: its prompts end, and decode, on the sparse path.
    assert!(prompts.iter().all(|p| p.len() > 4), "{prompts:?}");
    let cancel = AtomicBool::new(false);
    let v = e.n_vocab();

    // Each alone: its prompt, then one decoding step.
    let mut alone = Vec::new();
    for (i, prompt) in prompts.iter().enumerate() {
        let mut s = e.new_sequence();
        e.prefill(&mut s, prompt, &cancel).unwrap();
        let next = [17 + i as u32];
        alone.push(e.decode_batch(&mut [&mut s], &next).unwrap().to_vec());
    }
    // Together: the same rows, bit for bit.
    let (mut a, mut b) = (e.new_sequence(), e.new_sequence());
    e.prefill(&mut a, &prompts[0], &cancel).unwrap();
    e.prefill(&mut b, &prompts[1], &cancel).unwrap();
    let both = e
        .decode_batch(&mut [&mut a, &mut b], &[17, 18])
        .unwrap()
        .to_vec();
    assert_eq!(&both[..v], &alone[0][..]);
    assert_eq!(&both[v..2 * v], &alone[1][..]);

    // `a` holds prompt 0 and token 17: a longer prompt reuses them.
    let mut longer = prompts[0].clone();
    longer.extend([17, 30, 31]);
    assert_eq!(
        e.prefill(&mut a, &longer, &cancel).unwrap(),
        Some(prompts[0].len() + 1)
    );
    let reused = e.logits().to_vec();
    let mut fresh = e.new_sequence();
    assert_eq!(e.prefill(&mut fresh, &longer, &cancel).unwrap(), Some(0));
    let worst = reused
        .iter()
        .zip(e.logits())
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-3, "reused vs fresh prefill: {worst}");
    std::fs::remove_dir_all(&dir).ok();
}
