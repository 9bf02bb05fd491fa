//! TQ2_0: ternary quants stored as 2-bit `q + 1`, four per byte, one f16 scale per block.

use super::common::*;
use crate::formats;
use std::arch::x86_64::*;

/// TQ2_0: chunk `4h + n` is bit pair n of the 32 bytes of half h.
pub(super) struct Tq2;
impl Codebook for Tq2 {
    const BYTES: usize = formats::tq2_0::BYTES;
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::tq2_0::OFFSET_D))
    }
    #[inline(always)]
    unsafe fn chunk(wb: *const u8, c: usize) -> (__m256i, __m256i) {
        let v = load256(wb.add(formats::tq2_0::OFFSET_QS + 32 * (c / 4)));
        let shift = _mm_cvtsi32_si128(2 * (c % 4) as i32);
        let q = _mm256_and_si256(_mm256_srl_epi16(v, shift), _mm256_set1_epi8(3));
        (
            _mm256_sub_epi8(q, _mm256_set1_epi8(1)),
            _mm256_set1_epi16(1),
        )
    }
}

pub(super) mod tq2_0 {
    super::super::common::codebook_entry_points!("TQ2_0", tq2_0, super::Tq2, 4);
}
