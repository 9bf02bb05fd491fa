//! `deepseek2` (DeepSeek V2/V3/R1, Kimi K2, DeepSeek-V2-Lite): multi-head latent attention
//! (MLA). The query comes through a q-LoRA (`attn_q_a`, its norm, `attn_q_b`) or, in the Lite
//! layout (`attention.q_lora_rank` 0), a plain `attn_q`; `attn_kv_a_mqa` gives each token one
//! latent (normed by `attn_kv_a_norm`) and one RoPE key shared by every head. In the absorbed
//! form llama.cpp's converter writes, `attn_k_b` folds into each head's query and `attn_v_b`
//! turns the attended latent into the head's value, so the cache keeps only the latent and the
//! RoPE key; an older conversion's unsplit `attn_kv_b` is split the same way at run time.
//! Adjacent-pair RoPE on the last `rope.dimension_count` elements of each query head.
//! Dense FFNs in the first `leading_dense_block_count` layers, then experts routed by softmax
//! (V2) or sigmoid with a selection bias and expert groups (V3), beside
//! `expert_shared_count` shared experts.

use super::spec::{
    layer_tensor, with_presence, with_shape, Architecture, Dim, Ffn, Gating, Normalize, Presence,
    Role::*, RopeStyle, Router, Shape, SharedExpert, TensorSpec, SOFTMAX_TOP_K,
};

/// The `deepseek2` description.
pub(super) const DEEPSEEK2: Architecture = Architecture {
    name: "deepseek2",
    rope: RopeStyle::Adjacent,
    layer: &LAYER,
    ffn: Ffn::SwiGlu,
    scale_embeddings: false,
    sliding_window: None,
    router: Router {
        gating: Gating::Softmax,
        gating_key: true,
        normalize: Normalize::Key,
        scale_key: true,
        groups_key: true,
        dense_lead_key: true,
        shared: SharedExpert::Counted,
        ..SOFTMAX_TOP_K
    },
};

const LAYER: [TensorSpec; 23] = [
    layer_tensor(AttnNorm),
    layer_tensor(AttnQA),
    layer_tensor(AttnQANorm),
    layer_tensor(AttnQB),
    with_presence(
        with_shape(
            layer_tensor(AttnQ),
            Shape::Matrix {
                cols: Dim::Embd,
                rows: Dim::QMla,
            },
        ),
        Presence::QLora(false),
    ),
    layer_tensor(AttnKvAMqa),
    layer_tensor(AttnKvANorm),
    layer_tensor(AttnKB),
    layer_tensor(AttnVB),
    layer_tensor(AttnKvB),
    with_shape(
        layer_tensor(AttnOutput),
        Shape::Matrix {
            cols: Dim::VMla,
            rows: Dim::Embd,
        },
    ),
    layer_tensor(FfnNorm),
    with_presence(layer_tensor(FfnGate), Presence::Dense),
    with_presence(layer_tensor(FfnUp), Presence::Dense),
    with_presence(layer_tensor(FfnDown), Presence::Dense),
    layer_tensor(FfnGateInp),
    with_presence(
        layer_tensor(FfnExpProbsBias),
        Presence::MoeGroup("selection bias"),
    ),
    layer_tensor(FfnGateExps),
    layer_tensor(FfnUpExps),
    layer_tensor(FfnDownExps),
    layer_tensor(FfnGateShexp),
    layer_tensor(FfnUpShexp),
    layer_tensor(FfnDownShexp),
];
