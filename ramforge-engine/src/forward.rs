//! The transformer block's arithmetic on f32 activations: RMSNorm, RoPE, attention, SwiGLU.
//! Matrix products go to `ramforge-quant`, which reads the weights in their quantized form.

use crate::budget::{BudgetError, ChargedVec, MemoryBudget};
use crate::config::{ModelConfig, RopeStyle};
use crate::error::EngineError;
use crate::kv::KvCache;
use crate::plan::scratch_elements;
use crate::weights::{LayerVectors, LayerView, MatrixView};
use rayon::prelude::*;

/// Activations for one batch of tokens, each row `batch` tokens long. Charged as "scratch".
pub struct Scratch {
    pub batch: usize,
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
    /// Attention output, head-major (`n_head x batch x head_dim`), written in parallel.
    pub att_heads: ChargedVec<f32>,
    pub gate: ChargedVec<f32>,
    pub up: ChargedVec<f32>,
    /// cos then sin of each RoPE angle, `batch x rope_dim/2` each.
    pub rope: ChargedVec<f32>,
    /// One score row per head, `n_head x ctx`.
    pub scores: ChargedVec<f32>,
    /// The matrix products' quantized activations ([`activation_scratch_elements`] f32
    /// elements' worth of bytes).
    pub act: ChargedVec<u8>,
}

/// Scratch (in f32 elements) for the quantized activations of one fused matrix product: a
/// batch of the widest input, quantized for up to two activation types at once, at Q8_K's
/// 292 bytes per 256 elements (the most of any activation type).
pub fn activation_scratch_elements(cfg: &ModelConfig, batch: usize) -> u64 {
    let widest = cfg.n_embd.max(cfg.q_dim()).max(cfg.n_ff) as u64;
    (2 * batch as u64 * widest * 292).div_ceil(256 * 4)
}

impl Scratch {
    pub fn new(
        budget: &MemoryBudget,
        cfg: &ModelConfig,
        batch: usize,
        ctx: usize,
    ) -> Result<Scratch, BudgetError> {
        let b = batch;
        let buf = |len: usize| ChargedVec::zeroed(budget, "scratch", len);
        let s = Scratch {
            batch,
            ctx,
            x: buf(b * cfg.n_embd)?,
            xn: buf(b * cfg.n_embd)?,
            q: buf(b * cfg.q_dim())?,
            k: buf(b * cfg.kv_dim())?,
            v: buf(b * cfg.kv_dim())?,
            att: buf(b * cfg.q_dim())?,
            att_heads: buf(b * cfg.q_dim())?,
            gate: buf(b * cfg.n_ff)?,
            up: buf(b * cfg.n_ff)?,
            rope: buf(b * cfg.rope_dim)?,
            scores: buf(cfg.n_head * ctx)?,
            act: ChargedVec::zeroed(
                budget,
                "scratch",
                4 * activation_scratch_elements(cfg, batch) as usize,
            )?,
        };
        debug_assert_eq!(s.elements() as u64, scratch_elements(cfg, batch, ctx));
        Ok(s)
    }

    fn elements(&self) -> usize {
        [
            &self.x,
            &self.xn,
            &self.q,
            &self.k,
            &self.v,
            &self.att,
            &self.att_heads,
            &self.gate,
            &self.up,
            &self.rope,
            &self.scores,
        ]
        .iter()
        .map(|b| b.len())
        .sum::<usize>()
            + self.act.len() / 4
    }
}

/// `ys[j] = ms[j] . x` for `n` rows of `x`, every product in one parallel region (one
/// fork-join instead of one per matrix), with `x` quantized once into `act`. The matrices
/// share their input, so they have the same `cols`.
pub fn matmul<const N: usize>(
    ms: [(&MatrixView<'_>, &mut [f32]); N],
    x: &[f32],
    n: usize,
    act: &mut [u8],
) -> Result<(), EngineError> {
    let cols = ms[0].0.cols;
    debug_assert!(ms.iter().all(|(m, _)| m.cols == cols));
    let x = &x[..n * cols];
    let mut products = ms.map(|(m, y)| ramforge_quant::Product {
        ty: m.ty,
        weights: m.bytes,
        rows: m.rows,
        y: &mut y[..n * m.rows],
    });
    let types = products.each_ref().map(|p| p.ty);
    if ramforge_quant::activation_scratch_bytes(&types, cols, n)? <= act.len() {
        ramforge_quant::matmul_many(&mut products, cols, x, n, act)?;
    } else {
        // More activation types than the scratch holds at once (a file mixing three):
        // one product at a time, each within the scratch.
        for p in products.chunks_mut(1) {
            ramforge_quant::matmul_many(p, cols, x, n, act)?;
        }
    }
    Ok(())
}

/// `out = x / sqrt(mean(x^2) + eps) * w`, row by row.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let ss: f64 = xr.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let scale = 1.0 / ((ss / d as f64) as f32 + eps).sqrt();
        for ((o, &v), &wi) in or.iter_mut().zip(xr).zip(w) {
            *o = v * scale * wi;
        }
    }
}

