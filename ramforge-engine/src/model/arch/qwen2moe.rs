//! `qwen2moe` (Qwen1.5-MoE, Qwen2-57B-A14B): the qwen2 attention (Q/K/V biases, neox RoPE)
//! with softmax-routed experts whose weights are not renormalized, plus a shared expert whose
//! output is scaled by `sigmoid(ffn_gate_inp_shexp . x)`, as llama.cpp runs it.

use super::spec::{
    layer_tensor, with_presence, Architecture, Ffn, Normalize, Presence, Role::*, RopeStyle,
    Router, SharedExpert, TensorSpec, SOFTMAX_TOP_K,
};

/// The `qwen2moe` description.
pub(super) const QWEN2MOE: Architecture = Architecture {
    name: "qwen2moe",
    rope: RopeStyle::Neox,
    layer: &LAYER,
    ffn: Ffn::SwiGlu,
    scale_embeddings: false,
    sliding_window: None,
    router: Router {
        gating_key: false,
        normalize: Normalize::Never,
        shared: SharedExpert::Gated,
        ..SOFTMAX_TOP_K
    },
};

const LAYER: [TensorSpec; 18] = [
    layer_tensor(AttnNorm),
    layer_tensor(AttnQ),
    layer_tensor(AttnK),
    layer_tensor(AttnV),
    layer_tensor(AttnQBias),
    layer_tensor(AttnKBias),
    layer_tensor(AttnVBias),
    layer_tensor(AttnOutput),
    layer_tensor(AttnOutputBias),
    layer_tensor(FfnNorm),
    with_presence(layer_tensor(FfnGateInp), Presence::Required),
    with_presence(layer_tensor(FfnGateExps), Presence::Required),
    with_presence(layer_tensor(FfnUpExps), Presence::Required),
    with_presence(layer_tensor(FfnDownExps), Presence::Required),
    layer_tensor(FfnGateInpShexp),
    layer_tensor(FfnGateShexp),
    layer_tensor(FfnUpShexp),
    layer_tensor(FfnDownShexp),
];
