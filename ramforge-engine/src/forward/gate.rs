//! The gated feed-forward activations, `gate = act(gate) * up`: SiLU (SwiGLU) and GELU in
//! ggml's tanh approximation (GeGLU). Both are `x * sigmoid(z)`: SiLU with `z = x`, the tanh
//! GELU with `z = 2 * sqrt(2 / pi) * (x + 0.044715 x^3)` (since `(1 + tanh(y)) / 2 =
//! sigmoid(2y)`). A prefill batch has `tokens * n_ff` of them, so they run on the worker pool
//! and, with AVX2, eight at a time: the scalar reference's operations in its order, with
//! `exp` in f64 lanes, so each value is the reference's but where libm's `expf` misrounds a
//! near-tie. Every element takes the same arithmetic wherever it falls in the slice (the
//! ragged end goes through the same vector code), so a row's result does not depend on the
//! batch around it.

use ramforge_quant::parallel::for_each_chunk_mut;

/// Elements per pool item: large enough that a region's fork-join is paid back.
const CHUNK: usize = 8192;

/// Which gate function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    Silu,
    GeluTanh,
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_COEF_A: f32 = 0.044_715;

/// `gate[i] = act(gate[i]) * up[i]`.
pub(crate) fn gated(kind: Gate, gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "gate and up lengths");
    let simd = crate::simd::avx2_enabled();
    if gate.len() <= CHUNK {
        gated_part(kind, gate, up, simd);
        return;
    }
    for_each_chunk_mut(gate, CHUNK, |i, part| {
        gated_part(kind, part, &up[i * CHUNK..][..part.len()], simd)
    });
}

fn gated_part(kind: Gate, gate: &mut [f32], up: &[f32], simd: bool) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is only true when the CPU has AVX2, FMA and F16C; the lengths are equal.
        unsafe { avx2::gated(kind, gate, up) };
        return;
    }
    let _ = simd;
    gated_scalar(kind, gate, up);
}

