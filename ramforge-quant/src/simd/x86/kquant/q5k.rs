//! Q5_K x Q8_K: Q4_K's kernel with the fifth bit of each quant or-ed in from `qh`.

use super::common::*;
use super::q4k::{
    add_block_with_mins, add_scaled_pair, bsums32, pair_activations, scales_mins, shared_sums_tile,
    Folded,
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

encodings!("Q5_K", 1, shared tile_shared);

/// `R` rows by `T` tokens; only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
unsafe fn dot<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    dot_with::<E, R, T>(w, a, None, None)
}

/// [`dot`], with block `i`'s activation group sums from `sums[i]` and its activations folded
/// from `folded[i]` where given (as Q4_K's).
#[inline(always)]
unsafe fn dot_with<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
    sums: Option<&[[__m128i; T]]>,
    folded: Option<&[Folded<T>]>,
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let m4 = _mm256_set1_epi8(0x0F);
    let bit4 = _mm256_set1_epi8(0x10);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
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
        let folded = if E::FOLD { folded.map(|f| &f[i]) } else { None };
        for j in 0..4 {
            let qa = pair_activations(&ab, j, folded.is_some());
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
                add_scaled_pair::<E, T>(&mut sumi[r], lo, hi, sm[r], j, &qa, folded);
            }
        }
        let bs: [__m128i; T] = match sums {
            Some(sums) => sums[i],
            None => std::array::from_fn(|t| bsums32(ab[t])),
        };
        for r in 0..R {
            add_block_with_mins(&mut acc[r], wb[r], sm[r], &da, &bs, &sumi[r]);
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|t| hsum256(acc[r][t])))
}

shared_sums_tile!();
