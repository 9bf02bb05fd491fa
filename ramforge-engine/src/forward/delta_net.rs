//! The gated delta-net (linear attention) layer of hybrid models (qwen35moe), as llama.cpp's
//! `build_layer_attn_linear` and `delta-net-base.cpp` compute it:
//!
//! - `attn_qkv` gives the convolution's input, `attn_gate` the output gate `z`, `ssm_beta`
//!   and `ssm_alpha` (qwen3next: both in `ssm_ba`) one number per value head each;
//! - a causal convolution of `d_conv` taps per channel over the previous inputs (the
//!   sequence's convolution state) and the current one, then SiLU, gives q, k and v;
//! - q and k are L2-normalized per head (`max(|x|, eps)`), q scaled by `1/sqrt(head_dim)`;
//! - per value head `h` (its key head as [`DeltaNetConfig::key_head`] says): `beta = sigmoid(beta)`, the decay
//!   `g = softplus(alpha + dt_bias) * ssm_a`, then the delta rule on its state matrix `S`
//!   (row `j` a value element, column `i` a key element): `S *= exp(g)`,
//!   `S[j] += k * beta * (v[j] - S[j].k)`, and the output `o[j] = S[j].q` (`delta_rule.rs`:
//!   token by token while decoding, in chunks of 64 tokens for a prompt, heads on the pool);
//! - each head's output is RMS-normalized (`ssm_norm`) and multiplied by `silu(z)`, and
//!   `ssm_out` projects it back to the residual width.
//!
//! A full-attention layer of the same models gates its output instead: see
//! [`split_query_gate`] and [`apply_query_gate`].

use super::delta_rule::{self, Token};
use super::matmul::matmul;
use super::scratch::Scratch;
use crate::error::EngineError;
use crate::kv::KvCache;
use crate::model::arch::Role;
use crate::model::{DeltaNetConfig, ModelConfig};
use crate::weights::{LayerVectors, LayerView};

/// Moves the output gates out of the `n` rows of `q` (each `2 * q_dim` wide: per head its
/// query, then its gate) into `gates` (`q_dim` per row), leaving the queries packed
/// (`q_dim` per row) at the start of `q`.
pub(crate) fn split_query_gate(cfg: &ModelConfig, q: &mut [f32], gates: &mut [f32], n: usize) {
    let (hd, qd) = (cfg.head_dim, cfg.q_dim());
    for t in 0..n {
        for h in 0..cfg.n_head {
            let src = t * 2 * qd + h * 2 * hd;
            gates[t * qd + h * hd..][..hd].copy_from_slice(&q[src + hd..src + 2 * hd]);
            // The destination never lies after the source: a forward copy is safe.
            q.copy_within(src..src + hd, t * qd + h * hd);
        }
    }
}

/// `att *= sigmoid(gate)`, element by element, for the `n` rows.
pub(crate) fn apply_query_gate(cfg: &ModelConfig, att: &mut [f32], gates: &[f32], n: usize) {
    let len = n * cfg.q_dim();
    for (a, &g) in att[..len].iter_mut().zip(&gates[..len]) {
        *a *= 1.0 / (1.0 + (-g).exp());
    }
}

