//! DeepSeek V4's hyper-parameters beyond the common ones (`deepseek4.*` keys): the compressed
//! attention's per-layer ratios, window, output groups and indexer, the hyper-connections,
//! hash routing and the SwiGLU clamps. Checked here, before anything is sized from them.

use super::mla::IndexerConfig;
use crate::error::EngineError;
use ramforge_gguf::{Metadata, Value};

/// The residual streams llama.cpp's deepseek4 graph runs (`hyper_connection.count`).
pub const HC_STREAMS: usize = 4;

/// Widths and counts above this are refused before anything is sized from them.
const MAX_DIM: u64 = 1 << 20;

/// DeepSeek V4's sizes (see `arch/deepseek4.rs`).
#[derive(Clone, Debug, PartialEq)]
pub struct Dsv4Config {
    /// Per layer (MTP layers included): 0 (the raw window only), 4 or 128 tokens per
    /// compressed row.
    pub ratios: Vec<usize>,
    /// The raw sliding window (`attention.sliding_window`): a query sees itself and the
    /// `window - 1` positions before it.
    pub window: usize,
    /// The RoPE base of the compressing layers, their compressed rows and the indexer.
    pub compress_rope_base: f32,
    /// The q-LoRA rank.
    pub q_lora: usize,
    /// Output groups (`attention.output_group_count`).
    pub o_groups: usize,
    /// Each output group's rank (`attention.output_lora_rank`).
    pub o_lora: usize,
    /// The lightning indexer of the ratio-4 layers.
    pub indexer: IndexerConfig,
    /// Sinkhorn iterations of the hyper-connections' mixing matrix.
    pub hc_iters: usize,
    /// The hyper-connections' epsilon.
    pub hc_eps: f32,
    /// Leading layers whose experts come from `ffn_gate_tid2eid` by token id.
    pub hash_layers: usize,
    /// Per layer: the routed experts' SwiGLU clamp (0: none).
    pub clamp_exp: Vec<f32>,
    /// Per layer: the shared expert's SwiGLU clamp (0: none).
    pub clamp_shexp: Vec<f32>,
}

impl Dsv4Config {
    /// The compress ratio of `layer` (0 past the listed ones).
    pub fn ratio(&self, layer: usize) -> usize {
        self.ratios.get(layer).copied().unwrap_or(0)
    }

    /// Tokens a compressor of ratio `ratio` keeps pending: two blocks of 4 (ratio 4 pools the
    /// previous block's tokens too), or one block.
    pub fn pending_tokens(ratio: usize) -> usize {
        match ratio {
            4 => 8,
            r => r,
        }
    }

    /// Floats of layer `l`'s fixed per-sequence state (`kv/compressed.rs`): the raw ring
    /// (`window` rows of `head_dim`), then each pending token's compressor entries and scores,
    /// then the indexer compressor's.
    pub fn fixed_floats(&self, l: usize, head_dim: usize) -> usize {
        let r = self.ratio(l);
        let comp = Self::pending_tokens(r) * 2 * self.comp_width(l, head_dim);
        let idx = if r == 4 {
            Self::pending_tokens(r) * 2 * 2 * self.indexer.head_dim
        } else {
            0
        };
        self.window * head_dim + comp + idx
    }

    /// Floats a compressor keeps per token (`head_dim`, twice that at ratio 4, whose blocks
    /// overlap).
    pub fn comp_width(&self, layer: usize, head_dim: usize) -> usize {
        match self.ratio(layer) {
            4 => 2 * head_dim,
            0 => 0,
            _ => head_dim,
        }
    }
}

