//! `qwen2`: the llama block with neox-style RoPE and biases on the Q, K and V projections.

use super::spec::{dense_layer, Architecture, Ffn, Role::*, RopeStyle, TensorSpec};

/// The `qwen2` description.
pub(super) const QWEN2: Architecture = Architecture {
    name: "qwen2",
    rope: RopeStyle::Neox,
    layer: &LAYER,
    ffn: Ffn::SwiGlu,
};

const LAYER: [TensorSpec; 12] = [
    dense_layer(AttnNorm),
    dense_layer(AttnQ),
    dense_layer(AttnK),
    dense_layer(AttnV),
    dense_layer(AttnQBias),
    dense_layer(AttnKBias),
    dense_layer(AttnVBias),
    dense_layer(AttnOutput),
    dense_layer(FfnNorm),
    dense_layer(FfnGate),
    dense_layer(FfnUp),
    dense_layer(FfnDown),
];
