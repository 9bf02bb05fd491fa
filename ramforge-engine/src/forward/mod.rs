//! The forward pass: a transformer block composed, as the model's architecture describes it,
//! from shared ops on f32 activations. Matrix products go to `ramforge-quant`, which reads the
//! weights in their quantized form.

mod attention;
mod delta_net;
mod delta_rule;
mod dsv4;
mod gate;
mod indexer;
mod matmul;
mod mla;
mod moe;
pub(crate) mod mtp;
mod ops;
mod scratch;

pub(crate) use ops::rms_norm;
pub(crate) use ops::{rope_rows, scale, RopeParams, Yarn};
pub(crate) use scratch::Scratch;

use crate::error::EngineError;
use crate::kv::KvCache;
use crate::model::arch::{Ffn, Role};
use crate::model::{AttentionKind, FfnKind, ModelConfig};
use crate::weights::{ExpertStore, LayerVectors, LayerView};
use attention::attention;
use delta_net::{apply_query_gate, delta_net_layer, split_query_gate};
use gate::{gated, Gate};
use matmul::matmul;
use moe::moe_ffn;
pub(crate) use moe::{routed_experts, ExpertRows, ExpertWork};
use ops::{add_bias, add_into, apply_rope, rms_norm_in_place};
use scratch::gated_query;
use std::ops::Range;

/// Fills the RoPE tables of `s` for rows at `positions`: the global one (with `factors`,
/// llama3-style) and, for a model with sliding-window layers, the local one.
pub(crate) fn rope_tables(
    cfg: &ModelConfig,
    factors: Option<&[f32]>,
    positions: impl ExactSizeIterator<Item = usize> + Clone,
    s: &mut Scratch,
) {
    let params = |(base, scale): (f32, f32), factors| RopeParams {
        base,
        scale,
        dim: cfg.rope_dim,
        factors,
        yarn: cfg.rope_yarn.filter(|_| scale != 1.0).map(|y| {
            Yarn::new(
                cfg.rope_dim,
                base,
                y.n_ctx_orig,
                scale,
                (y.beta_fast, y.beta_slow),
                y.attn_factor,
            )
        }),
    };
    rope_rows(
        params((cfg.rope_base, cfg.rope_freq_scale), factors),
        positions.clone(),
        &mut s.rope,
    );
    if let Some(local) = (0..cfg.n_layer).find(|&l| cfg.window(l).is_some()) {
        rope_rows(
            params(cfg.rope_of(local), None),
            positions,
            &mut s.rope_local,
        );
    }
}

/// Whose keys and values the rows of a block are, and at which positions.
pub(crate) enum Rows<'a, 'b> {
    /// Consecutive positions of one sequence: a prompt batch, or one decoded token. With the
    /// flag set every product runs per token, as in `Batch`, so each row gets exactly the numbers
    /// it would get evaluated alone (speculative verification: greedy identity depends on it).
    Run(&'a mut KvCache, Range<usize>, bool),
    /// One row per sequence (batched decoding): row `i` is at `positions[i]` of `kvs[i]`.
    /// Every product then runs per token ([`ramforge_quant::matmul_many_per_token`]), so each
    /// row gets exactly the numbers it would get decoded alone.
    Batch {
        kvs: &'a mut [&'b mut KvCache],
        positions: &'a [usize],
    },
}

impl Rows<'_, '_> {
    /// Whether every product runs per token: batched decoding, or rows verified one by one.
    fn per_token(&self) -> bool {
        matches!(self, Rows::Batch { .. } | Rows::Run(_, _, true))
    }

    fn len(&self) -> usize {
        match self {
            Rows::Run(_, positions, _) => positions.len(),
            Rows::Batch { positions, .. } => positions.len(),
        }
    }

    /// The position of row `t`.
    fn position(&self, t: usize) -> usize {
        match self {
            Rows::Run(_, positions, _) => positions.start + t,
            Rows::Batch { positions, .. } => positions[t],
        }
    }

