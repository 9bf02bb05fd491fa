//! IQ2_XXS, IQ2_XS and IQ2_S: groups of 8 quants from a grid of levels 8, 25, 43, four
//! grid words per 32-element chunk; signs from the ksigns table (XXS, XS) or one bit per
//! element (S); 4-bit scales `ls` as `2 ls + 1` (per 32 elements in XXS, per 16 in XS and
//! S), the block factor `d / 8`.

use super::common::*;
use crate::formats;
use std::arch::x86_64::*;

static GRID_XXS: [u64; 256] = rows8(&formats::iq2_xxs::GRID, 1);
static GRID_XS: [u64; 512] = rows8(&formats::iq2_xs::GRID, 1);
static GRID_S: [u64; 1024] = rows8(&formats::iq2_s::GRID, 1);

/// IQ2_XXS: chunk c owns 8 bytes: four grid indices, then a u32 of four 7-bit sign indices
/// and the scale in its top 4 bits.
pub(super) struct Iq2Xxs;
impl Codebook for Iq2Xxs {
    const BYTES: usize = formats::iq2_xxs::BYTES;
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::iq2_xxs::OFFSET_D)) * 0.125
    }
    #[inline(always)]
    unsafe fn chunk(wb: *const u8, c: usize) -> (__m256i, __m256i) {
        let p = wb.add(formats::iq2_xxs::OFFSET_QS + 8 * c);
        let idx = u32_at(p);
        let aux = u32_at(p.add(4));
        let q = _mm256_set_epi64x(
            GRID_XXS[(idx >> 24) as usize] as i64,
            GRID_XXS[((idx >> 16) & 255) as usize] as i64,
            GRID_XXS[((idx >> 8) & 255) as usize] as i64,
            GRID_XXS[(idx & 255) as usize] as i64,
        );
        let q = _mm256_sign_epi8(q, ksigns4(aux));
        (q, _mm256_set1_epi16((2 * (aux >> 28) + 1) as i16))
    }
}

/// IQ2_XS: a u16 per group of 8, grid index in bits 0-8 and sign index in 9-15; a nibble
/// scale per 16 elements.
pub(super) struct Iq2Xs;
impl Codebook for Iq2Xs {
    const BYTES: usize = formats::iq2_xs::BYTES;
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::iq2_xs::OFFSET_D)) * 0.125
    }
    #[inline(always)]
    unsafe fn chunk(wb: *const u8, c: usize) -> (__m256i, __m256i) {
        let v = u64_at(wb.add(formats::iq2_xs::OFFSET_QS + 8 * c));
        let g = |l: u32| GRID_XS[((v >> (16 * l)) & 511) as usize] as i64;
        let q = _mm256_set_epi64x(g(3), g(2), g(1), g(0));
        let s = |l: u32| KSIGNS[((v >> (16 * l + 9)) & 127) as usize] as i64;
        let q = _mm256_sign_epi8(q, _mm256_set_epi64x(s(3), s(2), s(1), s(0)));
        let sc = *wb.add(formats::iq2_xs::OFFSET_SCALES + c) as i32;
        (q, scales2(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1))
    }
}

/// IQ2_S: grid index `qs[k]` plus two bits of `qh[k / 4]`, one sign bit per element, a
/// nibble scale per 16 elements.
pub(super) struct Iq2S;
impl Codebook for Iq2S {
    const BYTES: usize = formats::iq2_s::BYTES;
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::iq2_s::OFFSET_D)) * 0.125
    }
    #[inline(always)]
    unsafe fn chunk(wb: *const u8, c: usize) -> (__m256i, __m256i) {
        let idx = u32_at(wb.add(formats::iq2_s::OFFSET_QS + 4 * c));
        let high = *wb.add(formats::iq2_s::OFFSET_QH + c) as u32;
        let g = |l: u32| {
            let i = ((idx >> (8 * l)) & 255) | (((high >> (2 * l)) & 3) << 8);
            GRID_S[i as usize] as i64
        };
        let q = _mm256_set_epi64x(g(3), g(2), g(1), g(0));
        let q = _mm256_sign_epi8(
            q,
            sign_bits(u32_at(wb.add(formats::iq2_s::OFFSET_SIGNS + 4 * c))),
        );
        let sc = *wb.add(formats::iq2_s::OFFSET_SCALES + c) as i32;
        (q, scales2(2 * (sc & 15) + 1, 2 * (sc >> 4) + 1))
    }
}

pub(super) mod iq2_xxs {
    super::super::common::codebook_entry_points!("IQ2_XXS", iq2_xxs, super::Iq2Xxs, 2, vex 4);
}

pub(super) mod iq2_xs {
    super::super::common::codebook_entry_points!("IQ2_XS", iq2_xs, super::Iq2Xs, 4);
}

pub(super) mod iq2_s {
    super::super::common::codebook_entry_points!("IQ2_S", iq2_s, super::Iq2S, 4);
}
