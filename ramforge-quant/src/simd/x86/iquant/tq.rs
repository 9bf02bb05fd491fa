//! TQ2_0 and TQ1_0: ternary quants, one f16 scale per block. TQ2_0 stores `q + 1` in bit
//! pairs; TQ1_0 five base-3 digits per byte as a fixed-point fraction of 3^5, digit n read as
//! `(byte * 3^n mod 256) * 3 >> 8` (`spec_support::trit`), done per byte with 16-bit
//! multiplies.

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

/// Per TQ1_0 chunk, the power of 3 each byte of its 32 source bytes is multiplied by (see
/// [`Tq1::chunk`] for which bytes).
static TQ1_POW3: [[u8; 32]; 8] = {
    let mut t = [[0u8; 32]; 8];
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let mut c = 0;
    while c < 8 {
        let mut b = 0;
        while b < 32 {
            t[c][b] = match c {
                0..5 => POW3[c],
                // Digits 0 and 1 (2 and 3) of qs[32..48].
                5 | 6 => POW3[2 * (c - 5) + b / 16],
                // Digit 4 of qs[32..48], then digits 0..4 of qh[0..4].
                _ => {
                    if b < 16 {
                        POW3[4]
                    } else {
                        POW3[(b - 16) / 4]
                    }
                }
            };
            b += 1;
        }
        c += 1;
    }
    t
};

/// TQ1_0: chunk c < 5 is digit c of `qs[0..32]`; chunks 5 and 6 digits 0, 1 and 2, 3 of
/// `qs[32..48]` (16 elements each); chunk 7 digit 4 of `qs[32..48]`, then digits 0..4 of
/// `qh[0..4]` (4 elements each).
pub(super) struct Tq1;
impl Codebook for Tq1 {
    const BYTES: usize = formats::tq1_0::BYTES;
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::tq1_0::OFFSET_D))
    }
    #[inline(always)]
    unsafe fn chunk(wb: *const u8, c: usize) -> (__m256i, __m256i) {
        let qs = wb.add(formats::tq1_0::OFFSET_QS);
        let v = match c {
            0..5 => load256(qs),
            5 | 6 => _mm256_broadcastsi128_si256(load128(qs.add(32))),
            _ => _mm256_set_m128i(
                _mm_set1_epi32(u32_at(wb.add(formats::tq1_0::OFFSET_QH)) as i32),
                load128(qs.add(32)),
            ),
        };
        let pow = load256(TQ1_POW3[c].as_ptr());
        let low = _mm256_set1_epi16(0x00FF);
        let high = _mm256_set1_epi16(0xFF00u16 as i16);
        // Bytes times their powers mod 256: the even bytes' products are the low bytes of
        // 16-bit products, the odd bytes' the high bytes of products with the byte in place.
        let even = _mm256_mullo_epi16(v, _mm256_and_si256(pow, low));
        let odd = _mm256_mullo_epi16(_mm256_and_si256(v, high), _mm256_srli_epi16::<8>(pow));
        let p = _mm256_or_si256(_mm256_and_si256(even, low), odd);
        // `p * 3 >> 8` per byte: the high half of `(p << 8) * 3` in each 16-bit lane.
        let three = _mm256_set1_epi16(3);
        let d_even = _mm256_mulhi_epu16(_mm256_slli_epi16::<8>(p), three);
        let d_odd = _mm256_mulhi_epu16(_mm256_and_si256(p, high), three);
        let digits = _mm256_or_si256(d_even, _mm256_slli_epi16::<8>(d_odd));
        (
            _mm256_sub_epi8(digits, _mm256_set1_epi8(1)),
            _mm256_set1_epi16(1),
        )
    }
}

pub(super) mod tq1_0 {
    super::super::common::codebook_entry_points!("TQ1_0", tq1_0, super::Tq1, 4);
}

pub(super) mod tq2_0 {
    super::super::common::codebook_entry_points!("TQ2_0", tq2_0, super::Tq2, 4);
}
