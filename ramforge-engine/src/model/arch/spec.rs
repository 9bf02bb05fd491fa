//! The vocabulary architecture descriptions are written in: roles, tensor specs, shapes,
//! dimensions, block variants, and the dense llama-family layer they start from.

/// What distinguishes one architecture from another.
#[derive(Debug, PartialEq)]
pub struct Architecture {
    /// The `general.architecture` value (and the prefix of its metadata keys).
    pub name: &'static str,
    /// How RoPE pairs the elements of a head.
    pub rope: RopeStyle,
    /// The tensors of every layer (`blk.N.<name>`); a layer tensor not listed here is refused
    /// rather than ignored.
    pub layer: &'static [TensorSpec],
    /// The feed-forward network's gating.
    pub ffn: Ffn,
    /// Whether token embeddings are multiplied by `sqrt(n_embd)` before the first block
    /// (gemma).
    pub scale_embeddings: bool,
    /// Local (sliding-window) attention on most layers, when the file gives a window.
    pub sliding_window: Option<SlidingWindow>,
    /// How a layer with experts routes each token to them (used only when the file has
    /// experts).
    pub router: Router,
}

/// How an MoE layer routes, weights and runs its experts: llama.cpp's `build_moe_ffn`
/// parameters for the architecture, and which of them the file may set.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Router {
    /// The gating function when the file names none.
    pub gating: Gating,
    /// Whether `<arch>.expert_gating_func` is read.
    pub gating_key: bool,
    /// Whether the selected experts' weights are renormalized to sum to one.
    pub normalize: Normalize,
    /// Whether `<arch>.expert_weights_scale` multiplies the weights.
    pub scale_key: bool,
    /// Whether `<arch>.expert_group_count` / `expert_group_used_count` limit the choice to the
    /// best groups of experts (DeepSeek V3).
    pub groups_key: bool,
    /// Whether the first `<arch>.leading_dense_block_count` layers have a dense FFN instead.
    pub dense_lead_key: bool,
    /// How wide one routed expert is.
    pub expert_width: ExpertWidth,
    /// The shared expert beside the routed ones, if the architecture has one.
    pub shared: SharedExpert,
    /// The activation of every expert.
    pub activation: ExpertActivation,
}

/// The plain router: softmax over all experts, the top k renormalized (Mixtral, qwen3moe).
pub(crate) const SOFTMAX_TOP_K: Router = Router {
    gating: Gating::Softmax,
    gating_key: false,
    normalize: Normalize::Always,
    scale_key: false,
    groups_key: false,
    dense_lead_key: false,
    expert_width: ExpertWidth::ExpertKey,
    shared: SharedExpert::None,
    activation: ExpertActivation::SwiGlu,
};

/// How router logits become expert probabilities (`expert_gating_func`; llama.cpp's numbers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gating {
    /// 1: softmax over every expert.
    Softmax,
    /// 2: a sigmoid per expert.
    Sigmoid,
    /// 3: the raw logits choose; a softmax over the chosen ones weights them (gpt-oss).
    SoftmaxWeight,
    /// 4: `sqrt(softplus(logit))` per expert (DeepSeek V4).
    SqrtSoftplus,
}

impl Gating {
    /// The gating `expert_gating_func = id` names.
    pub fn from_id(id: u64) -> Option<Gating> {
        Some(match id {
            1 => Gating::Softmax,
            2 => Gating::Sigmoid,
            3 => Gating::SoftmaxWeight,
            4 => Gating::SqrtSoftplus,
            _ => return None,
        })
    }
}

/// Whether the chosen experts' weights are renormalized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Normalize {
    /// Always.
    Always,
    /// Never.
    Never,
    /// As `<arch>.expert_weights_norm` says (false when absent).
    Key,
}

/// The hidden width of one routed expert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertWidth {
    /// `feed_forward_length` (Mixtral-style llama, olmoe).
    FeedForward,
    /// `expert_feed_forward_length`, else `feed_forward_length / expert_used_count`.
    ExpertKey,
}

/// The always-active expert beside the routed ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedExpert {
    /// None.
    None,
    /// `expert_shared_feed_forward_length` wide (else `feed_forward_length`), its output
    /// multiplied by `sigmoid(ffn_gate_inp_shexp . x)` (qwen2moe).
    Gated,
    /// `expert_shared_count` experts' width (`n_ff_exp * count`), ungated (glm4moe, deepseek2).
    Counted,
}

