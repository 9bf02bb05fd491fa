//! The model's tensor table: every tensor the forward pass needs, found by name and checked for
//! shape and type at load, before a single weight byte is read.

use crate::config::{Arch, ModelConfig};
use crate::error::EngineError;
use ramforge_gguf::{GgmlType, GgufFile, TensorInfo};

/// One layer's tensors. Matrices are GGML layout: `rows` rows of `cols` elements.
#[derive(Clone, Debug)]
pub struct LayerTensors {
    pub attn_norm: TensorInfo,
    pub attn_q: TensorInfo,
    pub attn_k: TensorInfo,
    pub attn_v: TensorInfo,
    pub attn_output: TensorInfo,
    pub ffn_norm: TensorInfo,
    pub ffn_gate: TensorInfo,
    pub ffn_up: TensorInfo,
    pub ffn_down: TensorInfo,
    /// Q, K and V biases (qwen2): all three or none.
    pub qkv_bias: Option<[TensorInfo; 3]>,
}

impl LayerTensors {
    /// The seven weight matrices, in the order the forward pass uses them.
    pub fn matrices(&self) -> [&TensorInfo; 7] {
        [
            &self.attn_q,
            &self.attn_k,
            &self.attn_v,
            &self.attn_output,
            &self.ffn_gate,
            &self.ffn_up,
            &self.ffn_down,
        ]
    }

    /// Bytes of the seven matrices (what a streamed layer reads from storage).
    pub fn matrix_bytes(&self) -> u64 {
        self.matrices().iter().map(|t| t.n_bytes).sum()
    }

    /// The small f32 vectors kept resident: norms and biases.
    pub fn vectors(&self) -> Vec<&TensorInfo> {
        let mut v = vec![&self.attn_norm, &self.ffn_norm];
        if let Some(b) = &self.qkv_bias {
            v.extend(b.iter());
        }
        v
    }
}

/// Every tensor the forward pass reads.
#[derive(Clone, Debug)]
pub struct ModelTensors {
    pub token_embd: TensorInfo,
    pub output_norm: TensorInfo,
    /// The output projection; `token_embd` itself when the file ties them.
    pub output: TensorInfo,
    pub tied_output: bool,
    /// llama3-style per-frequency RoPE divisors.
    pub rope_freqs: Option<TensorInfo>,
    pub layers: Vec<LayerTensors>,
    pub n_vocab: usize,
}

impl ModelTensors {
    /// Finds and checks every tensor for `cfg`.
    pub fn find(file: &GgufFile, cfg: &ModelConfig) -> Result<ModelTensors, EngineError> {
        let e = cfg.n_embd as u64;
        let get = |name: &str| -> Result<TensorInfo, EngineError> {
            file.header()
                .tensor(name)
                .cloned()
                .ok_or_else(|| EngineError::BadModel(format!("missing tensor {name:?}")))
        };
        let token_embd = get("token_embd.weight")?;
        let n_vocab = token_embd.shape.get(1).copied().unwrap_or(0);
        if n_vocab == 0 || n_vocab > u32::MAX as u64 {
            return Err(EngineError::BadModel(format!(
                "tensor \"token_embd.weight\" has shape {:?}; expected [{e}, n_vocab]",
                token_embd.shape
            )));
        }
        matrix(&token_embd, e, n_vocab)?;
        let output_norm = get("output_norm.weight")?;
        vector(&output_norm, e)?;
        let (output, tied_output) = match file.header().tensor("output.weight") {
            Some(t) => {
                matrix(t, e, n_vocab)?;
                (t.clone(), false)
            }
            None => (token_embd.clone(), true),
        };
        let rope_freqs = match file.header().tensor("rope_freqs.weight") {
            Some(t) => {
                vector(t, (cfg.rope_dim / 2) as u64)?;
                Some(t.clone())
            }
            None => None,
        };

        let (q, kv, ff) = (cfg.q_dim() as u64, cfg.kv_dim() as u64, cfg.n_ff as u64);
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for i in 0..cfg.n_layer {
            let name = |s: &str| format!("blk.{i}.{s}");
            let t = |s: &str| get(&name(s));
            let layer = LayerTensors {
                attn_norm: vector(&t("attn_norm.weight")?, e)?,
                attn_q: matrix(&t("attn_q.weight")?, e, q)?,
                attn_k: matrix(&t("attn_k.weight")?, e, kv)?,
                attn_v: matrix(&t("attn_v.weight")?, e, kv)?,
                attn_output: matrix(&t("attn_output.weight")?, q, e)?,
                ffn_norm: vector(&t("ffn_norm.weight")?, e)?,
                ffn_gate: matrix(&t("ffn_gate.weight")?, e, ff)?,
                ffn_up: matrix(&t("ffn_up.weight")?, e, ff)?,
                ffn_down: matrix(&t("ffn_down.weight")?, ff, e)?,
                qkv_bias: qkv_bias(file, cfg, i)?,
            };
            layers.push(layer);
        }
        Ok(ModelTensors {
            token_embd,
            output_norm,
            output,
            tied_output,
            rope_freqs,
            layers,
            n_vocab: n_vocab as usize,
        })
    }