    /// The cache row `t` belongs to.
    fn kv(&mut self, t: usize) -> &mut KvCache {
        match self {
            Rows::Run(kv, _, _) => kv,
            Rows::Batch { kvs, .. } => kvs[t],
        }
    }
}

/// One layer's weights as a block uses them.
pub(crate) struct LayerWeights<'v, 'x> {
    /// Its matrices (pinned, streamed or mapped).
    pub matrices: &'v LayerView<'v>,
    /// Its norms and biases.
    pub vectors: &'v LayerVectors,
    /// The expert cache, when the experts of an MoE layer are streamed one by one.
    pub experts: Option<&'x mut ExpertStore>,
}

/// Runs one transformer block, as `cfg.arch` composes it, on the rows of `s.x`, storing their
/// keys and values where `rows` says. The RoPE tables must already hold their positions.
pub(crate) fn block(
    cfg: &ModelConfig,
    layer_index: usize,
    weights: LayerWeights<'_, '_>,
    s: &mut Scratch,
    rows: Rows<'_, '_>,
) -> Result<(), EngineError> {
    if cfg.dsv4.is_some() {
        return dsv4::block(cfg, layer_index, weights, s, rows);
    }
    let LayerWeights {
        matrices: w,
        vectors: vecs,
        experts,
    } = weights;
    let n = rows.len();
    let per_token = rows.per_token();
    attention_half(cfg, layer_index, w, vecs, s, rows)?;
    feed_forward(cfg, layer_index, w, vecs, experts, s, n, per_token)
}

/// Whether layer `layer_index`'s block may run in two halves around its routed experts
/// ([`block_to_experts`], [`block_from_experts`]), so that a layer-major prefill runs each
/// expert once over all the rows it holds: an MoE layer, not DeepSeek V4's (its
/// hyper-connected block runs whole).
pub(crate) fn splits_at_experts(cfg: &ModelConfig, layer_index: usize) -> bool {
    cfg.dsv4.is_none() && cfg.layer_kind(layer_index).ffn == FfnKind::Moe
}

/// The first half of an MoE block ([`splits_at_experts`]) on the rows of `s.x`: attention and
/// its residual, then the FFN's normalized input into `s.xn` and each row's experts into
/// `routes`. [`routed_experts`] and [`block_from_experts`] finish it.
pub(crate) fn block_to_experts(
    cfg: &ModelConfig,
    layer_index: usize,
    w: &LayerView<'_>,
    vecs: &LayerVectors,
    s: &mut Scratch,
    rows: Rows<'_, '_>,
    routes: &mut [(usize, f32)],
) -> Result<(), EngineError> {
    debug_assert!(splits_at_experts(cfg, layer_index));
    let n = rows.len();
    let per_token = rows.per_token();
    attention_half(cfg, layer_index, w, vecs, s, rows)?;
    normed_input(cfg, vecs, Role::FfnNorm, s, n);
    moe::route_rows(cfg, w, vecs, s, n, per_token, routes)
}

/// Attention (or a recurrent layer's delta net) on the rows of `s.x`, its residual added.
fn attention_half(
    cfg: &ModelConfig,
    layer_index: usize,
    w: &LayerView<'_>,
    vecs: &LayerVectors,
    s: &mut Scratch,
    mut rows: Rows<'_, '_>,
) -> Result<(), EngineError> {
    let n = rows.len();
    let per_token = rows.per_token();
    normed_input(cfg, vecs, Role::AttnNorm, s, n);
    if cfg.is_recurrent(layer_index) {
        match &mut rows {
            Rows::Run(kv, _, _) => {
                delta_net_layer(cfg, layer_index, w, vecs, s, &mut [&mut **kv], n, per_token)?
            }
            Rows::Batch { kvs, .. } => {
                delta_net_layer(cfg, layer_index, w, vecs, s, kvs, n, per_token)?
            }
        }
        residual(cfg, vecs, Role::AttnPostNorm, s, n);
        return Ok(());
    }
    if cfg.layer_kind(layer_index).attention == AttentionKind::Latent {
        // One key/value head whose values are the cached rows themselves.
        mla::queries_and_latent(cfg, w, vecs, s, n, per_token)?;
        indexer::keys_and_queries(cfg, layer_index, w, vecs, s, n, per_token)?;
        attend_rows(cfg, layer_index, s, &mut rows, None);
        match &rows {
            Rows::Run(kv, positions, _) => {
                let (kv, first): (&KvCache, usize) = (kv, positions.start);
                indexer::sparse_attention(cfg, layer_index, s, n, |t| (kv, first + t))?
            }
            Rows::Batch { kvs, positions } => {
                indexer::sparse_attention(cfg, layer_index, s, n, |t| (&*kvs[t], positions[t]))?
            }
        }
        mla::output(cfg, w, s, n, per_token)?;
    } else {
        attention_qkv(cfg, layer_index, w, vecs, s, &mut rows, per_token)?;
    }
    residual(cfg, vecs, Role::AttnPostNorm, s, n);
    Ok(())
}