/// Runs delta-net layer `layer` on the `n` normalized rows of `s.xn`, advancing each row's
/// sequence state, and leaves its output (before the residual add) in `s.xn`. The rows are
/// consecutive tokens of `caches[0]`'s sequence when it is the only cache, else row `t` is
/// the next token of `caches[t]` (batched decoding).
#[allow(clippy::too_many_arguments)]
pub(crate) fn delta_net_layer(
    cfg: &ModelConfig,
    layer: usize,
    w: &LayerView<'_>,
    vecs: &LayerVectors,
    s: &mut Scratch,
    caches: &mut [&mut KvCache],
    n: usize,
    per_token: bool,
) -> Result<(), EngineError> {
    let d = cfg
        .delta_net
        .as_ref()
        .expect("a delta-net layer has its config");
    let (c, v, h) = (d.channels(), d.value_dim(), d.n_v_heads);
    let (qkv, rest) = s.hybrid.split_at_mut(n * c);
    let (z, rest) = rest.split_at_mut(n * v);
    let (beta, rest) = rest.split_at_mut(n * h);
    let (alpha, rest) = rest.split_at_mut(n * h);
    let (out, rest) = rest.split_at_mut(n * v);
    let (heads, rest) = rest.split_at_mut(n * v);
    let ws_len = if n > 1 {
        delta_rule::chunk_workspace_floats(d.head_dim)
    } else {
        0
    };
    let (ws, grouped) = rest.split_at_mut(h * ws_len);
    if d.joint_beta_alpha {
        // qwen3next: per key head, its value heads' betas then their alphas.
        let ba = &mut out[..n * 2 * h];
        if let Some(ssm_in) = w.get(Role::SsmIn) {
            let grouped = &mut grouped[..n * (c + v)];
            matmul(
                [
                    (ssm_in, &mut *grouped),
                    (w.matrix(Role::SsmBetaAlpha), &mut *ba),
                ],
                &s.xn,
                n,
                &mut s.act,
                per_token,
            )?;
            ungroup_qkvz(d, grouped, qkv, z, n);
        } else {
            matmul(
                [
                    (w.matrix(Role::AttnQkv), &mut *qkv),
                    (w.matrix(Role::AttnGate), &mut *z),
                    (w.matrix(Role::SsmBetaAlpha), &mut *ba),
                ],
                &s.xn,
                n,
                &mut s.act,
                per_token,
            )?;
        }
        let run = h / d.n_k_heads;
        for t in 0..n {
            let row = &ba[t * 2 * h..(t + 1) * 2 * h];
            for (g, pair) in row.chunks_exact(2 * run).enumerate() {
                beta[t * h + g * run..][..run].copy_from_slice(&pair[..run]);
                alpha[t * h + g * run..][..run].copy_from_slice(&pair[run..]);
            }
        }
    } else {
        matmul(
            [
                (w.matrix(Role::AttnQkv), &mut *qkv),
                (w.matrix(Role::AttnGate), &mut *z),
                (w.matrix(Role::SsmBeta), &mut *beta),
                (w.matrix(Role::SsmAlpha), &mut *alpha),
            ],
            &s.xn,
            n,
            &mut s.act,
            per_token,
        )?;
    }
    let p = Params {
        d,
        conv: vecs.norm(Role::SsmConv1d),
        dt_bias: vecs.norm(Role::SsmDtBias),
        a: vecs.norm(Role::SsmA),
        norm: vecs.norm(Role::SsmNorm),
        eps: cfg.rms_eps,
    };
    // Convolution, normalization, beta and the decay, token by token (the convolution's
    // inputs are the sequence's).
    for t in 0..n {
        let kv = if caches.len() == 1 { 0 } else { t };
        let conv_state = caches[kv].recurrent_layer(layer).0;
        p.prepare(
            conv_state,
            &mut qkv[t * c..(t + 1) * c],
            &mut beta[t * h..(t + 1) * h],
            &mut alpha[t * h..(t + 1) * h],
        );
    }
    let (qkv, beta, g) = (&*qkv, &*beta, &*alpha);
    let (hd, kd) = (d.head_dim, d.key_dim());
    let token = |t: usize, head: usize| {
        let (row, kh) = (&qkv[t * c..(t + 1) * c], d.key_head(head));
        Token {
            q: &row[kh * hd..(kh + 1) * hd],
            k: &row[kd + kh * hd..kd + (kh + 1) * hd],
            v: &row[2 * kd + head * hd..2 * kd + (head + 1) * hd],
            b: beta[t * h + head],
            g: g[t * h + head],
        }
    };
    // The delta rule, value head by value head (`heads` holds head `h`'s rows together).
    if let [kv] = caches {
        let state = kv.recurrent_layer(layer).1;
        let chunked = n > 1 && !per_token;
        for_each_head(d, n, state, heads, ws, ws_len, |head, state, o, ws| {
            if chunked {
                delta_rule::chunked(state, n, |t| token(t, head), o, ws)
            } else {
                delta_rule::recurrent(state, n, |t| token(t, head), o)
            }
        });
    } else {
        for (t, kv) in caches.iter_mut().enumerate().take(n) {
            let state = kv.recurrent_layer(layer).1;
            let row_out = &mut heads[t * v..(t + 1) * v];
            for_each_head(d, 1, state, row_out, &mut [], 0, |head, state, o, _| {
                delta_rule::recurrent(state, 1, |_| token(t, head), o)
            });
        }
    }
    // The gated norm, into token-major rows: one sequence's outputs are head-major, a batch
    // of sequences' token-major already.
    let head_major = caches.len() == 1;
    for t in 0..n {
        for head in 0..h {
            let src = if head_major {
                &heads[(head * n + t) * hd..][..hd]
            } else {
                &heads[t * v + head * hd..][..hd]
            };
            p.gated_norm(
                src,
                &z[t * v + head * hd..][..hd],
                &mut out[t * v + head * hd..][..hd],
            );
        }
    }
    matmul(
        [(w.matrix(Role::SsmOut), &mut s.xn)],
        out,
        n,
        &mut s.act,
        per_token,
    )
}

