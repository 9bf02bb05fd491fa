//! The three block-dot drivers over [`Weights::isums`]: eight weight rows with one token
//! (`rows`, the decode kernel), one row with one token (`vec_dot`) and one row with [`TILE`]
//! tokens (`tile`, the prefill GEMM kernel).
//!
//! All three round the same way, per row and token, block by block in order:
//! - without a min: `acc = fma(isum, dw * da, acc)`;
//! - with a min (Q4_1 / Q5_1): `acc += da * (dw * isum + mw * asum)`, each operation rounded
//!   on its own, no fma: exactly the generated scalar reference's steps, so these two formats
//!   equal it bit for bit (an fma form measured further from llama.cpp on the Q5_K_M golden);
//!
//! where `isum` is the exact integer dot of the block's quants, `asum` the exact sum of the
//! activation quants (not Q8_1's `s`, which is rounded to f16), and `dw * da` is exact in
//! f32 (11-bit by 11-bit significands; MXFP4's `dw` is a power of two). So the drivers agree
//! bit for bit (decode equals single-row equals batched results, however the rows are
//! grouped); without a min they differ from the generated scalar reference (which reduces
//! each block, then adds blocks in order) by f32 rounding order only.

use super::blocks::{Weights, LANES};
use super::common::{f16_to_f32, f16x8, read_u16};
use crate::kernel_table::{ROWS, TILE};
use crate::simd::x86::prefetch::group_after_next;
use std::arch::x86_64::*;

const _: () = assert!(ROWS == LANES && 2 * TILE == LANES);

/// The two factors `(x, y)` of each lane's step ([`step`]: `acc = fma(x, y, acc)`, or with a
/// min `acc = acc + x * y`; see the module note), from the lanes' integer sums, weight
/// blocks and activation scales `da`.
#[inline(always)]
unsafe fn factors<F: Weights>(
    sums: (__m256i, __m256i),
    w: [*const u8; LANES],
    da: __m256,
) -> (__m256, __m256) {
    let isum = _mm256_cvtepi32_ps(sums.0);
    let dw = F::scales(w);
    if let Some(min_at) = F::MIN_AT {
        let mw = f16x8(w, min_at);
        let min = _mm256_mul_ps(mw, _mm256_cvtepi32_ps(sums.1));
        (_mm256_add_ps(_mm256_mul_ps(dw, isum), min), da)
    } else {
        (isum, _mm256_mul_ps(dw, da))
    }
}

/// One block step of every lane (see [`factors`]).
#[inline(always)]
unsafe fn step<F: Weights>(x: __m256, y: __m256, acc: __m256) -> __m256 {
    if F::HAS_MIN {
        _mm256_add_ps(acc, _mm256_mul_ps(y, x))
    } else {
        _mm256_fmadd_ps(x, y, acc)
    }
}

