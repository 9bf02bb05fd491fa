//! Model hyperparameters, read from the GGUF metadata (`<arch>.*` keys) and checked for sense
//! before anything is sized from them.

use super::arch::Architecture;
use crate::error::EngineError;
use ramforge_gguf::Metadata;

/// The numbers that define a transformer: its architecture and the sizes it is built with.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    /// What the layers bind and run.
    pub arch: &'static Architecture,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Model width (residual stream).
    pub n_embd: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_head`).
    pub n_head_kv: usize,
    /// Elements per attention head (queries, keys and values).
    pub head_dim: usize,
    /// FFN hidden width.
    pub n_ff: usize,
    /// Trained context length.
    pub n_ctx_train: usize,
    /// The RMSNorm epsilon.
    pub rms_eps: f32,
    /// The RoPE frequency base.
    pub rope_base: f32,
    /// How many leading elements of each head are rotated.
    pub rope_dim: usize,
    /// Positions are multiplied by this (linear RoPE scaling; 1 when absent).
    pub rope_freq_scale: f32,
}

/// Bounds that keep a hostile header from asking for absurd work or memory before the tensor
/// shapes (which are checked against the file's size) are compared.
const MAX_DIM: u64 = 1 << 20;
const MAX_LAYERS: u64 = 4096;
/// The most experts a mixture-of-experts layer may have (llama.cpp's LLAMA_MAX_EXPERTS).
const MAX_EXPERTS: u64 = 512;

impl ModelConfig {
    /// Reads the hyperparameters of a model of any architecture in [`super::arch::ALL`].
    pub fn from_metadata(meta: &Metadata) -> Result<ModelConfig, EngineError> {
        let arch_name = meta.get_str("general.architecture")?;
        let arch = Architecture::named(arch_name).ok_or_else(|| {
            EngineError::Unsupported(format!(
                "architecture {arch_name:?} (general.architecture); supported: {}",
                Architecture::supported_names()
            ))
        })?;
        let key = |k: &str| format!("{arch_name}.{k}");
        let bounded = |k: &str, max: u64| -> Result<usize, EngineError> {
            let full = key(k);
            let v = meta.get_u64(&full)?;
            if v == 0 || v > max {
                return Err(EngineError::BadModel(format!(
                    "metadata {full} = {v} is outside 1..={max}"
                )));
            }
            Ok(v as usize)
        };
        let optional = |k: &str, max: u64| -> Result<Option<usize>, EngineError> {
            if meta.contains(&key(k)) {
                bounded(k, max).map(Some)
            } else {
                Ok(None)
            }
        };

        let n_layer = bounded("block_count", MAX_LAYERS)?;
        let n_embd = bounded("embedding_length", MAX_DIM)?;
        let n_ff = bounded("feed_forward_length", MAX_DIM)?;
        let n_head = bounded("attention.head_count", MAX_DIM)?;
        let n_head_kv = optional("attention.head_count_kv", MAX_DIM)?.unwrap_or(n_head);
        let n_ctx_train = bounded("context_length", 1 << 24)?;
        if n_embd % n_head != 0 && !meta.contains(&key("attention.key_length")) {
            return Err(EngineError::BadModel(format!(
                "{} = {n_embd} is not a multiple of {} = {n_head}",
                key("embedding_length"),
                key("attention.head_count")
            )));
        }
        let head_dim = optional("attention.key_length", MAX_DIM)?.unwrap_or(n_embd / n_head);
        if let Some(v) = optional("attention.value_length", MAX_DIM)? {
            if v != head_dim {
                return Err(EngineError::Unsupported(format!(
                    "{} = {v} differs from the key length {head_dim}",
                    key("attention.value_length")
                )));
            }
        }
        if n_head % n_head_kv != 0 {
            return Err(EngineError::BadModel(format!(
                "{} = {n_head} is not a multiple of {} = {n_head_kv}",
                key("attention.head_count"),
                key("attention.head_count_kv")
            )));
        }
        let rope_dim = optional("rope.dimension_count", MAX_DIM)?.unwrap_or(head_dim);
        if rope_dim > head_dim || rope_dim % 2 != 0 {
            return Err(EngineError::BadModel(format!(
                "{} = {rope_dim} must be even and at most the head size {head_dim}",
                key("rope.dimension_count")
            )));
        }
        let rope_base = if meta.contains(&key("rope.freq_base")) {
            meta.get_f32(&key("rope.freq_base"))?
        } else {
            10000.0
        };
        if !(rope_base.is_finite() && rope_base > 1.0) {
            return Err(EngineError::BadModel(format!(
                "{} = {rope_base} must be a finite number above 1",
                key("rope.freq_base")
            )));
        }
        let rope_freq_scale = rope_scaling(meta, &key)?;
        check_experts(meta, &key)?;
        let rms_eps = meta.get_f32(&key("attention.layer_norm_rms_epsilon"))?;
        if !(rms_eps.is_finite() && rms_eps > 0.0 && rms_eps < 1.0) {
            return Err(EngineError::BadModel(format!(
                "{} = {rms_eps} must lie in (0, 1)",
                key("attention.layer_norm_rms_epsilon")
            )));
        }
        Ok(ModelConfig {
            arch,
            n_layer,
            n_embd,
            n_head,
            n_head_kv,
            head_dim,
            n_ff,
            n_ctx_train,
            rms_eps,
            rope_base,
            rope_dim,
            rope_freq_scale,
        })
    }

    /// Width of all query heads together.
    pub fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    /// Width of all key (or value) heads together.
    pub fn kv_dim(&self) -> usize {
        self.n_head_kv * self.head_dim
    }
}

/// Mixture-of-experts counts (`<arch>.expert_count`, `<arch>.expert_used_count`), where
/// present, must make sense before anything is sized from them: at most [`MAX_EXPERTS`]
/// experts, and between one and all of them used per token.
fn check_experts(meta: &Metadata, key: &dyn Fn(&str) -> String) -> Result<(), EngineError> {
    let (count_key, used_key) = (key("expert_count"), key("expert_used_count"));
    let read = |k: &str| -> Result<Option<u64>, EngineError> {
        Ok(if meta.contains(k) {
            Some(meta.get_u64(k)?)
        } else {
            None
        })
    };
    let count = read(&count_key)?.unwrap_or(0);
    let used = read(&used_key)?.unwrap_or(0);
    if count > MAX_EXPERTS {
        return Err(EngineError::BadModel(format!(
            "metadata {count_key} = {count} is outside 0..={MAX_EXPERTS}"
        )));
    }
    if used > count || (count > 0 && used == 0) {
        return Err(EngineError::BadModel(format!(
            "metadata {used_key} = {used} must lie in 1..={count} ({count_key})"
        )));
    }
    Ok(())
}

/// The position multiplier of `<arch>.rope.scaling.*`: none or linear; anything else is refused
/// rather than silently ignored.
fn rope_scaling(meta: &Metadata, key: &dyn Fn(&str) -> String) -> Result<f32, EngineError> {
    let kind_key = key("rope.scaling.type");
    let kind = if meta.contains(&kind_key) {
        meta.get_str(&kind_key)?
    } else {
        "none"
    };
    let factor_key = key("rope.scaling.factor");
    let factor = if meta.contains(&factor_key) {
        meta.get_f32(&factor_key)?
    } else {
        0.0
    };
    match kind {
        "none" => Ok(1.0),
        "linear" if factor == 0.0 || factor == 1.0 => Ok(1.0),
        "linear" if factor.is_finite() && factor > 0.0 => Ok(1.0 / factor),
        "linear" => Err(EngineError::BadModel(format!(
            "{factor_key} = {factor} must be a positive number"
        ))),
        other => Err(EngineError::Unsupported(format!(
            "RoPE scaling {other:?} ({kind_key}); supported: none, linear"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::arch::RopeStyle;
    use ramforge_gguf::Value;

    fn meta(arch: &str, extra: &[(&str, Value)]) -> Metadata {
        let mut m = Metadata::new();
        m.insert("general.architecture".into(), Value::String(arch.into()));
        let base = [
            ("block_count", Value::U32(2)),
            ("embedding_length", Value::U32(64)),
            ("feed_forward_length", Value::U32(128)),
            ("attention.head_count", Value::U32(4)),
            ("attention.head_count_kv", Value::U32(2)),
            ("context_length", Value::U32(256)),
            ("attention.layer_norm_rms_epsilon", Value::F32(1e-5)),
        ];
        for (k, v) in extra {
            m.insert(format!("{arch}.{k}"), v.clone());
        }
        for (k, v) in base {
            m.insert(format!("{arch}.{k}"), v);
        }
        m
    }

    #[test]
    fn llama_and_qwen2_read_with_defaults() {
        let c = ModelConfig::from_metadata(&meta("llama", &[])).unwrap();
        assert_eq!(c.arch.name, "llama");
        assert_eq!(c.arch.rope, RopeStyle::Adjacent);
        assert_eq!(
            (c.head_dim, c.rope_dim, c.q_dim(), c.kv_dim()),
            (16, 16, 64, 32)
        );
        assert_eq!(c.rope_base, 10000.0);
        let q = ModelConfig::from_metadata(&meta(
            "qwen2",
            &[
                ("rope.freq_base", Value::F32(1e6)),
                ("rope.dimension_count", Value::U32(8)),
            ],
        ))
        .unwrap();
        assert_eq!(q.arch.rope, RopeStyle::Neox);
        assert_eq!((q.rope_base, q.rope_dim), (1e6, 8));
    }

    #[test]
    fn unknown_architecture_and_bad_values_are_named() {
        let e = ModelConfig::from_metadata(&meta("gemma3", &[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("gemma3") && e.contains("llama, qwen2"), "{e}");
        let e = ModelConfig::from_metadata(&meta(
            "llama",
            &[("attention.head_count_kv", Value::U32(3))],
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("head_count"), "{e}");
        let e = ModelConfig::from_metadata(&meta(
            "llama",
            &[("rope.scaling.type", Value::String("yarn".into()))],
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("yarn"), "{e}");
        let mut m = meta("llama", &[]);
        m = {
            let mut n = Metadata::new();
            for (k, v) in m.iter() {
                if k != "llama.block_count" {
                    n.insert(k.to_string(), v.clone());
                }
            }
            n
        };
        let e = ModelConfig::from_metadata(&m).unwrap_err().to_string();
        assert!(e.contains("llama.block_count"), "{e}");
    }

    #[test]
    fn expert_counts_are_bounded() {
        let with = |count: Option<u32>, used: Option<u32>| {
            let mut extra = Vec::new();
            extra.extend(count.map(|c| ("expert_count", Value::U32(c))));
            extra.extend(used.map(|u| ("expert_used_count", Value::U32(u))));
            ModelConfig::from_metadata(&meta("llama", &extra)).map_err(|e| e.to_string())
        };
        assert!(with(Some(8), Some(2)).is_ok());
        assert!(with(Some(0), Some(0)).is_ok());
        let e = with(Some(100_000), Some(2)).unwrap_err();
        assert!(e.contains("llama.expert_count = 100000"), "{e}");
        let e = with(Some(8), Some(9)).unwrap_err();
        assert!(
            e.contains("llama.expert_used_count = 9 must lie in 1..=8"),
            "{e}"
        );
        let e = with(None, Some(1)).unwrap_err();
        assert!(
            e.contains("llama.expert_used_count = 1 must lie in 1..=0"),
            "{e}"
        );
        let e = with(Some(4), None).unwrap_err();
        assert!(e.contains("llama.expert_used_count = 0"), "{e}");
    }
}
