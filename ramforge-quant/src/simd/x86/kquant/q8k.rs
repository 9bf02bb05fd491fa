//! The Q8_K activation quantizer: bit-identical to the generated reference (ggml's
//! `quantize_row_q8_K_ref`). In a block of finite values the products `iscale * x` lie within
//! about 127 of zero, where `round` to nearest-even and the pack to bytes are exact, so the
//! vector path equals the scalar one; blocks with NaN or infinities, and blocks whose
//! `iscale` overflows, take the reference itself.

use super::common::{Q8K_BSUMS, Q8K_BYTES, Q8K_D, Q8K_QS};
use crate::formats::q8_k;
use std::arch::x86_64::*;

/// Quantizes whole blocks: `src.len() / BLOCK * BYTES == dst.len()`.
pub(super) fn quantize_row(src: &[f32], dst: &mut [u8]) {
    debug_assert_eq!(src.len() / q8_k::BLOCK * Q8K_BYTES, dst.len());
    for (x, out) in src
        .chunks_exact(q8_k::BLOCK)
        .zip(dst.chunks_exact_mut(Q8K_BYTES))
    {
        // SAFETY: this function is only reachable through the AVX2 kernel table, which is
        // only handed out when the CPU has AVX2, FMA and F16C; `x` and `out` are one whole
        // block each.
        unsafe { quantize_block(x, out) }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quantize_block(x: &[f32], out: &mut [u8]) {
    assert!(x.len() == q8_k::BLOCK && out.len() == Q8K_BYTES);
    let p = x.as_ptr();
    let sign = _mm256_set1_ps(-0.0);
    let largest = _mm256_set1_ps(f32::MAX);
    let mut amax = _mm256_setzero_ps();
    let mut finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    for i in 0..32 {
        let v = _mm256_andnot_ps(sign, _mm256_loadu_ps(p.add(8 * i)));
        amax = _mm256_max_ps(v, amax);
        // False for NaN (ordered compare) and for infinities.
        finite = _mm256_and_ps(finite, _mm256_cmp_ps::<_CMP_LE_OQ>(v, largest));
    }
    if _mm256_movemask_ps(finite) != 0xFF {
        return reference(x, out);
    }
    let m = _mm_max_ps(
        _mm256_castps256_ps128(amax),
        _mm256_extractf128_ps::<1>(amax),
    );
    let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    let m = _mm_max_ss(m, _mm_movehdup_ps(m));
    let amax = _mm_cvtss_f32(m);
    if amax == 0.0 {
        // The reference leaves d, qs and bsums at zero.
        out.fill(0);
        return;
    }
    // The signed value of the first element of largest magnitude, as the reference picks it.
    let target = _mm256_set1_ps(amax);
    let mut max = amax;
    for i in 0..32 {
        let v = _mm256_andnot_ps(sign, _mm256_loadu_ps(p.add(8 * i)));
        let hits = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(v, target));
        if hits != 0 {
            max = x[8 * i + hits.trailing_zeros() as usize];
            break;
        }
    }
    let iscale = -127.0 / max;
    if !iscale.is_finite() {
        return reference(x, out);
    }
    let scale = _mm256_set1_ps(iscale);
    let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    let bias = _mm256_set1_epi8(-128);
    for c in 0..8 {
        let q: [__m256i; 4] = std::array::from_fn(|k| {
            let v = _mm256_mul_ps(scale, _mm256_loadu_ps(p.add(32 * c + 8 * k)));
            let r = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v);
            _mm256_cvtps_epi32(r)
        });
        // Saturating packs: values are within -127..=127 already, and the reference's
        // `min(127)` agrees with the saturation at the top.
        let q01 = _mm256_packs_epi32(q[0], q[1]);
        let q23 = _mm256_packs_epi32(q[2], q[3]);
        let bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q01, q23), order);
        let dst = out[Q8K_QS + 32 * c..Q8K_QS + 32 * c + 32].as_mut_ptr();
        _mm256_storeu_si256(dst.cast::<__m256i>(), bytes);
        // Sums of 16: sum of (q + 128) over 8 bytes per u64 lane, less 16 * 128 per pair.
        let sad = _mm256_sad_epu8(_mm256_xor_si256(bytes, bias), _mm256_setzero_si256());
        let s0 = (_mm256_extract_epi64::<0>(sad) + _mm256_extract_epi64::<1>(sad)) as i16 - 2048;
        let s1 = (_mm256_extract_epi64::<2>(sad) + _mm256_extract_epi64::<3>(sad)) as i16 - 2048;
        out[Q8K_BSUMS + 4 * c..Q8K_BSUMS + 4 * c + 2].copy_from_slice(&s0.to_le_bytes());
        out[Q8K_BSUMS + 4 * c + 2..Q8K_BSUMS + 4 * c + 4].copy_from_slice(&s1.to_le_bytes());
    }
    out[Q8K_D..Q8K_D + 4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
}

/// The generated reference for one block.
fn reference(x: &[f32], out: &mut [u8]) {
    q8_k::quantize_block(x, &mut q8_k::blocks_mut(out)[0]);
}
