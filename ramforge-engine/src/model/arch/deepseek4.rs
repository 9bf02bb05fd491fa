//! `deepseek4` (DeepSeek V4): one key/value row per position that is both key and value
//! (`attn_kv`, normed), a q-LoRA query with an unweighted per-head RMS norm, adjacent-pair RoPE
//! on the last `rope.dimension_count` elements, attention sinks, a raw sliding window
//! (`attention.sliding_window`) joined in one softmax by compressed rows: per layer
//! `attention.compress_ratios` says 0 (the window only), 4 (rows pooled from overlapping
//! blocks of 4 tokens, of which the lightning indexer picks `top_k`) or 128 (every row pooled
//! from 128 tokens). The output is rotated back, then projected per group of heads to a low
//! rank (`attn_output_a`) and from there to the residual (`attn_output_b`). Four residual
//! streams mixed before and after each sub-layer (hyper-connections, `hc_*`) and by the head
//! (`output_hc_*`). Experts gated by sqrt(softplus), the first `hash_layer_count` layers
//! routed by token id (`ffn_gate_tid2eid`), clamped SwiGLU, one shared expert. The block is
//! `forward/dsv4/`; its config `model/dsv4.rs`.

use super::spec::{
    layer_tensor, tensor, with_presence, with_shape, Architecture, Dim, ExpertActivation, Ffn,
    Gating, Normalize, Presence, Role, Role::*, RopeStyle, Router, Shape, SharedExpert, TensorSpec,
    SOFTMAX_TOP_K,
};

/// The `deepseek4` description.
pub(super) const DEEPSEEK4: Architecture = Architecture {
    name: "deepseek4",
    rope: RopeStyle::Adjacent,
    layer: &LAYER,
    ffn: Ffn::SwiGlu,
    scale_embeddings: false,
    // The window is every layer's and is read with the rest of `model/dsv4.rs`.
    sliding_window: None,
    router: Router {
        gating: Gating::SqrtSoftplus,
        gating_key: true,
        normalize: Normalize::Key,
        scale_key: true,
        shared: SharedExpert::Counted,
        activation: ExpertActivation::SwiGluClamped,
        ..SOFTMAX_TOP_K
    },
};

const fn matrix(role: Role, name: &'static str, cols: Dim, rows: Dim) -> TensorSpec {
    tensor(role, name, Shape::Matrix { cols, rows })
}

const fn only(spec: TensorSpec, presence: Presence) -> TensorSpec {
    with_presence(spec, presence)
}

const LAYER: [TensorSpec; 35] = [
    matrix(HcAttnFn, "hc_attn_fn.weight", Dim::HcIn, Dim::HcMix),
    tensor(HcAttnBase, "hc_attn_base.weight", Shape::Vector(Dim::HcMix)),
    tensor(
        HcAttnScale,
        "hc_attn_scale.weight",
        Shape::Vector(Dim::HcScales),
    ),
    layer_tensor(AttnNorm),
    layer_tensor(AttnSinks),
    with_presence(layer_tensor(AttnQA), Presence::Required),
    with_presence(layer_tensor(AttnQANorm), Presence::Required),
    with_presence(
        with_shape(
            layer_tensor(AttnQB),
            Shape::Matrix {
                cols: Dim::QLora,
                rows: Dim::Q,
            },
        ),
        Presence::Required,
    ),
    matrix(AttnKv, "attn_kv.weight", Dim::Embd, Dim::Head),
    with_shape(layer_tensor(AttnKvANorm), Shape::Vector(Dim::Head)),
    only(
        matrix(
            AttnCompressorKv,
            "attn_compressor_kv.weight",
            Dim::Embd,
            Dim::CompKv,
        ),
        Presence::Compressed,
    ),
    only(
        matrix(
            AttnCompressorGate,
            "attn_compressor_gate.weight",
            Dim::Embd,
            Dim::CompKv,
        ),
        Presence::Compressed,
    ),
    only(
        tensor(
            AttnCompressorApe,
            "attn_compressor_ape.weight",
            Shape::Table {
                cols: Dim::CompKv,
                rows: Dim::CompRatio,
            },
        ),
        Presence::Compressed,
    ),
    only(
        tensor(
            AttnCompressorNorm,
            "attn_compressor_norm.weight",
            Shape::Vector(Dim::Head),
        ),
        Presence::Compressed,
    ),
    only(layer_tensor(IndexerQB), Presence::CompressedIndexer),
    only(layer_tensor(IndexerProj), Presence::CompressedIndexer),
    only(
        matrix(
            IndexerCompressorKv,
            "indexer_compressor_kv.weight",
            Dim::Embd,
            Dim::IdxCompKv,
        ),
        Presence::CompressedIndexer,
    ),
    only(
        matrix(
            IndexerCompressorGate,
            "indexer_compressor_gate.weight",
            Dim::Embd,
            Dim::IdxCompKv,
        ),
        Presence::CompressedIndexer,
    ),
    only(
        tensor(
            IndexerCompressorApe,
            "indexer_compressor_ape.weight",
            Shape::Table {
                cols: Dim::IdxCompKv,
                rows: Dim::CompRatio,
            },
        ),
        Presence::CompressedIndexer,
    ),
    only(
        tensor(
            IndexerCompressorNorm,
            "indexer_compressor_norm.weight",
            Shape::Vector(Dim::IdxHead),
        ),
        Presence::CompressedIndexer,
    ),
    matrix(
        AttnOutputA,
        "attn_output_a.weight",
        Dim::OGroupIn,
        Dim::OLora,
    ),
    matrix(AttnOutputB, "attn_output_b.weight", Dim::OLora, Dim::Embd),
    matrix(HcFfnFn, "hc_ffn_fn.weight", Dim::HcIn, Dim::HcMix),
    tensor(HcFfnBase, "hc_ffn_base.weight", Shape::Vector(Dim::HcMix)),
    tensor(
        HcFfnScale,
        "hc_ffn_scale.weight",
        Shape::Vector(Dim::HcScales),
    ),
    layer_tensor(FfnNorm),
    layer_tensor(FfnGateInp),
    only(
        tensor(
            FfnGateTid2eid,
            "ffn_gate_tid2eid.weight",
            Shape::TokenTable(Dim::ExpertsUsed),
        ),
        Presence::HashRouted,
    ),
    only(layer_tensor(FfnExpProbsBias), Presence::ScoreRouted),
    layer_tensor(FfnGateExps),
    layer_tensor(FfnUpExps),
    layer_tensor(FfnDownExps),
    layer_tensor(FfnGateShexp),
    layer_tensor(FfnUpShexp),
    layer_tensor(FfnDownShexp),
];
