//! The hyper-parameters of multi-head latent attention (`deepseek2`): its sizes, and the
//! attention scale and RoPE magnitude llama.cpp derives for it under YaRN.

use crate::error::EngineError;
#[cfg(test)]
use ramforge_gguf::ValueType;
use ramforge_gguf::{Metadata, Value};

/// The sizes of multi-head latent attention (`deepseek2`), absorbed form: the query of each
/// head is `qk_nope + rope_dim` wide, its value `v_head`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MlaConfig {
    /// `attention.q_lora_rank` (0: a plain `attn_q`, the Lite layout).
    pub q_lora_rank: usize,
    /// `attention.kv_lora_rank`: the cached latent's width.
    pub kv_lora_rank: usize,
    /// The non-rotated part of each head's query and key (`key_length_mla - rope_dim`).
    pub qk_nope: usize,
    /// Each head's value (`attention.value_length_mla`).
    pub v_head: usize,
    /// Whether `attn_k_b`/`attn_v_b` are split (else the older unsplit `attn_kv_b`).
    pub absorbed: bool,
}

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

/// The attention scale of the scores and, under YaRN, the attention factor the RoPE
/// magnitude is computed from, as
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
    yarn_attn_factor: Option<f32>,
) -> Result<(f32, Option<f32>), EngineError> {
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
    let (attn_factor, yarn) = match yarn_attn_factor {
        Some(file_factor) => {
            let mut af = if log_mul != 0.0 {
                get_mscale(factor, log_mul) / get_mscale(factor, log_mul)
            } else {
                get_mscale(factor, 1.0)
            };
            af *= 1.0 / (1.0 + 0.1 * factor.ln());
            af *= file_factor;
            (af, Some(af))
        }
        None => (1.0, None),
    };
    let org = attn_factor * (1.0 + 0.1 * (1.0 / freq_scale).ln());
    let mscale = org * (1.0 + 0.1 * log_mul * (1.0 / freq_scale).ln());
    let k_len = m.qk_nope + rope_dim;
    Ok((mscale * mscale / (k_len as f32).sqrt(), yarn))
}

/// The lightning indexer of DeepSeek sparse attention (`glm-dsa`): its sizes and how many
/// positions each query attends to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IndexerConfig {
    /// `attention.indexer.head_count`.
    pub n_head: usize,
    /// `attention.indexer.key_length`: one head's query and the cached key.
    pub head_dim: usize,
    /// `attention.indexer.top_k`: the positions each query attends to.
    pub top_k: usize,
    /// The epsilon of the key's LayerNorm: 0, as llama.cpp has it (its glm-dsa reads no
    /// `attention.layer_norm_epsilon`; a file's value is ignored there and here).
    pub norm_eps: f32,
}

/// The most positions a query may select (bounds the selection's scratch).
const MAX_TOP_K: u64 = 1 << 16;

/// Reads the indexer's keys and checks them: the key is RoPEd on its leading `rope_dim`
/// elements and rotated by a Hadamard matrix, so it must be a power of two of at least 64
/// (llama.cpp keeps rotations of 64 and up) above `rope_dim`. glm-dsa needs the q-LoRA and
/// the absorbed layout. Returns the sizes and, per layer, whether its indexer runs
/// ([`indexer_layers`]).
pub(super) fn read_indexer(
    meta: &Metadata,
    key: &dyn Fn(&str) -> String,
    m: &MlaConfig,
    rope_dim: usize,
    n_ctx_train: usize,
    n_layer: usize,
) -> Result<(IndexerConfig, Vec<bool>), EngineError> {
    let required = |k: &str, max: u64| -> Result<usize, EngineError> {
        let full = key(k);
        match optional(meta, &full, max)? {
            Some(v) if v > 0 => Ok(v),
            Some(_) => Err(EngineError::BadModel(format!(
                "metadata {full} = 0 must be positive"
            ))),
            None => Err(EngineError::BadModel(format!("metadata {full} is missing"))),
        }
    };
    let n_head = required("attention.indexer.head_count", 4096)?;
    let head_dim = required("attention.indexer.key_length", MAX_DIM)?;
    let top_k = required("attention.indexer.top_k", MAX_TOP_K)?;
    if !head_dim.is_power_of_two() || head_dim < 64 || head_dim <= rope_dim {
        return Err(EngineError::Unsupported(format!(
            "metadata {} = {head_dim}: the indexer's Hadamard rotation needs a power of two \
             of at least 64, above {} = {rope_dim}",
            key("attention.indexer.key_length"),
            key("rope.dimension_count")
        )));
    }
    if m.q_lora_rank == 0 || !m.absorbed {
        return Err(EngineError::BadModel(format!(
            "{} needs {} above 0 and the split attn_k_b/attn_v_b ({} and {})",
            key("attention.indexer.top_k"),
            key("attention.q_lora_rank"),
            key("attention.key_length_mla"),
            key("attention.value_length_mla")
        )));
    }
    let full = indexer_layers(meta, key, n_ctx_train, n_layer)?;
    Ok((
        IndexerConfig {
            n_head,
            head_dim,
            top_k,
            norm_eps: 0.0,
        },
        full,
    ))
}