/// The input of a block's half: the `n` rows of `s.x` normalized by the layer's `norm` into
/// `s.xn`.
fn normed_input(cfg: &ModelConfig, vecs: &LayerVectors, norm: Role, s: &mut Scratch, n: usize) {
    let e = cfg.n_embd;
    rms_norm(
        &s.x[..n * e],
        vecs.norm(norm),
        cfg.rms_eps,
        &mut s.xn[..n * e],
    );
}

/// The rest of an MoE block after its routed experts, on the `n` rows of `s.x` (after
/// attention), `s.xn` (the FFN's normalized input) and `s.moe_out` (the routed experts'
/// sums): the shared expert added to the sums, then the residual.
pub(crate) fn block_from_experts(
    cfg: &ModelConfig,
    w: &LayerView<'_>,
    vecs: &LayerVectors,
    s: &mut Scratch,
    n: usize,
    per_token: bool,
) -> Result<(), EngineError> {
    let e = cfg.n_embd;
    if cfg.n_ff_shexp > 0 {
        shared_expert(cfg, w, vecs, s, n, per_token, 0.0)?;
    }
    s.xn[..n * e].copy_from_slice(&s.moe_out[..n * e]);
    residual(cfg, vecs, Role::FfnPostNorm, s, n);
    Ok(())
}

/// The feed-forward half of a block on the `n` rows of `s.x`, its residual add included.
#[allow(clippy::too_many_arguments)]
fn feed_forward(
    cfg: &ModelConfig,
    layer_index: usize,
    w: &LayerView<'_>,
    vecs: &LayerVectors,
    experts: Option<&mut ExpertStore>,
    s: &mut Scratch,
    n: usize,
    per_token: bool,
) -> Result<(), EngineError> {
    let m = |role| w.matrix(role);
    normed_input(cfg, vecs, Role::FfnNorm, s, n);
    match cfg.layer_kind(layer_index).ffn {
        FfnKind::Moe => {
            moe_ffn(cfg, layer_index, w, vecs, experts, s, n, per_token)?;
            return block_from_experts(cfg, w, vecs, s, n, per_token);
        }
        FfnKind::Dense => {
            let ff = cfg.n_ff;
            matmul(
                [(m(Role::FfnGate), &mut s.gate), (m(Role::FfnUp), &mut s.up)],
                &s.xn,
                n,
                &mut s.act,
                per_token,
            )?;
            match cfg.arch.ffn {
                Ffn::SwiGlu => gated(Gate::Silu, &mut s.gate[..n * ff], &s.up[..n * ff]),
                Ffn::GeGlu => gated(Gate::GeluTanh, &mut s.gate[..n * ff], &s.up[..n * ff]),
            }
            matmul(
                [(m(Role::FfnDown), &mut s.xn)],
                &s.gate,
                n,
                &mut s.act,
                per_token,
            )?;
        }
    }
    residual(cfg, vecs, Role::FfnPostNorm, s, n);
    Ok(())
}

