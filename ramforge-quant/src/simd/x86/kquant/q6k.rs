//! Q6_K x Q8_K: the 6-bit quants are used unsigned (stored + 32) in `maddubs`; the offset
//! comes back as `32 * sum(scale * bsum)` from Q8_K's 16-element sums.

use super::common::*;
use crate::formats::q6_k::{BYTES, OFFSET_D, OFFSET_QH, OFFSET_QL, OFFSET_SCALES};
use crate::simd::x86::prefetch::blocks_ahead;
use std::arch::x86_64::*;

encodings!("Q6_K", 1);

/// `R` rows by `T` tokens; only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
unsafe fn dot<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let m4 = _mm256_set1_epi8(0x0F);
    let top = _mm256_set1_epi8(0x30);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for i in 0..row / BYTES {
        let wb = weight_blocks::<R>(w, row, BYTES, i);
        let (ab, da) = act_blocks(&a, i);
        let bs: [__m256i; T] = std::array::from_fn(|t| bsums(ab[t]));
        if T == 1 {
            blocks_ahead(&wb, BYTES);
        }
        for r in 0..R {
            let sc16 = _mm256_cvtepi8_epi16(load128(wb[r].add(OFFSET_SCALES)));
            // Start from -32 * sum(scale * bsum): the quants below are stored + 32.
            let mut sumi: [__m256i; T] = std::array::from_fn(|t| {
                let off = _mm256_madd_epi16(sc16, bs[t]);
                _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<5>(off))
            });
            for h in 0..2 {
                let hs = half_scales(sc16, h);
                let ql0 = load256(wb[r].add(OFFSET_QL + 64 * h));
                let ql1 = load256(wb[r].add(OFFSET_QL + 64 * h + 32));
                let qh = load256(wb[r].add(OFFSET_QH + 32 * h));
                // Chunk k (elements 32k..32k+32 of the half): low nibble from ql0 / ql1, low
                // or high; top two bits from bits 2k, 2k+1 of qh, moved to bits 4, 5.
                let q = [
                    _mm256_or_si256(
                        _mm256_and_si256(ql0, m4),
                        _mm256_and_si256(_mm256_slli_epi16::<4>(qh), top),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(ql1, m4),
                        _mm256_and_si256(_mm256_slli_epi16::<2>(qh), top),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
                        _mm256_and_si256(qh, top),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(qh), top),
                    ),
                ];
                for (k, &qk) in q.iter().enumerate() {
                    let sc = chunk_scales(hs, k);
                    add_scaled_chunk::<E, T>(&mut sumi, qk, sc, &ab, 4 * h + k);
                }
            }
            let d = f16_at(wb[r].add(OFFSET_D));
            add_block(&mut acc[r], d, &da, &sumi);
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|t| hsum256(acc[r][t])))
}
