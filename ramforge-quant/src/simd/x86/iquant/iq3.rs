//! IQ3_XXS and IQ3_S: groups of 4 quants from a grid (levels 4 ... 62, or 1 ... 15), eight
//! grid words per 32-element chunk; signs from 7-bit ksigns indices (XXS) or one bit per element
//! (S); a 4-bit scale per 32 elements: `2 ls + 1` with the block factor `d / 4` (XXS),
//! `1 + 2 s` with `d` (S).

use super::common::*;
use crate::formats;
use std::arch::x86_64::*;

static GRID_XXS: [u32; 256] = rows4(&formats::iq3_xxs::GRID);
static GRID_S: [u32; 512] = rows4(&formats::iq3_s::GRID);

/// An IQ3_XXS block's groups' sign bits per chunk (a u32 for [`sign_bits`]) and its scales
/// (chunk c's in i16 number 2c).
#[derive(Clone, Copy, Default)]
pub(super) struct Iq3XxsPrepared {
    signs: [u32; 8],
    scales: [i16; 16],
}

/// IQ3_XXS: grid index `qs[j / 4]`; chunk c's u32 at `sas[4c]` holds four 7-bit sign indices
/// and the scale in its top 4 bits.
pub(super) struct Iq3Xxs;
impl Codebook for Iq3Xxs {
    const BYTES: usize = formats::iq3_xxs::BYTES;
    type Prepared = Iq3XxsPrepared;
    #[inline(always)]
    unsafe fn prepare(wb: *const u8) -> Iq3XxsPrepared {
        let mut p = Iq3XxsPrepared::default();
        let aux = load256(wb.add(formats::iq3_xxs::OFFSET_SAS));
        let (signs, scales) = aux_signs_scales(aux);
        store256(&mut p.signs, signs);
        store256(&mut p.scales, scales);
        p
    }
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::iq3_xxs::OFFSET_D)) * 0.25
    }
    #[inline(always)]
    unsafe fn chunk<N: Negate>(wb: *const u8, p: &Iq3XxsPrepared, c: usize) -> (__m256i, __m256i) {
        let qs = wb.add(formats::iq3_xxs::OFFSET_QS + 8 * c);
        let q = words8(&GRID_XXS, std::array::from_fn(|l| *qs.add(l) as usize));
        let q = N::negate(q, p.signs[c]);
        (q, _mm256_set1_epi16(p.scales[2 * c]))
    }
}

/// An IQ3_S block's 64 grid indices and its scales (chunk c's in i16 number c).
#[derive(Clone, Copy)]
pub(super) struct Iq3SPrepared {
    idx: [u16; 64],
    scales: [i16; 16],
}

impl Default for Iq3SPrepared {
    fn default() -> Self {
        Iq3SPrepared {
            idx: [0; 64],
            scales: [0; 16],
        }
    }
}

/// IQ3_S: grid index `qs[k]` plus bit k % 8 of `qh[k / 8]`, one sign bit per element, a
/// nibble scale per 32 elements.
pub(super) struct Iq3S;
impl Codebook for Iq3S {
    const BYTES: usize = formats::iq3_s::BYTES;
    // Grid levels at most 15: its unpacked chunk pairs fold as IQ1's.
    const FOLD: bool = true;
    type Prepared = Iq3SPrepared;
    #[inline(always)]
    unsafe fn prepare(wb: *const u8) -> Iq3SPrepared {
        let mut p = Iq3SPrepared::default();
        let qh = _mm256_broadcastsi128_si256(_mm_loadl_epi64(
            wb.add(formats::iq3_s::OFFSET_QH).cast::<__m128i>(),
        ));
        // `qh[k / 8] << (8 - k % 8)`: the group's bit at 8.
        let shift = _mm256_broadcastsi128_si256(_mm_setr_epi16(256, 128, 64, 32, 16, 8, 4, 2));
        for h in 0..4 {
            // Byte 2h of `qh` in the low lane, 2h + 1 in the high lane.
            let b = 2 * h as u64;
            let pick = byte_per_qword([b, b, b + 1, b + 1]);
            let bits = _mm256_and_si256(
                _mm256_mullo_epi16(_mm256_shuffle_epi8(qh, pick), shift),
                _mm256_set1_epi16(0x100),
            );
            let low = _mm256_cvtepu8_epi16(load128(wb.add(formats::iq3_s::OFFSET_QS + 16 * h)));
            store256(&mut p.idx[16 * h..16 * h + 16], _mm256_or_si256(low, bits));
        }
        // `1 + 2 s` per chunk, the low nibble of `scales[c / 2]` first (its 4 bytes only:
        // they end the block).
        let b = _mm_cvtsi32_si128(u32_at(wb.add(formats::iq3_s::OFFSET_SCALES)) as i32);
        store256(&mut p.scales, nibble_scales(b));
        p
    }
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::iq3_s::OFFSET_D))
    }
    #[inline(always)]
    unsafe fn chunk<N: Negate>(wb: *const u8, p: &Iq3SPrepared, c: usize) -> (__m256i, __m256i) {
        let q = words8(&GRID_S, std::array::from_fn(|l| p.idx[8 * c + l] as usize));
        let q = N::negate(q, u32_at(wb.add(formats::iq3_s::OFFSET_SIGNS + 4 * c)));
        (q, _mm256_set1_epi16(p.scales[c]))
    }
}

pub(super) mod iq3_xxs {
    super::super::common::codebook_entry_points!("IQ3_XXS", iq3_xxs, super::Iq3Xxs, 2, vex 4);
}

pub(super) mod iq3_s {
    super::super::common::codebook_entry_points!("IQ3_S", iq3_s, super::Iq3S, 2, vex 4);
}
