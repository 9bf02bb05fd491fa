//! IQ4_XS x Q8_K: nibbles become IQ4_NL's signed levels through a byte shuffle, are dotted
//! with the int8 activations by `maddubs` (the levels' signs moved onto the activations), and
//! scaled per 32-element group by the signed 6-bit scales.

use super::common::*;
use crate::formats::iq4_xs::KVALUES;
use std::arch::x86_64::*;

const BYTES: usize = 136;

entry_points!("IQ4_XS");

/// The 8 signed group scales as i16, in both lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales(wb: *const u8) -> __m256i {
    let high = u16::from_le_bytes(wb.add(2).cast::<[u8; 2]>().read_unaligned());
    let low = u32_at(wb.add(4));
    let low = _mm256_srlv_epi32(
        _mm256_set1_epi32(low as i32),
        _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28),
    );
    let high = _mm256_srlv_epi32(
        _mm256_set1_epi32(high as i32),
        _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14),
    );
    let ls = _mm256_or_si256(
        _mm256_and_si256(low, _mm256_set1_epi32(0xF)),
        _mm256_slli_epi32::<4>(_mm256_and_si256(high, _mm256_set1_epi32(3))),
    );
    let sc = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
    // [s0..3 s0..3 | s4..7 s4..7] -> [s0..7 | s0..7]
    _mm256_permute4x64_epi64::<0b10_00_10_00>(_mm256_packs_epi32(sc, sc))
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn dot_rows<const T: usize>(w: &[u8], a: [&[u8]; T]) -> [f32; T] {
    let m4 = _mm256_set1_epi8(0x0F);
    let table = KVALUES;
    let levels = _mm256_broadcastsi128_si256(load128(table.as_ptr().cast::<u8>()));
    let mut acc = [_mm256_setzero_ps(); T];
    for i in 0..w.len() / BYTES {
        let wb = w.as_ptr().add(i * BYTES);
        let (ab, da) = act_blocks(&a, i);
        let d = f16_at(wb);
        let sc = scales(wb);
        let mut sumi = [_mm256_setzero_si256(); T];
        for p in 0..4 {
            // Groups 2p, 2p+1 in the two lanes; each lane's low nibbles are its group's
            // elements 0..16, the high nibbles 16..32.
            let q = load256(wb.add(8 + 32 * p));
            let lo = _mm256_shuffle_epi8(levels, _mm256_and_si256(q, m4));
            let hi = _mm256_shuffle_epi8(levels, _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4));
            let groups = [
                _mm256_permute2x128_si256::<0x20>(lo, hi),
                _mm256_permute2x128_si256::<0x31>(lo, hi),
            ];
            for (k, &g) in groups.iter().enumerate() {
                let mag = _mm256_sign_epi8(g, g);
                let s = bcast16(sc, 2 * p + k);
                for t in 0..T {
                    let qa = load256(ab[t].add(Q8K_QS + 64 * p + 32 * k));
                    let prod = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(qa, g));
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(s, prod));
                }
            }
        }
        for t in 0..T {
            acc[t] = _mm256_fmadd_ps(
                _mm256_set1_ps(d * da[t]),
                _mm256_cvtepi32_ps(sumi[t]),
                acc[t],
            );
        }
    }
    std::array::from_fn(|t| hsum256(acc[t]))
}