/// The attention of a layer with Q/K/V projections for the `n` rows of `s.xn` (already
/// normed): biases, Q/K norms, RoPE, the keys and values stored where `rows` says, attention,
/// and the output projection left in `s.xn`.
fn attention_qkv(
    cfg: &ModelConfig,
    layer_index: usize,
    w: &LayerView<'_>,
    vecs: &LayerVectors,
    s: &mut Scratch,
    rows: &mut Rows<'_, '_>,
    per_token: bool,
) -> Result<(), EngineError> {
    let n = rows.len();
    let (e, qd, kvd) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim());
    let hd = cfg.head_dim;
    let style = cfg.arch.rope;
    let m = |role| w.matrix(role);
    let gated_q = gated_query(cfg);
    matmul(
        [
            (m(Role::AttnQ), &mut s.q),
            (m(Role::AttnK), &mut s.k),
            (m(Role::AttnV), &mut s.v),
        ],
        &s.xn,
        n,
        &mut s.act,
        per_token,
    )?;
    if gated_q {
        split_query_gate(cfg, &mut s.q, &mut s.hybrid, n);
    }
    for (role, out, width) in [
        (Role::AttnQBias, &mut s.q, qd),
        (Role::AttnKBias, &mut s.k, kvd),
        (Role::AttnVBias, &mut s.v, kvd),
    ] {
        if let Some(bias) = vecs.get(role) {
            add_bias(&mut out[..n * width], bias);
        }
    }
    for (role, out, width) in [
        (Role::AttnQNorm, &mut s.q, qd),
        (Role::AttnKNorm, &mut s.k, kvd),
    ] {
        if let Some(norm) = vecs.get(role) {
            rms_norm_in_place(&mut out[..n * width], norm, cfg.rms_eps);
        }
    }
    let table = if cfg.window(layer_index).is_some() {
        &s.rope_local
    } else {
        &s.rope
    };
    apply_rope(&mut s.q, n, cfg.n_head, hd, cfg.rope_dim, style, table);
    apply_rope(&mut s.k, n, cfg.n_head_kv, hd, cfg.rope_dim, style, table);
    attend_rows(cfg, layer_index, s, rows, vecs.get(Role::AttnSinks));
    if gated_q {
        apply_query_gate(cfg, &mut s.att, &s.hybrid, n);
    }
    matmul(
        [(m(Role::AttnOutput), &mut s.xn)],
        &s.att,
        n,
        &mut s.act,
        per_token,
    )?;
    if let Some(bias) = vecs.get(Role::AttnOutputBias) {
        add_bias(&mut s.xn[..n * e], bias);
    }
    Ok(())
}

/// Stores the keys and values of the rows of `s.k`/`s.v` where `rows` says and attends each
/// query of `s.q` into `s.att`.
fn attend_rows(
    cfg: &ModelConfig,
    layer_index: usize,
    s: &mut Scratch,
    rows: &mut Rows<'_, '_>,
    sinks: Option<&[f32]>,
) {
    let (n, kvd) = (rows.len(), cfg.kv_dim());
    match rows {
        Rows::Run(kv, positions, _) => {
            attend_run(cfg, layer_index, s, kv, positions.start, n, sinks)
        }
        Rows::Batch { kvs, positions } => {
            // Each row against its own sequence, exactly as a run of one row.
            for (i, (kv, &p)) in kvs.iter_mut().zip(positions.iter()).enumerate() {
                kv.write(
                    layer_index,
                    p,
                    &s.k[i * kvd..][..kvd],
                    &s.v[i * kvd..][..kvd],
                );
                attention(
                    cfg,
                    layer_index,
                    kv,
                    p,
                    i..i + 1,
                    &s.q,
                    sinks,
                    &mut s.att_part,
                    &mut s.att,
                );
            }
        }
    }
}

