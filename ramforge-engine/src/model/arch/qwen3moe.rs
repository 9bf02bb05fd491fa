//! `qwen3moe`: the qwen3 attention (per-head Q/K RMSNorm, neox RoPE) with a mixture of SwiGLU
//! experts (`expert_feed_forward_length` wide) for its FFN: softmax over the router's logits,
//! the top `expert_used_count`, their weights renormalized to sum to one.

use super::spec::{
    layer_tensor, with_presence, Architecture, Ffn, Presence, Role::*, RopeStyle, TensorSpec,
    SOFTMAX_TOP_K,
};

/// The `qwen3moe` description.
pub(super) const QWEN3MOE: Architecture = Architecture {
    name: "qwen3moe",
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
    layer_tensor(AttnQNorm),
    layer_tensor(AttnKNorm),
    layer_tensor(AttnOutput),
    layer_tensor(FfnNorm),
    with_presence(layer_tensor(FfnGateInp), Presence::Required),
    with_presence(layer_tensor(FfnGateExps), Presence::Required),
    with_presence(layer_tensor(FfnUpExps), Presence::Required),
    with_presence(layer_tensor(FfnDownExps), Presence::Required),
];
