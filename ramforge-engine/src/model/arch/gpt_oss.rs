//! `gpt-oss` (gpt-oss-20b, -120b): Q/K/V and output biases, attention sinks, neox RoPE,
//! sliding-window layers alternating with full ones (`attention.sliding_window_pattern`, 2
//! by default; `rope.freq_base_swa` for the local ones), and experts with biases chosen by
//! their raw router logits (plus the router's bias), weighted by a softmax over the chosen
//! logits, run with the clamped SwiGLU (alpha 1.702, limit 7), as llama.cpp runs it.

use super::spec::{
    layer_tensor, renamed, with_presence, Architecture, ExpertActivation, Ffn, Gating,
    LocalRopeBase, Normalize, Presence, Role::*, RopeStyle, Router, SlidingWindow, TensorSpec,
    SOFTMAX_TOP_K,
};

/// The `gpt-oss` description.
pub(super) const GPT_OSS: Architecture = Architecture {
    name: "gpt-oss",
    rope: RopeStyle::Neox,
    layer: &LAYER,
    ffn: Ffn::SwiGlu,
    scale_embeddings: false,
    sliding_window: Some(SlidingWindow {
        period: 2,
        period_key: true,
        local_rope_base: LocalRopeBase::Key,
        local_rope_scaled: true,
    }),
    router: Router {
        gating: Gating::SoftmaxWeight,
        gating_key: false,
        normalize: Normalize::Never,
        activation: ExpertActivation::SwiGluOai,
        ..SOFTMAX_TOP_K
    },
};

const LAYER: [TensorSpec; 19] = [
    layer_tensor(AttnNorm),
    layer_tensor(AttnQ),
    layer_tensor(AttnK),
    layer_tensor(AttnV),
    layer_tensor(AttnQBias),
    layer_tensor(AttnKBias),
    layer_tensor(AttnVBias),
    layer_tensor(AttnOutput),
    with_presence(layer_tensor(AttnOutputBias), Presence::Required),
    layer_tensor(AttnSinks),
    renamed(layer_tensor(FfnNorm), "post_attention_norm.weight"),
    with_presence(layer_tensor(FfnGateInp), Presence::Required),
    with_presence(layer_tensor(FfnGateInpBias), Presence::Required),
    with_presence(layer_tensor(FfnGateExps), Presence::Required),
    with_presence(layer_tensor(FfnUpExps), Presence::Required),
    with_presence(layer_tensor(FfnDownExps), Presence::Required),
    with_presence(layer_tensor(FfnGateExpsBias), Presence::Required),
    with_presence(layer_tensor(FfnUpExpsBias), Presence::Required),
    with_presence(layer_tensor(FfnDownExpsBias), Presence::Required),
];
