//! Small AVX2 building blocks shared by the block dots, the quantizers and the float dots.
//!
//! Every function here is `#[inline(always)]` and only ever inlined into a
//! `#[target_feature(enable = "avx2,fma,f16c")]` body, which is what makes its intrinsics valid.

use std::arch::x86_64::*;

/// A little-endian `u16` at `p` (blocks are byte-packed: no alignment).
#[inline(always)]
pub(super) unsafe fn read_u16(p: *const u8) -> u16 {
    u16::from_le(p.cast::<u16>().read_unaligned())
}

/// A little-endian `u32` at `p`.
#[inline(always)]
pub(super) unsafe fn read_u32(p: *const u8) -> u32 {
    u32::from_le(p.cast::<u32>().read_unaligned())
}

/// One f16 (as bits) widened exactly to f32 with F16C.
#[inline(always)]
pub(super) unsafe fn f16_to_f32(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// The sum of 8 i32 lanes.
#[inline(always)]
pub(super) unsafe fn hsum_epi32(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
    let s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01>(s));
    _mm_cvtsi128_si32(s)
}

/// The sum of 8 f32 lanes, in one fixed order (so that every caller rounds the same way).
#[inline(always)]
pub(super) unsafe fn hsum_ps(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}