/// Reads the keys; `n_layer_all` counts the MTP layers too.
pub(super) fn read(
    meta: &Metadata,
    key: &dyn Fn(&str) -> String,
    n_layer: usize,
    n_layer_all: usize,
    (n_head, n_head_kv, head_dim, rope_dim): (usize, usize, usize, usize),
) -> Result<Dsv4Config, EngineError> {
    let bad = |m: String| EngineError::BadModel(m);
    let required = |k: &str, max: u64| -> Result<usize, EngineError> {
        let full = key(k);
        if !meta.contains(&full) {
            return Err(bad(format!("metadata {full} is missing")));
        }
        let v = meta.get_u64(&full)?;
        if v == 0 || v > max {
            return Err(bad(format!("metadata {full} = {v} is outside 1..={max}")));
        }
        Ok(v as usize)
    };
    let optional = |k: &str, max: u64| -> Result<Option<usize>, EngineError> {
        if meta.contains(&key(k)) {
            required(k, max).map(Some)
        } else {
            Ok(None)
        }
    };
    if n_head_kv != 1 {
        return Err(bad(format!(
            "{} = {n_head_kv}: deepseek4 has one key/value head",
            key("attention.head_count_kv")
        )));
    }
    if rope_dim > head_dim {
        return Err(bad(format!(
            "{} = {rope_dim} exceeds the head {head_dim}",
            key("rope.dimension_count")
        )));
    }
    let ratios_key = key("attention.compress_ratios");
    let ratios: Vec<usize> = meta
        .get_i64_array(&ratios_key)
        .map_err(|e| bad(format!("metadata {ratios_key}: {e}")))?
        .into_iter()
        .map(|r| match r {
            0 | 4 | 128 => Ok(r as usize),
            other => Err(EngineError::Unsupported(format!(
                "metadata {ratios_key}: compress ratio {other} (0, 4 and 128 are implemented)"
            ))),
        })
        .collect::<Result<_, _>>()?;
    if ratios.len() != n_layer_all && ratios.len() != n_layer {
        return Err(bad(format!(
            "metadata {ratios_key} has {} values for {} = {n_layer_all}",
            ratios.len(),
            key("block_count")
        )));
    }
    let window = required("attention.sliding_window", 1 << 24)?;
    let base_key = key("attention.compress_rope_freq_base");
    let compress_rope_base = if meta.contains(&base_key) {
        meta.get_f32(&base_key)?
    } else {
        return Err(bad(format!("metadata {base_key} is missing")));
    };
    if !(compress_rope_base.is_finite() && compress_rope_base > 1.0) {
        return Err(bad(format!(
            "metadata {base_key} = {compress_rope_base} must be a finite number above 1"
        )));
    }
    let q_lora = required("attention.q_lora_rank", MAX_DIM)?;
    let o_groups = required("attention.output_group_count", MAX_DIM)?;
    let o_lora = required("attention.output_lora_rank", MAX_DIM)?;
    if n_head % o_groups != 0 {
        return Err(bad(format!(
            "{} = {o_groups} does not divide {} = {n_head}",
            key("attention.output_group_count"),
            key("attention.head_count")
        )));
    }
    let idx_heads = required("attention.indexer.head_count", 4096)?;
    let idx_dim = required("attention.indexer.key_length", MAX_DIM)?;
    let top_k = required("attention.indexer.top_k", 1 << 16)?;
    if idx_dim < rope_dim {
        return Err(bad(format!(
            "{} = {idx_dim} is below {} = {rope_dim}",
            key("attention.indexer.key_length"),
            key("rope.dimension_count")
        )));
    }
    let streams = optional("hyper_connection.count", 64)?.unwrap_or(HC_STREAMS);
    if streams != HC_STREAMS {
        return Err(EngineError::Unsupported(format!(
            "{} = {streams} (llama.cpp's deepseek4 runs {HC_STREAMS} streams)",
            key("hyper_connection.count")
        )));
    }
    let hc_iters = required("hyper_connection.sinkhorn_iterations", 1000)?;
    let eps_key = key("hyper_connection.epsilon");
    let hc_eps = meta.get_f32(&eps_key)?;
    if !(hc_eps.is_finite() && hc_eps > 0.0 && hc_eps < 1.0) {
        return Err(bad(format!(
            "metadata {eps_key} = {hc_eps} must lie in (0, 1)"
        )));
    }
    let hash_layers = match meta.get(&key("hash_layer_count")) {
        None => 0,
        Some(_) => meta.get_u64(&key("hash_layer_count"))? as usize,
    };
    if hash_layers > n_layer {
        return Err(bad(format!(
            "metadata {} = {hash_layers} exceeds the {n_layer} blocks",
            key("hash_layer_count")
        )));
    }
    let clamps = |k: &str| -> Result<Vec<f32>, EngineError> {
        let full = key(k);
        let values = match meta.get(&full) {
            None => vec![0.0; n_layer_all],
            Some(Value::Array(..)) => meta.get_f32_array(&full)?,
            Some(v) => vec![v.as_f64().unwrap_or(f64::NAN) as f32; n_layer_all],
        };
        if values.len() < n_layer || values.iter().any(|v| !(v.is_finite() && *v >= 0.0)) {
            return Err(bad(format!(
                "metadata {full}: one finite clamp of at least 0 per block expected"
            )));
        }
        Ok(values)
    };
    let clamp_exp = clamps("swiglu_clamp_exp")?;
    let clamp_shexp = if meta.contains(&key("swiglu_clamp_shexp")) {
        clamps("swiglu_clamp_shexp")?
    } else {
        clamp_exp.clone()
    };
    Ok(Dsv4Config {
        ratios,
        window,
        compress_rope_base,
        q_lora,
        o_groups,
        o_lora,
        indexer: IndexerConfig {
            n_head: idx_heads,
            head_dim: idx_dim,
            top_k,
            norm_eps: 0.0,
        },
        hc_iters,
        hc_eps,
        hash_layers,
        clamp_exp,
        clamp_shexp,
    })
}
