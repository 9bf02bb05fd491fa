//! The forward pass: a transformer block composed, as the model's architecture describes it,
//! from shared ops on f32 activations. Matrix products go to `ramforge-quant`, which reads the
//! weights in their quantized form.

mod attention;
mod matmul;
mod ops;
mod scratch;

pub(crate) use ops::rms_norm;
pub(crate) use ops::rope_table;
pub(crate) use scratch::Scratch;

use crate::error::EngineError;
use crate::kv::KvCache;
use crate::model::arch::{Ffn, Role};
use crate::model::ModelConfig;
use crate::weights::{LayerVectors, LayerView};
use attention::attention;
use matmul::matmul;
use ops::{add_bias, add_into, apply_rope, swiglu};

/// Runs one transformer block, as `cfg.arch` composes it, on the rows of `s.x` at positions `positions`, storing their
/// keys and values in `kv`. The RoPE table must already hold these positions.
pub(crate) fn block(
    cfg: &ModelConfig,
    layer_index: usize,
    w: &LayerView<'_>,
    vecs: &LayerVectors,
    s: &mut Scratch,
    kv: &mut KvCache,
    positions: std::ops::Range<usize>,
) -> Result<(), EngineError> {
    let (first, n) = (positions.start, positions.len());
    let (e, qd, kvd, ff) = (cfg.n_embd, cfg.q_dim(), cfg.kv_dim(), cfg.n_ff);
    let hd = cfg.head_dim;
    let style = cfg.arch.rope;
    let m = |role| w.matrix(role);

    // Attention.
    rms_norm(
        &s.x[..n * e],
        vecs.norm(Role::AttnNorm),
        cfg.rms_eps,
        &mut s.xn[..n * e],
    );
    matmul(
        [
            (m(Role::AttnQ), &mut s.q),
            (m(Role::AttnK), &mut s.k),
            (m(Role::AttnV), &mut s.v),
        ],
        &s.xn,
        n,
        &mut s.act,
    )?;
    for (role, out, width) in [
        (Role::AttnQBias, &mut s.q, qd),
        (Role::AttnKBias, &mut s.k, kvd),
        (Role::AttnVBias, &mut s.v, kvd),
    ] {
        if let Some(bias) = vecs.get(role) {
            add_bias(&mut out[..n * width], bias);
        }
    }
    apply_rope(&mut s.q, n, cfg.n_head, hd, cfg.rope_dim, style, &s.rope);
    apply_rope(&mut s.k, n, cfg.n_head_kv, hd, cfg.rope_dim, style, &s.rope);
    for i in 0..n {
        kv.write(
            layer_index,
            first + i,
            &s.k[i * kvd..(i + 1) * kvd],
            &s.v[i * kvd..(i + 1) * kvd],
        );
    }
    attention(cfg, layer_index, s, kv, first, n);
    matmul([(m(Role::AttnOutput), &mut s.xn)], &s.att, n, &mut s.act)?;
    add_into(&mut s.x[..n * e], &s.xn[..n * e]);

    // Feed-forward.
    rms_norm(
        &s.x[..n * e],
        vecs.norm(Role::FfnNorm),
        cfg.rms_eps,
        &mut s.xn[..n * e],
    );
    matmul(
        [(m(Role::FfnGate), &mut s.gate), (m(Role::FfnUp), &mut s.up)],
        &s.xn,
        n,
        &mut s.act,
    )?;
    match cfg.arch.ffn {
        Ffn::SwiGlu => swiglu(&mut s.gate[..n * ff], &s.up[..n * ff]),
    }
    matmul([(m(Role::FfnDown), &mut s.xn)], &s.gate, n, &mut s.act)?;
    add_into(&mut s.x[..n * e], &s.xn[..n * e]);
    Ok(())
}
