//! `qwen3`: the qwen2 block without Q/K/V biases, with per-head Q/K RMSNorm before RoPE.

use super::spec::{layer_tensor, Architecture, Ffn, Role::*, RopeStyle, TensorSpec, SOFTMAX_TOP_K};

/// The `qwen3` description.
pub(super) const QWEN3: Architecture = Architecture {
    name: "qwen3",
    rope: RopeStyle::Neox,
    layer: &LAYER,
    ffn: Ffn::SwiGlu,
    scale_embeddings: false,
    sliding_window: None,
    router: SOFTMAX_TOP_K,
};

const LAYER: [TensorSpec; 11] = [
    layer_tensor(AttnNorm),
    layer_tensor(AttnQ),
    layer_tensor(AttnK),
    layer_tensor(AttnV),
    layer_tensor(AttnQNorm),
    layer_tensor(AttnKNorm),
    layer_tensor(AttnOutput),
    layer_tensor(FfnNorm),
    layer_tensor(FfnGate),
    layer_tensor(FfnUp),
    layer_tensor(FfnDown),
];
