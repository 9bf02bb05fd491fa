//! DeepSeek V4's block (`arch/deepseek4.rs`): hyper-connections around compressed attention
//! and the MoE FFN. The products run for the whole batch; each row then runs its attention
//! in order (`attention.rs`), so a row sees exactly the rows and compressed rows before it.

mod attention;
mod hc;

use super::matmul::matmul;
use super::moe::moe_ffn;
use super::ops::{rms_norm, rms_norm_in_place, rms_norm_unweighted};
use super::scratch::dsv4_row_lens;
use super::{shared_expert, LayerWeights, Rows, Scratch};
use crate::error::EngineError;
use crate::model::arch::Role;
use crate::model::dsv4::HC_STREAMS;
use crate::model::ModelConfig;
use crate::weights::LayerView;
use attention::{
    angles, attend, rope_params, rotate_tails, IndexerInputs, Norms, TokenInputs, Work,
};
use hc::MIXES;

/// The scratch's DeepSeek V4 buffers, each `batch` rows.
struct Parts<'a> {
    xin: &'a mut [f32],
    z: &'a mut [f32],
    mix: &'a mut [f32],
    qa: &'a mut [f32],
    iq: &'a mut [f32],
    iw: &'a mut [f32],
    ckv: &'a mut [f32],
    cscore: &'a mut [f32],
    ikv: &'a mut [f32],
    iscore: &'a mut [f32],
    lora: &'a mut [f32],
    gin: &'a mut [f32],
    gout: &'a mut [f32],
    streams: &'a mut [f32],
    work: Work<'a>,
}

