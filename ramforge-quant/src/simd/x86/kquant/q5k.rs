//! Q5_K x Q8_K: Q4_K's kernel with the fifth bit of each quant or-ed in from `qh`.

use super::common::*;
use super::q4k::{
    add_block_with_mins, add_scaled_pair, bsums32, pair_activations, row_results, scales_mins,
    unpack_block, unpacked_dot5 as unpacked_dot, ARRANGE, UNPACKED_BYTES,
};
use crate::formats::q4_k;
use crate::formats::q5_k::{BYTES, OFFSET_D, OFFSET_DMIN, OFFSET_QH, OFFSET_QS, OFFSET_SCALES};
use crate::simd::x86::prefetch::blocks_ahead;
use std::arch::x86_64::*;

// Q5_K's d, dmin and scales sit where Q4_K's do: the helpers above read them there.
const _: () = assert!(
    q4_k::OFFSET_D == OFFSET_D
        && q4_k::OFFSET_DMIN == OFFSET_DMIN
        && q4_k::OFFSET_SCALES == OFFSET_SCALES
);

encodings!("Q5_K", 1, unpacked unpacked_dot);

/// `R` rows by `T` tokens; only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
unsafe fn dot<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let m4 = _mm256_set1_epi8(0x0F);
    let bit4 = _mm256_set1_epi8(0x10);
    let mut acc = [_mm_setzero_ps(); R];
    for i in 0..row / BYTES {
        let wb = weight_blocks::<R>(w, row, BYTES, i);
        let (ab, da) = act_blocks(&a, i);
        if T == 1 {
            blocks_ahead(&wb, BYTES);
        }
        let sm: [__m256i; R] = std::array::from_fn(|r| scales_mins(wb[r].add(OFFSET_SCALES)));
        // Bit 2j of qh[l] is the fifth bit of element 64j + l, bit 2j + 1 that of 64j + 32 + l;
        // `high` is qh shifted right by 2j (per 16-bit word: bits 0, 1 of each byte stay its own).
        let mut high: [__m256i; R] = std::array::from_fn(|r| load256(wb[r].add(OFFSET_QH)));
        let mut sumi = [[_mm256_setzero_si256(); T]; R];
        for j in 0..4 {
            let qa = pair_activations(&ab, j);
            for r in 0..R {
                let q = load256(wb[r].add(OFFSET_QS + 32 * j));
                let lo = _mm256_or_si256(
                    _mm256_and_si256(q, m4),
                    _mm256_and_si256(_mm256_slli_epi16::<4>(high[r]), bit4),
                );
                let hi = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4),
                    _mm256_and_si256(_mm256_slli_epi16::<3>(high[r]), bit4),
                );
                high[r] = _mm256_srli_epi16::<2>(high[r]);
                add_scaled_pair::<E, T>(&mut sumi[r], lo, hi, sm[r], j, &qa);
            }
        }
        let bs: [__m128i; T] = std::array::from_fn(|t| bsums32(ab[t]));
        for r in 0..R {
            let mins = _mm256_extracti128_si256::<1>(sm[r]);
            add_block_with_mins(&mut acc[r], wb[r], mins, &da, &bs, &sumi[r]);
        }
    }
    row_results(&acc)
}

/// A row of Q5_K blocks unpacked for the prefill tile: Q4_K's unpacked layout (its quants
/// up to 31 keep [`unpacked_dot`]'s eight products per i16 within range: 8 * 31 * 128), so
/// Q4_K's tile and activation arrangement serve it.
fn unpack(w: &[u8], out: &mut [u8]) {
    assert!(w.len().is_multiple_of(BYTES) && out.len() == w.len() / BYTES * UNPACKED_BYTES);
    // SAFETY: reachable only through the kernel tables, handed out only when the CPU has
    // AVX2, FMA and F16C; the lengths are whole blocks.
    unsafe { unpack_blocks(w, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack_blocks(w: &[u8], out: &mut [u8]) {
    for (wb, ub) in w
        .chunks_exact(BYTES)
        .zip(out.chunks_exact_mut(UNPACKED_BYTES))
    {
        let wp = wb.as_ptr();
        let qh = load256(wp.add(OFFSET_QH));
        unpack_block(wp, wp.add(OFFSET_QS), Some(qh), ub.as_mut_ptr());
    }
}