/// The scalar reference (libm's `exp`).
pub(crate) fn gated_scalar(kind: Gate, gate: &mut [f32], up: &[f32]) {
    for (g, &u) in gate.iter_mut().zip(up) {
        let x = *g;
        let z = match kind {
            Gate::Silu => x,
            Gate::GeluTanh => 2.0 * SQRT_2_OVER_PI * x * (1.0 + GELU_COEF_A * x * x),
        };
        *g = x / (1.0 + (-z).exp()) * u;
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Gate, GELU_COEF_A, SQRT_2_OVER_PI};
    use crate::simd::exp4_f64;
    use std::arch::x86_64::*;

    /// `exp(x)` rounded to f32, as libm's `expf` gives it; clamped where that is 0 or
    /// infinite already.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn exp8(x: __m256) -> __m256 {
        let clamp = |v: __m256d| {
            _mm256_min_pd(
                _mm256_max_pd(v, _mm256_set1_pd(-150.0)),
                _mm256_set1_pd(89.0),
            )
        };
        let lo = exp4_f64(clamp(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
        let hi = exp4_f64(clamp(_mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x))));
        _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo))
    }

    /// The scalar reference's operations in its order, without fused multiply-adds.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn gated8(kind: Gate, x: __m256, u: __m256) -> __m256 {
        let z = match kind {
            Gate::Silu => x,
            Gate::GeluTanh => {
                let ax2 = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(GELU_COEF_A), x), x);
                let inner = _mm256_add_ps(_mm256_set1_ps(1.0), ax2);
                _mm256_mul_ps(
                    _mm256_mul_ps(_mm256_set1_ps(2.0 * SQRT_2_OVER_PI), x),
                    inner,
                )
            }
        };
        let neg_z = _mm256_xor_ps(z, _mm256_set1_ps(-0.0));
        let denom = _mm256_add_ps(_mm256_set1_ps(1.0), exp8(neg_z));
        _mm256_mul_ps(_mm256_div_ps(x, denom), u)
    }

    /// Caller: AVX2 + FMA + F16C, `gate.len() == up.len()`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn gated(kind: Gate, gate: &mut [f32], up: &[f32]) {
        let n = gate.len();
        let whole = n / 8 * 8;
        let (g, u) = (gate.as_mut_ptr(), up.as_ptr());
        for i in (0..whole).step_by(8) {
            let y = gated8(kind, _mm256_loadu_ps(g.add(i)), _mm256_loadu_ps(u.add(i)));
            _mm256_storeu_ps(g.add(i), y);
        }
        if whole < n {
            // The ragged end through the same lanes, padded with zeros.
            let (mut gx, mut ux) = ([0f32; 8], [0f32; 8]);
            gx[..n - whole].copy_from_slice(&gate[whole..]);
            ux[..n - whole].copy_from_slice(&up[whole..]);
            let y = gated8(
                kind,
                _mm256_loadu_ps(gx.as_ptr()),
                _mm256_loadu_ps(ux.as_ptr()),
            );
            _mm256_storeu_ps(gx.as_mut_ptr(), y);
            gate[whole..].copy_from_slice(&gx[..n - whole]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(n: usize) -> (Vec<f32>, Vec<f32>) {
        // From -100 to 100 (past exp's clamps) with a dense stretch around 0.
        let g = (0..n)
            .map(|i| {
                let t = i as f32 / n as f32 * 2.0 - 1.0;
                if i % 3 == 0 {
                    100.0 * t
                } else {
                    6.0 * t
                }
            })
            .collect();
        let u = (0..n).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
        (g, u)
    }

    #[test]
    fn known_values() {
        for (kind, x, want) in [
            (Gate::Silu, 2.0f32, 2.0 / (1.0 + (-2.0f32).exp())),
            (Gate::Silu, 0.0, 0.0),
            // GELU(tanh) at 1 and -2 (0.841192, -0.045402).
            (Gate::GeluTanh, 1.0, 0.841_192),
            (Gate::GeluTanh, -2.0, -0.045_402),
        ] {
            let mut g = [x];
            gated(kind, &mut g, &[3.0]);
            assert!((g[0] - 3.0 * want).abs() < 1e-5, "{kind:?}({x}) = {}", g[0]);
        }
    }

    /// The vector form (and the pool's chunks) against the scalar reference: the same value
    /// but for rare `expf` near-ties, and those within an ulp or two.
    #[test]
    fn vector_form_matches_scalar_reference() {
        for kind in [Gate::Silu, Gate::GeluTanh] {
            for n in [1, 7, 8, 13, 3 * CHUNK + 5] {
                let (g0, u) = inputs(n);
                let mut want = g0.clone();
                gated_scalar(kind, &mut want, &u);
                let mut got = g0.clone();
                gated(kind, &mut got, &u);
                let differ = (0..n).filter(|&i| got[i] != want[i]).count();
                assert!(differ * 1000 <= n, "{kind:?}, {n}: {differ} values differ");
                for i in 0..n {
                    assert!(got[i].is_finite(), "{kind:?} x={} gave {}", g0[i], got[i]);
                    let tol = 2.0 * f32::EPSILON * (want[i].abs() + f32::MIN_POSITIVE);
                    assert!(
                        (got[i] - want[i]).abs() <= tol,
                        "{kind:?} x={}: {} vs {}",
                        g0[i],
                        got[i],
                        want[i]
                    );
                }
            }
        }
    }

    /// A row's values are the same whether it is computed alone or inside a larger batch.
    #[test]
    fn a_row_does_not_depend_on_the_batch_around_it() {
        let ff = 13;
        let (g0, u) = inputs(ff * 1000);
        let mut batch = g0.clone();
        gated(Gate::GeluTanh, &mut batch, &u);
        for r in [0, 1, 617, 999] {
            let mut one = g0[r * ff..][..ff].to_vec();
            gated(Gate::GeluTanh, &mut one, &u[r * ff..][..ff]);
            assert_eq!(one, batch[r * ff..][..ff], "row {r}");
        }
    }
}