/// Sorts `ssm_in`'s output (per key head: its query, its key, then the values and `z` of
/// its run of value heads) into the convolution's input (all queries, all keys, all values)
/// and `z`, for the `n` rows.
fn ungroup_qkvz(d: &DeltaNetConfig, grouped: &[f32], qkv: &mut [f32], z: &mut [f32], n: usize) {
    let (c, v, hd, kd) = (d.channels(), d.value_dim(), d.head_dim, d.key_dim());
    let run = d.n_v_heads / d.n_k_heads * hd;
    let per_group = 2 * hd + 2 * run;
    for t in 0..n {
        let src = &grouped[t * (c + v)..(t + 1) * (c + v)];
        let (qkv, z) = (&mut qkv[t * c..(t + 1) * c], &mut z[t * v..(t + 1) * v]);
        for (g, part) in src.chunks_exact(per_group).enumerate() {
            qkv[g * hd..(g + 1) * hd].copy_from_slice(&part[..hd]);
            qkv[kd + g * hd..kd + (g + 1) * hd].copy_from_slice(&part[hd..2 * hd]);
            qkv[2 * kd + g * run..2 * kd + (g + 1) * run]
                .copy_from_slice(&part[2 * hd..2 * hd + run]);
            z[g * run..(g + 1) * run].copy_from_slice(&part[2 * hd + run..]);
        }
    }
}

/// One layer's fixed inputs to the recurrent step.
struct Params<'a> {
    d: &'a DeltaNetConfig,
    /// `d_conv` taps per channel, channel by channel.
    conv: &'a [f32],
    dt_bias: &'a [f32],
    a: &'a [f32],
    norm: &'a [f32],
    eps: f32,
}

impl Params<'_> {
    /// One token's inputs to the delta rule: its convolution (advancing `conv_state`), SiLU
    /// and the normalized, scaled q and k in `qkv`; `beta` becomes `sigmoid(beta)` and
    /// `alpha` the log of the decay, `softplus(alpha + dt_bias) * ssm_a`.
    fn prepare(
        &self,
        conv_state: &mut [f32],
        qkv: &mut [f32],
        beta: &mut [f32],
        alpha: &mut [f32],
    ) {
        let d = self.d;
        let (c, k_taps, hd) = (d.channels(), d.d_conv, d.head_dim);
        let kd = d.key_dim();
        // Causal convolution over the kept inputs and this one, then SiLU; the kept inputs
        // shift by one row.
        for ch in 0..c {
            let taps = &self.conv[ch * k_taps..(ch + 1) * k_taps];
            let x = qkv[ch];
            let mut sum = 0.0f32;
            for (j, &tap) in taps[..k_taps - 1].iter().enumerate() {
                sum += conv_state[j * c + ch] * tap;
            }
            sum += x * taps[k_taps - 1];
            for j in 0..k_taps.saturating_sub(2) {
                conv_state[j * c + ch] = conv_state[(j + 1) * c + ch];
            }
            if k_taps >= 2 {
                conv_state[(k_taps - 2) * c + ch] = x;
            }
            qkv[ch] = sum / (1.0 + (-sum).exp());
        }
        let (q, k) = qkv[..2 * kd].split_at_mut(kd);
        let q_scale = 1.0 / (hd as f32).sqrt();
        for head in q.chunks_exact_mut(hd) {
            l2_normalize(head, self.eps, q_scale);
        }
        for head in k.chunks_exact_mut(hd) {
            l2_normalize(head, self.eps, 1.0);
        }
        for (h, (b, a)) in beta.iter_mut().zip(alpha.iter_mut()).enumerate() {
            *b = 1.0 / (1.0 + (-*b).exp());
            *a = softplus(*a + self.dt_bias[h]) * self.a[h];
        }
    }

    /// One head's output: RMS-normalized, times `ssm_norm`, times `silu(z)`.
    fn gated_norm(&self, o: &[f32], z: &[f32], out: &mut [f32]) {
        let ss: f64 = o.iter().map(|&x| (x as f64) * (x as f64)).sum();
        let scale = 1.0 / ((ss / o.len() as f64) as f32 + self.eps).sqrt();
        for (((y, &x), &wn), &g) in out.iter_mut().zip(o).zip(self.norm).zip(z) {
            *y = x * scale * wn * (g / (1.0 + (-g).exp()));
        }
    }
}

