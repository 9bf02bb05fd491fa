//! The kernels of tiled attention: a tile of query rows against a block of up to [`BLOCK`]
//! cached positions. Scores land in a `rows x BLOCK` tile (never a whole score row), the
//! softmax runs online (running max, sum and output per row, rescaled block by block), and
//! each cached row is read once per group of four query rows.
//!
//! Every row's arithmetic depends only on that row and the block's columns, never on which
//! other rows share the tile, so a query's result is the same in any batch.

// Kernels over a tile take its shape (rows, stride, count, column) as plain arguments.
#![allow(clippy::too_many_arguments)]

use super::Element;
use half::f16;

/// Cached positions per block: a block is aligned to a multiple of `BLOCK` positions.
pub(crate) const BLOCK: usize = 64;
/// Query rows per tile.
pub(crate) const TILE_ROWS: usize = 16;

/// One score row of a tile.
pub(crate) type ScoreRow = [f32; BLOCK];

/// `out[r][col0 + p] = scale * q_r . K_p` for the `count` key rows at `keys`, `stride` apart.
pub(crate) fn dots<T: Element>(
    keys: &[T],
    stride: usize,
    count: usize,
    qs: &[&[f32]],
    scale: f32,
    out: &mut [ScoreRow],
    col0: usize,
    simd: bool,
) {
    let hd = qs[0].len();
    assert!(count == 0 || keys.len() >= (count - 1) * stride + hd);
    assert!(col0 + count <= BLOCK && out.len() >= qs.len());
    assert!(qs.iter().all(|q| q.len() == hd));
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: `simd` is only true when the CPU has AVX2, FMA and F16C; the bounds were
        // checked above.
        unsafe { T::dots_avx2(keys, stride, count, qs, scale, out, col0) };
        return;
    }
    let _ = simd;
    for p in 0..count {
        let k = &keys[p * stride..p * stride + hd];
        for (q, o) in qs.iter().zip(out.iter_mut()) {
            let s: f32 = k.iter().zip(q.iter()).map(|(a, b)| a.widen() * b).sum();
            o[col0 + p] = s * scale;
        }
    }
}

/// `out_r += sum_p w[r][col0 + p] V_p` for the `count` value rows at `vals`, `stride` apart;
/// `out` holds the rows `hd` apart.
pub(crate) fn accumulate<T: Element>(
    vals: &[T],
    stride: usize,
    count: usize,
    w: &[ScoreRow],
    col0: usize,
    out: &mut [f32],
    hd: usize,
    simd: bool,
) {
    assert!(count == 0 || vals.len() >= (count - 1) * stride + hd);
    assert!(col0 + count <= BLOCK && out.len() >= w.len() * hd);
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: as in `dots`.
        unsafe { T::accumulate_avx2(vals, stride, count, w, col0, out, hd) };
        return;
    }
    let _ = simd;
    for (wr, o) in w.iter().zip(out.chunks_exact_mut(hd)) {
        for p in 0..count {
            let v = &vals[p * stride..p * stride + hd];
            let wp = wr[col0 + p];
            for (oi, vi) in o.iter_mut().zip(v) {
                *oi += wp * vi.widen();
            }
        }
    }
}

/// Turns a score row into weights `exp(s - max)` (0 where the score is `-inf`: masked) and
/// returns their sum (added in f64). The exponential is as exact as libm's `expf` (the
/// greedy tokens of the quantized goldens are sensitive to its last bit).
pub(crate) fn exp_row(row: &mut ScoreRow, max: f32, simd: bool) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: as in `dots`.
        return unsafe { avx2::exp_row(row, max) };
    }
    let _ = simd;
    let mut sum = 0.0f64;
    for s in row.iter_mut() {
        *s = if *s > f32::NEG_INFINITY {
            (*s - max).exp()
        } else {
            0.0
        };
        sum += *s as f64;
    }
    sum as f32
}

/// The AVX2 forms of the tile kernels, per cache element type.
pub(crate) trait TileAvx2: Sized {
    /// [`dots`]. Caller: AVX2 + FMA + F16C, bounds checked.
    #[cfg(target_arch = "x86_64")]
    unsafe fn dots_avx2(
        keys: &[Self],
        stride: usize,
        count: usize,
        qs: &[&[f32]],
        scale: f32,
        out: &mut [ScoreRow],
        col0: usize,
    );
    /// [`accumulate`]. Caller: as above.
    #[cfg(target_arch = "x86_64")]
    unsafe fn accumulate_avx2(
        vals: &[Self],
        stride: usize,
        count: usize,
        w: &[ScoreRow],
        col0: usize,
        out: &mut [f32],
        hd: usize,
    );
}