/// The activation inside each expert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertActivation {
    /// `silu(gate) * up`.
    SwiGlu,
    /// gpt-oss's clamped form: `g = min(gate, 7)`, `u = clamp(up, -7, 7)`,
    /// `g * sigmoid(1.702 g) * (u + 1)`.
    SwiGluOai,
    /// DeepSeek V4's: `silu(min(gate, L)) * clamp(up, -L, L)`, `L` per layer from
    /// `swiglu_clamp_exp` (routed) and `swiglu_clamp_shexp` (shared).
    SwiGluClamped,
}

/// Interleaved local and global attention: every `period`-th layer (the last of each period)
/// attends to the whole context with `rope.freq_base`, the others to the last
/// `attention.sliding_window` positions with their own RoPE base.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlidingWindow {
    /// Layers per local/global period, unless `<arch>.attention.sliding_window_pattern` says.
    pub period: usize,
    /// Whether `<arch>.attention.sliding_window_pattern` may set the period.
    pub period_key: bool,
    /// The RoPE base of the local layers.
    pub local_rope_base: LocalRopeBase,
    /// Whether the local layers scale positions as the global ones do (else not at all).
    pub local_rope_scaled: bool,
}

/// Where the local layers' RoPE base comes from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LocalRopeBase {
    /// A fixed base (gemma3: 10000).
    Fixed(f32),
    /// `<arch>.rope.freq_base_swa`, else the global base (gpt-oss).
    Key,
}

/// Which two elements of a head one RoPE rotation acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// `(x[2j], x[2j+1])` (llama).
    Adjacent,
    /// `(x[j], x[j + d/2])` (qwen2, "neox").
    Neox,
}

/// How the feed-forward network gates its hidden layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ffn {
    /// `down(silu(gate(x)) * up(x))`.
    SwiGlu,
    /// `down(gelu_tanh(gate(x)) * up(x))` (gemma).
    GeGlu,
}

