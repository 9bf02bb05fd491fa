//! IQ3_XXS and IQ3_S: groups of 4 quants from a grid (levels 4 ... 62, or 1 ... 15), eight
//! grid words per 32-element chunk; signs from the ksigns table (XXS) or one bit per element
//! (S); a 4-bit scale per 32 elements: `2 ls + 1` with the block factor `d / 4` (XXS),
//! `1 + 2 s` with `d` (S).

use super::common::*;
use crate::formats;
use std::arch::x86_64::*;

static GRID_XXS: [u32; 256] = rows4(&formats::iq3_xxs::GRID);
static GRID_S: [u32; 512] = rows4(&formats::iq3_s::GRID);

/// IQ3_XXS: grid index `qs[j / 4]`; chunk c's u32 at `sas[4c]` holds four 7-bit sign indices
/// and the scale in its top 4 bits.
pub(super) struct Iq3Xxs;
impl Codebook for Iq3Xxs {
    const BYTES: usize = formats::iq3_xxs::BYTES;
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::iq3_xxs::OFFSET_D)) * 0.25
    }
    #[inline(always)]
    unsafe fn chunk(wb: *const u8, c: usize) -> (__m256i, __m256i) {
        let p = wb.add(formats::iq3_xxs::OFFSET_QS + 8 * c);
        let g = |l: usize| GRID_XXS[*p.add(l) as usize] as i32;
        let q = _mm256_setr_epi32(g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7));
        let aux = u32_at(wb.add(formats::iq3_xxs::OFFSET_SAS + 4 * c));
        let q = _mm256_sign_epi8(q, ksigns4(aux));
        (q, _mm256_set1_epi16((2 * (aux >> 28) + 1) as i16))
    }
}

/// IQ3_S: grid index `qs[k]` plus bit k % 8 of `qh[k / 8]`, one sign bit per element, a
/// nibble scale per 32 elements.
pub(super) struct Iq3S;
impl Codebook for Iq3S {
    const BYTES: usize = formats::iq3_s::BYTES;
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::iq3_s::OFFSET_D))
    }
    #[inline(always)]
    unsafe fn chunk(wb: *const u8, c: usize) -> (__m256i, __m256i) {
        let p = wb.add(formats::iq3_s::OFFSET_QS + 8 * c);
        let high = *wb.add(formats::iq3_s::OFFSET_QH + c) as usize;
        let g = |l: usize| GRID_S[*p.add(l) as usize | (((high >> l) & 1) << 8)] as i32;
        let q = _mm256_setr_epi32(g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7));
        let q = _mm256_sign_epi8(
            q,
            sign_bits(u32_at(wb.add(formats::iq3_s::OFFSET_SIGNS + 4 * c))),
        );
        let s = (*wb.add(formats::iq3_s::OFFSET_SCALES + c / 2) >> (4 * (c % 2))) & 15;
        (q, _mm256_set1_epi16(1 + 2 * s as i16))
    }
}

pub(super) mod iq3_xxs {
    super::super::common::codebook_entry_points!("IQ3_XXS", iq3_xxs, super::Iq3Xxs, 2, vex 4);
}

pub(super) mod iq3_s {
    super::super::common::codebook_entry_points!("IQ3_S", iq3_s, super::Iq3S, 2, vex 4);
}
