//! The hyper-parameters of a hybrid model's gated delta-net (linear attention) layers
//! (`<arch>.ssm.*`), which of its layers they are, and its sectioned RoPE: llama.cpp's
//! `load_arch_hparams` of qwen35moe.

use super::arch::{Architecture, Role};
use crate::error::EngineError;
use ramforge_gguf::{Metadata, Value};

/// The most taps a delta-net convolution may have (real files: 4).
const MAX_KERNEL: u64 = 64;
/// The most elements of one delta-net head (its state is this squared per head).
const MAX_HEAD: u64 = 1024;

/// A hybrid model's gated delta-net layers.
#[derive(Clone, Debug, PartialEq)]
pub struct DeltaNetConfig {
    /// Taps of the causal convolution (`ssm.conv_kernel`).
    pub d_conv: usize,
    /// Elements of one head: keys, values and each state row (`ssm.state_size`).
    pub head_dim: usize,
    /// Key (and query) heads (`ssm.group_count`).
    pub n_k_heads: usize,
    /// Value heads (`ssm.time_step_rank`); see [`DeltaNetConfig::key_head`].
    pub n_v_heads: usize,
    /// qwen3next's layout: `beta` and `alpha` from one projection, and value heads sharing
    /// their key head in runs (qwen35moe: in turn).
    pub joint_beta_alpha: bool,
    /// Whether each block is a delta-net layer (else full attention).
    pub recurrent: Vec<bool>,
}

impl DeltaNetConfig {
    /// All query (or key) heads together.
    pub fn key_dim(&self) -> usize {
        self.n_k_heads * self.head_dim
    }

    /// All value heads together (`ssm.inner_size`).
    pub fn value_dim(&self) -> usize {
        self.n_v_heads * self.head_dim
    }

    /// Channels of the convolution: queries, keys, values.
    pub fn channels(&self) -> usize {
        2 * self.key_dim() + self.value_dim()
    }

    /// f32 elements of one layer's recurrent state: the last `d_conv - 1` convolution inputs
    /// and one `head_dim x head_dim` matrix per value head.
    pub fn state_floats(&self) -> usize {
        (self.d_conv - 1) * self.channels() + self.n_v_heads * self.head_dim * self.head_dim
    }

    /// The key (and query) head value head `h` uses: in turn (qwen35moe, as ggml broadcasts),
    /// or in runs of `n_v_heads / n_k_heads` (qwen3next, as llama.cpp repeats them).
    pub fn key_head(&self, h: usize) -> usize {
        if self.joint_beta_alpha {
            h / (self.n_v_heads / self.n_k_heads)
        } else {
            h % self.n_k_heads
        }
    }

    /// Whether block `layer` is a delta-net layer.
    pub fn is_recurrent(&self, layer: usize) -> bool {
        self.recurrent.get(layer).copied().unwrap_or(false)
    }

    /// Reads the delta-net keys of an architecture with delta-net layers (`None` for others).
    /// `n_layer` blocks run; `n_layer_all` counts the MTP layers after them too.
    pub(super) fn from_metadata(
        meta: &Metadata,
        arch: &Architecture,
        n_layer: usize,
        n_layer_all: usize,
        rope_dim: usize,
    ) -> Result<Option<DeltaNetConfig>, EngineError> {
        if arch.spec(Role::SsmOut).is_none() {
            return Ok(None);
        }
        let key = |k: &str| format!("{}.{k}", arch.name);
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
        let d_conv = bounded("ssm.conv_kernel", MAX_KERNEL)?;
        let head_dim = bounded("ssm.state_size", MAX_HEAD)?;
        let n_k_heads = bounded("ssm.group_count", 1 << 12)?;
        let n_v_heads = bounded("ssm.time_step_rank", 1 << 12)?;
        let inner = bounded("ssm.inner_size", 1 << 20)?;
        if n_v_heads % n_k_heads != 0 {
            return Err(EngineError::BadModel(format!(
                "metadata {} = {n_v_heads} is not a multiple of {} = {n_k_heads}",
                key("ssm.time_step_rank"),
                key("ssm.group_count")
            )));
        }
        if inner != n_v_heads * head_dim {
            return Err(EngineError::Unsupported(format!(
                "metadata {} = {inner} differs from {} x {} = {}",
                key("ssm.inner_size"),
                key("ssm.time_step_rank"),
                key("ssm.state_size"),
                n_v_heads * head_dim
            )));
        }
        let recurrent = recurrent_layers(meta, &key, n_layer, n_layer_all)?;
        let joint_beta_alpha = arch.spec(Role::SsmBetaAlpha).is_some();
        if !joint_beta_alpha {
            // qwen35moe's sectioned RoPE (qwen3next's is plain).
            check_sections(meta, &key, rope_dim)?;
        }
        Ok(Some(DeltaNetConfig {
            d_conv,
            head_dim,
            n_k_heads,
            n_v_heads,
            joint_beta_alpha,
            recurrent,
        }))
    }
}

