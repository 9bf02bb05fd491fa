//! Dots of F32, F16 and BF16 weight rows with f32 activations (FMA; F16 widened with F16C,
//! BF16 by a 16-bit shift), for one token and for a tile of [`TILE`] tokens.
//!
//! Two 8-lane accumulators per token, summed in one fixed order, then the tail elements one
//! by one: [`tile`] runs exactly the operations of [`dot`] for each of its tokens, so the
//! prefill product equals one matvec per token bit for bit. Against the scalar reference the
//! summation order differs (f32 rounding only).

use super::common::{f16_to_f32, hsum_ps};
use crate::kernel_table::TILE;
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
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        let wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()));
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(wide))
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

/// Weight row `w` dotted with [`TILE`] activation rows; each weight vector is widened once.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile<F: Float>(w: &[u8], x: [&[f32]; TILE]) -> [f32; TILE] {
    let n = x.iter().fold(w.len() / F::WIDTH, |n, r| n.min(r.len()));
    let wp = w.as_ptr();
    let xp = x.map(|r| r.as_ptr());
    let zero = _mm256_setzero_ps();
    let (mut a0, mut a1) = ([zero; TILE], [zero; TILE]);
    let mut i = 0;
    while i + 16 <= n {
        let w0 = F::load8(wp.add(i * F::WIDTH));
        let w1 = F::load8(wp.add((i + 8) * F::WIDTH));
        for t in 0..TILE {
            a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xp[t].add(i)), a0[t]);
            a1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xp[t].add(i + 8)), a1[t]);
        }
        i += 16;
    }
    if i + 8 <= n {
        let w0 = F::load8(wp.add(i * F::WIDTH));
        for t in 0..TILE {
            a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xp[t].add(i)), a0[t]);
        }
        i += 8;
    }
    let mut out = [0f32; TILE];
    for t in 0..TILE {
        let mut sum = hsum_ps(_mm256_add_ps(a0[t], a1[t]));
        for j in i..n {
            sum += F::at(wp.add(j * F::WIDTH)) * *xp[t].add(j);
        }
        out[t] = sum;
    }
    out
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