/// Contexts of this many positions or more mark a GLM-5.2 file, whose indexer layers default
/// to [`glm52_full_layers`] (as llama.cpp decides).
const GLM52_CONTEXT: usize = 1 << 20;

/// GLM-5.2's full indexer layers (its `config.json`'s `indexer_types`): layers 0 and 1, then
/// the first of every four from layer 2 (2, 6, 10, ...); the others are shared.
pub(crate) fn glm52_full_layers(n_layer: usize) -> Vec<bool> {
    (0..n_layer).map(|l| l < 2 || (l - 2) % 4 == 0).collect()
}

/// Which layers run their own indexer ("full") and which reuse the choice of the last full
/// layer before them ("shared", GLM-5.2): `attention.indexer.types` (one value, or one per
/// layer; non-zero or true is full), else every layer before GLM-5.2's context length and
/// [`glm52_full_layers`] from it. A shared layer needs a full one before it.
fn indexer_layers(
    meta: &Metadata,
    key: &dyn Fn(&str) -> String,
    n_ctx_train: usize,
    n_layer: usize,
) -> Result<Vec<bool>, EngineError> {
    let types = key("attention.indexer.types");
    let full = match meta.get(&types) {
        None if n_ctx_train >= GLM52_CONTEXT => glm52_full_layers(n_layer),
        None => vec![true; n_layer],
        Some(value) => {
            let flag = |v: &Value, at: &str| match v {
                Value::Bool(b) => Ok(*b),
                other => other.as_i64().map(|x| x != 0).ok_or_else(|| {
                    EngineError::BadModel(format!(
                        "metadata {types}{at} is not a boolean or an integer"
                    ))
                }),
            };
            match value.as_array() {
                Some((_, items)) => {
                    if items.len() != n_layer {
                        return Err(EngineError::BadModel(format!(
                            "metadata {types} has {} entries; expected {n_layer} (the blocks \
                             before any MTP layers)",
                            items.len()
                        )));
                    }
                    items
                        .iter()
                        .enumerate()
                        .map(|(i, v)| flag(v, &format!("[{i}]")))
                        .collect::<Result<_, _>>()?
                }
                None => vec![flag(value, "")?; n_layer],
            }
        }
    };
    if full.first() == Some(&false) {
        return Err(EngineError::BadModel(format!(
            "metadata {types}: layer 0 is shared, but a shared indexer layer reuses the choice \
             of a full one before it"
        )));
    }
    Ok(full)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layers(
        meta: &Metadata,
        n_ctx_train: usize,
        n_layer: usize,
    ) -> Result<Vec<bool>, EngineError> {
        indexer_layers(
            meta,
            &|k: &str| format!("glm-dsa.{k}"),
            n_ctx_train,
            n_layer,
        )
    }

    #[test]
    fn glm52_runs_its_indexer_on_layers_0_1_2_then_every_fourth() {
        let full = glm52_full_layers(78);
        let at: Vec<usize> = (0..78).filter(|&l| full[l]).collect();
        let mut want = vec![0, 1];
        want.extend((2..78).step_by(4));
        assert_eq!(at, want);
        assert_eq!(at.len(), 21);
        // Without the key: every layer before GLM-5.2's context length, its table from it.
        let meta = Metadata::new();
        assert_eq!(layers(&meta, 202_752, 8).unwrap(), vec![true; 8]);
        assert_eq!(layers(&meta, 1 << 20, 8).unwrap(), glm52_full_layers(8));
    }

    #[test]
    fn indexer_types_are_read_per_layer_or_whole_and_checked() {
        let key = "glm-dsa.attention.indexer.types";
        let mut meta = Metadata::new();
        let list =
            |v: &[i32]| Value::Array(ValueType::I32, v.iter().map(|&x| Value::I32(x)).collect());
        meta.set(key, list(&[1, 0, 2]));
        assert_eq!(layers(&meta, 4096, 3).unwrap(), vec![true, false, true]);
        meta.set(key, Value::Bool(true));
        assert_eq!(layers(&meta, 1 << 20, 3).unwrap(), vec![true; 3]);
        for (value, error) in [
            (list(&[1, 0]), "has 2 entries; expected 3"),
            (list(&[0, 1, 1]), "layer 0 is shared"),
            (
                Value::String("full".into()),
                "is not a boolean or an integer",
            ),
        ] {
            meta.set(key, value);
            let e = layers(&meta, 4096, 3).unwrap_err().to_string();
            assert!(e.contains(error) && e.contains(key), "{e}");
        }
    }
}
