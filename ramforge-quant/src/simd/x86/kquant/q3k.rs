//! Q3_K x Q8_K: each quant is used unsigned as `low two bits | hmask bit << 2` (0..8) in
//! `maddubs`; the offset of 4 comes back as `4 * sum(scale * bsum)` from Q8_K's sums.

use super::common::*;
use crate::formats::q3_k::{BYTES, OFFSET_D, OFFSET_HMASK, OFFSET_QS, OFFSET_SCALES};
use crate::simd::x86::prefetch::blocks_ahead;
use std::arch::x86_64::*;

encodings!("Q3_K", 1);

/// The 16 signed 6-bit group scales as i16 (groups 0-7 in the low lane).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales(p: *const u8) -> __m256i {
    const LOW4: u32 = 0x0F0F_0F0F;
    const LOW2: u32 = 0x0303_0303;
    let (a0, a1, a2) = (u32_at(p), u32_at(p.add(4)), u32_at(p.add(8)));
    let groups = [
        (a0 & LOW4) | ((a2 & LOW2) << 4),
        (a1 & LOW4) | (((a2 >> 2) & LOW2) << 4),
        ((a0 >> 4) & LOW4) | (((a2 >> 4) & LOW2) << 4),
        ((a1 >> 4) & LOW4) | (((a2 >> 6) & LOW2) << 4),
    ];
    let stored = _mm_setr_epi32(
        groups[0] as i32,
        groups[1] as i32,
        groups[2] as i32,
        groups[3] as i32,
    );
    _mm256_cvtepi8_epi16(_mm_sub_epi8(stored, _mm_set1_epi8(32)))
}

/// `R` rows by `T` tokens; only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
unsafe fn dot<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let m2 = _mm256_set1_epi8(3);
    let bit2 = _mm256_set1_epi8(4);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for i in 0..row / BYTES {
        let wb = weight_blocks::<R>(w, row, BYTES, i);
        let (ab, da) = act_blocks(&a, i);
        if T == 1 {
            blocks_ahead(&wb, BYTES);
        }
        let bs: [__m256i; T] = std::array::from_fn(|t| bsums(ab[t]));
        for r in 0..R {
            let sc16 = scales(wb[r].add(OFFSET_SCALES));
            // Start from -4 * sum(scale * bsum): the quants below are stored + 4.
            let mut sumi: [__m256i; T] = std::array::from_fn(|t| {
                let off = _mm256_madd_epi16(sc16, bs[t]);
                _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<2>(off))
            });
            // Chunk c = 4h + k of 32 elements takes bit c of hmask[l]; `high` is hmask shifted
            // right by c (per 16-bit word: bit 0 of each byte stays its own).
            let mut high = load256(wb[r].add(OFFSET_HMASK));
            for h in 0..2 {
                let hs = half_scales(sc16, h);
                let mut low = load256(wb[r].add(OFFSET_QS + 32 * h));
                for k in 0..4 {
                    let q = _mm256_or_si256(
                        _mm256_and_si256(low, m2),
                        _mm256_and_si256(_mm256_slli_epi16::<2>(high), bit2),
                    );
                    low = _mm256_srli_epi16::<2>(low);
                    high = _mm256_srli_epi16::<1>(high);
                    let sc = chunk_scales(hs, k);
                    add_scaled_chunk::<E, T>(&mut sumi, q, sc, &ab, 4 * h + k);
                }
            }
            let d = f16_at(wb[r].add(OFFSET_D));
            add_block(&mut acc[r], d, &da, &sumi);
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|t| hsum256(acc[r][t])))
}
