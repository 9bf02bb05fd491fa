//! Q4_K x Q8_K: per 32-element group, `maddubs` of the unsigned nibbles with the int8
//! activations, `madd` with the group's 6-bit scale; the mins come from Q8_K's bsums.

use super::common::*;
use std::arch::x86_64::*;

const BYTES: usize = 144;

entry_points!("Q4_K");

/// The 8 group scales (low lane) and 8 group mins (high lane) as i16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn scales_mins(p: *const u8) -> __m256i {
    const LOW6: u32 = 0x3F3F_3F3F;
    const LOW4: u32 = 0x0F0F_0F0F;
    const TOP2: u32 = 0x0303_0303;
    let (u0, u1, u2) = (u32_at(p), u32_at(p.add(4)), u32_at(p.add(8)));
    let sc_lo = u0 & LOW6;
    let mn_lo = u1 & LOW6;
    let sc_hi = (u2 & LOW4) | (((u0 >> 6) & TOP2) << 4);
    let mn_hi = ((u2 >> 4) & LOW4) | (((u1 >> 6) & TOP2) << 4);
    _mm256_cvtepu8_epi16(_mm_setr_epi32(
        sc_lo as i32,
        sc_hi as i32,
        mn_lo as i32,
        mn_hi as i32,
    ))
}

/// Sums of 32 of a Q8_K block's bsums: 8 i16, one per Q4_K group.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bsums32(ab: *const u8) -> __m128i {
    let bs = bsums(ab);
    _mm_hadd_epi16(
        _mm256_castsi256_si128(bs),
        _mm256_extracti128_si256::<1>(bs),
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_rows<const T: usize>(w: &[u8], a: [&[u8]; T]) -> [f32; T] {
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm256_setzero_ps(); T];
    for i in 0..w.len() / BYTES {
        let wb = w.as_ptr().add(i * BYTES);
        let (ab, da) = act_blocks(&a, i);
        let d = f16_at(wb);
        let dmin = f16_at(wb.add(2));
        let sm = scales_mins(wb.add(4));
        let mins = _mm256_extracti128_si256::<1>(sm);
        let sc = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(sm));
        let mut sumi = [_mm256_setzero_si256(); T];
        for j in 0..4 {
            let q = load256(wb.add(16 + 32 * j));
            let lo = _mm256_and_si256(q, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
            let s_lo = bcast16(sc, 2 * j);
            let s_hi = bcast16(sc, 2 * j + 1);
            for t in 0..T {
                let qa = ab[t].add(Q8K_QS + 64 * j);
                let p_lo = _mm256_maddubs_epi16(lo, load256(qa));
                let p_hi = _mm256_maddubs_epi16(hi, load256(qa.add(32)));
                let p =
                    _mm256_add_epi32(_mm256_madd_epi16(s_lo, p_lo), _mm256_madd_epi16(s_hi, p_hi));
                sumi[t] = _mm256_add_epi32(sumi[t], p);
            }
        }
        for t in 0..T {
            // The mins' 4 sums ride in the low half of the accumulator.
            let m = _mm256_zextsi128_si256(_mm_madd_epi16(mins, bsums32(ab[t])));
            let sum = _mm256_fmadd_ps(
                _mm256_set1_ps(d * da[t]),
                _mm256_cvtepi32_ps(sumi[t]),
                acc[t],
            );
            acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * da[t]), _mm256_cvtepi32_ps(m), sum);
        }
    }
    std::array::from_fn(|t| hsum256(acc[t]))
}
