//! Dots of F32, F16 and BF16 weight rows with f32 activations (FMA; F16 widened with F16C,
//! BF16 by a byte shuffle), for one token and for a tile of rows times [`TILE`] tokens.
//!
//! Two 8-lane accumulators per token, summed in one fixed order, then the tail elements one
//! by one: [`tile_rows`] runs exactly the operations of [`dot`] for each of its pairs, so the
//! prefill product equals one matvec per token bit for bit. Against the scalar reference the
//! summation order differs (f32 rounding only).

use super::common::{f16_to_f32, hsum_ps};
use crate::kernel_table::TILE;
use crate::simd::x86::prefetch::line_ahead;
use crate::GgmlType;
use std::arch::x86_64::*;

/// A float weight encoding: its element width and how 8 elements become 8 f32 lanes.
pub(super) trait Float {
    const WIDTH: usize;
    unsafe fn load8(p: *const u8) -> __m256;
    unsafe fn at(p: *const u8) -> f32;
}

pub(super) struct F32;
impl Float for F32 {
    const WIDTH: usize = GgmlType::F32.type_size();
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        _mm256_loadu_ps(p.cast())
    }
    #[inline(always)]
    unsafe fn at(p: *const u8) -> f32 {
        p.cast::<f32>().read_unaligned()
    }
}

pub(super) struct F16;
impl Float for F16 {
    const WIDTH: usize = GgmlType::F16.type_size();
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
    }
    #[inline(always)]
    unsafe fn at(p: *const u8) -> f32 {
        f16_to_f32(p.cast::<u16>().read_unaligned())
    }
}

pub(super) struct Bf16;
impl Float for Bf16 {
    const WIDTH: usize = GgmlType::BF16.type_size();
    /// The 8 values go to both 128-bit lanes, and one byte shuffle puts each lane's 4 into the
    /// high halves of its 32-bit slots, zeros below: no shift on the ports the FMAs use.
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        let both = _mm256_broadcastsi128_si256(_mm_loadu_si128(p.cast()));
        #[rustfmt::skip]
        let high_halves = _mm256_setr_epi8(
            -1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7,
            -1, -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15,
        );
        _mm256_castsi256_ps(_mm256_shuffle_epi8(both, high_halves))
    }
    #[inline(always)]
    unsafe fn at(p: *const u8) -> f32 {
        f32::from_bits((p.cast::<u16>().read_unaligned() as u32) << 16)
    }
}

/// Weight row `w` (elements of `F`) dotted with `x`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot<F: Float>(w: &[u8], x: &[f32]) -> f32 {
    let n = x.len().min(w.len() / F::WIDTH);
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i + 16 <= n {
        line_ahead(wp.add(i * F::WIDTH));
        let w0 = F::load8(wp.add(i * F::WIDTH));
        let w1 = F::load8(wp.add((i + 8) * F::WIDTH));
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xp.add(i)), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xp.add(i + 8)), a1);
        i += 16;
    }
    if i + 8 <= n {
        a0 = _mm256_fmadd_ps(
            F::load8(wp.add(i * F::WIDTH)),
            _mm256_loadu_ps(xp.add(i)),
            a0,
        );
        i += 8;
    }
    let mut sum = hsum_ps(_mm256_add_ps(a0, a1));
    for j in i..n {
        sum += F::at(wp.add(j * F::WIDTH)) * *xp.add(j);
    }
    sum
}

/// `R` weight rows of `F`, back to back in `w`, dotted with [`TILE`] activation rows: each
/// weight vector is widened once and each activation vector loaded once for all `R` rows.
/// Every (row, token) pair runs [`dot`]'s operations in its order (its even 8-element steps
/// into one accumulator, its odd ones into another, summed, then the tail), so the prefill
/// product equals one matvec per token bit for bit. The even steps and the odd ones go in two
/// passes over the rows, so that one accumulator per pair is live at a time: `R * TILE`
/// of them, the weights and an activation vector fit the 16 registers.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile_rows<F: Float, const R: usize>(
    w: &[u8],
    x: [&[f32]; TILE],
) -> [[f32; TILE]; R] {
    let row = w.len() / R;
    let n = x.iter().fold(row / F::WIDTH, |n, r| n.min(r.len()));
    let wp: [*const u8; R] = std::array::from_fn(|r| w.as_ptr().add(r * row));
    let xp = x.map(|r| r.as_ptr());
    let steps = n / 16;
    // `dot`'s one 8-element step after its loop, into the even accumulator.
    let extra = n % 16 >= 8;
    let even = pass::<F, R>(wp, xp, 0, steps, extra);
    let odd = pass::<F, R>(wp, xp, 8, steps, false);
    let tail = 16 * steps + if extra { 8 } else { 0 };
    std::array::from_fn(|r| {
        std::array::from_fn(|t| {
            let mut sum = hsum_ps(_mm256_add_ps(even[r][t], odd[r][t]));
            for j in tail..n {
                sum += F::at(wp[r].add(j * F::WIDTH)) * *xp[t].add(j);
            }
            sum
        })
    })
}

/// One accumulator per (row, token): the 8 elements at `offset + 16 k` for `k < steps`, then
/// (with `extra`) those at `16 steps`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pass<F: Float, const R: usize>(
    wp: [*const u8; R],
    xp: [*const f32; TILE],
    offset: usize,
    steps: usize,
    extra: bool,
) -> [[__m256; TILE]; R] {
    let mut acc = [[_mm256_setzero_ps(); TILE]; R];
    let mut step = |i: usize| {
        let wv: [__m256; R] = std::array::from_fn(|r| F::load8(wp[r].add(i * F::WIDTH)));
        for t in 0..TILE {
            let xv = _mm256_loadu_ps(xp[t].add(i));
            for r in 0..R {
                acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
            }
        }
    };
    for k in 0..steps {
        step(offset + 16 * k);
    }
    if extra {
        step(16 * steps);
    }
    acc
}

/// A row of `F` widened to f32 (for embedding rows).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dequantize<F: Float>(src: &[u8], dst: &mut [f32]) {
    let n = dst.len().min(src.len() / F::WIDTH);
    let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
    let mut i = 0;
    while i + 8 <= n {
        _mm256_storeu_ps(dp.add(i), F::load8(sp.add(i * F::WIDTH)));
        i += 8;
    }
    for j in i..n {
        *dp.add(j) = F::at(sp.add(j * F::WIDTH));
    }
}
