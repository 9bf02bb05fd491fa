//! Model hyperparameters, read from the GGUF metadata (`<arch>.*` keys) and checked for sense
//! before anything is sized from them.

use super::arch::{Architecture, Role, SlidingWindow};
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
    /// The local layers' window (`attention.sliding_window`), for an architecture with
    /// [`SlidingWindow`] layers: a query sees itself and the `window - 1` positions before it.
    pub sliding_window: Option<usize>,
    /// The query scale of attention scores (`1/sqrt(head_dim)` unless the architecture says
    /// otherwise).
    pub attn_scale: f32,
    /// Experts of a mixture-of-experts FFN (`expert_count`; 0: a dense FFN).
    pub n_expert: usize,
    /// Experts each token is routed to (`expert_used_count`; 0 without experts).
    pub n_expert_used: usize,
    /// One expert's hidden width (0 without experts).
    pub n_ff_exp: usize,
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
        if arch_name == "qwen2moe" {
            return Err(EngineError::Unsupported(
                "architecture \"qwen2moe\": its shared experts \
                 (qwen2moe.expert_shared_feed_forward_length) are not implemented"
                    .into(),
            ));
        }
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
        let sliding_window = match arch.sliding_window {
            Some(_) if !meta.contains(&key("attention.sliding_window")) => {
                return Err(EngineError::Unsupported(format!(
                    "{arch_name} without {} (full attention on every layer, logit \
                     soft-capping) is not implemented",
                    key("attention.sliding_window")
                )))
            }
            Some(_) => Some(bounded("attention.sliding_window", 1 << 24)?),
            None => None,
        };
        // llama.cpp: 1/sqrt(n_embd/n_head) for the 62-layer Gemma 3 27B, else 1/sqrt(head_dim).
        let attn_scale = if arch.sliding_window.is_some() && n_layer == 62 {
            1.0 / ((n_embd / n_head) as f32).sqrt()
        } else {
            1.0 / (head_dim as f32).sqrt()
        };
        let (n_expert, n_expert_used, n_ff_exp) = experts(meta, arch, &key, n_ff)?;
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
            sliding_window,
            attn_scale,
            n_expert,
            n_expert_used,
            n_ff_exp,
        })
    }

    /// The sliding window of `layer` if it is a local layer, `None` for a global one.
    pub fn window(&self, layer: usize) -> Option<usize> {
        let SlidingWindow { period, .. } = self.arch.sliding_window?;
        (layer % period < period - 1).then_some(self.sliding_window?)
    }

    /// The RoPE base and position scale of `layer` (local layers have their own base and no
    /// scaling).
    pub fn rope_of(&self, layer: usize) -> (f32, f32) {
        match (self.window(layer), self.arch.sliding_window) {
            (Some(_), Some(sw)) => (sw.local_rope_base, 1.0),
            _ => (self.rope_base, self.rope_freq_scale),
        }
    }

    /// Positions of `layer` a cache for a context of `ctx` must keep: the window of a local
    /// layer, else the whole context.
    pub fn kv_positions(&self, layer: usize, ctx: usize) -> usize {
        self.window(layer).map_or(ctx, |w| w.min(ctx))
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

/// `(expert_count, expert_used_count, expert FFN width)`: zeros for a dense model. Refuses
/// experts in an architecture without an expert layout, and gating other than softmax.
fn experts(
    meta: &Metadata,
    arch: &Architecture,
    key: &dyn Fn(&str) -> String,
    n_ff: usize,
) -> Result<(usize, usize, usize), EngineError> {
    let read = |k: &str| -> Result<Option<u64>, EngineError> {
        let full = key(k);
        Ok(if meta.contains(&full) {
            Some(meta.get_u64(&full)?)
        } else {
            None
        })
    };
    let count_key = key("expert_count");
    let n_expert = read("expert_count")?.unwrap_or(0);
    let has_layout = arch.spec(Role::FfnGateExps).is_some();
    let needs_experts = arch.spec(Role::FfnDown).is_none();
    if n_expert == 0 {
        if needs_experts {
            return Err(EngineError::BadModel(format!(
                "{count_key} must be above 0 for {}",
                arch.name
            )));
        }
        return Ok((0, 0, 0));
    }
    if !has_layout {
        return Err(EngineError::Unsupported(format!(
            "{count_key} = {n_expert}: experts in {} are not implemented",
            arch.name
        )));
    }
    let used_key = key("expert_used_count");
    let used = read("expert_used_count")?.ok_or_else(|| {
        EngineError::BadModel(format!("{used_key} is missing ({count_key} = {n_expert})"))
    })?;
    // check_experts has bounded both counts.
    let gating_key = key("expert_gating_func");
    // llama.cpp's numbering: 1 is softmax, the gating these architectures use.
    if let Some(g) = read("expert_gating_func")? {
        if g != 1 {
            return Err(EngineError::Unsupported(format!(
                "{gating_key} = {g}: only softmax gating (1) is implemented"
            )));
        }
    }
    // llama.cpp: llama's experts are feed_forward_length wide; qwen3moe's are
    // expert_feed_forward_length wide (n_ff / n_expert_used when absent).
    let n_ff_exp = if needs_experts {
        match read("expert_feed_forward_length")? {
            Some(v) if v > 0 && v <= MAX_DIM => v as usize,
            Some(v) => {
                return Err(EngineError::BadModel(format!(
                    "{} = {v} is outside 1..={MAX_DIM}",
                    key("expert_feed_forward_length")
                )))
            }
            None => n_ff / used as usize,
        }
    } else {
        n_ff
    };
    Ok((n_expert as usize, used as usize, n_ff_exp))
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
        let e = ModelConfig::from_metadata(&meta("phi3", &[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("phi3") && e.contains("llama, qwen2"), "{e}");
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
    fn gemma3_reads_its_window_layer_pattern_and_scale() {
        let c = ModelConfig::from_metadata(&meta(
            "gemma3",
            &[
                ("attention.key_length", Value::U32(32)),
                ("attention.sliding_window", Value::U32(8)),
                ("block_count", Value::U32(12)),
                ("rope.freq_base", Value::F32(1e6)),
            ],
        ))
        .unwrap();
        assert_eq!((c.head_dim, c.q_dim()), (32, 128));
        let windows: Vec<Option<usize>> = (0..12).map(|l| c.window(l)).collect();
        let local = Some(8);
        assert_eq!(
            windows,
            [local, local, local, local, local, None, local, local, local, local, local, None]
        );
        assert_eq!((c.rope_of(0), c.rope_of(5)), ((10000.0, 1.0), (1e6, 1.0)));
        assert_eq!((c.kv_positions(0, 100), c.kv_positions(5, 100)), (8, 100));
        assert_eq!(c.kv_positions(0, 4), 4);
        assert_eq!(c.attn_scale, 1.0 / 32f32.sqrt());
        let e = ModelConfig::from_metadata(&meta("gemma3", &[]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("gemma3.attention.sliding_window"), "{e}");
    }

    #[test]
    fn experts_are_read_and_what_is_not_implemented_is_named() {
        let moe = |arch: &str, extra: &[(&str, Value)]| {
            let mut all = extra.to_vec();
            for (k, v) in [
                ("expert_count", Value::U32(8)),
                ("expert_used_count", Value::U32(2)),
            ] {
                if extra.iter().all(|(e, _)| *e != k) {
                    all.push((k, v));
                }
            }
            ModelConfig::from_metadata(&meta(arch, &all))
        };
        let c = moe(
            "qwen3moe",
            &[("expert_feed_forward_length", Value::U32(32))],
        )
        .unwrap();
        assert_eq!((c.n_expert, c.n_expert_used, c.n_ff_exp), (8, 2, 32));
        let c = moe("qwen3moe", &[]).unwrap();
        assert_eq!(c.n_ff_exp, 128 / 2);
        let c = moe("llama", &[]).unwrap();
        assert_eq!((c.n_expert, c.n_ff_exp), (8, 128));
        let dense = ModelConfig::from_metadata(&meta("llama", &[])).unwrap();
        assert_eq!((dense.n_expert, dense.n_expert_used), (0, 0));
        let err = |r: Result<ModelConfig, EngineError>| r.unwrap_err().to_string();
        let e = err(moe("llama", &[("expert_gating_func", Value::U32(2))]));
        assert!(e.contains("llama.expert_gating_func"), "{e}");
        let e = err(moe("qwen2", &[]));
        assert!(e.contains("qwen2.expert_count"), "{e}");
        let e = err(moe("llama", &[("expert_used_count", Value::U32(9))]));
        assert!(e.contains("llama.expert_used_count"), "{e}");
        let e = err(ModelConfig::from_metadata(&meta("qwen3moe", &[])));
        assert!(e.contains("qwen3moe.expert_count"), "{e}");
        let e = err(moe("qwen2moe", &[]));
        assert!(
            e.contains("qwen2moe") && e.contains("expert_shared_feed_forward_length"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
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
