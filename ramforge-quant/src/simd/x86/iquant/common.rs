//! The driver every low-bit format shares ([`dot`] over a [`Codebook`]) and the tables and
//! bit spreads its formats build their quants from.

pub(super) use crate::simd::x86::kquant::common::{
    act_blocks, encodings, entry_points, f16_at, hsum256, load128, load256, u32_at, weight_blocks,
    PairSum, Q8K_BYTES, Q8K_QS,
};
use crate::simd::x86::prefetch::group_after_next;
use std::arch::x86_64::*;

/// A super-block format of 256 elements dotted with Q8_K, as eight chunks of 32. The
/// implementations are `#[inline(always)]` and only ever inlined into [`dot`]'s
/// `#[target_feature(enable = "avx2,fma,f16c")]` body, which is what makes their intrinsics
/// valid; they read within the block they are given.
pub(super) trait Codebook {
    /// Bytes of one block.
    const BYTES: usize;
    /// The block's float factor: its scale `d` times the format's constant, so that element j
    /// is `factor * chunk scale * quant` (e.g. IQ2_XXS's `d * (0.5 + ls) / 4` is
    /// `d / 8 * (2 ls + 1)`).
    unsafe fn factor(wb: *const u8) -> f32;
    /// Chunk `c` (elements `32c .. 32c + 32`) of block `wb`: its 32 quants as signed bytes in
    /// element order (at most 62 in magnitude), and its integer scales as i16 (every i16 of
    /// the low lane for elements `32c .. 32c + 16`, of the high lane for the rest).
    unsafe fn chunk(wb: *const u8, c: usize) -> (__m256i, __m256i);
}

/// `R` weight rows of `F` (back to back in `w`) dotted with `T` Q8_K activation rows:
/// `out[r][t]`. Per (row, token) the same steps whatever `R` and `T` are, so every entry
/// point returns bit for bit what the single-row, single-token call does.
///
/// Per chunk: `maddubs(|a|, sign(q, a))` (pairs of at most 2 * 128 * 62, no saturation),
/// `madd` with the scales into i32 (exact: at most 8 * 2 * 31 * 15872 per lane); per block
/// `acc = fma(factor * da, sum, acc)`. `madd` + `add` is `E`'s (one `vpdpwssd` with VNNI);
/// only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
pub(super) unsafe fn dot<F: Codebook, E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let nb = row / F::BYTES;
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for i in 0..nb {
        let wb = weight_blocks::<R>(w, row, F::BYTES, i);
        let (ab, da) = act_blocks(&a, i);
        if R > 1 {
            group_after_next::<_MM_HINT_T0>(w, i, nb);
        }
        let mut sumi = [[_mm256_setzero_si256(); T]; R];
        for c in 0..8 {
            let mut x = [_mm256_setzero_si256(); T];
            let mut mag = [_mm256_setzero_si256(); T];
            for t in 0..T {
                x[t] = load256(ab[t].add(Q8K_QS + 32 * c));
                mag[t] = _mm256_abs_epi8(x[t]);
            }
            for r in 0..R {
                let (q, sc) = F::chunk(wb[r], c);
                for t in 0..T {
                    let p = _mm256_maddubs_epi16(mag[t], _mm256_sign_epi8(q, x[t]));
                    sumi[r][t] = E::madd_add(sumi[r][t], p, sc);
                }
            }
        }
        for r in 0..R {
            let f = F::factor(wb[r]);
            for t in 0..T {
                acc[r][t] = _mm256_fmadd_ps(
                    _mm256_set1_ps(f * da[t]),
                    _mm256_cvtepi32_ps(sumi[r][t]),
                    acc[r][t],
                );
            }
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|t| hsum256(acc[r][t])))
}

/// Bytes of one block of a [`Codebook`] as [`unpack`] writes it: the block's factor (f32),
/// its correction `128 * sum q * sc` per i32 lane (see [`unpacked_dot`]), then per chunk the
/// 32 quants and the 16 i16 scales that `chunk` returns.
pub(super) const UNPACKED_BYTES: usize = UNPACKED_CHUNKS + 8 * 64;
/// Where an unpacked block's correction lanes start.
const UNPACKED_CORRECTION: usize = 4;
/// Where an unpacked block's chunks start.
const UNPACKED_CHUNKS: usize = UNPACKED_CORRECTION + 32;