/// Fills `table` with cos (first half) and sin (second half) of every RoPE angle for the
/// positions `first..first + n`: angle(p, j) = p * scale * base^(-2j/rope_dim) / factor[j].
pub fn rope_table(
    cfg: &ModelConfig,
    factors: Option<&[f32]>,
    first: usize,
    n: usize,
    table: &mut [f32],
) {
    let half = cfg.rope_dim / 2;
    let (cos, sin) = table[..2 * n * half].split_at_mut(n * half);
    for i in 0..n {
        let p = (first + i) as f64 * cfg.rope_freq_scale as f64;
        for j in 0..half {
            let mut freq = (cfg.rope_base as f64).powf(-2.0 * j as f64 / cfg.rope_dim as f64);
            if let Some(f) = factors {
                freq /= f[j] as f64;
            }
            let angle = p * freq;
            cos[i * half + j] = angle.cos() as f32;
            sin[i * half + j] = angle.sin() as f32;
        }
    }
}

/// Rotates the first `rope_dim` elements of every head of `n` rows of `x` (rows of
/// `n_heads * head_dim`), pairing elements by `style`.
pub fn apply_rope(
    x: &mut [f32],
    n: usize,
    n_heads: usize,
    head_dim: usize,
    rope_dim: usize,
    style: RopeStyle,
    table: &[f32],
) {
    let half = rope_dim / 2;
    let (cos, sin) = table[..2 * n * half].split_at(n * half);
    for (i, row) in x.chunks_exact_mut(n_heads * head_dim).take(n).enumerate() {
        let (c, s) = (&cos[i * half..][..half], &sin[i * half..][..half]);
        for head in row.chunks_exact_mut(head_dim) {
            for j in 0..half {
                let (a, b) = match style {
                    RopeStyle::Adjacent => (2 * j, 2 * j + 1),
                    RopeStyle::Neox => (j, j + half),
                };
                let (x0, x1) = (head[a], head[b]);
                head[a] = x0 * c[j] - x1 * s[j];
                head[b] = x0 * s[j] + x1 * c[j];
            }
        }
    }
}

/// `gate = silu(gate) * up`.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + (-*g).exp()) * u;
    }
}

fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (v, &b) in row.iter_mut().zip(bias) {
            *v += b;
        }
    }
}

fn add_into(acc: &mut [f32], x: &[f32]) {
    for (a, &v) in acc.iter_mut().zip(x) {
        *a += v;
    }
}

