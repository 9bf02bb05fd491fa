//! The activations of one batch of tokens, charged as "scratch": every buffer the forward pass
//! writes, sized by the one formula the plan also books.

use super::attention::Heads;
use super::matmul::MATMUL_GROUPS;
use crate::budget::{ChargedVec, MemoryBudget};
use crate::error::EngineError;
use crate::model::arch::{Dim, Role, Shape};
use crate::model::dsv4::HC_STREAMS;
use crate::model::{ModelConfig, ModelTensors};

/// Activations for one batch of tokens, each row `batch` tokens long.
pub struct Scratch {
    pub batch: usize,
    /// The context the buffers are sized for.
    pub ctx: usize,
    /// Residual stream, `batch x n_embd`.
    pub x: ChargedVec<f32>,
    /// Normalised input / projection output, `batch x n_embd`.
    pub xn: ChargedVec<f32>,
    pub q: ChargedVec<f32>,
    pub k: ChargedVec<f32>,
    pub v: ChargedVec<f32>,
    /// Attention output, token-major (`batch x q_dim`).
    pub att: ChargedVec<f32>,
    /// Attention's partial softmax state (running max, sum and output of each tile of query
    /// rows, or of each split of one query's positions); see `Heads::scratch_floats`.
    pub att_part: ChargedVec<f32>,
    pub gate: ChargedVec<f32>,
    pub up: ChargedVec<f32>,
    /// cos then sin of each RoPE angle, `batch x rope_dim/2` each.
    pub rope: ChargedVec<f32>,
    /// The same for the sliding-window layers' RoPE (empty without them).
    pub rope_local: ChargedVec<f32>,
    /// Router logits, `batch x n_expert` (empty without experts).
    pub router: ChargedVec<f32>,
    /// The rows routed to one expert, then its outputs, `batch x n_embd` (empty without
    /// experts).
    pub moe_in: ChargedVec<f32>,
    /// The weighted sum of the experts' outputs, `batch x n_embd` (empty without experts).
    pub moe_out: ChargedVec<f32>,
    /// The matrix products' quantized activations: as many bytes as the widest group of
    /// products the block runs needs for a batch (asked of `ramforge-quant`).
    pub act: ChargedVec<u8>,
    /// Multi-head latent attention's own buffers (empty without it; see `mla_floats`).
    pub mla: ChargedVec<f32>,
    /// A hybrid model's delta-net projections and outputs, or its attention's output gates
    /// (`forward/delta_net.rs`; empty for other models).
    pub hybrid: ChargedVec<f32>,
    /// `--mtp` drafting (`forward/mtp.rs`; empty without it): the pass's hidden states
    /// (`batch x n_embd`, normed as the output projection takes them), the MTP layer's inputs
    /// (`batch x 2 n_embd`: normed embedding, normed hidden state) and the hidden state a
    /// later pass's first row takes.
    pub mtp: ChargedVec<f32>,
    /// DeepSeek V4's own buffers (`forward/dsv4/`; empty for other models).
    pub dsv4: ChargedVec<f32>,
    /// The batch's token ids (DeepSeek V4's hash-routed layers choose experts by them).
    pub tokens: ChargedVec<u32>,
}

/// Elements of the f32 buffers, in [`Scratch`]'s field order from `x` to `dsv4`.
fn f32_lens(cfg: &ModelConfig, batch: usize, ctx: usize) -> [usize; 18] {
    let (e, q, kv) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim());
    let moe = cfg.n_expert > 0;
    // The widest FFN any layer runs: routed experts, the shared expert, leading dense layers.
    let ff = if moe {
        let dense = if cfg.n_layer_dense_lead > 0 {
            cfg.n_ff
        } else {
            0
        };
        cfg.n_ff_exp.max(cfg.n_ff_shexp).max(dense)
    } else {
        cfg.n_ff
    };
    let b = batch;
    let local_rope = if cfg.sliding_window.is_some() {
        b * cfg.rope_dim
    } else {
        0
    };
    let if_moe = |len: usize| if moe { len } else { 0 };
    [
        b * e * cfg.residual_streams(),
        b * e,
        // A gated query projection gives each head's gate beside its query.
        b * q * if gated_query(cfg) { 2 } else { 1 },
        b * kv,
        b * kv,
        b * q,
        Heads::of(cfg).scratch_floats(b, ctx),
        b * ff,
        b * ff,
        b * cfg.rope_dim,
        local_rope,
        if_moe(b * cfg.n_expert),
        if_moe(b * e),
        if_moe(b * e),
        mla_floats(cfg, b),
        hybrid_floats(cfg, b),
        if cfg.mtp { 3 * b * e + 2 * e } else { 0 },
        dsv4_floats(cfg, b, ctx),
    ]
}

