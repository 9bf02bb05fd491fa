//! Hyper-connections: DeepSeek V4 keeps [`HC_STREAMS`] residual streams per token. Before a
//! sub-layer, mixes computed from the normed streams give its input (a weighted sum of the
//! streams, `pre`), how much of its output each stream takes (`post`), and a doubly
//! stochastic matrix (Sinkhorn) that recombines the streams; the head weighs the streams
//! into one state. As llama.cpp's deepseek4 graph computes them.

use super::super::ops::rms_norm_unweighted;
use crate::model::dsv4::HC_STREAMS as H;

/// Floats of one row's mixes: `pre`, `post`, then the combination `c[dst][src]`.
pub(super) const MIXES: usize = (2 + H) * H;

/// `z = x / sqrt(mean(x^2) + eps)` over the whole row (every stream), unweighted.
pub(super) fn norm_streams(x: &[f32], eps: f32, z: &mut [f32]) {
    z.copy_from_slice(x);
    rms_norm_unweighted(z, x.len(), eps);
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Turns one row's raw mixes `m` (the `hc_*_fn` product) into `pre`, `post` and the
/// Sinkhorn-normalized combination, in place: `c[dst][src]` at `2H + dst * H + src`.
pub(super) fn finish_mixes(m: &mut [f32], base: &[f32], scale: &[f32], iters: usize, eps: f32) {
    let mut c = [[0.0f32; H]; H];
    for src in 0..H {
        for (dst, row) in c.iter_mut().enumerate() {
            let i = 2 * H + dst + H * src;
            row[src] = m[i] * scale[2] + base[i];
        }
    }
    for h in 0..H {
        m[h] = sigmoid(m[h] * scale[0] + base[h]) + eps;
        m[H + h] = 2.0 * sigmoid(m[H + h] * scale[1] + base[H + h]);
    }
    // Softmax over the destinations of each source, then alternate normalizations.
    for src in 0..H {
        let max = (0..H).fold(f32::NEG_INFINITY, |a, d| a.max(c[d][src]));
        let mut sum = 0.0;
        for row in c.iter_mut() {
            row[src] = (row[src] - max).exp();
            sum += row[src];
        }
        for row in c.iter_mut() {
            row[src] = row[src] / sum + eps;
        }
    }
    let by_dst = |c: &mut [[f32; H]; H]| {
        for row in c.iter_mut() {
            let sum: f32 = row.iter().sum::<f32>() + eps;
            for v in row.iter_mut() {
                *v /= sum;
            }
        }
    };
    let by_src = |c: &mut [[f32; H]; H]| {
        for src in 0..H {
            let sum: f32 = (0..H).map(|d| c[d][src]).sum::<f32>() + eps;
            for row in c.iter_mut() {
                row[src] /= sum;
            }
        }
    };
    by_dst(&mut c);
    for _ in 1..iters {
        by_src(&mut c);
        by_dst(&mut c);
    }
    for (dst, row) in c.iter().enumerate() {
        m[2 * H + dst * H..2 * H + (dst + 1) * H].copy_from_slice(row);
    }
}

/// A sub-layer's input from one token's streams `x` (`H` rows of `e`): `sum_h pre[h] x[h]`.
pub(super) fn input(x: &[f32], mixes: &[f32], out: &mut [f32]) {
    let e = out.len();
    out.fill(0.0);
    for h in 0..H {
        let w = mixes[h];
        for (o, &v) in out.iter_mut().zip(&x[h * e..(h + 1) * e]) {
            *o += w * v;
        }
    }
}

/// The streams after a sub-layer whose output for this token is `f`:
/// `x[dst] = post[dst] f + sum_src c[dst][src] x[src]`, with `tmp` of the streams' size.
pub(super) fn output(x: &mut [f32], f: &[f32], mixes: &[f32], tmp: &mut [f32]) {
    let e = f.len();
    for dst in 0..H {
        let out = &mut tmp[dst * e..(dst + 1) * e];
        let post = mixes[H + dst];
        for (o, &v) in out.iter_mut().zip(f) {
            *o = post * v;
        }
        for src in 0..H {
            let c = mixes[2 * H + dst * H + src];
            for (o, &v) in out.iter_mut().zip(&x[src * e..(src + 1) * e]) {
                *o += c * v;
            }
        }
    }
    x.copy_from_slice(&tmp[..H * e]);
}

/// The head's state from one token's streams: weights `sigmoid(m[h] s + b[h]) + eps` from the
/// `output_hc_fn` product `m` of the normed streams.
pub(super) fn head(x: &[f32], m: &[f32], base: &[f32], scale: f32, eps: f32, out: &mut [f32]) {
    let e = out.len();
    out.fill(0.0);
    for h in 0..H {
        let w = sigmoid(m[h] * scale + base[h]) + eps;
        for (o, &v) in out.iter_mut().zip(&x[h * e..(h + 1) * e]) {
            *o += w * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_combination_is_nearly_doubly_stochastic_after_sinkhorn() {
        let mut m: Vec<f32> = (0..MIXES)
            .map(|i| ((i * 7919) % 13) as f32 / 5.0 - 1.0)
            .collect();
        let base: Vec<f32> = (0..MIXES).map(|i| (i % 5) as f32 / 10.0).collect();
        finish_mixes(&mut m, &base, &[0.5, 0.7, 1.3], 20, 1e-6);
        for d in 0..H {
            let row: f32 = (0..H).map(|s| m[2 * H + d * H + s]).sum();
            let col: f32 = (0..H).map(|s| m[2 * H + s * H + d]).sum();
            assert!(
                (row - 1.0).abs() < 1e-3 && (col - 1.0).abs() < 1e-3,
                "{row} {col}"
            );
        }
        assert!(m[..H].iter().all(|&p| p > 0.0 && p < 1.0 + 1e-5));
        assert!(m[H..2 * H].iter().all(|&p| p > 0.0 && p < 2.0));
    }
}