/// What a layer tensor is for: the forward pass asks for tensors by role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// The RMSNorm before attention.
    AttnNorm,
    /// The query projection.
    AttnQ,
    /// The key projection.
    AttnK,
    /// The value projection.
    AttnV,
    /// The query bias.
    AttnQBias,
    /// The key bias.
    AttnKBias,
    /// The value bias.
    AttnVBias,
    /// The per-head RMSNorm of the queries (over `head_dim`, before RoPE).
    AttnQNorm,
    /// The per-head RMSNorm of the keys.
    AttnKNorm,
    /// The attention output projection.
    AttnOutput,
    /// The RMSNorm of the attention output, before the residual add (gemma).
    AttnPostNorm,
    /// The RMSNorm before the feed-forward network.
    FfnNorm,
    /// The FFN gate projection.
    FfnGate,
    /// The FFN up projection.
    FfnUp,
    /// The FFN down projection.
    FfnDown,
    /// The mixture-of-experts router: one logit per expert.
    FfnGateInp,
    /// Every expert's gate projection, one expert per slice of the last dimension.
    FfnGateExps,
    /// Every expert's up projection.
    FfnUpExps,
    /// Every expert's down projection.
    FfnDownExps,
    /// The RMSNorm of the FFN output, before the residual add (gemma).
    FfnPostNorm,
    /// The attention output projection's bias.
    AttnOutputBias,
    /// One extra logit per query head that takes part in the softmax but has no value
    /// (gpt-oss's attention sinks).
    AttnSinks,
    /// The router's bias, added to its logits.
    FfnGateInpBias,
    /// The expert-selection bias (`exp_probs_b`): added to the probabilities that choose the
    /// experts, not to the weights their outputs are mixed with (DeepSeek V3, GLM-4.5).
    FfnExpProbsBias,
    /// Every expert's gate bias, one `[FfExp]` row per expert.
    FfnGateExpsBias,
    /// Every expert's up bias.
    FfnUpExpsBias,
    /// Every expert's down bias, one `[Embd]` row per expert.
    FfnDownExpsBias,
    /// The shared expert's scalar gate (`sigmoid(w . x)`), qwen2moe.
    FfnGateInpShexp,
    /// The shared expert's gate projection.
    FfnGateShexp,
    /// The shared expert's up projection.
    FfnUpShexp,
    /// The shared expert's down projection.
    FfnDownShexp,
    /// Multi-head latent attention: the query's down projection (q-LoRA, `q_lora_rank` wide).
    AttnQA,
    /// The RMSNorm of the q-LoRA latent.
    AttnQANorm,
    /// The query's up projection from the q-LoRA latent (every head's `key_length_mla`).
    AttnQB,
    /// The shared latent and RoPE key: `kv_lora_rank + rope` rows (deepseek2).
    AttnKvAMqa,
    /// The RMSNorm of the key/value latent.
    AttnKvANorm,
    /// Per head: the latent rows of the non-rotated key (absorbed into the query).
    AttnKB,
    /// Per head: the value from the attended latent.
    AttnVB,
    /// Every head's non-rotated key and value from the latent, unsplit (older conversions of
    /// `deepseek2`): per head `qk_nope` key rows, then `v_head` value rows.
    AttnKvB,
    /// A gated delta-net layer's joint Q/K/V projection (before its convolution).
    AttnQkv,
    /// A gated delta-net layer's output gate `z` (its norm is multiplied by `silu(z)`).
    AttnGate,
    /// The delta-net causal convolution: `ssm.conv_kernel` taps per Q/K/V channel.
    SsmConv1d,
    /// The delta-net time-step bias, added to `alpha` before the softplus.
    SsmDtBias,
    /// The delta-net decay `-exp(A_log)`, one per value head.
    SsmA,
    /// The delta-net `beta` projection (update strength, through a sigmoid).
    SsmBeta,
    /// The delta-net `alpha` projection (decay, through the softplus).
    SsmAlpha,
    /// `beta` and `alpha` in one projection (qwen3next).
    SsmBetaAlpha,
    /// The delta-net output's per-head RMSNorm.
    SsmNorm,
    /// The delta-net output projection.
    SsmOut,
    /// qwen3next's older joint projection of queries, keys, values and `z`, grouped by key
    /// head (instead of `attn_qkv` and `attn_gate`).
    SsmIn,
    /// The lightning indexer's queries from the normed q-LoRA latent (glm-dsa): every indexer
    /// head's `indexer.key_length`.
    IndexerQB,
    /// The lightning indexer's key (one head) from the normed input.
    IndexerK,
    /// The LayerNorm weight of the indexer's key.
    IndexerKNorm,
    /// The LayerNorm bias of the indexer's key.
    IndexerKNormBias,
    /// The indexer's per-head weights from the normed input.
    IndexerProj,
    /// DeepSeek V4: the one key/value row (keys are the values), `head_dim` wide.
    AttnKv,
    /// DeepSeek V4: each output group's heads to its own low rank (`output_lora_rank`).
    AttnOutputA,
    /// DeepSeek V4: every group's low-rank output to the residual width.
    AttnOutputB,
    /// DeepSeek V4 hyper-connections before attention: the streams' mixes from their normed concatenation.
    HcAttnFn,
    /// The bias of those mixes.
    HcAttnBase,
    /// The three scales of those mixes (pre, post, combination).
    HcAttnScale,
    /// DeepSeek V4 hyper-connections before the FFN: the mixes.
    HcFfnFn,
    /// Their bias.
    HcFfnBase,
    /// Their three scales.
    HcFfnScale,
    /// DeepSeek V4 compressor: each token's entries pooled into a compressed row.
    AttnCompressorKv,
    /// The compressor's pooling scores.
    AttnCompressorGate,
    /// The compressor's score bias per position in its block.
    AttnCompressorApe,
    /// The RMSNorm of a compressed row.
    AttnCompressorNorm,
    /// DeepSeek V4's indexer compressor: entries of the indexer's key rows.
    IndexerCompressorKv,
    /// Its pooling scores.
    IndexerCompressorGate,
    /// Its score bias per position in the block.
    IndexerCompressorApe,
    /// The RMSNorm of an indexer key row.
    IndexerCompressorNorm,
    /// DeepSeek V4's hash routing: each token id's experts (I32, `expert_used_count` per token).
    FfnGateTid2eid,
    /// An MTP (nextn) layer's projection of its normed token embedding and normed hidden
    /// state, concatenated (`2 n_embd` columns), to its block's input.
    NextnEhProj,
    /// The RMSNorm of an MTP layer's token embedding.
    NextnEnorm,
    /// The RMSNorm of the hidden state an MTP layer takes.
    NextnHnorm,
    /// The RMSNorm before an MTP layer's output projection (the model's own).
    NextnSharedHeadNorm,
}

impl Role {
    /// How many roles there are (the size of a per-layer table indexed by role).
    pub const COUNT: usize = Role::NextnSharedHeadNorm as usize + 1;

    /// An MoE layer's expert stacks, in the order an expert's slices are used: gate, up, down.
    pub const EXPERT_STACKS: [Role; 3] = [Role::FfnGateExps, Role::FfnUpExps, Role::FfnDownExps];