impl<'a> Parts<'a> {
    fn carve(cfg: &ModelConfig, batch: usize, ctx: usize, buf: &'a mut [f32]) -> Parts<'a> {
        let mut rest = buf;
        let mut take = |len: usize| {
            let (a, b) = std::mem::take(&mut rest).split_at_mut(len);
            rest = b;
            a
        };
        let [xin, z, mix, qa, iq, iw, ckv, cscore, ikv, iscore, lora, gin, gout] =
            dsv4_row_lens(cfg).map(|len| batch * len);
        Parts {
            xin: take(xin),
            z: take(z),
            mix: take(mix),
            qa: take(qa),
            iq: take(iq),
            iw: take(iw),
            ckv: take(ckv),
            cscore: take(cscore),
            ikv: take(ikv),
            iscore: take(iscore),
            lora: take(lora),
            gin: take(gin),
            gout: take(gout),
            streams: take(HC_STREAMS * cfg.n_embd),
            work: Work::carve(cfg, ctx, rest),
        }
    }
}

/// A sub-layer's hyper-connection before it: each row's mixes into `mix` and its input into
/// `xin`, from the streams `x`.
#[allow(clippy::too_many_arguments)]
fn hc_pre(
    cfg: &ModelConfig,
    w: &LayerView<'_>,
    vecs: &crate::weights::LayerVectors,
    [fn_role, base_role, scale_role]: [Role; 3],
    x: &[f32],
    p: &mut Parts<'_>,
    act: &mut [u8],
    n: usize,
    per_token: bool,
) -> Result<(), EngineError> {
    let d = cfg.dsv4.as_ref().expect("a deepseek4 model");
    let (e, hs) = (cfg.n_embd, HC_STREAMS * cfg.n_embd);
    for t in 0..n {
        hc::norm_streams(
            &x[t * hs..(t + 1) * hs],
            cfg.rms_eps,
            &mut p.z[t * hs..(t + 1) * hs],
        );
    }
    matmul(
        [(w.matrix(fn_role), &mut p.mix[..])],
        p.z,
        n,
        act,
        per_token,
    )?;
    let (base, scale) = (vecs.norm(base_role), vecs.norm(scale_role));
    for t in 0..n {
        let mix = &mut p.mix[t * MIXES..(t + 1) * MIXES];
        hc::finish_mixes(mix, base, scale, d.hc_iters, d.hc_eps);
        hc::input(
            &x[t * hs..(t + 1) * hs],
            mix,
            &mut p.xin[t * e..(t + 1) * e],
        );
    }
    Ok(())
}

/// The hyper-connection after a sub-layer whose outputs are the rows of `f`.
fn hc_post(cfg: &ModelConfig, x: &mut [f32], f: &[f32], p: &mut Parts<'_>, n: usize) {
    let (e, hs) = (cfg.n_embd, HC_STREAMS * cfg.n_embd);
    for t in 0..n {
        hc::output(
            &mut x[t * hs..(t + 1) * hs],
            &f[t * e..(t + 1) * e],
            &p.mix[t * MIXES..(t + 1) * MIXES],
            p.streams,
        );
    }
}

/// Runs one DeepSeek V4 block on the rows of `s.x` (each [`HC_STREAMS`] streams wide).
pub(crate) fn block(
    cfg: &ModelConfig,
    l: usize,
    weights: LayerWeights<'_, '_>,
    s: &mut Scratch,
    mut rows: Rows<'_, '_>,
) -> Result<(), EngineError> {
    let LayerWeights {
        matrices: w,
        vectors: vecs,
        experts,
    } = weights;
    let d = cfg.dsv4.as_ref().expect("a deepseek4 model");
    let n = rows.len();
    let per_token = rows.per_token();
    let (e, hd, nh) = (cfg.n_embd, cfg.head_dim, cfg.n_head);
    let (ratio, ql) = (d.ratio(l), d.q_lora);
    let (hi, di) = (d.indexer.n_head, d.indexer.head_dim);
    let m = |role| w.matrix(role);
    let (batch, ctx) = (s.batch, s.ctx);
    {
        let mut p = Parts::carve(cfg, batch, ctx, &mut s.dsv4);
        let attn_hc = [Role::HcAttnFn, Role::HcAttnBase, Role::HcAttnScale];
        hc_pre(
            cfg, w, vecs, attn_hc, &s.x, &mut p, &mut s.act, n, per_token,
        )?;
        rms_norm(
            &p.xin[..n * e],
            vecs.norm(Role::AttnNorm),
            cfg.rms_eps,
            &mut s.xn[..n * e],
        );
        matmul(
            [
                (m(Role::AttnQA), &mut p.qa[..]),
                (m(Role::AttnKv), &mut s.k[..]),
            ],
            &s.xn,
            n,
            &mut s.act,
            per_token,
        )?;
        rms_norm_in_place(
            &mut p.qa[..n * ql],
            vecs.norm(Role::AttnQANorm),
            cfg.rms_eps,
        );
        matmul(
            [(m(Role::AttnQB), &mut s.q[..])],
            p.qa,
            n,
            &mut s.act,
            per_token,
        )?;
        if ratio == 4 {
            matmul(
                [(m(Role::IndexerQB), &mut p.iq[..])],
                p.qa,
                n,
                &mut s.act,
                per_token,
            )?;
        }
        rms_norm_in_place(
            &mut s.k[..n * hd],
            vecs.norm(Role::AttnKvANorm),
            cfg.rms_eps,
        );
        // Each query head's unweighted RMS norm.
        rms_norm_unweighted(&mut s.q[..n * nh * hd], hd, cfg.rms_eps);
        if ratio != 0 {
            let cw = d.comp_width(l, hd);
            matmul(
                [
                    (m(Role::AttnCompressorKv), &mut p.ckv[..]),
                    (m(Role::AttnCompressorGate), &mut p.cscore[..]),
                ],
                &s.xn,
                n,
                &mut s.act,
                per_token,
            )?;
            let ape = vecs.norm(Role::AttnCompressorApe);
            for t in 0..n {
                let pos = rows.position(t);
                let bias = &ape[(pos % ratio) * cw..][..cw];
                for (v, b) in p.cscore[t * cw..(t + 1) * cw].iter_mut().zip(bias) {
                    *v += b;
                }
            }
        }
        if ratio == 4 {
            matmul(
                [
                    (m(Role::IndexerCompressorKv), &mut p.ikv[..]),
                    (m(Role::IndexerCompressorGate), &mut p.iscore[..]),
                    (m(Role::IndexerProj), &mut p.iw[..]),
                ],
                &s.xn,
                n,
                &mut s.act,
                per_token,
            )?;
            let ape = vecs.norm(Role::IndexerCompressorApe);
            for t in 0..n {
                let pos = rows.position(t);
                let bias = &ape[(pos % 4) * 2 * di..][..2 * di];
                for (v, b) in p.iscore[t * 2 * di..(t + 1) * 2 * di].iter_mut().zip(bias) {
                    *v += b;
                }
            }
            let scale = 1.0 / ((di * hi) as f32).sqrt();
            p.iw[..n * hi].iter_mut().for_each(|v| *v *= scale);
        }
        let rope = rope_params(cfg, l);
        let norms = Norms {
            comp: vecs.get(Role::AttnCompressorNorm),
            idx: vecs.get(Role::IndexerCompressorNorm),
            sinks: vecs.norm(Role::AttnSinks),
        };
        for t in 0..n {
            let pos = rows.position(t);
            angles(rope, pos, p.work.table);
            rotate_tails(
                &mut s.q[t * nh * hd..(t + 1) * nh * hd],
                hd,
                p.work.table,
                false,
            );
            rotate_tails(&mut s.k[t * hd..(t + 1) * hd], hd, p.work.table, false);
            if ratio == 4 {
                rotate_tails(
                    &mut p.iq[t * hi * di..(t + 1) * hi * di],
                    di,
                    p.work.table,
                    false,
                );
            }
            let cw = d.comp_width(l, hd);
            let inputs = TokenInputs {
                q: &s.q[t * nh * hd..(t + 1) * nh * hd],
                kv: &s.k[t * hd..(t + 1) * hd],
                comp: (ratio != 0).then(|| {
                    (
                        &p.ckv[t * cw..(t + 1) * cw],
                        &p.cscore[t * cw..(t + 1) * cw],
                    )
                }),
                idx: (ratio == 4).then(|| IndexerInputs {
                    kv: &p.ikv[t * 2 * di..(t + 1) * 2 * di],
                    score: &p.iscore[t * 2 * di..(t + 1) * 2 * di],
                    q: &p.iq[t * hi * di..(t + 1) * hi * di],
                    weights: &p.iw[t * hi..(t + 1) * hi],
                }),
            };
            let att = &mut s.att[t * nh * hd..(t + 1) * nh * hd];
            let state = rows.kv(t).compressed_layer(l);
            attend(cfg, l, pos, &inputs, &norms, state, &mut p.work, att);
        }
        // The grouped low-rank output: each group's heads to its rank, then all to the
        // residual width.
        let (g, ol) = (d.o_groups, d.o_lora);
        let gin = cfg.q_dim() / g;
        let out_a = m(Role::AttnOutputA);
        for group in 0..g {
            for t in 0..n {
                p.gin[t * gin..(t + 1) * gin]
                    .copy_from_slice(&s.att[t * nh * hd + group * gin..][..gin]);
            }
            let slice = out_a.expert(group, g);
            matmul([(&slice, &mut p.gout[..])], p.gin, n, &mut s.act, per_token)?;
            for t in 0..n {
                p.lora[t * g * ol + group * ol..][..ol].copy_from_slice(&p.gout[t * ol..][..ol]);
            }
        }
        matmul(
            [(m(Role::AttnOutputB), &mut s.xn[..])],
            p.lora,
            n,
            &mut s.act,
            per_token,
        )?;
        hc_post(cfg, &mut s.x, &s.xn, &mut p, n);

        let ffn_hc = [Role::HcFfnFn, Role::HcFfnBase, Role::HcFfnScale];
        hc_pre(cfg, w, vecs, ffn_hc, &s.x, &mut p, &mut s.act, n, per_token)?;
        rms_norm(
            &p.xin[..n * e],
            vecs.norm(Role::FfnNorm),
            cfg.rms_eps,
            &mut s.xn[..n * e],
        );
    }
    moe_ffn(cfg, l, w, vecs, experts, s, n, per_token)?;
    let limit = d.clamp_shexp.get(l).copied().unwrap_or(0.0);
    shared_expert(cfg, w, vecs, s, n, per_token, limit)?;
    let mut p = Parts::carve(cfg, batch, ctx, &mut s.dsv4);
    hc_post(cfg, &mut s.x, &s.moe_out, &mut p, n);
    Ok(())
}

/// The head's input for row `r` of `x` (its streams) into `out`: the streams weighed by the
/// head's hyper-connection (`output_hc`: fn, base, scale); `z` is one row's streams wide.
pub(crate) fn head_state(
    cfg: &ModelConfig,
    output_hc: &[Vec<f32>; 3],
    x: &[f32],
    z: &mut [f32],
    out: &mut [f32],
) {
    let d = cfg.dsv4.as_ref().expect("a deepseek4 model");
    let hs = x.len();
    hc::norm_streams(x, cfg.rms_eps, z);
    let mut m = [0.0f32; HC_STREAMS];
    for (h, mh) in m.iter_mut().enumerate() {
        *mh = output_hc[0][h * hs..(h + 1) * hs]
            .iter()
            .zip(z.iter())
            .map(|(a, b)| a * b)
            .sum();
    }
    hc::head(x, &m, &output_hc[1], output_hc[2][0], d.hc_eps, out);
}