/// Adds the shared expert's output for the `n` normalized rows of `s.xn` to `s.moe_out`:
/// a SwiGLU FFN of its own (its inputs clamped to `limit` where that is above 0, DeepSeek
/// V4), scaled per row by `sigmoid(ffn_gate_inp_shexp . x)` where the layer has that gate
/// (qwen2moe).
fn shared_expert(
    cfg: &ModelConfig,
    w: &LayerView<'_>,
    vecs: &LayerVectors,
    s: &mut Scratch,
    n: usize,
    per_token: bool,
    limit: f32,
) -> Result<(), EngineError> {
    let (e, ff) = (cfg.n_embd, cfg.n_ff_shexp);
    matmul(
        [
            (w.matrix(Role::FfnGateShexp), &mut s.gate),
            (w.matrix(Role::FfnUpShexp), &mut s.up),
        ],
        &s.xn,
        n,
        &mut s.act,
        per_token,
    )?;
    moe::swiglu_clamped(&mut s.gate[..n * ff], &mut s.up[..n * ff], limit);
    matmul(
        [(w.matrix(Role::FfnDownShexp), &mut s.moe_in)],
        &s.gate,
        n,
        &mut s.act,
        per_token,
    )?;
    let gate = vecs.get(Role::FfnGateInpShexp);
    for t in 0..n {
        let g = gate.map_or(1.0, |g| {
            let z: f32 = g
                .iter()
                .zip(&s.xn[t * e..(t + 1) * e])
                .map(|(a, b)| a * b)
                .sum();
            1.0 / (1.0 + (-z).exp())
        });
        let src = &s.moe_in[t * e..(t + 1) * e];
        for (o, &v) in s.moe_out[t * e..(t + 1) * e].iter_mut().zip(src) {
            *o += v * g;
        }
    }
    Ok(())
}

/// Writes the keys and values of `n` consecutive rows of one sequence, the first at `first`,
/// and attends each query. A layer that keeps fewer positions than the context (a ring) must
/// not overwrite a key a query of the same batch still needs: once the ring wraps, one token
/// at a time.
fn attend_run(
    cfg: &ModelConfig,
    layer_index: usize,
    s: &mut Scratch,
    kv: &mut KvCache,
    first: usize,
    n: usize,
    sinks: Option<&[f32]>,
) {
    let kvd = cfg.kv_dim();
    let slots = kv.slots(layer_index);
    let mut i = 0;
    while i < n {
        let p = first + i;
        let len = if p + (n - i) <= slots {
            n - i
        } else if p < slots {
            slots - p
        } else {
            1
        };
        for j in i..i + len {
            let (k, v) = (&s.k[j * kvd..][..kvd], &s.v[j * kvd..][..kvd]);
            kv.write(layer_index, first + j, k, v);
        }
        attention(
            cfg,
            layer_index,
            kv,
            first + i,
            i..i + len,
            &s.q,
            sinks,
            &mut s.att_part,
            &mut s.att,
        );
        i += len;
    }
}

/// The output projection's input for rows `from..n` of `s.x` into rows `0..n - from` of
/// `s.xn`: each row (DeepSeek V4: its streams weighed by the head's hyper-connection,
/// `output_hc`) normed by `output_norm`.
pub(crate) fn output_rows(
    cfg: &ModelConfig,
    output_norm: &[f32],
    output_hc: Option<&[Vec<f32>; 3]>,
    s: &mut Scratch,
    from: usize,
    n: usize,
) {
    let e = cfg.n_embd;
    for r in from..n {
        let out = &mut s.xn[(r - from) * e..(r - from + 1) * e];
        match output_hc {
            Some(hc) => {
                let hs = crate::model::dsv4::HC_STREAMS * e;
                let (z, state) = s.dsv4[..hs + e].split_at_mut(hs);
                dsv4::head_state(cfg, hc, &s.x[r * hs..(r + 1) * hs], z, state);
                rms_norm(state, output_norm, cfg.rms_eps, out);
            }
            None => rms_norm(&s.x[r * e..(r + 1) * e], output_norm, cfg.rms_eps, out),
        }
    }
}

/// `x += post_norm(xn)` for the `n` rows, the norm only where the layer has one.
fn residual(cfg: &ModelConfig, vecs: &LayerVectors, post_norm: Role, s: &mut Scratch, n: usize) {
    let e = cfg.n_embd;
    if let Some(norm) = vecs.get(post_norm) {
        rms_norm_in_place(&mut s.xn[..n * e], norm, cfg.rms_eps);
    }
    add_into(&mut s.x[..n * e], &s.xn[..n * e]);
}
