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

/// Four f16s (as bits) widened exactly to f32 lanes 0..4.
#[inline(always)]
pub(super) unsafe fn f16x4(b: [u16; 4]) -> __m128 {
    _mm_cvtph_ps(_mm_setr_epi16(
        b[0] as i16,
        b[1] as i16,
        b[2] as i16,
        b[3] as i16,
        0,
        0,
        0,
        0,
    ))
}

/// `[sum(v[0]), sum(v[1]), sum(v[2]), sum(v[3])]` of four vectors of 8 i32 each.
#[inline(always)]
pub(super) unsafe fn hsum4_epi32(v: [__m256i; 4]) -> __m128i {
    let h01 = _mm256_hadd_epi32(v[0], v[1]);
    let h23 = _mm256_hadd_epi32(v[2], v[3]);
    let h = _mm256_hadd_epi32(h01, h23);
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
}

/// `[sum(v[0]), .., sum(v[3])]` as i32 of four vectors of 16 i16 each, added in i16 up to
/// sums of four lanes: the caller guarantees those cannot overflow.
#[inline(always)]
pub(super) unsafe fn hsum4_epi16_pairs(v: [__m256i; 4]) -> __m128i {
    let h01 = _mm256_hadd_epi16(v[0], v[1]);
    let h23 = _mm256_hadd_epi16(v[2], v[3]);
    // Per 128-bit lane: two sums of four i16 for each of v[0] .. v[3].
    let h = _mm256_madd_epi16(_mm256_hadd_epi16(h01, h23), _mm256_set1_epi16(1));
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256::<1>(h))
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

/// The four f32 lanes of `v`.
#[inline(always)]
pub(super) unsafe fn lanes4(v: __m128) -> [f32; 4] {
    let mut out = [0f32; 4];
    _mm_storeu_ps(out.as_mut_ptr(), v);
    out
}
