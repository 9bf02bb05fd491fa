//! `glm4moe` (GLM-4.5, 4.6, 4.7 and -Air): Q/K/V biases, optional per-head Q/K norms, partial
//! neox RoPE; dense FFNs in the first `leading_dense_block_count` layers, then sigmoid-gated
//! experts chosen with a selection bias, their weights renormalized as the file says and
//! scaled by `expert_weights_scale`, beside `expert_shared_count` shared experts. Its pre-FFN
//! norm is named `post_attention_norm`. Its MTP (nextn) layers are not run by a pass; `--mtp`
//! drafts with the first.

use super::spec::{
    grouped, layer_tensor, renamed, with_presence, Architecture, Ffn, Gating, Normalize, Presence,
    Role::*, RopeStyle, Router, SharedExpert, TensorSpec, SOFTMAX_TOP_K,
};

/// The `glm4moe` description.
pub(super) const GLM4MOE: Architecture = Architecture {
    name: "glm4moe",
    rope: RopeStyle::Neox,
    layer: &LAYER,
    ffn: Ffn::SwiGlu,
    scale_embeddings: false,
    sliding_window: None,
    router: Router {
        gating: Gating::Sigmoid,
        gating_key: true,
        normalize: Normalize::Key,
        scale_key: true,
        dense_lead_key: true,
        shared: SharedExpert::Counted,
        ..SOFTMAX_TOP_K
    },
};

const LAYER: [TensorSpec; 22] = [
    layer_tensor(AttnNorm),
    layer_tensor(AttnQ),
    layer_tensor(AttnK),
    layer_tensor(AttnV),
    layer_tensor(AttnQBias),
    layer_tensor(AttnKBias),
    layer_tensor(AttnVBias),
    grouped(
        AttnQNorm,
        "attn_q_norm.weight",
        layer_tensor(AttnQNorm).shape,
        "Q/K norms",
    ),
    grouped(
        AttnKNorm,
        "attn_k_norm.weight",
        layer_tensor(AttnKNorm).shape,
        "Q/K norms",
    ),
    layer_tensor(AttnOutput),
    renamed(layer_tensor(FfnNorm), "post_attention_norm.weight"),
    with_presence(layer_tensor(FfnGate), Presence::Dense),
    with_presence(layer_tensor(FfnUp), Presence::Dense),
    with_presence(layer_tensor(FfnDown), Presence::Dense),
    layer_tensor(FfnGateInp),
    layer_tensor(FfnExpProbsBias),
    layer_tensor(FfnGateExps),
    layer_tensor(FfnUpExps),
    layer_tensor(FfnDownExps),
    layer_tensor(FfnGateShexp),
    layer_tensor(FfnUpShexp),
    layer_tensor(FfnDownShexp),
];
