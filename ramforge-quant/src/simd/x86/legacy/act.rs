//! The activation quantizers Q8_0 and Q8_1: run once per token per matrix product, and
//! bit-identical to the generated reference quantizers (which match ggml's reference).
//!
//! Reference per block of 32: `amax = max |x|` (NaN ignored), `d = amax / 127`,
//! `id = 1/d` (0 when `d == 0`), `q = round_half_away(x * id) as i8` (saturating, NaN -> 0);
//! Q8_1 adds `s = (sum q) as f32 * d`. `d` and `s` are stored as f16.

use super::common::hsum_epi32;
use crate::formats::{q8_0, q8_1};
use std::arch::x86_64::*;

/// Elements per block, the same for both.
const BLOCK: usize = q8_0::BLOCK;
const _: () = assert!(q8_1::BLOCK == BLOCK);

/// Quantizes 32 floats at `x` into 32 i8 at `qs`; returns `(d, sum of the quants)`.
#[inline(always)]
unsafe fn quantize_block(x: *const f32, qs: *mut u8) -> (f32, i32) {
    let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
    let v = [
        _mm256_loadu_ps(x),
        _mm256_loadu_ps(x.add(8)),
        _mm256_loadu_ps(x.add(16)),
        _mm256_loadu_ps(x.add(24)),
    ];
    // max_ps returns its second operand when either is NaN, so NaN inputs are skipped
    // exactly like the reference's `v.abs() > amax` test.
    let mut m = _mm256_setzero_ps();
    for vk in v {
        m = _mm256_max_ps(_mm256_and_ps(vk, abs_mask), m);
    }
    let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
    let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let m1 = _mm_max_ss(m2, _mm_movehdup_ps(m2));
    let amax = _mm_cvtss_f32(m1);

    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let vid = _mm256_set1_ps(id);
    let sign_mask = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN));
    let half = _mm256_set1_ps(0.5);
    let one = _mm256_set1_ps(1.0);
    let (lo, hi) = (_mm256_set1_ps(-128.0), _mm256_set1_ps(127.0));
    let mut q = [_mm256_setzero_si256(); 4];
    for (qk, vk) in q.iter_mut().zip(v) {
        let p = _mm256_mul_ps(vk, vid);
        // round half away from zero: truncate, then step away from zero when |frac| >= 0.5
        // (the fraction p - trunc(p) is exact; for |p| >= 2^23, p is already an integer).
        let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(p);
        let frac = _mm256_and_ps(_mm256_sub_ps(p, t), abs_mask);
        let step = _mm256_or_ps(_mm256_and_ps(p, sign_mask), one);
        let up = _mm256_cmp_ps::<_CMP_GE_OQ>(frac, half);
        let r = _mm256_add_ps(t, _mm256_and_ps(up, step));
        // `as i8`: NaN becomes 0, everything else saturates to [-128, 127].
        let r = _mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(p, p));
        let r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
        *qk = _mm256_cvtps_epi32(r);
    }
    let sum = hsum_epi32(_mm256_add_epi32(
        _mm256_add_epi32(q[0], q[1]),
        _mm256_add_epi32(q[2], q[3]),
    ));
    // i32 -> i16 -> i8 packs interleave 128-bit lanes; the permute restores element order.
    let p01 = _mm256_packs_epi32(q[0], q[1]);
    let p23 = _mm256_packs_epi32(q[2], q[3]);
    let p = _mm256_packs_epi16(p01, p23);
    let p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(qs.cast(), p);
    (d, sum)
}

fn f16_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_le_bytes()
}

/// Q8_0: blocks `d: f16, qs: [i8; 32]`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    use q8_0::{BYTES, OFFSET_D as D, OFFSET_QS};
    for (x, b) in src.chunks_exact(BLOCK).zip(dst.chunks_exact_mut(BYTES)) {
        let (d, _) = quantize_block(x.as_ptr(), b.as_mut_ptr().add(OFFSET_QS));
        b[D..D + 2].copy_from_slice(&f16_bytes(d));
    }
}

/// Q8_1: blocks `d: f16, s: f16, qs: [i8; 32]`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    use q8_1::{BYTES, OFFSET_D as D, OFFSET_QS, OFFSET_S as S};
    for (x, b) in src.chunks_exact(BLOCK).zip(dst.chunks_exact_mut(BYTES)) {
        let (d, sum) = quantize_block(x.as_ptr(), b.as_mut_ptr().add(OFFSET_QS));
        b[D..D + 2].copy_from_slice(&f16_bytes(d));
        b[S..S + 2].copy_from_slice(&f16_bytes(sum as f32 * d));
    }
}
