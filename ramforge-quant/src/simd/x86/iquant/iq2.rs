//! IQ2_XXS, IQ2_XS and IQ2_S: groups of 8 quants from a grid of levels 8, 25, 43, four
//! grid words per 32-element chunk; signs from 7-bit ksigns indices (XXS, XS; their parity made per block) or one bit per
//! element (S); 4-bit scales `ls` as `2 ls + 1` (per 32 elements in XXS, per 16 in XS and
//! S), the block factor `d / 8`.

use super::common::*;
use crate::formats;
use std::arch::x86_64::*;

static GRID_XXS: [u64; 256] = rows8(&formats::iq2_xxs::GRID, 1);
static GRID_XS: [u64; 512] = rows8(&formats::iq2_xs::GRID, 1);
static GRID_S: [u64; 1024] = rows8(&formats::iq2_s::GRID, 1);

/// A block's 32 grid indices, its groups' sign bits per chunk (a u32 for [`sign_bits`]) and
/// its scales (per chunk in IQ2_XXS, per 16 elements in IQ2_XS and IQ2_S).
#[derive(Clone, Copy, Default)]
pub(super) struct Iq2Prepared {
    idx: [u16; 32],
    signs: [u32; 8],
    scales: [i16; 16],
}

/// IQ2_XXS: chunk c owns 8 bytes: four grid indices, then a u32 of four 7-bit sign indices
/// and the scale in its top 4 bits.
pub(super) struct Iq2Xxs;
impl Codebook for Iq2Xxs {
    const BYTES: usize = formats::iq2_xxs::BYTES;
    type Prepared = Iq2Prepared;
    #[inline(always)]
    unsafe fn prepare(wb: *const u8) -> Iq2Prepared {
        let mut p = Iq2Prepared::default();
        let qs = wb.add(formats::iq2_xxs::OFFSET_QS);
        let (a, b) = (load256(qs), load256(qs.add(32)));
        // The u32 words at even positions (grid indices) and odd ones, each in chunk order;
        // `shuffle_ps` interleaves the two sources' 128-bit lanes, the permute undoes it.
        let (a, b) = (_mm256_castsi256_ps(a), _mm256_castsi256_ps(b));
        let order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
        let idx = _mm256_permutevar8x32_epi32(
            _mm256_castps_si256(_mm256_shuffle_ps::<0b10_00_10_00>(a, b)),
            order,
        );
        let aux = _mm256_permutevar8x32_epi32(
            _mm256_castps_si256(_mm256_shuffle_ps::<0b11_01_11_01>(a, b)),
            order,
        );
        store256(
            &mut p.idx[..16],
            _mm256_cvtepu8_epi16(_mm256_castsi256_si128(idx)),
        );
        store256(
            &mut p.idx[16..],
            _mm256_cvtepu8_epi16(_mm256_extracti128_si256::<1>(idx)),
        );
        let (signs, scales) = aux_signs_scales(aux);
        store256(&mut p.signs, signs);
        store256(&mut p.scales, scales);
        p
    }
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::iq2_xxs::OFFSET_D)) * 0.125
    }
    #[inline(always)]
    unsafe fn chunk<N: Negate>(_wb: *const u8, p: &Iq2Prepared, c: usize) -> (__m256i, __m256i) {
        let q = words4(
            &GRID_XXS,
            std::array::from_fn(|l| p.idx[4 * c + l] as usize),
        );
        let q = N::negate(q, p.signs[c]);
        (q, _mm256_set1_epi16(p.scales[2 * c]))
    }
}

