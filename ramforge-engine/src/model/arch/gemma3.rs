//! `gemma3`: neox RoPE, embeddings scaled by `sqrt(n_embd)`, per-head Q/K RMSNorm, RMSNorm
//! after attention and after the FFN as well as before, a GELU(tanh)-gated FFN, and five
//! sliding-window layers (RoPE base 10000) to every global one, as llama.cpp runs it. The
//! converter stores the norms' `1 + w`, so they are plain RMSNorm weights here.

use super::spec::{
    layer_tensor, Architecture, Ffn, LocalRopeBase, Role::*, RopeStyle, SlidingWindow, TensorSpec,
    SOFTMAX_TOP_K,
};

/// The `gemma3` description.
pub(super) const GEMMA3: Architecture = Architecture {
    name: "gemma3",
    rope: RopeStyle::Neox,
    layer: &LAYER,
    ffn: Ffn::GeGlu,
    scale_embeddings: true,
    sliding_window: Some(SlidingWindow {
        period: 6,
        period_key: false,
        local_rope_base: LocalRopeBase::Fixed(10000.0),
        local_rope_scaled: false,
    }),
    router: SOFTMAX_TOP_K,
};

const LAYER: [TensorSpec; 13] = [
    layer_tensor(AttnNorm),
    layer_tensor(AttnQ),
    layer_tensor(AttnK),
    layer_tensor(AttnV),
    layer_tensor(AttnQNorm),
    layer_tensor(AttnKNorm),
    layer_tensor(AttnOutput),
    layer_tensor(AttnPostNorm),
    layer_tensor(FfnNorm),
    layer_tensor(FfnGate),
    layer_tensor(FfnUp),
    layer_tensor(FfnDown),
    layer_tensor(FfnPostNorm),
];