    /// Every role, in declaration order (`Role::ALL[r as usize] == r`).
    pub const ALL: [Role; Role::COUNT] = {
        use Role::*;
        [
            AttnNorm,
            AttnQ,
            AttnK,
            AttnV,
            AttnQBias,
            AttnKBias,
            AttnVBias,
            AttnQNorm,
            AttnKNorm,
            AttnOutput,
            AttnPostNorm,
            FfnNorm,
            FfnGate,
            FfnUp,
            FfnDown,
            FfnGateInp,
            FfnGateExps,
            FfnUpExps,
            FfnDownExps,
            FfnPostNorm,
            AttnOutputBias,
            AttnSinks,
            FfnGateInpBias,
            FfnExpProbsBias,
            FfnGateExpsBias,
            FfnUpExpsBias,
            FfnDownExpsBias,
            FfnGateInpShexp,
            FfnGateShexp,
            FfnUpShexp,
            FfnDownShexp,
            AttnQA,
            AttnQANorm,
            AttnQB,
            AttnKvAMqa,
            AttnKvANorm,
            AttnKB,
            AttnVB,
            AttnKvB,
            AttnQkv,
            AttnGate,
            SsmConv1d,
            SsmDtBias,
            SsmA,
            SsmBeta,
            SsmAlpha,
            SsmBetaAlpha,
            SsmNorm,
            SsmOut,
            SsmIn,
            IndexerQB,
            IndexerK,
            IndexerKNorm,
            IndexerKNormBias,
            IndexerProj,
            AttnKv,
            AttnOutputA,
            AttnOutputB,
            HcAttnFn,
            HcAttnBase,
            HcAttnScale,
            HcFfnFn,
            HcFfnBase,
            HcFfnScale,
            AttnCompressorKv,
            AttnCompressorGate,
            AttnCompressorApe,
            AttnCompressorNorm,
            IndexerCompressorKv,
            IndexerCompressorGate,
            IndexerCompressorApe,
            IndexerCompressorNorm,
            FfnGateTid2eid,
            NextnEhProj,
            NextnEnorm,
            NextnHnorm,
            NextnSharedHeadNorm,
        ]
    };

    /// The tensors an MTP (nextn) layer carries beyond its block's (llama.cpp's
    /// `LLM_TENSOR_NEXTN_*` that the drafts use).
    pub const NEXTN: [Role; 4] = [
        Role::NextnEhProj,
        Role::NextnEnorm,
        Role::NextnHnorm,
        Role::NextnSharedHeadNorm,
    ];

    /// The expert biases, in the order of [`Role::EXPERT_STACKS`].
    pub const EXPERT_BIASES: [Role; 3] = [
        Role::FfnGateExpsBias,
        Role::FfnUpExpsBias,
        Role::FfnDownExpsBias,
    ];
}

/// One tensor of a layer: its role, name suffix, shape and whether a file must carry it.
#[derive(Debug, PartialEq)]
pub struct TensorSpec {
    /// What the tensor is for.
    pub role: Role,
    /// The name after `blk.N.`, e.g. `attn_q.weight`.
    pub name: &'static str,
    /// Its expected shape.
    pub shape: Shape,
    /// Whether a file must carry it.
    pub presence: Presence,
}

/// A tensor's expected shape, in the model's dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A 1-D vector (norm weights, biases), kept resident as f32.
    Vector(Dim),
    /// A weight matrix: GGUF shape `[cols, rows]`, `rows` rows of `cols` elements, used as
    /// `y[row] = sum_col W[row][col] x[col]`. Matrices are what streaming reads.
    Matrix {
        /// Elements of a row (the input width).
        cols: Dim,
        /// Rows (the output width).
        rows: Dim,
    },
    /// One vector per expert (expert biases): GGUF shape `[len, n_expert]`, kept resident as
    /// f32 like every vector.
    ExpertVectors(Dim),
    /// A small 2-D table kept resident as f32, like a vector: GGUF shape `[cols, rows]`
    /// (the delta-net convolution's taps).
    Table {
        /// Elements of a row.
        cols: Dim,
        /// Rows.
        rows: Dim,
    },
    /// One matrix per expert, stacked: GGUF shape `[cols, rows, n_expert]`. Read and streamed
    /// whole, like any matrix.
    Experts {
        /// Elements of a row.
        cols: Dim,
        /// Rows of one expert.
        rows: Dim,
    },
    /// A table of `cols` I32 values per token id (GGUF `[cols, n_vocab]`), kept resident
    /// (DeepSeek V4's hash routing); every value is checked when it is read.
    TokenTable(Dim),
    /// One matrix per query head, stacked: GGUF shape `[cols, rows, n_head]` (MLA's
    /// `attn_k_b`, `attn_v_b`).
    PerHead {
        /// Elements of a row.
        cols: Dim,
        /// Rows of one head.
        rows: Dim,
    },
}