/// Floats of MLA's own scratch for `batch` tokens: the projected queries, the q-LoRA latent
/// (later the heads' values), and one head's input and output of its per-head products.
fn mla_floats(cfg: &ModelConfig, batch: usize) -> usize {
    mla_base_floats(cfg, batch) + indexer_floats(cfg, batch)
}

/// Floats of glm-dsa's lightning indexer (`indexer.rs`) beyond MLA's for `batch` rows: each
/// row's queries and weights, the key being built, the selection's scores, its positions with
/// their count (one row's, or every row's when shared layers reuse them), each head's running
/// maximum and sum, and one cached row.
fn indexer_floats(cfg: &ModelConfig, batch: usize) -> usize {
    cfg.indexer.map_or(0, |x| {
        let kept = if cfg.indexer_has_shared_layers() {
            batch
        } else {
            1
        };
        batch * (x.n_head * x.head_dim + x.n_head + x.head_dim)
            + x.top_k
            + kept * (x.top_k + 1)
            + 2 * cfg.n_head
            + cfg.head_dim
    })
}

/// Floats of one row's DeepSeek V4 buffers (`forward/dsv4/`'s `Parts`, in its order): the
/// sub-layer input, the normed streams, the mixes, the q-LoRA latent, the indexer's queries
/// and head weights, the compressors' entries and scores, the indexer compressor's, the
/// low-rank output, one output group's input and output.
pub(super) fn dsv4_row_lens(cfg: &ModelConfig) -> [usize; 13] {
    let Some(d) = &cfg.dsv4 else {
        return [0; 13];
    };
    let (e, hd) = (cfg.n_embd, cfg.head_dim);
    let (hi, di) = (d.indexer.n_head, d.indexer.head_dim);
    [
        e,
        HC_STREAMS * e,
        (2 + HC_STREAMS) * HC_STREAMS,
        d.q_lora,
        hi * di,
        hi,
        2 * hd,
        2 * hd,
        2 * di,
        2 * di,
        d.o_groups * d.o_lora,
        cfg.q_dim() / d.o_groups,
        d.o_lora,
    ]
}

/// Floats of DeepSeek V4's attention work buffers for one token at a context of `ctx`
/// (`forward/dsv4/attention.rs`'s `Work`): the gathered keys (the window and the most
/// compressed rows any layer attends to) and each head's probabilities over them, the
/// indexer's scores and a copy to select from, one pooled row with its indexer key, one RoPE
/// table.
pub(super) fn dsv4_work_lens(cfg: &ModelConfig, ctx: usize) -> [usize; 5] {
    let Some(d) = &cfg.dsv4 else {
        return [0; 5];
    };
    let most = (0..cfg.n_layer)
        .map(|l| match d.ratio(l) {
            0 => 0,
            4 => d.indexer.top_k.min(ctx / 4),
            r => ctx / r,
        })
        .max()
        .unwrap_or(0);
    let keys = d.window + most;
    [
        keys * cfg.head_dim,
        keys * cfg.n_head,
        2 * (ctx / 4),
        cfg.head_dim + d.indexer.head_dim,
        cfg.rope_dim,
    ]
}

/// Floats of DeepSeek V4's scratch for `batch` rows at a context of `ctx` (0 for other
/// models): each row's buffers, one token's streams, the attention's work buffers.
fn dsv4_floats(cfg: &ModelConfig, batch: usize, ctx: usize) -> usize {
    if cfg.dsv4.is_none() {
        return 0;
    }
    batch * dsv4_row_lens(cfg).iter().sum::<usize>()
        + HC_STREAMS * cfg.n_embd
        + dsv4_work_lens(cfg, ctx).iter().sum::<usize>()
}

/// MLA's own part of [`mla_floats`] (the indexer's scratch follows it).
pub(super) fn mla_base_floats(cfg: &ModelConfig, batch: usize) -> usize {
    let Some(m) = cfg.mla else {
        return 0;
    };
    let h = cfg.n_head;
    let q = h * (m.qk_nope + cfg.rope_dim);
    let lora = m.q_lora_rank.max(h * m.v_head);
    let head_in = m.qk_nope.max(m.kv_lora_rank);
    let head_out = m.kv_lora_rank.max(m.v_head);
    // An unsplit attn_kv_b: one head's key rows, dequantized.
    let k_rows = if m.absorbed {
        0
    } else {
        m.qk_nope * m.kv_lora_rank
    };
    batch * (q + lora + head_in + head_out) + k_rows
}

