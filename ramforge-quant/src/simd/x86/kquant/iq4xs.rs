//! IQ4_XS x Q8_K: nibbles become IQ4_NL's signed levels through a byte shuffle, are dotted
//! with the int8 activations by `maddubs` (the activations' magnitudes against the levels
//! carrying the activations' signs: the magnitudes are shared by every weight row of a
//! `rows` call, and an activation of -128 still multiplies exactly), and scaled per
//! 32-element group by the signed 6-bit scales. The prefill tile reads rows unpacked once
//! (levels resolved, scales spread) and activations arranged so that each of its vectors is
//! one plain load; every kernel gives the same integers per lane and the same float steps,
//! so the same bits.

use super::common::*;
use crate::formats::iq4_xs::{
    BYTES, KVALUES, OFFSET_D, OFFSET_QS, OFFSET_SCALES_H, OFFSET_SCALES_L,
};
use crate::simd::x86::prefetch::group_after_next;
use std::arch::x86_64::*;

encodings!("IQ4_XS", 2, vex 8, unpacked unpacked_dot);

/// The 8 signed group scales as i16, in both lanes. The 4 low bits of each sit in
/// `scales_l`'s nibbles, the 2 high bits in `scales_h`'s bit pairs: both are spread to one
/// byte per group with integer shifts and masks (which run beside the vector work).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales(wb: *const u8) -> __m256i {
    let high =
        u16::from_le_bytes(wb.add(OFFSET_SCALES_H).cast::<[u8; 2]>().read_unaligned()) as u64;
    let low = u32_at(wb.add(OFFSET_SCALES_L)) as u64;
    // Nibble j of `low` to byte j.
    let mut lo = low;
    lo = (lo | (lo << 16)) & 0x0000_FFFF_0000_FFFF;
    lo = (lo | (lo << 8)) & 0x00FF_00FF_00FF_00FF;
    lo = (lo | (lo << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    // Bit pair j of `high` to byte j.
    let mut hi = high;
    hi = (hi | (hi << 24)) & 0x0000_00FF_0000_00FF;
    hi = (hi | (hi << 12)) & 0x000F_000F_000F_000F;
    hi = (hi | (hi << 6)) & 0x0303_0303_0303_0303;
    let stored = _mm_cvtsi64_si128((lo | (hi << 4)) as i64);
    let sc = _mm_cvtepi8_epi16(_mm_sub_epi8(stored, _mm_set1_epi8(32)));
    _mm256_broadcastsi128_si256(sc)
}

/// `R` rows by `T` tokens; only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
unsafe fn dot<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let m4 = _mm256_set1_epi8(0x0F);
    let levels = _mm256_broadcastsi128_si256(load128(KVALUES.as_ptr().cast::<u8>()));
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for i in 0..row / BYTES {
        let wb = weight_blocks::<R>(w, row, BYTES, i);
        let (ab, da) = act_blocks(&a, i);
        let sc: [__m256i; R] = std::array::from_fn(|r| scales(wb[r]));
        if R > 1 {
            group_after_next::<_MM_HINT_T0>(w, i, row / BYTES);
        }
        let mut sumi = [[_mm256_setzero_si256(); T]; R];
        for p in 0..4 {
            // 32 bytes of quants hold groups 2p, 2p + 1 in the two lanes, each lane's low
            // nibbles its group's elements 0..16, the high nibbles 16..32: the activations are
            // split the same way (`x[t][0]` for the low nibbles, `x[t][1]` the high), and their
            // magnitudes (`mag`) multiply the levels carrying the activations' signs.
            // Loaded by 16-byte halves: a lane-crossing permute is dear on Zen 1.
            let x: [[__m256i; 2]; T] = std::array::from_fn(|t| {
                let a = ab[t].add(Q8K_QS + 64 * p);
                [
                    _mm256_loadu2_m128i(a.add(32).cast(), a.cast()),
                    _mm256_loadu2_m128i(a.add(48).cast(), a.add(16).cast()),
                ]
            });
            let mag: [[__m256i; 2]; T] =
                std::array::from_fn(|t| [_mm256_abs_epi8(x[t][0]), _mm256_abs_epi8(x[t][1])]);
            for r in 0..R {
                let q = load256(wb[r].add(OFFSET_QS + 32 * p));
                let lo = _mm256_shuffle_epi8(levels, _mm256_and_si256(q, m4));
                let hi =
                    _mm256_shuffle_epi8(levels, _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4));
                let s = chunk_scales(sc[r], p);
                for t in 0..T {
                    let p_lo = _mm256_maddubs_epi16(mag[t][0], _mm256_sign_epi8(lo, x[t][0]));
                    let p_hi = _mm256_maddubs_epi16(mag[t][1], _mm256_sign_epi8(hi, x[t][1]));
                    sumi[r][t] = E::madd_add(E::madd_add(sumi[r][t], s, p_lo), s, p_hi);
                }
            }
        }
        for r in 0..R {
            let d = f16_at(wb[r].add(OFFSET_D));
            for t in 0..T {
                acc[r][t] = _mm256_fmadd_ps(
                    _mm256_set1_ps(d * da[t]),
                    _mm256_cvtepi32_ps(sumi[r][t]),
                    acc[r][t],
                );
            }
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|t| hsum256(acc[r][t])))
}

/// Bytes of an IQ4_XS block as [`unpack`] writes it for the prefill tile: f32 `d`, zeros,
/// each chunk pair's scales as [`dot`] spreads them (four vectors: group `2p`'s scale in
/// every i16 of the low lane, `2p + 1`'s in the high), then each chunk pair's levels as
/// [`dot`] builds them (signed bytes: the low nibbles' vector, then the high nibbles').
pub(super) const UNPACKED_BYTES: usize = 416;
const U_D: usize = 0;
const U_SCALES: usize = 32;
const U_LEVELS: usize = 160;

