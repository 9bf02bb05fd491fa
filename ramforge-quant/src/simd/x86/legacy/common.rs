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

/// The 16 bytes of nibbles at `p` as 32 bytes in element order: the low nibbles (elements
/// 0..16), then the high ones. Shifted as a 128-bit half rather than by a 256-bit variable
/// shift, which costs more on CPUs with one vector shift unit (benches/README.md).
#[inline(always)]
pub(super) unsafe fn nibbles(p: *const u8) -> __m256i {
    let v = _mm_loadu_si128(p.cast());
    let m = _mm_set1_epi8(0x0F);
    _mm256_set_m128i(
        _mm_and_si128(_mm_srli_epi16::<4>(v), m),
        _mm_and_si128(v, m),
    )
}

/// One f16 (as bits) widened exactly to f32 with F16C.
#[inline(always)]
pub(super) unsafe fn f16_to_f32(bits: u16) -> f32 {
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// The f16s at `off` past the eight pointers widened to f32, lane k from `p[k] + off`.
#[inline(always)]
pub(super) unsafe fn f16x8(p: [*const u8; 8], off: usize) -> __m256 {
    let mut packed = [0u64; 2];
    for (k, q) in p.iter().enumerate() {
        packed[k / 4] |= (read_u16(q.add(off)) as u64) << (16 * (k % 4));
    }
    _mm256_cvtph_ps(_mm_set_epi64x(packed[1] as i64, packed[0] as i64))
}

/// The E8M0 exponent bytes at `off` past the eight pointers as MXFP4's halved scales
/// (`spec_support::e8m0_half`: `2^(e - 128)`, exact, subnormal below `e = 2`).
#[inline(always)]
pub(super) unsafe fn e8m0_half_x8(p: [*const u8; 8], off: usize) -> __m256 {
    let mut e = [0i32; 8];
    for (k, q) in p.iter().enumerate() {
        e[k] = *q.add(off) as i32;
    }
    let e = _mm256_loadu_si256(e.as_ptr().cast());
    // `(e - 1) << 23` for e >= 2, `0x200000 << e` below (2^-128 and 2^-127 as subnormals).
    let normal = _mm256_slli_epi32::<23>(_mm256_sub_epi32(e, _mm256_set1_epi32(1)));
    let small = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
    let is_small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    _mm256_castsi256_ps(_mm256_blendv_epi8(normal, small, is_small))
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