macro_rules! tile_avx2 {
    ($t:ty, $dots:ident, $acc:ident) => {
        impl TileAvx2 for $t {
            #[cfg(target_arch = "x86_64")]
            unsafe fn dots_avx2(
                keys: &[$t],
                stride: usize,
                count: usize,
                qs: &[&[f32]],
                scale: f32,
                out: &mut [ScoreRow],
                col0: usize,
            ) {
                avx2::$dots(keys, stride, count, qs, scale, out, col0)
            }
            #[cfg(target_arch = "x86_64")]
            unsafe fn accumulate_avx2(
                vals: &[$t],
                stride: usize,
                count: usize,
                w: &[ScoreRow],
                col0: usize,
                out: &mut [f32],
                hd: usize,
            ) {
                avx2::$acc(vals, stride, count, w, col0, out, hd)
            }
        }
    };
}

tile_avx2!(f32, dots_f32, accumulate_f32);
tile_avx2!(f16, dots_f16, accumulate_f16);

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{ScoreRow, BLOCK};
    use crate::simd::exp4_f64;
    use half::f16;
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load_f16(p: *const f16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load_f32(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }

    /// See `super::exp_row`. Caller: AVX2 + FMA + F16C.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn exp_row(row: &mut ScoreRow, max: f32) -> f32 {
        let m = _mm256_set1_ps(max);
        let neg_inf = _mm256_set1_ps(f32::NEG_INFINITY);
        // exp(-150) is 0 in f32; the clamp keeps -inf out of the polynomial.
        let floor = _mm256_set1_ps(-150.0);
        let mut sum = _mm256_setzero_pd();
        let p = row.as_mut_ptr();
        for i in (0..BLOCK).step_by(8) {
            let s = _mm256_loadu_ps(p.add(i));
            let valid = _mm256_cmp_ps(s, neg_inf, _CMP_GT_OQ);
            let x = _mm256_max_ps(_mm256_sub_ps(s, m), floor);
            let lo = exp4_f64(_mm256_cvtps_pd(_mm256_castps256_ps128(x)));
            let hi = exp4_f64(_mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x)));
            let e = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
            let w = _mm256_and_ps(e, valid);
            _mm256_storeu_ps(p.add(i), w);
            sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm256_castps256_ps128(w)));
            sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(w)));
        }
        let s2 = _mm_add_pd(_mm256_castpd256_pd128(sum), _mm256_extractf128_pd::<1>(sum));
        (_mm_cvtsd_f64(s2) + _mm_cvtsd_f64(_mm_unpackhi_pd(s2, s2))) as f32
    }

    macro_rules! kernels {
        ($dots:ident, $dots_rows:ident, $acc:ident, $acc_rows:ident, $t:ty, $load:ident, $widen:path) => {
            /// `R` query rows against `count` key rows; per row the same sums as the
            /// one-row kernel (two accumulators, 16 lanes a step, then an 8-lane step and a
            /// scalar tail).
            #[inline]
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn $dots_rows<const R: usize>(
                k: *const $t,
                stride: usize,
                count: usize,
                q: [*const f32; R],
                hd: usize,
                scale: f32,
                out: &mut [ScoreRow],
                col0: usize,
            ) {
                for p in 0..count {
                    let kp = k.add(p * stride);
                    let mut a0 = [_mm256_setzero_ps(); R];
                    let mut a1 = [_mm256_setzero_ps(); R];
                    let mut i = 0;
                    while i + 16 <= hd {
                        let k0 = $load(kp.add(i));
                        let k1 = $load(kp.add(i + 8));
                        for r in 0..R {
                            a0[r] = _mm256_fmadd_ps(k0, _mm256_loadu_ps(q[r].add(i)), a0[r]);
                            a1[r] = _mm256_fmadd_ps(k1, _mm256_loadu_ps(q[r].add(i + 8)), a1[r]);
                        }
                        i += 16;
                    }
                    if i + 8 <= hd {
                        let k0 = $load(kp.add(i));
                        for r in 0..R {
                            a0[r] = _mm256_fmadd_ps(k0, _mm256_loadu_ps(q[r].add(i)), a0[r]);
                        }
                        i += 8;
                    }
                    for r in 0..R {
                        let mut s = hsum(_mm256_add_ps(a0[r], a1[r]));
                        for j in i..hd {
                            s += $widen(*kp.add(j)) * *q[r].add(j);
                        }
                        out[r][col0 + p] = s * scale;
                    }
                }
            }

            /// See `super::dots`. Caller: AVX2 + FMA + F16C, bounds checked.
            #[target_feature(enable = "avx2,fma,f16c")]
            pub(super) unsafe fn $dots(
                keys: &[$t],
                stride: usize,
                count: usize,
                qs: &[&[f32]],
                scale: f32,
                out: &mut [ScoreRow],
                col0: usize,
            ) {
                let hd = qs[0].len();
                let k = keys.as_ptr();
                let mut r = 0;
                while r < qs.len() {
                    let o = &mut out[r..];
                    let q = |i: usize| qs[r + i].as_ptr();
                    let left = qs.len() - r;
                    if left >= 4 {
                        $dots_rows::<4>(
                            k,
                            stride,
                            count,
                            [q(0), q(1), q(2), q(3)],
                            hd,
                            scale,
                            o,
                            col0,
                        );
                        r += 4;
                    } else if left == 3 {
                        $dots_rows::<3>(k, stride, count, [q(0), q(1), q(2)], hd, scale, o, col0);
                        r += 3;
                    } else if left == 2 {
                        $dots_rows::<2>(k, stride, count, [q(0), q(1)], hd, scale, o, col0);
                        r += 2;
                    } else {
                        $dots_rows::<1>(k, stride, count, [q(0)], hd, scale, o, col0);
                        r += 1;
                    }
                }
            }

            /// `R` output rows: each 8-lane slice of the rows is held in registers while
            /// every value row of the block is added in; per row the same sums in any group.
            #[inline]
            #[target_feature(enable = "avx2,fma,f16c")]
            unsafe fn $acc_rows<const R: usize>(
                v: *const $t,
                stride: usize,
                count: usize,
                w: [*const f32; R],
                out: [*mut f32; R],
                hd: usize,
            ) {
                let mut i = 0;
                while i + 8 <= hd {
                    let mut a = [_mm256_setzero_ps(); R];
                    for r in 0..R {
                        a[r] = _mm256_loadu_ps(out[r].add(i));
                    }
                    for p in 0..count {
                        let x = $load(v.add(p * stride + i));
                        for r in 0..R {
                            a[r] = _mm256_fmadd_ps(_mm256_set1_ps(*w[r].add(p)), x, a[r]);
                        }
                    }
                    for r in 0..R {
                        _mm256_storeu_ps(out[r].add(i), a[r]);
                    }
                    i += 8;
                }
                for j in i..hd {
                    for r in 0..R {
                        let mut o = *out[r].add(j);
                        for p in 0..count {
                            o += *w[r].add(p) * $widen(*v.add(p * stride + j));
                        }
                        *out[r].add(j) = o;
                    }
                }
            }

            /// See `super::accumulate`. Caller: AVX2 + FMA + F16C, bounds checked.
            #[target_feature(enable = "avx2,fma,f16c")]
            pub(super) unsafe fn $acc(
                vals: &[$t],
                stride: usize,
                count: usize,
                w: &[ScoreRow],
                col0: usize,
                out: &mut [f32],
                hd: usize,
            ) {
                let v = vals.as_ptr();
                let o = out.as_mut_ptr();
                let mut r = 0;
                while r < w.len() {
                    let wp = |i: usize| w[r + i].as_ptr().add(col0);
                    let op = |i: usize| o.add((r + i) * hd);
                    let left = w.len() - r;
                    if left >= 4 {
                        $acc_rows::<4>(
                            v,
                            stride,
                            count,
                            [wp(0), wp(1), wp(2), wp(3)],
                            [op(0), op(1), op(2), op(3)],
                            hd,
                        );
                        r += 4;
                    } else if left == 3 {
                        $acc_rows::<3>(
                            v,
                            stride,
                            count,
                            [wp(0), wp(1), wp(2)],
                            [op(0), op(1), op(2)],
                            hd,
                        );
                        r += 3;
                    } else if left == 2 {
                        $acc_rows::<2>(v, stride, count, [wp(0), wp(1)], [op(0), op(1)], hd);
                        r += 2;
                    } else {
                        $acc_rows::<1>(v, stride, count, [wp(0)], [op(0)], hd);
                        r += 1;
                    }
                }
            }
        };
    }

    kernels!(
        dots_f32,
        dots_rows_f32,
        accumulate_f32,
        acc_rows_f32,
        f32,
        load_f32,
        f32::from
    );
    kernels!(
        dots_f16,
        dots_rows_f16,
        accumulate_f16,
        acc_rows_f16,
        f16,
        load_f16,
        f16::to_f32
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn val(i: usize, salt: usize) -> f32 {
        ((i * 2654435761 + salt * 97) % 1000) as f32 / 500.0 - 1.0
    }

    /// The AVX2 kernels against the scalar ones, for head sizes with and without 8- and
    /// 16-lane tails and every row-group remainder: dots within 1e-5 of the sum of the
    /// products' magnitudes, outputs within 1e-5 relative, exp within 4e-7 relative (both
    /// about correctly rounded).
    #[test]
    fn simd_tile_kernels_match_the_scalar_ones() {
        if !ramforge_quant::isa::Isa::Avx2.is_available() {
            return; // Nothing to compare on this CPU: only the scalar kernels exist.
        }
        for hd in [1, 7, 8, 13, 16, 36, 64, 72, 128, 256] {
            for rows in [1, 2, 3, 4, 5, 7, 16] {
                let (stride, count, col0) = (hd + 3, 11, 5);
                let qv: Vec<Vec<f32>> = (0..rows)
                    .map(|r| (0..hd).map(|i| val(i, r + 1)).collect())
                    .collect();
                let qs: Vec<&[f32]> = qv.iter().map(|q| q.as_slice()).collect();
                let k32: Vec<f32> = (0..stride * count).map(|i| val(i, 40)).collect();
                let k16: Vec<f16> = k32.iter().map(|&v| f16::from_f32(v)).collect();
                let mag: f32 = hd as f32;
                for simd_first in [true, false] {
                    let mut a = vec![[0.0; BLOCK]; rows];
                    let mut b = vec![[0.0; BLOCK]; rows];
                    dots(&k32, stride, count, &qs, 0.3, &mut a, col0, simd_first);
                    dots(&k32, stride, count, &qs, 0.3, &mut b, col0, !simd_first);
                    dots(&k16, stride, count, &qs, 0.3, &mut a[..], 0, simd_first);
                    dots(&k16, stride, count, &qs, 0.3, &mut b[..], 0, !simd_first);
                    for (x, y) in a.iter().flatten().zip(b.iter().flatten()) {
                        assert!(
                            (x - y).abs() <= 1e-5 * mag,
                            "hd {hd} rows {rows}: {x} vs {y}"
                        );
                    }
                    let w: Vec<ScoreRow> = (0..rows)
                        .map(|r| std::array::from_fn(|c| val(c, 60 + r)))
                        .collect();
                    let mut o1: Vec<f32> = (0..rows * hd).map(|i| val(i, 70)).collect();
                    let mut o2 = o1.clone();
                    accumulate(&k16, stride, count, &w, col0, &mut o1, hd, simd_first);
                    accumulate(&k16, stride, count, &w, col0, &mut o2, hd, !simd_first);
                    accumulate(&k32, stride, count, &w, 1, &mut o1, hd, simd_first);
                    accumulate(&k32, stride, count, &w, 1, &mut o2, hd, !simd_first);
                    for (x, y) in o1.iter().zip(&o2) {
                        assert!(
                            (x - y).abs() <= 1e-5 * (1.0 + y.abs()),
                            "hd {hd}: {x} vs {y}"
                        );
                    }
                }
            }
        }
        let mut a: ScoreRow = std::array::from_fn(|c| val(c, 3) * 90.0 - 60.0);
        a[3] = f32::NEG_INFINITY;
        a[40] = -1e30;
        let mut b = a;
        let (sa, sb) = (exp_row(&mut a, 25.0, true), exp_row(&mut b, 25.0, false));
        assert_eq!(a[3], 0.0);
        for (x, y) in a.iter().zip(&b) {
            assert!(
                (x - y).abs() <= 4e-7 * y.abs() + f32::MIN_POSITIVE,
                "{x} vs {y}"
            );
        }
        assert!((sa - sb).abs() <= 1e-6 * sb);
    }
}