/// A model dimension a shape is given in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dim {
    /// The residual stream's width (`n_embd`).
    Embd,
    /// Two residual-stream rows side by side (an MTP layer's token embedding and hidden state).
    EmbdPair,
    /// All query heads together (`n_head * head_dim`).
    Q,
    /// All key (or value) heads together (`n_head_kv * head_dim`).
    Kv,
    /// The feed-forward hidden width (`n_ff`).
    Ff,
    /// Elements of one attention head (`head_dim`).
    Head,
    /// Experts (`expert_count`).
    Experts,
    /// One expert's hidden width (`n_ff_exp`).
    FfExp,
    /// The shared expert's hidden width (`n_ff_shexp`).
    FfShexp,
    /// Query heads (`n_head`).
    Heads,
    /// MLA: the q-LoRA rank (`attention.q_lora_rank`).
    QLora,
    /// MLA: the key/value latent (`attention.kv_lora_rank`).
    KvLora,
    /// MLA: the latent and the RoPE key together.
    KvAMqa,
    /// MLA: every head's query (`n_head * key_length_mla`).
    QMla,
    /// MLA: the non-rotated part of a head's key (`key_length_mla - rope`).
    QkNope,
    /// MLA: one head's value (`value_length_mla`).
    VHead,
    /// MLA: every head's value (`n_head * value_length_mla`).
    VMla,
    /// MLA: every head's key and value rows of the unsplit `attn_kv_b`.
    KvB,
    /// All query heads with their output gates (`2 * n_head * head_dim`, gated attention).
    QGated,
    /// The delta-net convolution's channels: queries, keys and values (`2 * key + value`).
    SsmChannels,
    /// The delta-net values of all heads (`ssm.inner_size`).
    SsmInner,
    /// Delta-net value heads (`ssm.time_step_rank`).
    SsmHeads,
    /// Both `beta` and `alpha` of every value head (`2 * ssm.time_step_rank`).
    SsmHeads2,
    /// Elements of one delta-net head (`ssm.state_size`).
    SsmHeadDim,
    /// Taps of the delta-net convolution (`ssm.conv_kernel`).
    SsmKernel,
    /// Queries, keys, values and `z` of every head (`2 * key + 2 * value`).
    SsmQkvz,
    /// The lightning indexer: every indexer head's query (`head_count * key_length`).
    IdxQ,
    /// The lightning indexer: one head (`attention.indexer.key_length`).
    IdxHead,
    /// The lightning indexer's heads (`attention.indexer.head_count`).
    IdxHeads,
    /// DeepSeek V4: the hyper-connection streams side by side (`hyper_connection.count * n_embd`).
    HcIn,
    /// DeepSeek V4: a hyper-connection's mixes (`(2 + count) * count`).
    HcMix,
    /// DeepSeek V4: a hyper-connection's three scales.
    HcScales,
    /// DeepSeek V4: one output group's heads (`n_head / output_group_count * head_dim`).
    OGroupIn,
    /// DeepSeek V4: every output group's rank (`output_group_count * output_lora_rank`).
    OLora,
    /// DeepSeek V4: a compressor's entries per token (`head_dim`, twice that at ratio 4).
    CompKv,
    /// DeepSeek V4: the layer's compress ratio (tokens per compressed row).
    CompRatio,
    /// DeepSeek V4: the indexer compressor's entries per token (twice the indexer head).
    IdxCompKv,
    /// Experts a token is routed to (`expert_used_count`).
    ExpertsUsed,
}

