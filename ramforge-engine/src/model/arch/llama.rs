//! `llama` (and the many models converted to it, e.g. SmolLM2): the dense pre-norm block with
//! adjacent-pair RoPE, no biases, SwiGLU.

use super::spec::{dense_layer, Architecture, Ffn, Role::*, RopeStyle, TensorSpec};

/// The `llama` description.
pub(super) const LLAMA: Architecture = Architecture {
    name: "llama",
    rope: RopeStyle::Adjacent,
    layer: &LAYER,
    ffn: Ffn::SwiGlu,
};

const LAYER: [TensorSpec; 9] = [
    dense_layer(AttnNorm),
    dense_layer(AttnQ),
    dense_layer(AttnK),
    dense_layer(AttnV),
    dense_layer(AttnOutput),
    dense_layer(FfnNorm),
    dense_layer(FfnGate),
    dense_layer(FfnUp),
    dense_layer(FfnDown),
];