/// Whether the architecture's query projection also gives an output gate per head
/// (`attn_q` twice as wide: each head's query, then its gate).
pub(crate) fn gated_query(cfg: &ModelConfig) -> bool {
    cfg.arch.spec(Role::AttnQ).is_some_and(|s| {
        matches!(
            s.shape,
            Shape::Matrix {
                rows: Dim::QGated,
                ..
            }
        )
    })
}

/// f32 elements of the scratch a hybrid model's layers need beyond the common buffers, for
/// `batch` rows: the delta-net projections and outputs (token- and head-major), or the gated
/// attention's gates.
fn hybrid_floats(cfg: &ModelConfig, batch: usize) -> usize {
    let dn = cfg.delta_net.as_ref().map_or(0, |d| {
        // qwen3next's `ssm_in` form: its grouped output beside the rest, then sorted.
        let grouped = if d.joint_beta_alpha {
            batch * (d.channels() + d.value_dim())
        } else {
            0
        };
        // A prompt's heads each have a workspace for the chunked form.
        let chunked = if batch > 1 {
            d.n_v_heads * super::delta_rule::chunk_workspace_floats(d.head_dim)
        } else {
            0
        };
        batch * (d.channels() + 3 * d.value_dim() + 2 * d.n_v_heads) + chunked + grouped
    });
    let gates = if gated_query(cfg) {
        batch * cfg.q_dim()
    } else {
        0
    };
    dn.max(gates)
}

/// Bytes of quantized activations the widest product group of any layer needs for `batch`
/// tokens: each group's input is quantized once for every activation type its weights use.
fn activation_bytes(tensors: &ModelTensors, batch: usize) -> Result<usize, EngineError> {
    let mut widest = 0;
    for layer in &tensors.layers {
        for group in MATMUL_GROUPS {
            let Some(first) = layer.get(group[0]) else {
                continue;
            };
            let types: Vec<_> = group
                .iter()
                .filter_map(|&r| layer.get(r))
                .map(|t| t.ggml_type)
                .collect();
            let need =
                ramforge_quant::activation_scratch_bytes(&types, first.row_len() as usize, batch)?;
            widest = widest.max(need);
        }
    }
    Ok(widest)
}

impl Scratch {
    /// Bytes [`Scratch::new`] charges for a batch of `batch` tokens at a context of `ctx`.
    pub fn bytes(
        cfg: &ModelConfig,
        tensors: &ModelTensors,
        batch: usize,
        ctx: usize,
    ) -> Result<u64, EngineError> {
        let floats: usize = f32_lens(cfg, batch, ctx).iter().sum::<usize>() + batch;
        Ok(4 * floats as u64 + activation_bytes(tensors, batch)? as u64)
    }

    /// Charges and allocates the scratch for `batch` tokens at a context of `ctx`.
    pub fn new(
        budget: &MemoryBudget,
        cfg: &ModelConfig,
        tensors: &ModelTensors,
        batch: usize,
        ctx: usize,
    ) -> Result<Scratch, EngineError> {
        let act = activation_bytes(tensors, batch)?;
        let buf = |len: usize| ChargedVec::zeroed(budget, "scratch", len);
        let [x, xn, q, k, v, att, att_part, gate, up, rope, rope_local, router, moe_in, moe_out, mla, hybrid, mtp, dsv4] =
            f32_lens(cfg, batch, ctx);
        Ok(Scratch {
            batch,
            ctx,
            x: buf(x)?,
            xn: buf(xn)?,
            q: buf(q)?,
            k: buf(k)?,
            v: buf(v)?,
            att: buf(att)?,
            att_part: buf(att_part)?,
            gate: buf(gate)?,
            up: buf(up)?,
            rope: buf(rope)?,
            rope_local: buf(rope_local)?,
            router: buf(router)?,
            moe_in: buf(moe_in)?,
            moe_out: buf(moe_out)?,
            act: ChargedVec::zeroed(budget, "scratch", act)?,
            mla: buf(mla)?,
            hybrid: buf(hybrid)?,
            mtp: buf(mtp)?,
            dsv4: buf(dsv4)?,
            tokens: ChargedVec::zeroed(budget, "scratch", batch)?,
        })
    }
}
