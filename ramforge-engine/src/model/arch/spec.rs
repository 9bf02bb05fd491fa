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
}

/// Interleaved local and global attention: every `period`-th layer (the last of each period)
/// attends to the whole context with `rope.freq_base`, the others to the last
/// `attention.sliding_window` positions with their own RoPE base and no RoPE scaling.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SlidingWindow {
    /// Layers per local/global period.
    pub period: usize,
    /// The RoPE base of the local layers.
    pub local_rope_base: f32,
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
}

impl Role {
    /// How many roles there are (the size of a per-layer table indexed by role).
    pub const COUNT: usize = Role::FfnPostNorm as usize + 1;

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
        ]
    };
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
    /// One matrix per expert, stacked: GGUF shape `[cols, rows, n_expert]`. Read and streamed
    /// whole, like any matrix.
    Experts {
        /// Elements of a row.
        cols: Dim,
        /// Rows of one expert.
        rows: Dim,
    },
}

/// A model dimension a shape is given in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dim {
    /// The residual stream's width (`n_embd`).
    Embd,
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
}

/// Whether a file must carry a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Every file of the architecture carries it.
    Required,
    /// Optional, but the tensors of the same group come all or none (e.g. Q/K/V biases).
    Group(&'static str),
    /// Required in a model without experts, absent in one with them (llama's dense FFN).
    Dense,
    /// Required in a model with experts (`expert_count` > 0), absent otherwise.
    Moe,
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

/// The tensor that plays `role`, as every description here names and shapes it: the dense
/// llama-family layer (pre-norm attention: Q, K, V, output; a pre-norm gated FFN: gate, up,
/// down), plus what later families add: per-head Q/K norms, gemma's post-norms, and the
/// mixture-of-experts FFN (router and stacked experts, [`Presence::Moe`]).
pub(crate) const fn layer_tensor(role: Role) -> TensorSpec {
    use Dim::*;
    use Role::*;
    match role {
        AttnQNorm => tensor(AttnQNorm, "attn_q_norm.weight", Shape::Vector(Head)),
        AttnKNorm => tensor(AttnKNorm, "attn_k_norm.weight", Shape::Vector(Head)),
        AttnPostNorm => tensor(
            AttnPostNorm,
            "post_attention_norm.weight",
            Shape::Vector(Embd),
        ),
        FfnPostNorm => tensor(FfnPostNorm, "post_ffw_norm.weight", Shape::Vector(Embd)),
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
    }
}
