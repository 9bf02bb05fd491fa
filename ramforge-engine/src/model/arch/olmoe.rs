//! `olmoe` (OLMoE-1B-7B): RMSNorm over the whole Q and K projections (not per head), neox
//! RoPE, and softmax-routed experts `feed_forward_length` wide whose weights are not
//! renormalized, as llama.cpp runs it.

use super::spec::{
    layer_tensor, with_presence, with_shape, Architecture, Dim, ExpertWidth, Ffn, Normalize,
    Presence, Role::*, RopeStyle, Router, Shape, TensorSpec, SOFTMAX_TOP_K,
};

/// The `olmoe` description.
pub(super) const OLMOE: Architecture = Architecture {
    name: "olmoe",
    rope: RopeStyle::Neox,
    layer: &LAYER,
    ffn: Ffn::SwiGlu,
    scale_embeddings: false,
    sliding_window: None,
    router: Router {
        gating_key: false,
        normalize: Normalize::Never,
        expert_width: ExpertWidth::FeedForward,
        ..SOFTMAX_TOP_K
    },
};

const LAYER: [TensorSpec; 12] = [
    layer_tensor(AttnNorm),
    layer_tensor(AttnQ),
    layer_tensor(AttnK),
    layer_tensor(AttnV),
    with_shape(layer_tensor(AttnQNorm), Shape::Vector(Dim::Q)),
    with_shape(layer_tensor(AttnKNorm), Shape::Vector(Dim::Kv)),
    layer_tensor(AttnOutput),
    layer_tensor(FfnNorm),
    with_presence(layer_tensor(FfnGateInp), Presence::Required),
    with_presence(layer_tensor(FfnGateExps), Presence::Required),
    with_presence(layer_tensor(FfnUpExps), Presence::Required),
    with_presence(layer_tensor(FfnDownExps), Presence::Required),
];
