//! `llama` (and the many models converted to it, e.g. SmolLM2): the dense pre-norm block with
//! adjacent-pair RoPE, no biases, SwiGLU; with `expert_count` > 0 the Mixtral layout, whose FFN
//! is a softmax-routed mixture of SwiGLU experts.

use super::spec::{
    layer_tensor, with_presence, Architecture, ExpertWidth, Ffn, Presence, Role::*, RopeStyle,
    Router, TensorSpec, SOFTMAX_TOP_K,
};

/// The `llama` description.
pub(super) const LLAMA: Architecture = Architecture {
    name: "llama",
    rope: RopeStyle::Adjacent,
    layer: &LAYER,
    ffn: Ffn::SwiGlu,
    scale_embeddings: false,
    sliding_window: None,
    router: Router {
        expert_width: ExpertWidth::FeedForward,
        ..SOFTMAX_TOP_K
    },
};

const LAYER: [TensorSpec; 13] = [
    layer_tensor(AttnNorm),
    layer_tensor(AttnQ),
    layer_tensor(AttnK),
    layer_tensor(AttnV),
    layer_tensor(AttnOutput),
    layer_tensor(FfnNorm),
    with_presence(layer_tensor(FfnGate), Presence::Dense),
    with_presence(layer_tensor(FfnUp), Presence::Dense),
    with_presence(layer_tensor(FfnDown), Presence::Dense),
    layer_tensor(FfnGateInp),
    layer_tensor(FfnGateExps),
    layer_tensor(FfnUpExps),
    layer_tensor(FfnDownExps),
];