/// Row `w` of `F` unpacked into `out` ([`UNPACKED_BYTES`] per block), so that a prefill
/// batch pays the grid lookups once per row instead of once per tile of tokens.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `w` is whole blocks of `F` and `out` is
/// `w.len() / F::BYTES * UNPACKED_BYTES` bytes.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn unpack<F: Codebook>(w: &[u8], out: &mut [u8]) {
    for (wb, ub) in w
        .chunks_exact(F::BYTES)
        .zip(out.chunks_exact_mut(UNPACKED_BYTES))
    {
        ub[..4].copy_from_slice(&F::factor(wb.as_ptr()).to_le_bytes());
        let mut correction = _mm256_setzero_si256();
        for c in 0..8 {
            let (q, sc) = F::chunk(wb.as_ptr(), c);
            let pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(-128), q);
            correction = _mm256_add_epi32(correction, _mm256_madd_epi16(pairs, sc));
            let p = ub.as_mut_ptr().add(UNPACKED_CHUNKS + 64 * c);
            _mm256_storeu_si256(p.cast::<__m256i>(), q);
            _mm256_storeu_si256(p.add(32).cast::<__m256i>(), sc);
        }
        let p = ub.as_mut_ptr().add(UNPACKED_CORRECTION);
        _mm256_storeu_si256(p.cast::<__m256i>(), correction);
    }
}

/// `R` rows unpacked by [`unpack`] (back to back in `w`) dotted with `T` Q8_K activation
/// rows: bit for bit what [`dot`] returns on the packed rows, by another route to the same
/// integer lanes. The activations offset to unsigned bytes (`x + 128`, once per token and
/// chunk for all rows) multiply the signed quants directly (`maddubs`: pairs at most
/// 2 * 255 * 62, no saturation), `madd` + `add` (`E`) the scales as in [`dot`], and the
/// block's stored `128 * sum q * sc` per lane comes off before the same float step. Only
/// inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
pub(super) unsafe fn unpacked_dot<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let nb = row / UNPACKED_BYTES;
    let offset = _mm256_set1_epi8(-128);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for i in 0..nb {
        let wb = weight_blocks::<R>(w, row, UNPACKED_BYTES, i);
        let (ab, da) = act_blocks(&a, i);
        let mut sumi = [[_mm256_setzero_si256(); T]; R];
        for c in 0..8 {
            let mut x = [_mm256_setzero_si256(); T];
            for t in 0..T {
                x[t] = _mm256_xor_si256(load256(ab[t].add(Q8K_QS + 32 * c)), offset);
            }
            for r in 0..R {
                let p = wb[r].add(UNPACKED_CHUNKS + 64 * c);
                let (q, sc) = (load256(p), load256(p.add(32)));
                for t in 0..T {
                    sumi[r][t] = E::madd_add(sumi[r][t], _mm256_maddubs_epi16(x[t], q), sc);
                }
            }
        }
        for r in 0..R {
            let f = f32::from_le_bytes(wb[r].cast::<[u8; 4]>().read_unaligned());
            let correction = load256(wb[r].add(UNPACKED_CORRECTION));
            for t in 0..T {
                acc[r][t] = _mm256_fmadd_ps(
                    _mm256_set1_ps(f * da[t]),
                    _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[r][t], correction)),
                    acc[r][t],
                );
            }
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|t| hsum256(acc[r][t])))
}

/// A grid of 8-wide rows as little-endian u64 words (byte l is value l), each value times
/// `mul`: one word per group of 8 quants.
pub(super) const fn rows8<const N: usize>(grid: &[[i8; 8]; N], mul: i8) -> [u64; N] {
    let mut out = [0u64; N];
    let mut i = 0;
    while i < N {
        let mut l = 0;
        while l < 8 {
            out[i] |= ((grid[i][l].wrapping_mul(mul) as u8) as u64) << (8 * l);
            l += 1;
        }
        i += 1;
    }
    out
}

/// A grid of 4-wide rows as little-endian u32 words.
pub(super) const fn rows4<const N: usize>(grid: &[[i8; 4]; N]) -> [u32; N] {
    let mut out = [0u32; N];
    let mut i = 0;
    while i < N {
        let mut l = 0;
        while l < 4 {
            out[i] |= (grid[i][l] as u8 as u32) << (8 * l);
            l += 1;
        }
        i += 1;
    }
    out
}

