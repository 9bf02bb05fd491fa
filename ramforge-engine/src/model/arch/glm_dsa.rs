//! `glm-dsa` (GLM-5.x): DeepSeek sparse attention over multi-head latent attention. Each
//! layer is `deepseek2`'s absorbed MLA with a q-LoRA (`attn_q_a`, its norm, `attn_q_b`;
//! `attn_kv_a_mqa`, `attn_k_b`, `attn_v_b`) plus a lightning indexer: `indexer.attn_q_b`
//! (queries from the normed q-LoRA latent), `indexer.attn_k` (one key head, LayerNormed by
//! `indexer.k_norm` with its bias), `indexer.proj` (one weight per indexer head). The indexer
//! keys are cached beside the latent; each query attends only to the
//! `attention.indexer.top_k` positions the indexer scores highest (every position while
//! there are no more than that). In GLM-5.2 only some layers run their indexer ("full", per
//! `attention.indexer.types`); the others ("shared") have no indexer tensors and attend to the
//! positions the last full layer chose. Dense FFNs in the first `leading_dense_block_count` layers,
//! then sigmoid-routed experts with a selection bias beside `expert_shared_count` shared
//! experts. Its MTP (nextn) layers are tolerated but not run (`--mtp` refuses them so far).

use super::spec::{
    layer_tensor, with_presence, with_shape, Architecture, Dim, Ffn, Gating, Normalize, Presence,
    Role::*, RopeStyle, Router, Shape, SharedExpert, TensorSpec, SOFTMAX_TOP_K,
};

/// The `glm-dsa` description.
pub(super) const GLM_DSA: Architecture = Architecture {
    name: "glm-dsa",
    rope: RopeStyle::Adjacent,
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

const LAYER: [TensorSpec; 26] = [
    layer_tensor(AttnNorm),
    layer_tensor(AttnQA),
    layer_tensor(AttnQANorm),
    layer_tensor(AttnQB),
    layer_tensor(AttnKvAMqa),
    layer_tensor(AttnKvANorm),
    layer_tensor(AttnKB),
    layer_tensor(AttnVB),
    with_shape(
        layer_tensor(AttnOutput),
        Shape::Matrix {
            cols: Dim::VMla,
            rows: Dim::Embd,
        },
    ),
    with_presence(layer_tensor(IndexerQB), Presence::Indexer),
    with_presence(layer_tensor(IndexerK), Presence::Indexer),
    with_presence(layer_tensor(IndexerKNorm), Presence::Indexer),
    with_presence(layer_tensor(IndexerKNormBias), Presence::Indexer),
    with_presence(layer_tensor(IndexerProj), Presence::Indexer),
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