/// Which blocks are delta-net layers: the file's `attention.recurrent_layers` list, else all
/// but every `full_attention_interval`-th (4 when absent). MTP layers never are.
fn recurrent_layers(
    meta: &Metadata,
    key: &dyn Fn(&str) -> String,
    n_layer: usize,
    n_layer_all: usize,
) -> Result<Vec<bool>, EngineError> {
    let list_key = key("attention.recurrent_layers");
    if meta.contains(&list_key) {
        let (_, items) = meta.get_array(&list_key)?;
        if items.len() != n_layer_all {
            return Err(EngineError::BadModel(format!(
                "metadata {list_key} has {} entries; expected {n_layer_all} (block_count)",
                items.len()
            )));
        }
        return items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let set = match v {
                    Value::Bool(b) => Some(*b),
                    other => other.as_i64().map(|x| x != 0),
                };
                set.map(|r| r && i < n_layer).ok_or_else(|| {
                    EngineError::BadModel(format!(
                        "metadata {list_key}[{i}] is not a boolean or an integer"
                    ))
                })
            })
            .collect();
    }
    let interval_key = key("full_attention_interval");
    let interval = if meta.contains(&interval_key) {
        let v = meta.get_u64(&interval_key)?;
        if v == 0 || v > n_layer_all as u64 {
            return Err(EngineError::BadModel(format!(
                "metadata {interval_key} = {v} is outside 1..={n_layer_all}"
            )));
        }
        v as usize
    } else {
        4
    };
    Ok((0..n_layer_all)
        .map(|i| i < n_layer && (i + 1) % interval != 0)
        .collect())
}

/// `rope.dimension_sections` (multimodal RoPE) splits the rotated pairs among the time,
/// height, width and extra positions. A text token's first three positions are its index,
/// so pairs of those sections rotate exactly as neox RoPE does; the engine runs text only and
/// refuses sections that would give a pair to the extra position (interleaved or in blocks).
fn check_sections(
    meta: &Metadata,
    key: &dyn Fn(&str) -> String,
    rope_dim: usize,
) -> Result<(), EngineError> {
    let k = key("rope.dimension_sections");
    let sections = meta.get_i64_array(&k)?;
    let bad = || {
        EngineError::Unsupported(format!(
            "metadata {k} = {sections:?}: only sections whose first three cover all {} rotated \
             pairs run (text positions)",
            rope_dim / 2
        ))
    };
    if sections.len() < 3 || sections.iter().any(|&s| !(0..=1 << 20).contains(&s)) {
        return Err(bad());
    }
    let [t, h, w] = [0, 1, 2].map(|i| sections[i] as usize);
    let pairs = rope_dim / 2;
    // Both layouts llama.cpp has: sections in blocks (mrope), and interleaved (imrope).
    let blocks = t + h + w >= pairs;
    let interleaved = (0..pairs).all(|s| match s % 3 {
        0 => s < 3 * t,
        1 => s < 3 * h,
        _ => s < 3 * w,
    });
    if blocks && interleaved {
        Ok(())
    } else {
        Err(bad())
    }
}
