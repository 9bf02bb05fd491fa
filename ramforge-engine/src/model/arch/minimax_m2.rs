//! `minimax-m2` (MiniMax-M2.x): RMSNorm over the whole Q and K projections, partial neox RoPE
//! (`rope.dimension_count` below the head size), and sigmoid-gated experts chosen with a
//! selection bias (`exp_probs_b`) and renormalized, as llama.cpp runs it.

use super::spec::{
    layer_tensor, with_presence, with_shape, Architecture, Dim, Ffn, Gating, Presence, Role::*,
    RopeStyle, Router, Shape, TensorSpec, SOFTMAX_TOP_K,
};

/// The `minimax-m2` description.
pub(super) const MINIMAX_M2: Architecture = Architecture {
    name: "minimax-m2",
    rope: RopeStyle::Neox,
    layer: &LAYER,
    ffn: Ffn::SwiGlu,
    scale_embeddings: false,
    sliding_window: None,
    router: Router {
        gating: Gating::Sigmoid,
        gating_key: true,
        ..SOFTMAX_TOP_K
    },
};

const LAYER: [TensorSpec; 13] = [
    layer_tensor(AttnNorm),
    layer_tensor(AttnQ),
    layer_tensor(AttnK),
    layer_tensor(AttnV),
    with_shape(layer_tensor(AttnQNorm), Shape::Vector(Dim::Q)),
    with_shape(layer_tensor(AttnKNorm), Shape::Vector(Dim::Kv)),
    layer_tensor(AttnOutput),
    layer_tensor(FfnNorm),
    with_presence(layer_tensor(FfnGateInp), Presence::Required),
    with_presence(layer_tensor(FfnExpProbsBias), Presence::Required),
    with_presence(layer_tensor(FfnGateExps), Presence::Required),
    with_presence(layer_tensor(FfnUpExps), Presence::Required),
    with_presence(layer_tensor(FfnDownExps), Presence::Required),
];
