//! The hyper-parameters of multi-head latent attention (`deepseek2`): its sizes, and the
//! attention scale and RoPE magnitude llama.cpp derives for it under YaRN.

use super::config::{MlaConfig, YarnConfig};
use crate::error::EngineError;
use ramforge_gguf::Metadata;

/// Widths above this are refused before anything is sized from them.
const MAX_DIM: u64 = 1 << 20;

/// An optional unsigned key, bounded by `max` (0 allowed).
fn optional(meta: &Metadata, key: &str, max: u64) -> Result<Option<usize>, EngineError> {
    if !meta.contains(key) {
        return Ok(None);
    }
    let v = meta.get_u64(key)?;
    if v > max {
        return Err(EngineError::BadModel(format!(
            "metadata {key} = {v} is outside 0..={max}"
        )));
    }
    Ok(Some(v as usize))
}

/// Reads MLA's sizes and checks them against the common keys. The absorbed layout (split
/// `attn_k_b`/`attn_v_b`, keys `attention.key_length_mla`/`value_length_mla`) has
/// `attention.key_length` = `kv_lora_rank + rope`, `attention.value_length` = `kv_lora_rank`
/// and one key/value head; an older conversion (unsplit `attn_kv_b`, no `_mla` keys) gives
/// each head's query and value widths in `attention.key_length`/`value_length` and one
/// key/value head per query head.
pub(super) fn read(
    meta: &Metadata,
    key: &dyn Fn(&str) -> String,
    head_dim: usize,
    n_head_kv: usize,
    rope_dim: usize,
) -> Result<MlaConfig, EngineError> {
    let q_lora_rank = optional(meta, &key("attention.q_lora_rank"), MAX_DIM)?.unwrap_or(0);
    let kv_key = key("attention.kv_lora_rank");
    let kv_lora_rank = match optional(meta, &kv_key, MAX_DIM)? {
        Some(v) if v > 0 => v,
        Some(_) => {
            return Err(EngineError::BadModel(format!(
                "metadata {kv_key} = 0 must be positive"
            )))
        }
        None => {
            return Err(EngineError::BadModel(format!(
                "metadata {kv_key} is missing"
            )))
        }
    };
    let (k_mla, v_mla) = (
        key("attention.key_length_mla"),
        key("attention.value_length_mla"),
    );
    let v_key = key("attention.value_length");
    let (k_len_key, k_len, v_head_key, v_head, absorbed) = match (
        optional(meta, &k_mla, MAX_DIM)?,
        optional(meta, &v_mla, MAX_DIM)?,
    ) {
        (Some(k), Some(v)) => {
            if head_dim != kv_lora_rank + rope_dim {
                return Err(EngineError::BadModel(format!(
                    "metadata {} = {head_dim} must be {kv_key} + {} = {}",
                    key("attention.key_length"),
                    key("rope.dimension_count"),
                    kv_lora_rank + rope_dim
                )));
            }
            if let Some(v) = optional(meta, &v_key, MAX_DIM)? {
                if v != kv_lora_rank {
                    return Err(EngineError::BadModel(format!(
                        "metadata {v_key} = {v} must equal {kv_key} = {kv_lora_rank}"
                    )));
                }
            }
            if n_head_kv != 1 {
                return Err(EngineError::BadModel(format!(
                    "metadata {} = {n_head_kv} must be 1 with the split attn_k_b/attn_v_b",
                    key("attention.head_count_kv")
                )));
            }
            (k_mla, k, v_mla, v, true)
        }
        (None, None) => {
            let v = optional(meta, &v_key, MAX_DIM)?.unwrap_or(head_dim);
            (key("attention.key_length"), head_dim, v_key, v, false)
        }
        _ => {
            return Err(EngineError::BadModel(format!(
                "metadata {k_mla} and {v_mla} come both or neither"
            )))
        }
    };
    if k_len <= rope_dim || v_head == 0 {
        return Err(EngineError::BadModel(format!(
            "metadata {k_len_key} = {k_len} must exceed {} = {rope_dim}, and {v_head_key} = \
             {v_head} must be positive",
            key("rope.dimension_count")
        )));
    }
    let temp = key("attention.temperature_scale");
    if meta.contains(&temp) {
        return Err(EngineError::Unsupported(format!(
            "{temp} (attention temperature tuning) is not implemented"
        )));
    }
    Ok(MlaConfig {
        q_lora_rank,
        kv_lora_rank,
        qk_nope: k_len - rope_dim,
        v_head,
        absorbed,
    })
}

/// llama.cpp's `get_mscale`: YaRN's magnitude for a context scaled by `factor`.
fn get_mscale(factor: f32, mscale: f32) -> f32 {
    if factor <= 1.0 {
        1.0
    } else {
        0.1 * mscale * factor.ln() + 1.0
    }
}

/// The attention scale of the scores and the YaRN settings with the RoPE magnitude as
/// llama.cpp computes them for deepseek2: with `rope.scaling.yarn_log_multiplier` (written as
/// 0.1 x `mscale_all_dim`, divided back) the context's attention factor becomes
/// `attn_factor / (1 + 0.1 ln F)` (so the rotation keeps magnitude `attn_factor`), and the
/// scores are scaled by `mscale^2 / sqrt(key_length_mla)` with
/// `mscale = attn_factor_org (1 + 0.1 L ln F)`, `attn_factor_org` the context's factor times
/// `1 + 0.1 ln F`.
pub(super) fn scales(
    meta: &Metadata,
    key: &dyn Fn(&str) -> String,
    m: &MlaConfig,
    rope_dim: usize,
    freq_scale: f32,
    yarn: Option<YarnConfig>,
) -> Result<(f32, Option<YarnConfig>), EngineError> {
    let log_key = key("rope.scaling.yarn_log_multiplier");
    let log_mul = if meta.contains(&log_key) {
        let v = meta.get_f32(&log_key)?;
        if !(v.is_finite() && (0.0..=100.0).contains(&v)) {
            return Err(EngineError::BadModel(format!(
                "metadata {log_key} = {v} must lie in [0, 100]"
            )));
        }
        v / 0.1
    } else {
        0.0
    };
    let factor = 1.0 / freq_scale;
    let (attn_factor, yarn) = match yarn {
        Some(mut y) => {
            let mut af = if log_mul != 0.0 {
                get_mscale(factor, log_mul) / get_mscale(factor, log_mul)
            } else {
                get_mscale(factor, 1.0)
            };
            af *= 1.0 / (1.0 + 0.1 * factor.ln());
            af *= y.attn_factor;
            y.attn_factor = af;
            (af, Some(y))
        }
        None => (1.0, None),
    };
    let org = attn_factor * (1.0 + 0.1 * (1.0 / freq_scale).ln());
    let mscale = org * (1.0 + 0.1 * log_mul * (1.0 / freq_scale).ln());
    let k_len = m.qk_nope + rope_dim;
    Ok((mscale * mscale / (k_len as f32).sqrt(), yarn))
}

#[cfg(test)]
mod tests {
    use crate::model::{AttentionKind, ModelConfig};
    use ramforge_gguf::{Metadata, Value};

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
        for (k, v) in base.into_iter().chain(extra.iter().cloned()) {
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
}
