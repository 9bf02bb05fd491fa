#![no_main]
//! Model loading fuzzing: a tiny llama, qwen2 or glm4moe file (two layers, the first dense, the
//! second routed experts beside a shared expert) written by `GgufWriter`, with arbitrary values
//! for its `<arch>.*` hyperparameters (the router's, YaRN's and the window pattern's among them)
//! and arbitrary tensor shapes. `Model::open` must
//! return an error (one line) or a model that loads under a 64 MiB budget and evaluates a
//! token; never a panic or an oversize allocation (the script runs it with -rss_limit_mb).

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use ramforge_engine::{Engine, EngineOptions, Model};
use ramforge_gguf::{GgmlType, GgufWriter, Metadata, Value, ValueType};

/// The hyperparameter keys (after `<arch>.`) the input may set.
const KEYS: [&str; 34] = [
    "block_count",
    "embedding_length",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "context_length",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "rope.dimension_count",
    "rope.freq_base",
    "rope.scaling.type",
    "rope.scaling.factor",
    "expert_count",
    "expert_used_count",
    "expert_feed_forward_length",
    "expert_shared_count",
    "expert_shared_feed_forward_length",
    "expert_gating_func",
    "expert_weights_norm",
    "expert_weights_scale",
    "expert_group_count",
    "expert_group_used_count",
    "leading_dense_block_count",
    "nextn_predict_layers",
    "rope.scaling.original_context_length",
    "rope.scaling.attn_factor",
    "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow",
    "attention.sliding_window",
    "attention.sliding_window_pattern",
    "rope.freq_base_swa",
    "rope.scaling.yarn_log_multiplier",
    "attention.key_length_mla",
];

/// The tiny dense model's tensors and shapes: width 8, 2 heads of 4, 1 KV head, FFN 16, 8
/// tokens.
const TENSORS: [(&str, &[u64]); 15] = [
    ("token_embd.weight", &[8, 8]),
    ("output_norm.weight", &[8]),
    ("output.weight", &[8, 8]),
    ("blk.0.attn_norm.weight", &[8]),
    ("blk.0.attn_q.weight", &[8, 8]),
    ("blk.0.attn_k.weight", &[8, 4]),
    ("blk.0.attn_v.weight", &[8, 4]),
    ("blk.0.attn_q.bias", &[8]),
    ("blk.0.attn_k.bias", &[4]),
    ("blk.0.attn_v.bias", &[4]),
    ("blk.0.attn_output.weight", &[8, 8]),
    ("blk.0.ffn_norm.weight", &[8]),
    ("blk.0.ffn_gate.weight", &[8, 16]),
    ("blk.0.ffn_up.weight", &[8, 16]),
    ("blk.0.ffn_down.weight", &[16, 8]),
];

/// The glm4moe model's tensors: layer 0 dense, layer 1 four experts of width 16 (two used)
/// with a selection bias and one shared expert.
const MOE_TENSORS: [(&str, &[u64]); 32] = [
    ("token_embd.weight", &[8, 8]),
    ("output_norm.weight", &[8]),
    ("output.weight", &[8, 8]),
    ("blk.0.attn_norm.weight", &[8]),
    ("blk.0.attn_q.weight", &[8, 8]),
    ("blk.0.attn_k.weight", &[8, 4]),
    ("blk.0.attn_v.weight", &[8, 4]),
    ("blk.0.attn_q.bias", &[8]),
    ("blk.0.attn_k.bias", &[4]),
    ("blk.0.attn_v.bias", &[4]),
    ("blk.0.attn_output.weight", &[8, 8]),
    ("blk.0.post_attention_norm.weight", &[8]),
    ("blk.0.ffn_gate.weight", &[8, 16]),
    ("blk.0.ffn_up.weight", &[8, 16]),
    ("blk.0.ffn_down.weight", &[16, 8]),
    ("blk.1.attn_norm.weight", &[8]),
    ("blk.1.attn_q.weight", &[8, 8]),
    ("blk.1.attn_k.weight", &[8, 4]),
    ("blk.1.attn_v.weight", &[8, 4]),
    ("blk.1.attn_q.bias", &[8]),
    ("blk.1.attn_k.bias", &[4]),
    ("blk.1.attn_v.bias", &[4]),
    ("blk.1.attn_output.weight", &[8, 8]),
    ("blk.1.post_attention_norm.weight", &[8]),
    ("blk.1.ffn_gate_inp.weight", &[8, 4]),
    ("blk.1.exp_probs_b.bias", &[4]),
    ("blk.1.ffn_gate_exps.weight", &[8, 16, 4]),
    ("blk.1.ffn_up_exps.weight", &[8, 16, 4]),
    ("blk.1.ffn_down_exps.weight", &[16, 8, 4]),
    ("blk.1.ffn_gate_shexp.weight", &[8, 16]),
    ("blk.1.ffn_up_shexp.weight", &[8, 16]),
    ("blk.1.ffn_down_shexp.weight", &[16, 8]),
];

#[derive(Arbitrary, Debug)]
enum Num {
    U32(u32),
    U64(u64),
    I32(i32),
    F32(f32),
    Small(u8),
    Str(String),
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// 0: llama, 1: qwen2, 2: glm4moe (taken modulo 3).
    arch: u8,
    /// (index into KEYS, value) overrides.
    values: Vec<(u8, Num)>,
    /// (index into TENSORS, new shape) overrides; dims are small so the data stays small.
    shapes: Vec<(u8, Vec<u8>)>,
    /// Indexes of tensors left out.
    dropped: Vec<u8>,
    /// Fill byte of the weights (f32 bit patterns, so NaNs too).
    fill: u8,
}

