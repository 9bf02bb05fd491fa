//! `qwen3next` (Qwen3-Next-80B-A3B): the hybrid of qwen35moe before it, with `beta` and
//! `alpha` in one projection (`ssm_ba`: per key head, its value heads' betas then their
//! alphas), value heads sharing key heads in runs (head `h` uses key head
//! `h / (n_v_heads / n_k_heads)`), and plain neox RoPE on the full-attention layers. As
//! llama.cpp's `src/models/qwen3next.cpp` runs it. Its delta-net input projections come as
//! `attn_qkv` and `attn_gate`, or (files of the first converters) as one `ssm_in`.

use super::spec::{
    layer_tensor, renamed, with_presence, with_shape, Architecture, Dim, Ffn, Presence, Role::*,
    RopeStyle, Router, Shape, SharedExpert, TensorSpec, SOFTMAX_TOP_K,
};

/// The `qwen3next` description.
pub(super) const QWEN3NEXT: Architecture = Architecture {
    name: "qwen3next",
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
    with_presence(
        layer_tensor(AttnQkv),
        Presence::RecurrentForm("attn_qkv and attn_gate"),
    ),
    with_presence(
        layer_tensor(AttnGate),
        Presence::RecurrentForm("attn_qkv and attn_gate"),
    ),
    with_presence(layer_tensor(SsmIn), Presence::RecurrentForm("ssm_in")),
    layer_tensor(SsmConv1d),
    layer_tensor(SsmDtBias),
    layer_tensor(SsmA),
    layer_tensor(SsmBetaAlpha),
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