/// Runs one transformer block on the rows of `s.x` at positions `positions`, storing their
/// keys and values in `kv`. The RoPE table must already hold these positions.
pub fn block(
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
    let style = cfg.arch.rope_style();

    // Attention.
    rms_norm(
        &s.x[..n * e],
        &vecs.attn_norm,
        cfg.rms_eps,
        &mut s.xn[..n * e],
    );
    matmul(
        [(&w.q, &mut s.q), (&w.k, &mut s.k), (&w.v, &mut s.v)],
        &s.xn,
        n,
        &mut s.act,
    )?;
    if let Some([bq, bk, bv]) = &vecs.qkv_bias {
        add_bias(&mut s.q[..n * qd], bq);
        add_bias(&mut s.k[..n * kvd], bk);
        add_bias(&mut s.v[..n * kvd], bv);
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
    matmul([(&w.o, &mut s.xn)], &s.att, n, &mut s.act)?;
    add_into(&mut s.x[..n * e], &s.xn[..n * e]);

    // Feed-forward.
    rms_norm(
        &s.x[..n * e],
        &vecs.ffn_norm,
        cfg.rms_eps,
        &mut s.xn[..n * e],
    );
    matmul(
        [(&w.gate, &mut s.gate), (&w.up, &mut s.up)],
        &s.xn,
        n,
        &mut s.act,
    )?;
    swiglu(&mut s.gate[..n * ff], &s.up[..n * ff]);
    matmul([(&w.down, &mut s.xn)], &s.gate, n, &mut s.act)?;
    add_into(&mut s.x[..n * e], &s.xn[..n * e]);
    Ok(())
}

/// Below this many key/value elements (heads x queries x positions x head size) attention
/// runs on the calling thread.
const ATTENTION_PARALLEL_MIN: usize = 64 * 1024;

/// Causal grouped-query attention of the `n` query rows in `s.q` over the cache, heads in
/// parallel; the result lands token-major in `s.att`.
fn attention(
    cfg: &ModelConfig,
    layer: usize,
    s: &mut Scratch,
    kv: &KvCache,
    first: usize,
    n: usize,
) {
    let hd = cfg.head_dim;
    let qd = cfg.q_dim();
    let group = cfg.n_head / cfg.n_head_kv;
    let scale = 1.0 / (hd as f32).sqrt();
    let q = &s.q;
    let ctx = s.ctx;
    let head = |h: usize, out: &mut [f32], scores: &mut [f32]| {
        for i in 0..n {
            let qrow = &q[i * qd + h * hd..i * qd + (h + 1) * hd];
            let o = &mut out[i * hd..(i + 1) * hd];
            kv.attend(
                layer,
                h / group,
                qrow,
                scale,
                &mut scores[..first + i + 1],
                o,
            );
        }
    };
    // Key/value elements read, summed over the heads: a short context's attention is cheaper
    // than waking the pool for it.
    let work = cfg.n_head * n * (first + n) * hd;
    if work < ATTENTION_PARALLEL_MIN {
        let heads = s.att_heads[..n * qd].chunks_mut(n * hd);
        for (h, (out, scores)) in heads.zip(s.scores.chunks_mut(ctx)).enumerate() {
            head(h, out, scores);
        }
    } else {
        s.att_heads[..n * qd]
            .par_chunks_mut(n * hd)
            .zip(s.scores.par_chunks_mut(ctx))
            .enumerate()
            .for_each(|(h, (out, scores))| head(h, out, scores));
    }
    for h in 0..cfg.n_head {
        for i in 0..n {
            let src = &s.att_heads[h * n * hd + i * hd..][..hd];
            s.att[i * qd + h * hd..][..hd].copy_from_slice(src);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Arch;

    fn cfg(rope_dim: usize) -> ModelConfig {
        ModelConfig {
            arch: Arch::Llama,
            n_layer: 1,
            n_embd: 8,
            n_head: 2,
            n_head_kv: 1,
            head_dim: 4,
            n_ff: 16,
            n_ctx_train: 64,
            rms_eps: 1e-5,
            rope_base: 10000.0,
            rope_dim,
            rope_freq_scale: 1.0,
        }
    }

    #[test]
    fn rope_pairs_adjacent_for_llama_and_halves_for_neox() {
        let c = cfg(4);
        let mut table = vec![0.0; 4];
        rope_table(&c, None, 1, 1, &mut table);
        // Angles: pos 1 * base^0 = 1 rad, pos 1 * base^(-1/2) = 0.01 rad.
        let (c0, s0, c1, s1) = (1f32.cos(), 1f32.sin(), 0.01f32.cos(), 0.01f32.sin());
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let mut a = x.to_vec();
        apply_rope(&mut a, 1, 1, 4, 4, RopeStyle::Adjacent, &table);
        let want_a = [
            1.0 * c0 - 2.0 * s0,
            1.0 * s0 + 2.0 * c0,
            3.0 * c1 - 4.0 * s1,
            3.0 * s1 + 4.0 * c1,
        ];
        let mut b = x.to_vec();
        apply_rope(&mut b, 1, 1, 4, 4, RopeStyle::Neox, &table);
        let want_b = [
            1.0 * c0 - 3.0 * s0,
            2.0 * c1 - 4.0 * s1,
            1.0 * s0 + 3.0 * c0,
            2.0 * s1 + 4.0 * c1,
        ];
        for i in 0..4 {
            assert!(
                (a[i] - want_a[i]).abs() < 1e-6,
                "adjacent {i}: {a:?} vs {want_a:?}"
            );
            assert!(
                (b[i] - want_b[i]).abs() < 1e-6,
                "neox {i}: {b:?} vs {want_b:?}"
            );
        }
        // Position 0 is the identity; partial rotation leaves the tail alone.
        let c2 = cfg(2);
        let mut t2 = vec![0.0; 2];
        rope_table(&c2, None, 3, 1, &mut t2);
        let mut p = x.to_vec();
        apply_rope(&mut p, 1, 1, 4, 2, RopeStyle::Neox, &t2);
        assert_eq!(&p[2..], &[3.0, 4.0]);
        rope_table(&c2, None, 0, 1, &mut t2);
        let mut z = x.to_vec();
        apply_rope(&mut z, 1, 1, 4, 2, RopeStyle::Adjacent, &t2);
        assert_eq!(z, x.to_vec());
    }

    #[test]
    fn rope_factors_divide_the_frequencies() {
        let c = cfg(4);
        let mut plain = vec![0.0; 4];
        let mut scaled = vec![0.0; 4];
        rope_table(&c, None, 5, 1, &mut plain);
        rope_table(&c, Some(&[1.0, 4.0]), 5, 1, &mut scaled);
        assert_eq!(plain[0], scaled[0]);
        assert!((scaled[1] - (5.0f64 * 0.01 / 4.0).cos() as f32).abs() < 1e-7);
    }

    #[test]
    fn rms_norm_and_swiglu() {
        let mut out = [0.0f32; 2];
        rms_norm(&[3.0, 4.0], &[1.0, 2.0], 0.0, &mut out);
        let r = (12.5f32).sqrt();
        assert!((out[0] - 3.0 / r).abs() < 1e-6 && (out[1] - 8.0 / r).abs() < 1e-6);
        let mut g = [0.0f32, 2.0];
        swiglu(&mut g, &[5.0, 3.0]);
        assert_eq!(g[0], 0.0);
        assert!((g[1] - 2.0 / (1.0 + (-2.0f32).exp()) * 3.0).abs() < 1e-6);
    }
}