/// A row of IQ4_XS blocks unpacked for the prefill tile (see [`UNPACKED_BYTES`]).
fn unpack(w: &[u8], out: &mut [u8]) {
    assert!(w.len().is_multiple_of(BYTES) && out.len() == w.len() / BYTES * UNPACKED_BYTES);
    // SAFETY: reachable only through the kernel tables, handed out only when the CPU has
    // AVX2, FMA and F16C; the lengths are whole blocks.
    unsafe { unpack_blocks(w, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack_blocks(w: &[u8], out: &mut [u8]) {
    let m4 = _mm256_set1_epi8(0x0F);
    let levels = _mm256_broadcastsi128_si256(load128(KVALUES.as_ptr().cast::<u8>()));
    for (wb, ub) in w
        .chunks_exact(BYTES)
        .zip(out.chunks_exact_mut(UNPACKED_BYTES))
    {
        let (wp, up) = (wb.as_ptr(), ub.as_mut_ptr());
        up.add(U_D)
            .cast::<f32>()
            .write_unaligned(f16_at(wp.add(OFFSET_D)));
        up.add(U_D + 4).write_bytes(0, U_SCALES - 4);
        let sc = scales(wp);
        for p in 0..4 {
            _mm256_storeu_si256(up.add(U_SCALES + 32 * p).cast(), chunk_scales(sc, p));
            let q = load256(wp.add(OFFSET_QS + 32 * p));
            let lo = _mm256_shuffle_epi8(levels, _mm256_and_si256(q, m4));
            let hi = _mm256_shuffle_epi8(levels, _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4));
            _mm256_storeu_si256(up.add(U_LEVELS + 64 * p).cast(), lo);
            _mm256_storeu_si256(up.add(U_LEVELS + 64 * p + 32).cast(), hi);
        }
    }
}

/// A Q8_K activation row as the tile reads it, planar ([`planar_at`]): in each 64 elements
/// `64p ..`, the vectors [`dot`] assembles from 16-byte halves (elements `0..16` and
/// `32..48`, then `16..32` and `48..64`) stored whole; `d` and bsums as they were.
fn arrange_activations(a: &[u8], out: &mut [u8]) {
    assert!(a.len().is_multiple_of(Q8K_BYTES) && out.len() == a.len());
    // SAFETY: as in `unpack`; the lengths are whole Q8_K blocks.
    unsafe { arrange_activation_blocks(a, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn arrange_activation_blocks(a: &[u8], out: &mut [u8]) {
    let nb = a.len() / Q8K_BYTES;
    let op = out.as_mut_ptr();
    for (i, ab) in a.chunks_exact(Q8K_BYTES).enumerate() {
        let ap = ab.as_ptr();
        let qs = planar_block(op, nb, i, ap, bsums(ap));
        for p in 0..4 {
            let v0 = load256(ap.add(Q8K_QS + 64 * p));
            let v1 = load256(ap.add(Q8K_QS + 64 * p + 32));
            _mm256_storeu_si256(
                op.add(qs + 64 * p).cast(),
                _mm256_permute2x128_si256::<0x20>(v0, v1),
            );
            _mm256_storeu_si256(
                op.add(qs + 64 * p + 32).cast(),
                _mm256_permute2x128_si256::<0x31>(v0, v1),
            );
        }
    }
}

/// How the driver turns an activation row into what [`unpacked_dot`] reads.
pub(super) const ARRANGE: Option<crate::kernel_table::Arrange> = Some(arrange_activations);

/// `R` rows [`unpack`]ed (back to back in `u`) dotted with `T` activation rows [`ARRANGE`]
/// made: per (row, token) [`dot`]'s integers in [`dot`]'s lanes and its float steps, so its
/// bits; the levels and scales are loads instead of shuffles. Rows run one at a time (two at
/// once spill: each (row, token) keeps an 8-lane float accumulator besides its integers);
/// only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
unsafe fn unpacked_dot<E: PairSum, const R: usize, const T: usize>(
    u: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    let row = u.len() / R;
    let planar = Planar::new(&a);
    let mut out = [[0f32; T]; R];
    for (r, out) in out.iter_mut().enumerate() {
        let mut acc = [_mm256_setzero_ps(); T];
        for i in 0..row / UNPACKED_BYTES {
            let ub = u.as_ptr().add(r * row + i * UNPACKED_BYTES);
            let (xq, da, _) = planar.block(i);
            let mut sumi = [_mm256_setzero_si256(); T];
            for p in 0..4 {
                let lo = load256(ub.add(U_LEVELS + 64 * p));
                let hi = load256(ub.add(U_LEVELS + 64 * p + 32));
                let s = load256(ub.add(U_SCALES + 32 * p));
                for t in 0..T {
                    let x0 = load256(xq[t].add(64 * p));
                    let x1 = load256(xq[t].add(64 * p + 32));
                    let p_lo = _mm256_maddubs_epi16(_mm256_abs_epi8(x0), _mm256_sign_epi8(lo, x0));
                    let p_hi = _mm256_maddubs_epi16(_mm256_abs_epi8(x1), _mm256_sign_epi8(hi, x1));
                    sumi[t] = E::madd_add(E::madd_add(sumi[t], s, p_lo), s, p_hi);
                }
            }
            add_block(&mut acc, f32_at(ub.add(U_D)), &da, &sumi);
        }
        // A loop, not `array::from_fn`: a closure's call would not inline.
        for t in 0..T {
            out[t] = hsum256(acc[t]);
        }
    }
    out
}
