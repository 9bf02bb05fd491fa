//! Unit tests of `deepseek2`'s hyper-parameters (`mla.rs`) as `ModelConfig` reads them.

use crate::model::{AttentionKind, ModelConfig};
use ramforge_gguf::{Metadata, Value};

/// deepseek2 metadata: `extra` (inserted first, so it wins) over a small absorbed layout,
/// without the keys in `drop`.
fn meta(extra: &[(&str, Value)], drop: &[&str]) -> Metadata {
    let mut m = Metadata::new();
    m.insert(
        "general.architecture".into(),
        Value::String("deepseek2".into()),
    );
    let base = [
        ("block_count", Value::U32(2)),
        ("embedding_length", Value::U32(64)),
        ("feed_forward_length", Value::U32(128)),
        ("attention.head_count", Value::U32(4)),
        ("attention.head_count_kv", Value::U32(1)),
        ("context_length", Value::U32(163840)),
        ("attention.layer_norm_rms_epsilon", Value::F32(1e-6)),
        ("attention.q_lora_rank", Value::U32(32)),
        ("attention.kv_lora_rank", Value::U32(64)),
        ("attention.key_length", Value::U32(80)),
        ("attention.value_length", Value::U32(64)),
        ("attention.key_length_mla", Value::U32(48)),
        ("attention.value_length_mla", Value::U32(32)),
        ("rope.dimension_count", Value::U32(16)),
    ];
    for (k, v) in extra.iter().cloned().chain(base) {
        if !drop.contains(&k) {
            m.insert(format!("deepseek2.{k}"), v);
        }
    }
    m
}

#[test]
fn deepseek2_reads_its_latent_sizes_and_caches_one_row_per_position() {
    let c = ModelConfig::from_metadata(&meta(&[], &[])).unwrap();
    let m = c.mla.unwrap();
    assert_eq!(
        (m.q_lora_rank, m.kv_lora_rank, m.qk_nope, m.v_head),
        (32, 64, 32, 32)
    );
    assert_eq!(
        (c.head_dim, c.n_head_kv, c.kv_dim(), c.rope_dim),
        (80, 1, 80, 16)
    );
    assert_eq!(c.layer_kind(1).attention, AttentionKind::Latent);
    // No scaling: 1/sqrt(key_length_mla), not of the cached row's width.
    assert!((c.attn_scale - 1.0 / 48f32.sqrt()).abs() < 1e-7);
    // One row (no values) per position and layer, 2 bytes an element in F16.
    let bytes = crate::kv::kv_cache_bytes(&c, 100, crate::kv::KvType::F16);
    assert_eq!(bytes, 2 * 100 * 80 * 2);
    let lite = ModelConfig::from_metadata(&meta(&[], &["attention.q_lora_rank"])).unwrap();
    assert_eq!(lite.mla.unwrap().q_lora_rank, 0);
    assert!(m.absorbed);
    // An older conversion: per-head widths in key_length/value_length, a key/value head
    // per query head, no _mla keys; cached the same way.
    let legacy = ModelConfig::from_metadata(&meta(
        &[
            ("attention.key_length", Value::U32(48)),
            ("attention.value_length", Value::U32(32)),
            ("attention.head_count_kv", Value::U32(4)),
        ],
        &["attention.key_length_mla", "attention.value_length_mla"],
    ))
    .unwrap();
    let l = legacy.mla.unwrap();
    assert_eq!((l.qk_nope, l.v_head, l.absorbed), (32, 32, false));
    assert_eq!((legacy.head_dim, legacy.n_head_kv), (80, 1));
    assert_eq!(legacy.attn_scale, c.attn_scale);
}

#[test]
fn deepseek2_yarn_scales_the_scores_by_mscale_squared_and_keeps_the_rotation_unit() {
    let c = ModelConfig::from_metadata(&meta(
        &[
            ("rope.scaling.type", Value::String("yarn".into())),
            ("rope.scaling.factor", Value::F32(40.0)),
            ("rope.scaling.original_context_length", Value::U32(4096)),
            ("rope.scaling.yarn_log_multiplier", Value::F32(0.1)),
        ],
        &[],
    ))
    .unwrap();
    let ln = 40f32.ln();
    // llama.cpp: the context's factor 1/(1 + 0.1 ln 40), ggml's rotation multiplies
    // (1 + 0.1 ln 40) back: magnitude 1; kq_scale (1 + 0.1 * 1.0 * ln 40)^2 / sqrt(48).
    let y = c.rope_yarn.unwrap();
    assert!((y.attn_factor * (1.0 + 0.1 * ln) - 1.0).abs() < 1e-6);
    let want = (1.0 + 0.1 * ln).powi(2) / 48f32.sqrt();
    assert!((c.attn_scale - want).abs() < 1e-6, "{}", c.attn_scale);
    // Without the multiplier: the generic YaRN magnitude, and kq_scale grows by it too.
    let c = ModelConfig::from_metadata(&meta(
        &[
            ("rope.scaling.type", Value::String("yarn".into())),
            ("rope.scaling.factor", Value::F32(40.0)),
        ],
        &[],
    ))
    .unwrap();
    assert!((c.rope_yarn.unwrap().attn_factor - 1.0).abs() < 1e-6);
    assert!((c.attn_scale - want).abs() < 1e-6, "{}", c.attn_scale);
}

#[test]
fn deepseek2_refuses_what_it_cannot_run_in_one_line_naming_the_key() {
    for (extra, drop, named) in [
        (
            vec![],
            vec!["attention.key_length_mla"],
            "deepseek2.attention.key_length_mla and deepseek2.attention.value_length_mla",
        ),
        (
            vec![],
            vec!["attention.kv_lora_rank"],
            "deepseek2.attention.kv_lora_rank",
        ),
        (
            vec![("attention.head_count_kv", Value::U32(4))],
            vec![],
            "deepseek2.attention.head_count_kv = 4",
        ),
        (
            vec![("attention.key_length", Value::U32(48))],
            vec![],
            "deepseek2.attention.key_length = 48",
        ),
        (
            vec![("attention.value_length", Value::U32(32))],
            vec![],
            "deepseek2.attention.value_length = 32",
        ),
        (
            vec![("attention.key_length_mla", Value::U32(16))],
            vec![],
            "deepseek2.attention.key_length_mla = 16",
        ),
        (
            vec![("rope.scaling.yarn_log_multiplier", Value::F32(f32::NAN))],
            vec![],
            "deepseek2.rope.scaling.yarn_log_multiplier",
        ),
    ] {
        let e = ModelConfig::from_metadata(&meta(&extra, &drop))
            .unwrap_err()
            .to_string();
        assert!(e.contains(named) && !e.contains('\n'), "{named}: {e}");
    }
}