/// ggml's `ksigns` as ±1 bytes: for the 7-bit sign index `s`, byte l < 7 is -1 where bit l
/// is set, byte 7 is -1 where the count of set bits is odd (see `spec_support::ksign`).
pub(super) static KSIGNS: [u64; 128] = {
    let mut out = [0u64; 128];
    let mut s = 0;
    while s < 128 {
        let mut l = 0;
        while l < 8 {
            let minus = if l < 7 {
                (s >> l) & 1 == 1
            } else {
                (s as u32).count_ones() % 2 == 1
            };
            let byte: u8 = if minus { 0xFF } else { 0x01 };
            out[s] |= (byte as u64) << (8 * l);
            l += 1;
        }
        s += 1;
    }
    out
};

/// The four 7-bit sign indices of `aux` (bits 7l .. 7l + 7 for the group of 8 number l)
/// as 32 ±1 bytes, group l in bytes 8l .. 8l + 8.
#[inline(always)]
pub(super) unsafe fn ksigns4(aux: u32) -> __m256i {
    _mm256_set_epi64x(
        KSIGNS[((aux >> 21) & 127) as usize] as i64,
        KSIGNS[((aux >> 14) & 127) as usize] as i64,
        KSIGNS[((aux >> 7) & 127) as usize] as i64,
        KSIGNS[(aux & 127) as usize] as i64,
    )
}

/// 32 sign bits (bit j for element j) as ±1 bytes: -1 where the bit is set.
#[inline(always)]
pub(super) unsafe fn sign_bits(bits: u32) -> __m256i {
    let v = _mm256_set1_epi32(bits as i32);
    // Byte j takes byte j / 8 of the word, then its bit j % 8.
    let which = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, which), bit), bit);
    _mm256_or_si256(set, _mm256_set1_epi8(1))
}

/// Scale `lo` in every i16 of the low lane, `hi` in the high lane (two 16-element groups).
#[inline(always)]
pub(super) unsafe fn scales2(lo: i32, hi: i32) -> __m256i {
    _mm256_set_m128i(_mm_set1_epi16(hi as i16), _mm_set1_epi16(lo as i16))
}

/// The little-endian u16 at `p`.
#[inline(always)]
pub(super) unsafe fn u16_at(p: *const u8) -> u16 {
    u16::from_le_bytes(p.cast::<[u8; 2]>().read_unaligned())
}

/// The little-endian u64 at `p`.
#[inline(always)]
pub(super) unsafe fn u64_at(p: *const u8) -> u64 {
    u64::from_le_bytes(p.cast::<[u8; 8]>().read_unaligned())
}

/// The safe entry points of a format module (`vec_dot`, `rows`, `tile`, `PREFILL`) around
/// [`dot`] over the [`Codebook`] `$codebook`, whose generated format is `$format`; `rows`
/// runs as calls of `$group` rows (`vex N`: of N in the VEX table). One set per encoding
/// ([`encodings`]: `avx2`, `vex`, `evex`).
macro_rules! codebook_entry_points {
    ($name:literal, $format:ident, $codebook:ty, $group:literal $(, vex $vex_group:literal)?) => {
        use crate::formats::$format::BYTES;
        use crate::simd::x86::iquant::common::{
            encodings, entry_points, PairSum, Q8K_BYTES, UNPACKED_BYTES,
        };

        const _: () =
            assert!(<$codebook as crate::simd::x86::iquant::common::Codebook>::BYTES == BYTES);

        encodings!($name, $group $(, vex $vex_group)?, unpacked unpacked_dot);

        /// The shared dots over unpacked rows, for this format's encodings.
        #[inline(always)]
        unsafe fn unpacked_dot<E: PairSum, const R: usize, const T: usize>(
            w: &[u8],
            a: [&[u8]; T],
        ) -> [[f32; T]; R] {
            crate::simd::x86::iquant::common::unpacked_dot::<E, R, T>(w, a)
        }

        /// A row of this format unpacked for the prefill tile (`Tile::Unpacked`).
        fn unpack(w: &[u8], out: &mut [u8]) {
            assert!(w.len() % BYTES == 0 && out.len() == w.len() / BYTES * UNPACKED_BYTES);
            // SAFETY: reachable only through the kernel tables, handed out only when the CPU
            // has AVX2, FMA and F16C; the lengths are whole blocks.
            unsafe { crate::simd::x86::iquant::common::unpack::<$codebook>(w, out) }
        }

        /// The shared driver for this format; the callers' SAFETY notes apply.
        #[inline(always)]
        unsafe fn dot<E: PairSum, const R: usize, const T: usize>(
            w: &[u8],
            a: [&[u8]; T],
        ) -> [[f32; T]; R] {
            crate::simd::x86::iquant::common::dot::<$codebook, E, R, T>(w, a)
        }
    };
}
pub(super) use codebook_entry_points;