    /// Bytes of all weight matrices of all layers.
    pub fn layer_bytes_total(&self) -> u64 {
        self.layers.iter().map(LayerTensors::matrix_bytes).sum()
    }

    /// Bytes of the largest layer (the size of one streaming slot).
    pub fn max_layer_bytes(&self) -> u64 {
        self.layers
            .iter()
            .map(LayerTensors::matrix_bytes)
            .max()
            .unwrap_or(0)
    }

    /// Bytes of the norms, biases and RoPE factors, kept resident as f32.
    pub fn vector_bytes(&self) -> u64 {
        let per_layer: u64 = self
            .layers
            .iter()
            .flat_map(|l| l.vectors())
            .map(|t| t.n_elements * 4)
            .sum();
        per_layer
            + self.output_norm.n_elements * 4
            + self.rope_freqs.as_ref().map_or(0, |t| t.n_elements * 4)
    }
}

/// The biases of layer `i`: qwen2 files carry all three, llama files none; anything in between
/// is refused.
fn qkv_bias(
    file: &GgufFile,
    cfg: &ModelConfig,
    i: usize,
) -> Result<Option<[TensorInfo; 3]>, EngineError> {
    let names = ["attn_q.bias", "attn_k.bias", "attn_v.bias"].map(|s| format!("blk.{i}.{s}"));
    let found: Vec<Option<&TensorInfo>> = names.iter().map(|n| file.header().tensor(n)).collect();
    let present = found.iter().filter(|t| t.is_some()).count();
    if present == 0 {
        return Ok(None);
    }
    if present != 3 {
        let missing: Vec<&str> = names
            .iter()
            .zip(&found)
            .filter(|(_, t)| t.is_none())
            .map(|(n, _)| n.as_str())
            .collect();
        return Err(EngineError::BadModel(format!(
            "layer {i} has some Q/K/V biases but not {}; they come all or none",
            missing.join(", ")
        )));
    }
    if cfg.arch != Arch::Qwen2 {
        return Err(EngineError::Unsupported(format!(
            "tensor {:?}: Q/K/V biases in a {} model",
            names[0],
            cfg.arch.name()
        )));
    }
    let want = [cfg.q_dim(), cfg.kv_dim(), cfg.kv_dim()];
    let mut out = Vec::with_capacity(3);
    for (t, w) in found.into_iter().zip(want) {
        let t = t.expect("all three are present");
        out.push(vector(t, w as u64)?);
    }
    Ok(Some([out[0].clone(), out[1].clone(), out[2].clone()]))
}

/// Checks a weight matrix: GGUF shape `[cols, rows]` and a type the kernels support.
fn matrix(t: &TensorInfo, cols: u64, rows: u64) -> Result<TensorInfo, EngineError> {
    if t.shape != [cols, rows] {
        return Err(EngineError::BadModel(format!(
            "tensor {:?} has shape {:?}; expected [{cols}, {rows}]",
            t.name, t.shape
        )));
    }
    supported(t)?;
    Ok(t.clone())
}

/// Checks a 1-D vector of `len` elements of a type that can be dequantized.
fn vector(t: &TensorInfo, len: u64) -> Result<TensorInfo, EngineError> {
    if t.shape != [len] {
        return Err(EngineError::BadModel(format!(
            "tensor {:?} has shape {:?}; expected [{len}]",
            t.name, t.shape
        )));
    }
    supported(t)?;
    Ok(t.clone())
}

fn supported(t: &TensorInfo) -> Result<(), EngineError> {
    if ramforge_quant::is_supported(t.ggml_type) {
        Ok(())
    } else {
        Err(EngineError::Unsupported(format!(
            "tensor {:?} has type {}, which has no kernels",
            t.name, t.ggml_type
        )))
    }
}

/// Whether a type is a plain float type (used to pick golden tolerances).
pub fn is_float_type(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}