/// Whether a file must carry a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Every file of the architecture carries it.
    Required,
    /// Optional, but the tensors of the same group come all or none (e.g. Q/K/V biases).
    Group(&'static str),
    /// Required in a layer with a dense FFN (every layer of a model without experts, the
    /// leading dense layers of one with them), absent in a layer with experts.
    Dense,
    /// Required in a layer with experts, absent otherwise.
    Moe,
    /// In a layer with experts, optional but all or none with its group.
    MoeGroup(&'static str),
    /// Required in a layer with experts when the model has a shared expert.
    Shared,
    /// Required when the model's `attention.q_lora_rank` is above 0 (`true`) or is 0
    /// (`false`), absent otherwise (MLA's q-LoRA or plain query).
    QLora(bool),
    /// Required when MLA's `attn_k_b`/`attn_v_b` are split (`true`, the absorbed layout) or
    /// when the file has the older unsplit `attn_kv_b` (`false`).
    Absorbed(bool),
    /// Required in a layer whose lightning indexer runs (glm-dsa's full layers), absent in a
    /// shared one (`ModelConfig::indexer_full`).
    Indexer,
    /// Required in a full-attention layer of a hybrid model (every layer of another).
    Attention,
    /// Required in a DeepSeek V4 layer whose compress ratio is not 0, absent otherwise.
    Compressed,
    /// Required in a DeepSeek V4 layer of compress ratio 4 (its lightning indexer).
    CompressedIndexer,
    /// Required in a DeepSeek V4 MoE layer routed by token id (`hash_layer_count`).
    HashRouted,
    /// Required in an MoE layer routed by its scores (DeepSeek V4's other layers).
    ScoreRouted,
    /// Required in a gated delta-net layer of a hybrid model, absent elsewhere.
    Recurrent,
    /// In a gated delta-net layer, one of two alternative forms of its input projections
    /// (`attn_qkv` with `attn_gate`, or `ssm_in`): all of the form or none, and exactly one
    /// form; absent elsewhere.
    RecurrentForm(&'static str),
}

/// The shorthand the description files use.
pub(crate) const fn tensor(role: Role, name: &'static str, shape: Shape) -> TensorSpec {
    TensorSpec {
        role,
        name,
        shape,
        presence: Presence::Required,
    }
}

/// A `tensor` of an all-or-none `group`.
pub(crate) const fn grouped(
    role: Role,
    name: &'static str,
    shape: Shape,
    group: &'static str,
) -> TensorSpec {
    TensorSpec {
        role,
        name,
        shape,
        presence: Presence::Group(group),
    }
}

/// A tensor of the gated delta-net layers only.
const fn recurrent(role: Role, name: &'static str, shape: Shape) -> TensorSpec {
    TensorSpec {
        role,
        name,
        shape,
        presence: Presence::Recurrent,
    }
}

/// A stack of one matrix per expert, present exactly when the model has experts.
const fn experts(role: Role, name: &'static str, cols: Dim, rows: Dim) -> TensorSpec {
    TensorSpec {
        role,
        name,
        shape: Shape::Experts { cols, rows },
        presence: Presence::Moe,
    }
}

/// `spec` with `presence`.
pub(crate) const fn with_presence(spec: TensorSpec, presence: Presence) -> TensorSpec {
    TensorSpec { presence, ..spec }
}

/// `spec` with `shape` (e.g. a Q/K norm over the whole projection instead of each head).
pub(crate) const fn with_shape(spec: TensorSpec, shape: Shape) -> TensorSpec {
    TensorSpec { shape, ..spec }
}

/// `spec` under another name (e.g. glm4moe's FFN norm is `post_attention_norm.weight`).
pub(crate) const fn renamed(spec: TensorSpec, name: &'static str) -> TensorSpec {
    TensorSpec { name, ..spec }
}

/// The tensor that plays `role`, as every description here names and shapes it: the dense
/// llama-family layer (pre-norm attention: Q, K, V, output; a pre-norm gated FFN: gate, up,
/// down), plus what later families add: per-head Q/K norms, gemma's post-norms, and the
/// mixture-of-experts FFN (router and stacked experts, [`Presence::Moe`]).
pub(crate) const fn layer_tensor(role: Role) -> TensorSpec {
    use Dim::*;
    use Role::*;
    match role {
        AttnQA | AttnQANorm | AttnQB | AttnKvAMqa | AttnKvANorm | AttnKB | AttnVB | AttnKvB => {
            mla_tensor(role)
        }
        NextnEhProj => tensor(
            NextnEhProj,
            "nextn.eh_proj.weight",
            Shape::Matrix {
                cols: EmbdPair,
                rows: Embd,
            },
        ),
        NextnEnorm => tensor(NextnEnorm, "nextn.enorm.weight", Shape::Vector(Embd)),
        NextnHnorm => tensor(NextnHnorm, "nextn.hnorm.weight", Shape::Vector(Embd)),
        NextnSharedHeadNorm => tensor(
            NextnSharedHeadNorm,
            "nextn.shared_head_norm.weight",
            Shape::Vector(Embd),
        ),
        IndexerQB => tensor(
            IndexerQB,
            "indexer.attn_q_b.weight",
            Shape::Matrix {
                cols: QLora,
                rows: IdxQ,
            },
        ),
        IndexerK => tensor(
            IndexerK,
            "indexer.attn_k.weight",
            Shape::Matrix {
                cols: Embd,
                rows: IdxHead,
            },
        ),
        IndexerKNorm => tensor(
            IndexerKNorm,
            "indexer.k_norm.weight",
            Shape::Vector(IdxHead),
        ),
        IndexerKNormBias => tensor(
            IndexerKNormBias,
            "indexer.k_norm.bias",
            Shape::Vector(IdxHead),
        ),
        IndexerProj => tensor(
            IndexerProj,
            "indexer.proj.weight",
            Shape::Matrix {
                cols: Embd,
                rows: IdxHeads,
            },
        ),
        AttnQNorm => tensor(AttnQNorm, "attn_q_norm.weight", Shape::Vector(Head)),
        AttnKNorm => tensor(AttnKNorm, "attn_k_norm.weight", Shape::Vector(Head)),
        AttnPostNorm => tensor(
            AttnPostNorm,
            "post_attention_norm.weight",
            Shape::Vector(Embd),
        ),
        FfnPostNorm => tensor(FfnPostNorm, "post_ffw_norm.weight", Shape::Vector(Embd)),
        AttnOutputBias => grouped(
            AttnOutputBias,
            "attn_output.bias",
            Shape::Vector(Embd),
            "attention output bias",
        ),
        AttnSinks => tensor(AttnSinks, "attn_sinks.weight", Shape::Vector(Heads)),
        FfnGateInpBias => with_presence(
            tensor(FfnGateInpBias, "ffn_gate_inp.bias", Shape::Vector(Experts)),
            Presence::Moe,
        ),
        FfnExpProbsBias => with_presence(
            tensor(FfnExpProbsBias, "exp_probs_b.bias", Shape::Vector(Experts)),
            Presence::Moe,
        ),
        FfnGateExpsBias => with_presence(
            tensor(
                FfnGateExpsBias,
                "ffn_gate_exps.bias",
                Shape::ExpertVectors(FfExp),
            ),
            Presence::Moe,
        ),
        FfnUpExpsBias => with_presence(
            tensor(
                FfnUpExpsBias,
                "ffn_up_exps.bias",
                Shape::ExpertVectors(FfExp),
            ),
            Presence::Moe,
        ),
        FfnDownExpsBias => with_presence(
            tensor(
                FfnDownExpsBias,
                "ffn_down_exps.bias",
                Shape::ExpertVectors(Embd),
            ),
            Presence::Moe,
        ),
        FfnGateInpShexp => with_presence(
            tensor(
                FfnGateInpShexp,
                "ffn_gate_inp_shexp.weight",
                Shape::Vector(Embd),
            ),
            Presence::Shared,
        ),
        FfnGateShexp => with_presence(
            tensor(
                FfnGateShexp,
                "ffn_gate_shexp.weight",
                Shape::Matrix {
                    cols: Embd,
                    rows: FfShexp,
                },
            ),
            Presence::Shared,
        ),
        FfnUpShexp => with_presence(
            tensor(
                FfnUpShexp,
                "ffn_up_shexp.weight",
                Shape::Matrix {
                    cols: Embd,
                    rows: FfShexp,
                },
            ),
            Presence::Shared,
        ),
        FfnDownShexp => with_presence(
            tensor(
                FfnDownShexp,
                "ffn_down_shexp.weight",
                Shape::Matrix {
                    cols: FfShexp,
                    rows: Embd,
                },
            ),
            Presence::Shared,
        ),
        FfnGateInp => with_presence(
            tensor(
                FfnGateInp,
                "ffn_gate_inp.weight",
                Shape::Matrix {
                    cols: Embd,
                    rows: Experts,
                },
            ),
            Presence::Moe,
        ),
        FfnGateExps => experts(FfnGateExps, "ffn_gate_exps.weight", Embd, FfExp),
        FfnUpExps => experts(FfnUpExps, "ffn_up_exps.weight", Embd, FfExp),
        FfnDownExps => experts(FfnDownExps, "ffn_down_exps.weight", FfExp, Embd),
        AttnQkv => recurrent(
            AttnQkv,
            "attn_qkv.weight",
            Shape::Matrix {
                cols: Embd,
                rows: SsmChannels,
            },
        ),
        AttnGate => recurrent(
            AttnGate,
            "attn_gate.weight",
            Shape::Matrix {
                cols: Embd,
                rows: SsmInner,
            },
        ),
        SsmConv1d => recurrent(
            SsmConv1d,
            "ssm_conv1d.weight",
            Shape::Table {
                cols: SsmKernel,
                rows: SsmChannels,
            },
        ),
        SsmDtBias => recurrent(SsmDtBias, "ssm_dt.bias", Shape::Vector(SsmHeads)),
        SsmA => recurrent(SsmA, "ssm_a", Shape::Vector(SsmHeads)),
        SsmBeta => recurrent(
            SsmBeta,
            "ssm_beta.weight",
            Shape::Matrix {
                cols: Embd,
                rows: SsmHeads,
            },
        ),
        SsmAlpha => recurrent(
            SsmAlpha,
            "ssm_alpha.weight",
            Shape::Matrix {
                cols: Embd,
                rows: SsmHeads,
            },
        ),
        SsmBetaAlpha => recurrent(
            SsmBetaAlpha,
            "ssm_ba.weight",
            Shape::Matrix {
                cols: Embd,
                rows: SsmHeads2,
            },
        ),
        SsmNorm => recurrent(SsmNorm, "ssm_norm.weight", Shape::Vector(SsmHeadDim)),
        SsmIn => recurrent(
            SsmIn,
            "ssm_in.weight",
            Shape::Matrix {
                cols: Embd,
                rows: SsmQkvz,
            },
        ),
        SsmOut => recurrent(
            SsmOut,
            "ssm_out.weight",
            Shape::Matrix {
                cols: SsmInner,
                rows: Embd,
            },
        ),
        AttnNorm => tensor(AttnNorm, "attn_norm.weight", Shape::Vector(Embd)),
        AttnQ => tensor(
            AttnQ,
            "attn_q.weight",
            Shape::Matrix {
                cols: Embd,
                rows: Q,
            },
        ),
        AttnK => tensor(
            AttnK,
            "attn_k.weight",
            Shape::Matrix {
                cols: Embd,
                rows: Kv,
            },
        ),
        AttnV => tensor(
            AttnV,
            "attn_v.weight",
            Shape::Matrix {
                cols: Embd,
                rows: Kv,
            },
        ),
        AttnQBias => grouped(AttnQBias, "attn_q.bias", Shape::Vector(Q), "Q/K/V biases"),
        AttnKBias => grouped(AttnKBias, "attn_k.bias", Shape::Vector(Kv), "Q/K/V biases"),
        AttnVBias => grouped(AttnVBias, "attn_v.bias", Shape::Vector(Kv), "Q/K/V biases"),
        AttnOutput => tensor(
            AttnOutput,
            "attn_output.weight",
            Shape::Matrix {
                cols: Q,
                rows: Embd,
            },
        ),
        FfnNorm => tensor(FfnNorm, "ffn_norm.weight", Shape::Vector(Embd)),
        FfnGate => tensor(
            FfnGate,
            "ffn_gate.weight",
            Shape::Matrix {
                cols: Embd,
                rows: Ff,
            },
        ),
        FfnUp => tensor(
            FfnUp,
            "ffn_up.weight",
            Shape::Matrix {
                cols: Embd,
                rows: Ff,
            },
        ),
        FfnDown => tensor(
            FfnDown,
            "ffn_down.weight",
            Shape::Matrix {
                cols: Ff,
                rows: Embd,
            },
        ),
        AttnKv
        | AttnOutputA
        | AttnOutputB
        | HcAttnFn
        | HcAttnBase
        | HcAttnScale
        | HcFfnFn
        | HcFfnBase
        | HcFfnScale
        | AttnCompressorKv
        | AttnCompressorGate
        | AttnCompressorApe
        | AttnCompressorNorm
        | IndexerCompressorKv
        | IndexerCompressorGate
        | IndexerCompressorApe
        | IndexerCompressorNorm
        | FfnGateTid2eid => {
            panic!("DeepSeek V4's own tensors are described in arch/deepseek4.rs")
        }
    }
}

/// The tensors of multi-head latent attention (deepseek2), as [`layer_tensor`] gives them.
const fn mla_tensor(role: Role) -> TensorSpec {
    use Dim::*;
    const fn matrix(cols: Dim, rows: Dim) -> Shape {
        Shape::Matrix { cols, rows }
    }
    const fn per_head(cols: Dim, rows: Dim) -> Shape {
        Shape::PerHead { cols, rows }
    }
    let q_lora = Presence::QLora(true);
    match role {
        Role::AttnQA => with_presence(tensor(role, "attn_q_a.weight", matrix(Embd, QLora)), q_lora),
        Role::AttnQANorm => with_presence(
            tensor(role, "attn_q_a_norm.weight", Shape::Vector(QLora)),
            q_lora,
        ),
        Role::AttnQB => with_presence(tensor(role, "attn_q_b.weight", matrix(QLora, QMla)), q_lora),
        Role::AttnKvAMqa => tensor(role, "attn_kv_a_mqa.weight", matrix(Embd, KvAMqa)),
        Role::AttnKvANorm => tensor(role, "attn_kv_a_norm.weight", Shape::Vector(KvLora)),
        Role::AttnKB => with_presence(
            tensor(role, "attn_k_b.weight", per_head(QkNope, KvLora)),
            Presence::Absorbed(true),
        ),
        Role::AttnVB => with_presence(
            tensor(role, "attn_v_b.weight", per_head(KvLora, VHead)),
            Presence::Absorbed(true),
        ),
        _ => with_presence(
            tensor(Role::AttnKvB, "attn_kv_b.weight", matrix(KvLora, KvB)),
            Presence::Absorbed(false),
        ),
    }
}
