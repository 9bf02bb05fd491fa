//! TQ2_0 and TQ1_0: ternary quants, one f16 scale per block, given to the driver as digits
//! `q + 1` (`Codebook::DIGITS`). TQ2_0 stores them in bit pairs; TQ1_0 five base-3 digits per
//! byte as a fixed-point fraction of 3^5, digit n read as `(byte * 3^n mod 256) * 3 >> 8`
//! (`spec_support::trit`), the products by powers of 3 made once per block with byte adds and
//! the `* 3 >> 8` with two byte comparisons.

use super::common::*;
use crate::formats;
use std::arch::x86_64::*;

/// TQ2_0: chunk `4h + n` is bit pair n of the 32 bytes of half h, the digit `q + 1`.
pub(super) struct Tq2;
impl Codebook for Tq2 {
    const BYTES: usize = formats::tq2_0::BYTES;
    const DIGITS: bool = true;
    type Prepared = ();
    #[inline(always)]
    unsafe fn prepare(_wb: *const u8) {}
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::tq2_0::OFFSET_D))
    }
    #[inline(always)]
    unsafe fn chunk<N: Negate>(wb: *const u8, _p: &(), c: usize) -> (__m256i, __m256i) {
        let v = load256(wb.add(formats::tq2_0::OFFSET_QS + 32 * (c / 4)));
        let shift = _mm_cvtsi32_si128(2 * (c % 4) as i32);
        let q = _mm256_and_si256(_mm256_srl_epi16(v, shift), _mm256_set1_epi8(3));
        (q, _mm256_set1_epi16(1))
    }
}

/// `v * 3` per byte, mod 256.
#[inline(always)]
unsafe fn times3(v: __m256i) -> __m256i {
    _mm256_add_epi8(v, _mm256_add_epi8(v, v))
}

/// `v * 9` per byte, mod 256 (`8 v + v`, the shift's carries into the next byte masked off).
#[inline(always)]
unsafe fn times9(v: __m256i) -> __m256i {
    let eight = _mm256_and_si256(_mm256_slli_epi16::<3>(v), _mm256_set1_epi8(-8));
    _mm256_add_epi8(eight, v)
}

/// TQ1_0's bytes of each chunk, each times the power of 3 that brings the chunk's digit to
/// the top: digit n of byte b is `(b * 3^n mod 256) * 3 >> 8` (`spec_support::trit`).
#[derive(Clone, Copy)]
pub(super) struct Tq1Prepared([__m256i; 8]);

impl Default for Tq1Prepared {
    fn default() -> Self {
        // SAFETY: an all-zero bit pattern is a valid `__m256i`.
        Tq1Prepared(unsafe { std::mem::zeroed() })
    }
}

/// TQ1_0: chunk c < 5 is digit c of `qs[0..32]`; chunks 5 and 6 digits 0, 1 and 2, 3 of
/// `qs[32..48]` (16 elements each); chunk 7 digit 4 of `qs[32..48]`, then digits 0..4 of
/// `qh[0..4]` (4 elements each).
pub(super) struct Tq1;
impl Codebook for Tq1 {
    const BYTES: usize = formats::tq1_0::BYTES;
    const DIGITS: bool = true;
    type Prepared = Tq1Prepared;
    #[inline(always)]
    unsafe fn prepare(wb: *const u8) -> Tq1Prepared {
        let qs = wb.add(formats::tq1_0::OFFSET_QS);
        let b = load256(qs);
        let (b3, b9) = (times3(b), times9(b));
        // `qs[32..48]` in the low lane, `qh[0..4]` four times in the high lane.
        let z = _mm256_set_m128i(
            _mm_set1_epi32(u32_at(wb.add(formats::tq1_0::OFFSET_QH)) as i32),
            load128(qs.add(32)),
        );
        let (z3, z9) = (times3(z), times9(z));
        let (z27, z81) = (times9(z3), times9(z9));
        // Chunk 7: digit 4 of `qs[32..48]`, then dword n of the high lane digit n of `qh`.
        let last = _mm256_blend_epi32::<0b1000_0000>(
            _mm256_blend_epi32::<0b0100_0000>(
                _mm256_blend_epi32::<0b0010_0000>(_mm256_blend_epi32::<0b1111_0000>(z81, z), z3),
                z9,
            ),
            z27,
        );
        Tq1Prepared([
            b,
            b3,
            b9,
            times9(b3),
            times9(b9),
            _mm256_permute2x128_si256::<0x20>(z, z3),
            _mm256_permute2x128_si256::<0x20>(z9, z27),
            last,
        ])
    }
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::tq1_0::OFFSET_D))
    }
    #[inline(always)]
    unsafe fn chunk<N: Negate>(_wb: *const u8, p: &Tq1Prepared, c: usize) -> (__m256i, __m256i) {
        // `p * 3 >> 8` per byte is 0 up to 85, 1 up to 170, 2 above: two comparisons (signed,
        // on `p - 128`), each -1 where true, subtracted from 0. No shifts: Zen 1 has one
        // vector shift pipe.
        let v = _mm256_xor_si256(p.0[c], _mm256_set1_epi8(-128));
        let above_85 = _mm256_cmpgt_epi8(v, _mm256_set1_epi8((85 ^ 0x80) as u8 as i8));
        let above_170 = _mm256_cmpgt_epi8(v, _mm256_set1_epi8((170 ^ 0x80) as u8 as i8));
        let q = _mm256_sub_epi8(_mm256_sub_epi8(_mm256_setzero_si256(), above_85), above_170);
        (q, _mm256_set1_epi16(1))
    }
}

// One row a decode call: a row's prepared form is eight vectors, which for more rows at once
// no longer fit the registers.
pub(super) mod tq1_0 {
    super::super::common::codebook_entry_points!("TQ1_0", tq1_0, super::Tq1, 1);
}

pub(super) mod tq2_0 {
    super::super::common::codebook_entry_points!("TQ2_0", tq2_0, super::Tq2, 4);
}
