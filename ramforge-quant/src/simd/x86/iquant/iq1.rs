//! IQ1_S and IQ1_M: groups of 8 from the iq1s grid (levels -1, 0, 1), kept eightfold as the
//! spec stores them (`8 grid + delta`, delta ±1: a table of the grid times 8 plus one byte
//! add), with 3-bit scales `2 s + 1` (per 32 elements in S, per 16 in M) and the block
//! factor `d / 8`.

use super::common::*;
use crate::formats;
use std::arch::x86_64::*;

/// The iq1s grid times 8 (IQ1_M shares it).
static GRID8: [u64; 2048] = rows8(&formats::iq1_s::GRID, 8);
const _: () = assert!(formats::iq1_s::GRID.len() == formats::iq1_m::GRID.len());

/// IQ1_S: grid index `qs[k]` plus three bits of the u16 `qh[k / 4]`, whose bits 12-14 are
/// the chunk's scale and bit 15 its delta's sign.
pub(super) struct Iq1S;
impl Codebook for Iq1S {
    const BYTES: usize = formats::iq1_s::BYTES;
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::iq1_s::OFFSET_D)) * 0.125
    }
    #[inline(always)]
    unsafe fn chunk(wb: *const u8, c: usize) -> (__m256i, __m256i) {
        let idx = u32_at(wb.add(formats::iq1_s::OFFSET_QS + 4 * c));
        let qh = u16_at(wb.add(formats::iq1_s::OFFSET_QH + 2 * c)) as u32;
        let g = |l: u32| {
            let i = ((idx >> (8 * l)) & 255) | (((qh >> (3 * l)) & 7) << 8);
            GRID8[i as usize] as i64
        };
        let q = _mm256_set_epi64x(g(3), g(2), g(1), g(0));
        let delta = if qh & 0x8000 != 0 { -1 } else { 1 };
        let q = _mm256_add_epi8(q, _mm256_set1_epi8(delta));
        (q, _mm256_set1_epi16((2 * ((qh >> 12) & 7) + 1) as i16))
    }
}

/// IQ1_M: grid index `qs[k]` plus bits 0-2 of nibble k % 2 of `qh[k / 2]`, whose bit 3 is
/// the group's delta sign; 3-bit scales per 16 elements in the u16 `scales`, whose top
/// nibbles hold the f16 `d`.
pub(super) struct Iq1M;
impl Codebook for Iq1M {
    const BYTES: usize = formats::iq1_m::BYTES;
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        let sc = u64_at(wb.add(formats::iq1_m::OFFSET_SCALES));
        // The top nibble of u16 number n is bits 4n .. 4n + 4 of d.
        let bits =
            ((sc >> 12) & 0xF) | ((sc >> 24) & 0xF0) | ((sc >> 36) & 0xF00) | ((sc >> 48) & 0xF000);
        let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)));
        d * 0.125
    }
    #[inline(always)]
    unsafe fn chunk(wb: *const u8, c: usize) -> (__m256i, __m256i) {
        let idx = u32_at(wb.add(formats::iq1_m::OFFSET_QS + 4 * c));
        let qh = u16_at(wb.add(formats::iq1_m::OFFSET_QH + 2 * c)) as u32;
        let g = |l: u32| {
            let i = ((idx >> (8 * l)) & 255) | (((qh >> (4 * l)) & 7) << 8);
            GRID8[i as usize] as i64
        };
        let q = _mm256_set_epi64x(g(3), g(2), g(1), g(0));
        let delta = |l: u32| {
            if (qh >> (4 * l + 3)) & 1 != 0 {
                -1i64
            } else {
                0x0101_0101_0101_0101
            }
        };
        let q = _mm256_add_epi8(q, _mm256_set_epi64x(delta(3), delta(2), delta(1), delta(0)));
        // Groups of 16 number 2c and 2c + 1: bits 3(2c % 4) .. of the u16 `scales[c / 2]`.
        let sc =
            u16_at(wb.add(formats::iq1_m::OFFSET_SCALES + 2 * (c / 2))) as i32 >> (6 * (c % 2));
        (q, scales2(2 * (sc & 7) + 1, 2 * ((sc >> 3) & 7) + 1))
    }
}

pub(super) mod iq1_s {
    super::super::common::codebook_entry_points!("IQ1_S", iq1_s, super::Iq1S, 4);
}

pub(super) mod iq1_m {
    super::super::common::codebook_entry_points!("IQ1_M", iq1_m, super::Iq1M, 4);
}
