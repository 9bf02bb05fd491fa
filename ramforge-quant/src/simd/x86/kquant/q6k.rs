//! Q6_K x Q8_K: the 6-bit quants are used unsigned (stored + 32) in `maddubs`; the offset
//! comes back as `32 * sum(scale * bsum)` from Q8_K's 16-element sums. The prefill tile
//! folds two chunks' scale groups into one `madd` on AVX2 ([`fold`], as Q4_K's: quants up to
//! 63 keep the i16 sums in range), with the activations folded once for its rows.

use super::common::*;
use super::q4k::{fold_activations, FoldTable, Folded, FOLDED_BLOCKS};
use crate::formats::q6_k::{BYTES, OFFSET_D, OFFSET_QH, OFFSET_QL, OFFSET_SCALES};
use crate::kernel_table::{TILE, TILE_ROWS};
use crate::simd::x86::prefetch::blocks_ahead;
use std::arch::x86_64::*;

encodings!("Q6_K", 1, shared tile_shared);

/// `R` rows by `T` tokens; only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
unsafe fn dot<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    dot_with::<E, R, T>(w, a, None)
}

/// The prefill tile: `TILE_ROWS` rows, back to back in `w`, with [`TILE`] tokens, one row
/// at a time, the activations folded once for the rows ([`fold_activations`], where `E`
/// folds): the same integers as [`dot`], so bit for bit its results.
#[inline(always)]
unsafe fn tile_shared<E: PairSum>(w: &[u8], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE_ROWS] {
    let row = w.len() / TILE_ROWS;
    let mut fold_table: FoldTable = [const { std::mem::MaybeUninit::uninit() }; FOLDED_BLOCKS];
    let folded = fold_activations::<E>(a, row / BYTES, &mut fold_table);
    // A loop, not `array::from_fn`: a closure is compiled without the kernel's target features.
    let mut out = [[0f32; TILE]; TILE_ROWS];
    for (r, o) in out.iter_mut().enumerate() {
        *o = dot_with::<E, 1, TILE>(&w[r * row..(r + 1) * row], a, folded)[0];
    }
    out
}

/// [`dot`], with block `i`'s activations [`fold`]ed from `folded[i]` where given.
#[inline(always)]
unsafe fn dot_with<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
    folded: Option<&[Folded<T>]>,
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let m4 = _mm256_set1_epi8(0x0F);
    let top = _mm256_set1_epi8(0x30);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for i in 0..row / BYTES {
        let wb = weight_blocks::<R>(w, row, BYTES, i);
        let (ab, da) = act_blocks(&a, i);
        let bs: [__m256i; T] = std::array::from_fn(|t| bsums(ab[t]));
        let folded = if E::FOLD { folded.map(|f| &f[i]) } else { None };
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
                match folded {
                    // Chunks 2p and 2p + 1 of the half are the block's chunk pair 2h + p.
                    Some(f) => {
                        for p in 0..2 {
                            let sc = _mm256_blend_epi16::<0xAA>(
                                chunk_scales(hs, 2 * p),
                                chunk_scales(hs, 2 * p + 1),
                            );
                            let q = fold(q[2 * p], q[2 * p + 1]);
                            add_folded::<T>(&mut sumi, q, sc, &f[2 * h + p]);
                        }
                    }
                    None => {
                        for (k, &qk) in q.iter().enumerate() {
                            let sc = chunk_scales(hs, k);
                            add_scaled_chunk::<E, T>(&mut sumi, qk, sc, &ab, 4 * h + k);
                        }
                    }
                }
            }
            let d = f16_at(wb[r].add(OFFSET_D));
            add_block(&mut acc[r], d, &da, &sumi);
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|t| hsum256(acc[r][t])))
}