/// State elements times tokens under which a region's fork and join cost more than they
/// save: the heads then run on the calling thread.
const HEADS_ON_POOL_MIN: usize = 1 << 16;

/// Runs `f(head, its state, its n output rows, its workspace)` for every value head of
/// `d`: `state` holds the heads' matrices in turn, `out` `n` rows of `head_dim` per head,
/// `ws` `ws_len` elements per head. On the pool when the work is large enough.
fn for_each_head(
    d: &DeltaNetConfig,
    n: usize,
    state: &mut [f32],
    out: &mut [f32],
    ws: &mut [f32],
    ws_len: usize,
    f: impl Fn(usize, &mut [f32], &mut [f32], &mut [f32]) + Sync,
) {
    let (heads, mat) = (d.n_v_heads, d.head_dim * d.head_dim);
    let rows = n * d.head_dim;
    assert!(state.len() >= heads * mat && out.len() >= heads * rows && ws.len() >= heads * ws_len);
    if heads < 2 || n * heads * mat < HEADS_ON_POOL_MIN {
        for head in 0..heads {
            f(
                head,
                &mut state[head * mat..(head + 1) * mat],
                &mut out[head * rows..(head + 1) * rows],
                &mut ws[head * ws_len..(head + 1) * ws_len],
            );
        }
        return;
    }
    let (sp, op, wp) = (
        HeadPtr(state.as_mut_ptr()),
        HeadPtr(out.as_mut_ptr()),
        HeadPtr(ws.as_mut_ptr()),
    );
    ramforge_quant::parallel::for_each(heads, |head| {
        // SAFETY: item `head` is the only one given these ranges, which lie inside the
        // slices (asserted above), borrowed mutably for the whole call; each item runs once.
        let (s, o, w) = unsafe {
            (
                sp.slice(head * mat, mat),
                op.slice(head * rows, rows),
                wp.slice(head * ws_len, ws_len),
            )
        };
        f(head, s, o, w)
    });
}

/// A pointer into a slice the items of one region share, each taking its own range.
#[derive(Clone, Copy)]
struct HeadPtr(*mut f32);
// SAFETY: only used by `for_each_head`, whose items take disjoint ranges.
unsafe impl Send for HeadPtr {}
unsafe impl Sync for HeadPtr {}

impl HeadPtr {
    /// # Safety
    /// `start..start + len` lies inside the slice and no other live borrow touches it.
    unsafe fn slice<'s>(self, start: usize, len: usize) -> &'s mut [f32] {
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// `x * scale / max(|x|, eps)` (ggml's `l2_norm`, then the query scale).
fn l2_normalize(x: &mut [f32], eps: f32, scale: f32) {
    let ss: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    let inv = 1.0 / (ss.sqrt() as f32).max(eps);
    for v in x {
        *v = *v * inv * scale;
    }
}

/// ggml's softplus: `log(1 + exp(x))`, `x` itself above 20.
fn softplus(x: f32) -> f32 {
    if x > 20.0 {
        x
    } else {
        (1.0 + x.exp()).ln()
    }
}