/// The three drivers, compiled for the target features `$features` under the given names:
/// once for AVX2 (`rows`, `vec_dot`, `tile`; also the AVX512-VNNI kernels', whose `vpdpbusd`
/// is inline assembly) and once with AVX-VNNI (`rows_vnni`, ...: the same steps, for formats
/// whose `isums` use its instructions).
macro_rules! drivers {
    ($features:literal, $rows:ident, $vec_dot:ident, $tile:ident) => {
        /// [`ROWS`] weight rows (back to back in `w`) dotted with one activation row: lane r is row
        /// r, so each activation block is loaded and its scale converted once for all rows. Each
        /// step also prefetches part of the group after the next ([`group_after_next`]).
        #[target_feature(enable = $features)]
        pub(super) unsafe fn $rows<F: Weights>(w: &[u8], a: &[u8]) -> [f32; ROWS] {
            let row = w.len() / ROWS;
            let nb = (row / F::BYTES).min(a.len() / F::ACT.bytes);
            let (wp, ap) = (w.as_ptr(), a.as_ptr());
            let mut acc = _mm256_setzero_ps();
            for i in 0..nb {
                let mut wb = [wp; LANES];
                for (r, p) in wb.iter_mut().enumerate() {
                    *p = wp.add(r * row + i * F::BYTES);
                }
                group_after_next::<_MM_HINT_T1>(w, i, nb);
                let ab = ap.add(i * F::ACT.bytes);
                let da = _mm256_set1_ps(f16_to_f32(read_u16(ab.add(F::ACT.d))));
                let (x, y) = factors::<F>(F::isums(wb, [ab; LANES]), wb, da);
                acc = step::<F>(x, y, acc);
            }
            std::mem::transmute::<__m256, [f32; ROWS]>(acc)
        }

        /// One weight row dotted with one activation row: eight blocks per integer step (a shorter
        /// last step repeats its last block in the unused lanes), then the lanes' steps in order.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn $vec_dot<F: Weights>(w: &[u8], a: &[u8]) -> f32 {
            let nb = (w.len() / F::BYTES).min(a.len() / F::ACT.bytes);
            let (wp, ap) = (w.as_ptr(), a.as_ptr());
            let mut acc = 0f32;
            let mut i = 0;
            while i < nb {
                let n = (nb - i).min(LANES);
                let (mut wb, mut ab) = ([wp; LANES], [ap; LANES]);
                for k in 0..LANES {
                    let b = i + k.min(n - 1);
                    wb[k] = wp.add(b * F::BYTES);
                    ab[k] = ap.add(b * F::ACT.bytes);
                }
                let (x, y) = factors::<F>(F::isums(wb, ab), wb, f16x8(ab, F::ACT.d));
                let x = std::mem::transmute::<__m256, [f32; LANES]>(x);
                let y = std::mem::transmute::<__m256, [f32; LANES]>(y);
                for k in 0..n {
                    acc = if F::HAS_MIN {
                        acc + y[k] * x[k]
                    } else {
                        x[k].mul_add(y[k], acc)
                    };
                }
                i += n;
            }
            acc
        }

        /// One weight row dotted with [`TILE`] activation rows: two blocks per integer step, lane
        /// t the first block of token t, lane t + 4 the second (a lone last block fills both), so
        /// each weight block is unpacked once for all tokens. Token t's result equals
        /// `vec_dot(w, a[t])` bit for bit.
        #[target_feature(enable = $features)]
        pub(super) unsafe fn $tile<F: Weights>(w: &[u8], a: [&[u8]; TILE]) -> [f32; TILE] {
            let nb = a
                .iter()
                .fold(w.len() / F::BYTES, |n, r| n.min(r.len() / F::ACT.bytes));
            let wp = w.as_ptr();
            let ap = a.map(|r| r.as_ptr());
            let mut acc = _mm_setzero_ps();
            let mut i = 0;
            while i < nb {
                let j = (i + 1).min(nb - 1);
                let (mut wb, mut ab) = ([wp; LANES], [wp; LANES]);
                for k in 0..LANES {
                    let b = if k < TILE { i } else { j };
                    wb[k] = wp.add(b * F::BYTES);
                    ab[k] = ap[k % TILE].add(b * F::ACT.bytes);
                }
                let (x, y) = factors::<F>(F::isums(wb, ab), wb, f16x8(ab, F::ACT.d));
                let step4 = |x: __m128, y: __m128, acc: __m128| {
                    if F::HAS_MIN {
                        _mm_add_ps(acc, _mm_mul_ps(y, x))
                    } else {
                        _mm_fmadd_ps(x, y, acc)
                    }
                };
                acc = step4(_mm256_castps256_ps128(x), _mm256_castps256_ps128(y), acc);
                if j > i {
                    let (xh, yh) = (_mm256_extractf128_ps::<1>(x), _mm256_extractf128_ps::<1>(y));
                    acc = step4(xh, yh, acc);
                }
                i += 2;
            }
            std::mem::transmute::<__m128, [f32; TILE]>(acc)
        }
    };
}

drivers!("avx2,fma,f16c", rows, vec_dot, tile);
drivers!("avx2,fma,f16c,avxvnni", rows_vnni, vec_dot_vnni, tile_vnni);
