//! Q2_K x Q8_K: 2-bit quants in `maddubs`, 4-bit scales per 16-element group in `madd`, the
//! 4-bit mins against Q8_K's bsums.

use super::common::*;
use crate::formats::q2_k::{BYTES, OFFSET_D, OFFSET_DMIN, OFFSET_QS, OFFSET_SCALES};
use crate::simd::x86::prefetch::group_after_next;
use std::arch::x86_64::*;

encodings!("Q2_K", 2, vex 8);

/// `R` rows by `T` tokens; only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
unsafe fn dot<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let m2 = _mm256_set1_epi8(3);
    let m4 = _mm_set1_epi8(0x0F);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for i in 0..row / BYTES {
        let wb = weight_blocks::<R>(w, row, BYTES, i);
        let (ab, da) = act_blocks(&a, i);
        let bs: [__m256i; T] = std::array::from_fn(|t| bsums(ab[t]));
        if R > 1 {
            group_after_next::<_MM_HINT_T0>(w, i, row / BYTES);
        }
        for r in 0..R {
            let d = f16_at(wb[r].add(OFFSET_D));
            let dmin = f16_at(wb[r].add(OFFSET_DMIN));
            let packed = load128(wb[r].add(OFFSET_SCALES));
            let sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(packed, m4));
            let mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(packed), m4));
            for t in 0..T {
                let m = _mm256_madd_epi16(mins, bs[t]);
                acc[r][t] = _mm256_fnmadd_ps(
                    _mm256_set1_ps(dmin * da[t]),
                    _mm256_cvtepi32_ps(m),
                    acc[r][t],
                );
            }
            let mut sumi = [_mm256_setzero_si256(); T];
            for h in 0..2 {
                let hs = half_scales(sc16, h);
                let mut low = load256(wb[r].add(OFFSET_QS + 32 * h));
                for k in 0..4 {
                    let q = _mm256_and_si256(low, m2);
                    low = _mm256_srli_epi16::<2>(low);
                    let sc = chunk_scales(hs, k);
                    add_scaled_chunk::<E, T>(&mut sumi, q, sc, &ab, 4 * h + k);
                }
            }
            add_block(&mut acc[r], d, &da, &sumi);
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|t| hsum256(acc[r][t])))
}
