//! `qwen35moe` (Qwen3.5/3.6 MoE): a hybrid of gated delta-net (linear attention) layers and,
//! every `full_attention_interval`-th layer, full attention with a gated query (the Q
//! projection gives each head's query and a sigmoid output gate), per-head Q/K norms and
//! sectioned RoPE (on text positions: neox RoPE over `rope.dimension_count`). Every FFN is
//! softmax-routed experts, renormalized, plus a sigmoid-gated shared expert; the FFN's norm is
//! `post_attention_norm`. As llama.cpp's `src/models/qwen35moe.cpp` runs it.

use super::spec::{
    layer_tensor, renamed, with_presence, with_shape, Architecture, Dim, Ffn, Presence, Role::*,
    RopeStyle, Router, Shape, SharedExpert, TensorSpec, SOFTMAX_TOP_K,
};

/// The `qwen35moe` description.
pub(super) const QWEN35MOE: Architecture = Architecture {
    name: "qwen35moe",
    rope: RopeStyle::Neox,
    layer: &LAYER,
    ffn: Ffn::SwiGlu,
    scale_embeddings: false,
    sliding_window: None,
    router: Router {
        shared: SharedExpert::Gated,
        ..SOFTMAX_TOP_K
    },
};

const LAYER: [TensorSpec; 25] = [
    layer_tensor(AttnNorm),
    with_presence(
        with_shape(
            layer_tensor(AttnQ),
            Shape::Matrix {
                cols: Dim::Embd,
                rows: Dim::QGated,
            },
        ),
        Presence::Attention,
    ),
    with_presence(layer_tensor(AttnK), Presence::Attention),
    with_presence(layer_tensor(AttnV), Presence::Attention),
    with_presence(layer_tensor(AttnQNorm), Presence::Attention),
    with_presence(layer_tensor(AttnKNorm), Presence::Attention),
    with_presence(layer_tensor(AttnOutput), Presence::Attention),
    layer_tensor(AttnQkv),
    layer_tensor(AttnGate),
    layer_tensor(SsmConv1d),
    layer_tensor(SsmDtBias),
    layer_tensor(SsmA),
    layer_tensor(SsmBeta),
    layer_tensor(SsmAlpha),
    layer_tensor(SsmNorm),
    layer_tensor(SsmOut),
    renamed(layer_tensor(FfnNorm), "post_attention_norm.weight"),
    with_presence(layer_tensor(FfnGateInp), Presence::Required),
    with_presence(layer_tensor(FfnGateExps), Presence::Required),
    with_presence(layer_tensor(FfnUpExps), Presence::Required),
    with_presence(layer_tensor(FfnDownExps), Presence::Required),
    layer_tensor(FfnGateInpShexp),
    layer_tensor(FfnGateShexp),
    layer_tensor(FfnUpShexp),
    layer_tensor(FfnDownShexp),
];