/// IQ2_XS: a u16 per group of 8, grid index in bits 0-8 and sign index in 9-15; a nibble
/// scale per 16 elements.
pub(super) struct Iq2Xs;
impl Codebook for Iq2Xs {
    const BYTES: usize = formats::iq2_xs::BYTES;
    type Prepared = Iq2Prepared;
    #[inline(always)]
    unsafe fn prepare(wb: *const u8) -> Iq2Prepared {
        let mut p = Iq2Prepared::default();
        let qs = wb.add(formats::iq2_xs::OFFSET_QS);
        let (a, b) = (load256(qs), load256(qs.add(32)));
        let grid = _mm256_set1_epi16(511);
        store256(&mut p.idx[..16], _mm256_and_si256(a, grid));
        store256(&mut p.idx[16..], _mm256_and_si256(b, grid));
        // The sign indices as bytes in group order (`packus` works per lane).
        let s = _mm256_packus_epi16(_mm256_srli_epi16::<9>(a), _mm256_srli_epi16::<9>(b));
        let s = _mm256_permute4x64_epi64::<0b11_01_10_00>(s);
        store256(&mut p.signs, ksign_bytes(s));
        store256(
            &mut p.scales,
            nibble_scales(_mm_loadl_epi64(
                wb.add(formats::iq2_xs::OFFSET_SCALES).cast::<__m128i>(),
            )),
        );
        p
    }
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::iq2_xs::OFFSET_D)) * 0.125
    }
    #[inline(always)]
    unsafe fn chunk<N: Negate>(_wb: *const u8, p: &Iq2Prepared, c: usize) -> (__m256i, __m256i) {
        let q = words4(&GRID_XS, std::array::from_fn(|l| p.idx[4 * c + l] as usize));
        let q = N::negate(q, p.signs[c]);
        (q, scale_pair(&p.scales, c))
    }
}

/// IQ2_S: grid index `qs[k]` plus two bits of `qh[k / 4]`, one sign bit per element, a
/// nibble scale per 16 elements.
pub(super) struct Iq2S;
impl Codebook for Iq2S {
    const BYTES: usize = formats::iq2_s::BYTES;
    type Prepared = Iq2Prepared;
    #[inline(always)]
    unsafe fn prepare(wb: *const u8) -> Iq2Prepared {
        let mut p = Iq2Prepared::default();
        let qh = _mm256_broadcastsi128_si256(_mm_loadl_epi64(
            wb.add(formats::iq2_s::OFFSET_QH).cast::<__m128i>(),
        ));
        // `qh[k / 4] << (8 - 2 (k % 4))`, the group's two bits at 8-9: the multipliers
        // 2^8, 2^6, 2^4, 2^2 in each qword's four u16 lanes.
        let shift = _mm256_set1_epi64x(0x0004_0010_0040_0100);
        for h in 0..2 {
            // Byte 4h + q of `qh` in qword q.
            let b = 4 * h as u64;
            let pick = byte_per_qword([b, b + 1, b + 2, b + 3]);
            let bits = _mm256_and_si256(
                _mm256_mullo_epi16(_mm256_shuffle_epi8(qh, pick), shift),
                _mm256_set1_epi16(0x300),
            );
            let low = _mm256_cvtepu8_epi16(load128(wb.add(formats::iq2_s::OFFSET_QS + 16 * h)));
            store256(&mut p.idx[16 * h..16 * h + 16], _mm256_or_si256(low, bits));
        }
        store256(&mut p.signs, load256(wb.add(formats::iq2_s::OFFSET_SIGNS)));
        store256(
            &mut p.scales,
            nibble_scales(_mm_loadl_epi64(
                wb.add(formats::iq2_s::OFFSET_SCALES).cast::<__m128i>(),
            )),
        );
        p
    }
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::iq2_s::OFFSET_D)) * 0.125
    }
    #[inline(always)]
    unsafe fn chunk<N: Negate>(_wb: *const u8, p: &Iq2Prepared, c: usize) -> (__m256i, __m256i) {
        let q = words4(&GRID_S, std::array::from_fn(|l| p.idx[4 * c + l] as usize));
        let q = N::negate(q, p.signs[c]);
        (q, scale_pair(&p.scales, c))
    }
}

pub(super) mod iq2_xxs {
    super::super::common::codebook_entry_points!("IQ2_XXS", iq2_xxs, super::Iq2Xxs, 4, vex 4);
}

pub(super) mod iq2_xs {
    super::super::common::codebook_entry_points!("IQ2_XS", iq2_xs, super::Iq2Xs, 4);
}

pub(super) mod iq2_s {
    super::super::common::codebook_entry_points!("IQ2_S", iq2_s, super::Iq2S, 4);
}
