//! NVFP4 x Q8_0: 64 E2M1 values in four groups of 16, each with an unsigned E4M3 scale byte,
//! dotted with two Q8_0 blocks. Per Q8_0 block, its two groups' nibbles go to the two lanes
//! of one vector (a byte shuffle turns them into the doubled E2M1 levels), are dotted by
//! `maddubs` (the activations' magnitudes with the levels carrying their signs, so -128
//! multiplies exactly) and reduced to i32 per lane; each lane then takes
//! `fma(scale * da, sum, acc)` with its group's scale (from a table of all 256 bytes).
//! One `dot::<R, T>` is `vec_dot`, the prefill tile and the decode `rows` kernel, which agree
//! bit for bit.

use super::common::{f16_at, hsum256, load128, load256, weight_blocks};
use crate::formats::{nvfp4, q8_0};
use crate::simd::x86::prefetch::group_after_next;
use std::arch::x86_64::*;

const BYTES: usize = nvfp4::BYTES;
/// Bytes of one Q8_0 activation block.
const Q8_BYTES: usize = q8_0::BYTES;
const _: () = assert!(nvfp4::BLOCK == 2 * q8_0::BLOCK && nvfp4::GROUP == 16);

/// `spec_support::ue4m3_half` of every byte: `(1 + m / 8) * 2^(e - 8)` with e the 4-bit
/// exponent and m the 3-bit mantissa, `m * 2^-10` for e = 0, and 0 for the bytes 0 and 0x7F.
pub(super) static UE4M3_HALF: [f32; 256] = {
    let mut t = [0f32; 256];
    let mut x = 0;
    while x < 256 {
        let (exp, man) = ((x >> 3) & 0xF, x & 7);
        t[x] = if x == 0 || x == 0x7F {
            0.0
        } else if exp == 0 {
            man as f32 * (1.0 / 1024.0)
        } else {
            f32::from_bits((((exp + 119) << 23) | (man << 20)) as u32)
        };
        x += 1;
    }
    t
};

/// `R` NVFP4 rows (back to back in `w`) dotted with `T` Q8_0 rows: `out[r][t]`, the same
/// steps for every (row, token) pair.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot<const R: usize, const T: usize>(w: &[u8], a: [&[u8]; T]) -> [[f32; T]; R] {
    let row = w.len() / R;
    let nb = row / BYTES;
    let levels = _mm256_broadcastsi128_si256(load128(nvfp4::KVALUES.as_ptr().cast()));
    let m4 = _mm_set1_epi8(0x0F);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for i in 0..nb {
        let wb = weight_blocks::<R>(w, row, BYTES, i);
        if R > 1 {
            group_after_next::<_MM_HINT_T0>(w, i, nb);
        }
        for k in 0..2 {
            let mut x = [_mm256_setzero_si256(); T];
            let mut mag = [_mm256_setzero_si256(); T];
            let mut da = [0f32; T];
            for t in 0..T {
                let ab = a[t].as_ptr().add((2 * i + k) * Q8_BYTES);
                x[t] = load256(ab.add(q8_0::OFFSET_QS));
                mag[t] = _mm256_abs_epi8(x[t]);
                da[t] = f16_at(ab.add(q8_0::OFFSET_D));
            }
            for r in 0..R {
                // Groups 2k and 2k + 1: bytes 8 of each, low nibbles elements 0..8 of the
                // group, high nibbles 8..16.
                let v = load128(wb[r].add(nvfp4::OFFSET_QS + 16 * k));
                let lo = _mm_and_si128(v, m4);
                let hi = _mm_and_si128(_mm_srli_epi16::<4>(v), m4);
                let idx = _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi));
                let q = _mm256_shuffle_epi8(levels, idx);
                let d = wb[r].add(nvfp4::OFFSET_D + 2 * k);
                let s = _mm256_set_m128(
                    _mm_set1_ps(UE4M3_HALF[*d.add(1) as usize]),
                    _mm_set1_ps(UE4M3_HALF[*d as usize]),
                );
                for t in 0..T {
                    // Pairs of at most 2 * 128 * 12: no saturation.
                    let p = _mm256_maddubs_epi16(mag[t], _mm256_sign_epi8(q, x[t]));
                    let sum = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                    acc[r][t] =
                        _mm256_fmadd_ps(_mm256_mul_ps(s, _mm256_set1_ps(da[t])), sum, acc[r][t]);
                }
            }
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|t| hsum256(acc[r][t])))
}

fn check(w: &[u8], a: &[u8]) {
    assert!(w.len().is_multiple_of(BYTES) && a.len() == w.len() / BYTES * 2 * Q8_BYTES);
}

/// The dot of a row of NVFP4 blocks with a row of Q8_0 blocks.
pub(super) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
    check(w, a);
    // SAFETY: reachable only through the AVX2 kernel table, handed out only when the CPU has
    // AVX2, FMA and F16C; `check` has confirmed whole, matching blocks.
    unsafe { dot::<1, 1>(w, [a])[0][0] }
}

/// 8 rows of NVFP4 blocks, back to back, dotted with one token's Q8_0 row (as 2 calls of 4
/// rows, each activation block loaded once for them).
pub(super) fn rows(w: &[u8], a: &[u8]) -> [f32; crate::kernel_table::ROWS] {
    const ROWS: usize = crate::kernel_table::ROWS;
    const GROUP: usize = 4;
    assert!(w.len().is_multiple_of(ROWS));
    let row = w.len() / ROWS;
    check(&w[..row], a);
    let mut out = [0f32; ROWS];
    for (g, part) in w.chunks_exact(GROUP * row).enumerate() {
        // SAFETY: as in `vec_dot`; `part` is `GROUP` rows of the checked length.
        let got = unsafe { dot::<GROUP, 1>(part, [a]) };
        for (k, v) in got.into_iter().enumerate() {
            out[g * GROUP + k] = v[0];
        }
    }
    out
}

/// One row of NVFP4 blocks dotted with 4 tokens' Q8_0 rows, each weight block unpacked once.
fn tile(w: &[u8], a: [&[u8]; crate::kernel_table::TILE]) -> [f32; crate::kernel_table::TILE] {
    for a in a {
        check(w, a);
    }
    // SAFETY: as in `vec_dot`.
    unsafe { dot::<1, { crate::kernel_table::TILE }>(w, a)[0] }
}

/// The prefill kernel the kernel table registers.
pub(super) const PREFILL: crate::kernel_table::Tile = crate::kernel_table::Tile::Quant(tile);
