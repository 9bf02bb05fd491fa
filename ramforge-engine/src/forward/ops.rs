//! The element-wise ops blocks are composed of, on f32 activations: RMSNorm, RoPE, gated
//! activations, bias and residual adds.

use crate::model::RopeStyle;

/// `1 / sqrt(mean(x^2) + eps)`, the square sum in f64.
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let ss: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    1.0 / ((ss / x.len() as f64) as f32 + eps).sqrt()
}

/// `out = x / sqrt(mean(x^2) + eps) * w`, row by row.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    for (xr, or) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        let scale = rms_scale(xr, eps);
        for ((o, &v), &wi) in or.iter_mut().zip(xr).zip(w) {
            *o = v * scale * wi;
        }
    }
}

/// [`rms_norm`] of every `w.len()` elements of `x`, in place (per-head norms, post-norms).
pub fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    let d = w.len();
    for xr in x.chunks_exact_mut(d) {
        let scale = rms_scale(xr, eps);
        for (v, &wi) in xr.iter_mut().zip(w) {
            *v = *v * scale * wi;
        }
    }
}

/// [`rms_norm_in_place`] without a weight, on every `d` elements of `x` (ggml's `rms_norm`).
pub fn rms_norm_unweighted(x: &mut [f32], d: usize, eps: f32) {
    for xr in x.chunks_exact_mut(d) {
        let scale = rms_scale(xr, eps);
        xr.iter_mut().for_each(|v| *v *= scale);
    }
}

/// The RoPE angles of one table: `angle(p, j) = p * scale * base^(-2j/dim) / factor[j]`.
#[derive(Clone, Copy)]
pub struct RopeParams<'a> {
    /// The frequency base.
    pub base: f32,
    /// The position multiplier.
    pub scale: f32,
    /// Rotated elements per head.
    pub dim: usize,
    /// Per-frequency divisors (llama3-style), if any.
    pub factors: Option<&'a [f32]>,
    /// YaRN: `scale` then interpolates the low frequencies only, ramping to the unscaled
    /// angle across the correction band, and cos/sin carry the attention-scale correction.
    pub yarn: Option<Yarn>,
}

/// YaRN's per-table constants, as ggml's `rope_yarn` uses them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Yarn {
    /// The first and last frequency index of the ramp (`ggml_rope_yarn_corr_dims`).
    pub corr: (f32, f32),
    /// What cos and sin are multiplied by: the attention factor times
    /// `1 + 0.1 ln(1 / scale)`.
    pub mscale: f32,
}

impl Yarn {
    /// The constants for `dim` rotated elements at frequency `base`, a model trained at
    /// `n_ctx_orig` positions, position scale `scale` (1 / factor), the ramp's corners
    /// `beta_fast`/`beta_slow` and the file's attention factor.
    pub fn new(
        dim: usize,
        base: f32,
        n_ctx_orig: usize,
        scale: f32,
        (beta_fast, beta_slow): (f32, f32),
        attn_factor: f32,
    ) -> Yarn {
        let corr_dim = |rotations: f32| {
            dim as f32 * (n_ctx_orig as f32 / (rotations * 2.0 * std::f32::consts::PI)).ln()
                / (2.0 * base.ln())
        };
        let start = corr_dim(beta_fast).floor().max(0.0);
        let end = corr_dim(beta_slow).ceil().min(dim as f32 - 1.0);
        Yarn {
            corr: (start, end),
            mscale: attn_factor * (1.0 + 0.1 * (1.0 / scale).ln()),
        }
    }

    /// How much of the unscaled (extrapolated) angle frequency `j` keeps: 1 below the band,
    /// 0 above it, linear between.
    fn ramp(&self, j: usize) -> f32 {
        let (low, high) = self.corr;
        let y = (j as f32 - low) / (high - low).max(0.001);
        1.0 - y.clamp(0.0, 1.0)
    }
}

/// [`rope_rows`] for the positions `first..first + n`.
#[cfg(test)]
pub fn rope_table(r: RopeParams<'_>, first: usize, n: usize, table: &mut [f32]) {
    rope_rows(r, first..first + n, table);
}

