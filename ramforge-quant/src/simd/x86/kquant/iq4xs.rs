//! IQ4_XS x Q8_K: nibbles become IQ4_NL's signed levels through a byte shuffle, are dotted
//! with the int8 activations by `maddubs` (the activations' magnitudes against the levels
//! carrying the activations' signs: the magnitudes are shared by every weight row of a
//! `rows` call, and an activation of -128 still multiplies exactly), and scaled per
//! 32-element group by the signed 6-bit scales.

use super::common::*;
use crate::formats::iq4_xs::{
    BYTES, KVALUES, OFFSET_D, OFFSET_QS, OFFSET_SCALES_H, OFFSET_SCALES_L,
};
use crate::simd::x86::prefetch::group_after_next;
use std::arch::x86_64::*;

encodings!("IQ4_XS", 2, vex 8, tile rows 2);

/// The 8 signed group scales as i16, in both lanes. The 4 low bits of each sit in
/// `scales_l`'s nibbles, the 2 high bits in `scales_h`'s bit pairs: both are spread to one
/// byte per group with integer shifts and masks (which run beside the vector work).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales(wb: *const u8) -> __m256i {
    let high =
        u16::from_le_bytes(wb.add(OFFSET_SCALES_H).cast::<[u8; 2]>().read_unaligned()) as u64;
    let low = u32_at(wb.add(OFFSET_SCALES_L)) as u64;
    // Nibble j of `low` to byte j.
    let mut lo = low;
    lo = (lo | (lo << 16)) & 0x0000_FFFF_0000_FFFF;
    lo = (lo | (lo << 8)) & 0x00FF_00FF_00FF_00FF;
    lo = (lo | (lo << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    // Bit pair j of `high` to byte j.
    let mut hi = high;
    hi = (hi | (hi << 24)) & 0x0000_00FF_0000_00FF;
    hi = (hi | (hi << 12)) & 0x000F_000F_000F_000F;
    hi = (hi | (hi << 6)) & 0x0303_0303_0303_0303;
    let stored = _mm_cvtsi64_si128((lo | (hi << 4)) as i64);
    let sc = _mm_cvtepi8_epi16(_mm_sub_epi8(stored, _mm_set1_epi8(32)));
    _mm256_broadcastsi128_si256(sc)
}

/// `R` rows by `T` tokens; only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
unsafe fn dot<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let m4 = _mm256_set1_epi8(0x0F);
    let levels = _mm256_broadcastsi128_si256(load128(KVALUES.as_ptr().cast::<u8>()));
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for i in 0..row / BYTES {
        let wb = weight_blocks::<R>(w, row, BYTES, i);
        let (ab, da) = act_blocks(&a, i);
        let sc: [__m256i; R] = std::array::from_fn(|r| scales(wb[r]));
        if R > 1 {
            group_after_next::<_MM_HINT_T0>(w, i, row / BYTES);
        }
        let mut sumi = [[_mm256_setzero_si256(); T]; R];
        for p in 0..4 {
            // 32 bytes of quants hold groups 2p, 2p + 1 in the two lanes, each lane's low
            // nibbles its group's elements 0..16, the high nibbles 16..32: the activations are
            // split the same way (`x[t][0]` for the low nibbles, `x[t][1]` the high), and their
            // magnitudes (`mag`) multiply the levels carrying the activations' signs.
            // Loaded by 16-byte halves: a lane-crossing permute is dear on Zen 1.
            let x: [[__m256i; 2]; T] = std::array::from_fn(|t| {
                let a = ab[t].add(Q8K_QS + 64 * p);
                [
                    _mm256_loadu2_m128i(a.add(32).cast(), a.cast()),
                    _mm256_loadu2_m128i(a.add(48).cast(), a.add(16).cast()),
                ]
            });
            let mag: [[__m256i; 2]; T] =
                std::array::from_fn(|t| [_mm256_abs_epi8(x[t][0]), _mm256_abs_epi8(x[t][1])]);
            for r in 0..R {
                let q = load256(wb[r].add(OFFSET_QS + 32 * p));
                let lo = _mm256_shuffle_epi8(levels, _mm256_and_si256(q, m4));
                let hi =
                    _mm256_shuffle_epi8(levels, _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4));
                let s = chunk_scales(sc[r], p);
                for t in 0..T {
                    let p_lo = _mm256_maddubs_epi16(mag[t][0], _mm256_sign_epi8(lo, x[t][0]));
                    let p_hi = _mm256_maddubs_epi16(mag[t][1], _mm256_sign_epi8(hi, x[t][1]));
                    sumi[r][t] = E::madd_add(E::madd_add(sumi[r][t], s, p_lo), s, p_hi);
                }
            }
        }
        for r in 0..R {
            let d = f16_at(wb[r].add(OFFSET_D));
            for t in 0..T {
                acc[r][t] = _mm256_fmadd_ps(
                    _mm256_set1_ps(d * da[t]),
                    _mm256_cvtepi32_ps(sumi[r][t]),
                    acc[r][t],
                );
            }
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|t| hsum256(acc[r][t])))
}
