//! `qwen2`: the llama block with neox-style RoPE and biases on the Q, K and V projections.

use super::spec::{layer_tensor, Architecture, Ffn, Role::*, RopeStyle, TensorSpec, SOFTMAX_TOP_K};

/// The `qwen2` description.
pub(super) const QWEN2: Architecture = Architecture {
    name: "qwen2",
    rope: RopeStyle::Neox,
    layer: &LAYER,
    ffn: Ffn::SwiGlu,
    scale_embeddings: false,
    sliding_window: None,
    router: SOFTMAX_TOP_K,
};

const LAYER: [TensorSpec; 12] = [
    layer_tensor(AttnNorm),
    layer_tensor(AttnQ),
    layer_tensor(AttnK),
    layer_tensor(AttnV),
    layer_tensor(AttnQBias),
    layer_tensor(AttnKBias),
    layer_tensor(AttnVBias),
    layer_tensor(AttnOutput),
    layer_tensor(FfnNorm),
    layer_tensor(FfnGate),
    layer_tensor(FfnUp),
    layer_tensor(FfnDown),
];
