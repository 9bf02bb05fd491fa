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
    /// The attention output projection.
    AttnOutput,
    /// The RMSNorm before the feed-forward network.
    FfnNorm,
    /// The FFN gate projection.
    FfnGate,
    /// The FFN up projection.
    FfnUp,
    /// The FFN down projection.
    FfnDown,
}

impl Role {
    /// How many roles there are (the size of a per-layer table indexed by role).
    pub const COUNT: usize = Role::FfnDown as usize + 1;

    /// Every role, in declaration order (`Role::ALL[r as usize] == r`).
    pub const ALL: [Role; Role::COUNT] = {
        use Role::*;
        [
            AttnNorm, AttnQ, AttnK, AttnV, AttnQBias, AttnKBias, AttnVBias, AttnOutput, FfnNorm,
            FfnGate, FfnUp, FfnDown,
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
}

/// Whether a file must carry a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Every file of the architecture carries it.
    Required,
    /// Optional, but the tensors of the same group come all or none (e.g. Q/K/V biases).
    Group(&'static str),
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

/// The dense llama-family layer every description here starts from: pre-norm attention
/// (Q, K, V, output) and a pre-norm gated FFN (gate, up, down), in the order the block uses
/// them.
pub(crate) const fn dense_layer(role: Role) -> TensorSpec {
    use Dim::*;
    use Role::*;
    match role {
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