fn value(n: &Num) -> Value {
    match n {
        Num::U32(v) => Value::U32(*v),
        Num::U64(v) => Value::U64(*v),
        Num::I32(v) => Value::I32(*v),
        Num::F32(v) => Value::F32(*v),
        Num::Small(v) => Value::U32(u32::from(*v)),
        Num::Str(s) => Value::String(s.clone()),
    }
}

fn metadata(arch: &str, moe: bool, input: &Input) -> Metadata {
    let mut md = Metadata::new();
    let mut set = |k: String, v: Value| {
        md.remove(&k);
        md.insert(k, v);
    };
    set("general.architecture".into(), Value::String(arch.into()));
    let base = [
        ("block_count", Value::U32(1)),
        ("embedding_length", Value::U32(8)),
        ("feed_forward_length", Value::U32(16)),
        ("attention.head_count", Value::U32(2)),
        ("attention.head_count_kv", Value::U32(1)),
        ("context_length", Value::U32(64)),
        ("attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
    ];
    for (k, v) in base {
        set(format!("{arch}.{k}"), v);
    }
    if moe {
        let experts = [
            ("block_count", Value::U32(2)),
            ("leading_dense_block_count", Value::U32(1)),
            ("expert_count", Value::U32(4)),
            ("expert_used_count", Value::U32(2)),
            ("expert_feed_forward_length", Value::U32(16)),
            ("expert_shared_count", Value::U32(1)),
            ("expert_gating_func", Value::U32(2)),
            ("expert_weights_norm", Value::Bool(true)),
            ("expert_weights_scale", Value::F32(2.5)),
            ("rope.dimension_count", Value::U32(2)),
        ];
        for (k, v) in experts {
            set(format!("{arch}.{k}"), v);
        }
    }
    for (i, n) in &input.values {
        set(
            format!("{arch}.{}", KEYS[*i as usize % KEYS.len()]),
            value(n),
        );
    }
    let pieces = [
        "<unk>",
        "<s>",
        "</s>",
        "\u{2581}a",
        "a",
        "b",
        "\u{2581}",
        "<0x0A>",
    ];
    let strings = pieces
        .iter()
        .map(|p| Value::String(p.to_string()))
        .collect();
    set("tokenizer.ggml.model".into(), Value::String("llama".into()));
    set(
        "tokenizer.ggml.tokens".into(),
        Value::Array(ValueType::String, strings),
    );
    let scores = (0..8).map(|i| Value::F32(-(i as f32))).collect();
    set(
        "tokenizer.ggml.scores".into(),
        Value::Array(ValueType::F32, scores),
    );
    let types = [2, 3, 3, 1, 1, 1, 1, 6].map(Value::I32).to_vec();
    set(
        "tokenizer.ggml.token_type".into(),
        Value::Array(ValueType::I32, types),
    );
    md
}

/// Process-lifetime state (rayon's global pool) is made once, before inputs are tracked for
/// leaks, by loading the unchanged tiny models; each must load and evaluate a token, or the
/// fuzzer would only ever reach their errors.
fn warm_up() {
    for arch in 0..3 {
        let evaluated = load(&Input {
            arch,
            values: Vec::new(),
            shapes: Vec::new(),
            dropped: Vec::new(),
            fill: 0,
        });
        assert!(evaluated, "the unchanged model {arch} does not evaluate");
    }
}

fuzz_target!(init: warm_up(), |input: Input| {
    load(&input);
});

/// Writes the input's model, opens it and evaluates a token; whether it got that far.
fn load(input: &Input) -> bool {
    let (arch, tensors): (&str, &[(&str, &[u64])]) = match input.arch % 3 {
        0 => ("llama", &TENSORS),
        1 => ("qwen2", &TENSORS),
        _ => ("glm4moe", &MOE_TENSORS),
    };
    let mut w = GgufWriter::new(metadata(arch, arch == "glm4moe", input));
    for (i, (name, shape)) in tensors.iter().enumerate() {
        if input
            .dropped
            .iter()
            .any(|&d| d as usize % tensors.len() == i)
            || (arch == "llama" && name.ends_with(".bias"))
        {
            continue;
        }
        let shape: Vec<u64> = match input
            .shapes
            .iter()
            .find(|(t, _)| *t as usize % tensors.len() == i)
        {
            Some((_, dims)) if !dims.is_empty() && dims.len() <= 4 => {
                dims.iter().map(|&d| u64::from(d % 64) + 1).collect()
            }
            _ => shape.to_vec(),
        };
        let n: u64 = shape.iter().product();
        if n > 1 << 16 {
            continue;
        }
        let data = vec![input.fill; 4 * n as usize];
        w.add_tensor(*name, GgmlType::F32, &shape, data).unwrap();
    }
    let path =
        std::env::temp_dir().join(format!("ramforge-fuzz-model-{}.gguf", std::process::id()));
    w.write_file(&path).unwrap();
    match Model::open(&path) {
        Err(e) => {
            assert!(!e.to_string().contains('\n'), "multi-line error: {e}");
            false
        }
        Ok(model) => {
            let n_vocab = model.tensors.n_vocab;
            let options = EngineOptions {
                ram: Some(64 << 20),
                threads: 1,
                ..EngineOptions::default()
            };
            match Engine::new(model, &options) {
                Err(e) => {
                    assert!(!e.to_string().contains('\n'), "multi-line error: {e}");
                    false
                }
                Ok(mut engine) => {
                    let logits = engine.eval(&[1]).expect("a loaded model evaluates a token");
                    assert_eq!(logits.len(), n_vocab);
                    true
                }
            }
        }
    }
}