/// Fills `table` with cos (first half) and sin (second half) of every RoPE angle for rows at
/// `positions` (row `i` at the `i`-th): a prompt batch, or the rows of a batch of sequences,
/// each at its own position.
pub fn rope_rows(
    r: RopeParams<'_>,
    positions: impl ExactSizeIterator<Item = usize>,
    table: &mut [f32],
) {
    let half = r.dim / 2;
    let factors = r.factors;
    let n = positions.len();
    let (cos, sin) = table[..2 * n * half].split_at_mut(n * half);
    for (i, pos) in positions.enumerate() {
        let p = pos as f64 * r.scale as f64;
        for j in 0..half {
            let mut freq = (r.base as f64).powf(-2.0 * j as f64 / r.dim as f64);
            if let Some(f) = factors {
                freq /= f[j] as f64;
            }
            let (angle, m) = match r.yarn {
                None => (p * freq, 1.0),
                Some(y) => {
                    let extrap = pos as f64 * freq;
                    let mix = y.ramp(j) as f64;
                    (p * freq * (1.0 - mix) + extrap * mix, y.mscale as f64)
                }
            };
            cos[i * half + j] = (angle.cos() * m) as f32;
            sin[i * half + j] = (angle.sin() * m) as f32;
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

/// `x *= factor`, element by element.
pub(crate) fn scale(x: &mut [f32], factor: f32) {
    for v in x {
        *v *= factor;
    }
}

pub(crate) fn add_bias(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (v, &b) in row.iter_mut().zip(bias) {
            *v += b;
        }
    }
}

pub(crate) fn add_into(acc: &mut [f32], x: &[f32]) {
    for (a, &v) in acc.iter_mut().zip(x) {
        *a += v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(dim: usize) -> RopeParams<'static> {
        RopeParams {
            base: 10000.0,
            scale: 1.0,
            dim,
            factors: None,
            yarn: None,
        }
    }

    #[test]
    fn rope_pairs_adjacent_for_llama_and_halves_for_neox() {
        let c = cfg(4);
        let mut table = vec![0.0; 4];
        rope_table(c, 1, 1, &mut table);
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
        rope_table(c2, 3, 1, &mut t2);
        let mut p = x.to_vec();
        apply_rope(&mut p, 1, 1, 4, 2, RopeStyle::Neox, &t2);
        assert_eq!(&p[2..], &[3.0, 4.0]);
        rope_table(c2, 0, 1, &mut t2);
        let mut z = x.to_vec();
        apply_rope(&mut z, 1, 1, 4, 2, RopeStyle::Adjacent, &t2);
        assert_eq!(z, x.to_vec());
    }

    #[test]
    fn rope_factors_divide_the_frequencies() {
        let c = cfg(4);
        let mut plain = vec![0.0; 4];
        let mut scaled = vec![0.0; 4];
        rope_table(c, 5, 1, &mut plain);
        rope_table(
            RopeParams {
                factors: Some(&[1.0, 4.0]),
                ..c
            },
            5,
            1,
            &mut scaled,
        );
        assert_eq!(plain[0], scaled[0]);
        assert!((scaled[1] - (5.0f64 * 0.01 / 4.0).cos() as f32).abs() < 1e-7);
    }

    #[test]
    fn rms_norm_in_both_forms() {
        let mut out = [0.0f32; 2];
        rms_norm(&[3.0, 4.0], &[1.0, 2.0], 0.0, &mut out);
        let r = (12.5f32).sqrt();
        assert!((out[0] - 3.0 / r).abs() < 1e-6 && (out[1] - 8.0 / r).abs() < 1e-6);
        let mut h = [3.0f32, 4.0, 0.0, 2.0];
        rms_norm_in_place(&mut h, &[1.0, 2.0], 0.0);
        assert!((h[0] - 3.0 / r).abs() < 1e-6 && (h[1] - 8.0 / r).abs() < 1e-6);
        assert!((h[2]).abs() < 1e-6 && (h[3] - 2.0 * 2.0 / 2f32.sqrt()).abs() < 1e-6);
    }

    #[test]
    fn yarn_interpolates_low_frequencies_only_and_scales_by_mscale() {
        // 64 rotated dims, base 10000, trained at 4096, factor 32 (gpt-oss's numbers).
        let y = Yarn::new(64, 10000.0, 4096, 1.0 / 32.0, (32.0, 1.0), 1.0);
        // ggml_rope_yarn_corr_dims for these: floor(10.47) and ceil(22.5).
        assert_eq!(y.corr, (10.0, 23.0));
        let mscale = 1.0 + 0.1 * 32f32.ln();
        assert!((y.mscale - mscale).abs() < 1e-6);
        let c = RopeParams {
            dim: 64,
            scale: 1.0 / 32.0,
            yarn: Some(y),
            ..cfg(64)
        };
        let mut t = vec![0.0; 64];
        rope_table(c, 100, 1, &mut t);
        let (cos, sin) = t.split_at(32);
        let freq = |j: usize| 10000f64.powf(-2.0 * j as f64 / 64.0);
        // Frequency 0 (high): extrapolated, the plain angle; frequency 31 (low): interpolated.
        for (j, angle) in [(0, 100.0 * freq(0)), (31, 100.0 / 32.0 * freq(31))] {
            assert!(
                (cos[j] as f64 - angle.cos() * mscale as f64).abs() < 1e-5,
                "{j}"
            );
            assert!(
                (sin[j] as f64 - angle.sin() * mscale as f64).abs() < 1e-5,
                "{j}"
            );
        }
        // Inside the ramp: the two angles mixed linearly.
        let mix = 1.0 - (16.0 - 10.0) / 13.0;
        let angle = 100.0 * freq(16) * mix + 100.0 / 32.0 * freq(16) * (1.0 - mix);
        assert!((cos[16] as f64 - angle.cos() * mscale as f64).abs() < 1e-5);
    }
}
