//! Loads and reductions the super-block kernels share, and the Q8_K block layout they read.

use std::arch::x86_64::*;

/// Bytes of one Q8_K activation block: f32 `d`, 256 `qs`, 16 i16 `bsums`.
pub(super) const Q8K_BYTES: usize = 292;
/// Offset of the quants in a Q8_K block.
pub(super) const Q8K_QS: usize = 4;
/// Offset of the 16-element sums in a Q8_K block.
pub(super) const Q8K_BSUMS: usize = 260;

/// 32 unaligned bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load256(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p.cast::<__m256i>())
}

/// 16 unaligned bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn load128(p: *const u8) -> __m128i {
    _mm_loadu_si128(p.cast::<__m128i>())
}

/// The little-endian f16 at `p`, widened.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes(p.cast::<[u8; 2]>().read_unaligned());
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// The little-endian f32 at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f32_at(p: *const u8) -> f32 {
    f32::from_le_bytes(p.cast::<[u8; 4]>().read_unaligned())
}

/// The little-endian u32 at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn u32_at(p: *const u8) -> u32 {
    u32::from_le_bytes(p.cast::<[u8; 4]>().read_unaligned())
}

/// Sum of the 4 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum128(v: __m128) -> f32 {
    let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    let v = _mm_add_ss(v, _mm_movehdup_ps(v));
    _mm_cvtss_f32(v)
}

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum256(v: __m256) -> f32 {
    hsum128(_mm_add_ps(
        _mm256_castps256_ps128(v),
        _mm256_extractf128_ps::<1>(v),
    ))
}

/// The 16 bsums of a Q8_K block as i16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bsums(ab: *const u8) -> __m256i {
    load256(ab.add(Q8K_BSUMS))
}

/// For the formats with 16 groups of 16: `sc16` holds the 16 group scales as i16
/// (groups 0-7 in the low lane, 8-15 in the high). Returns, for half `h` of the block and its
/// 32-element chunk `k`, the scale of group `8h + 2k` in every i16 of the low lane and that of
/// group `8h + 2k + 1` in the high lane: the two groups a 32-byte chunk of quants covers.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn chunk_scales(half_scales: __m256i, k: usize) -> __m256i {
    // Lane 0 picks i16 number 2k, lane 1 number 2k + 1 (bytes 4k, 4k+1 / 4k+2, 4k+3).
    let lo = (4 * k) as i8;
    let hi = (4 * k + 2) as i8;
    let ctrl = _mm256_setr_epi8(
        lo,
        lo + 1,
        lo,
        lo + 1,
        lo,
        lo + 1,
        lo,
        lo + 1,
        lo,
        lo + 1,
        lo,
        lo + 1,
        lo,
        lo + 1,
        lo,
        lo + 1,
        hi,
        hi + 1,
        hi,
        hi + 1,
        hi,
        hi + 1,
        hi,
        hi + 1,
        hi,
        hi + 1,
        hi,
        hi + 1,
        hi,
        hi + 1,
        hi,
        hi + 1,
    );
    _mm256_shuffle_epi8(half_scales, ctrl)
}

/// The scales of half `h` (`sc16`'s low lane for 0, high for 1) in both lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn half_scales(sc16: __m256i, h: usize) -> __m256i {
    if h == 0 {
        _mm256_permute2x128_si256::<0x00>(sc16, sc16)
    } else {
        _mm256_permute2x128_si256::<0x11>(sc16, sc16)
    }
}

/// Copies i16 number `k` of each lane of `v` to every i16 of that lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bcast16(v: __m256i, k: usize) -> __m256i {
    let ctrl = (((2 * k + 1) << 8) | (2 * k)) as i16;
    _mm256_shuffle_epi8(v, _mm256_set1_epi16(ctrl))
}

/// The Q8_K blocks number `i` of `T` activation rows: pointers to their starts and their
/// scales `d`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn act_blocks<const T: usize>(
    a: &[&[u8]; T],
    i: usize,
) -> ([*const u8; T], [f32; T]) {
    let ptrs: [*const u8; T] = std::array::from_fn(|t| a[t].as_ptr().add(i * Q8K_BYTES));
    let ds = std::array::from_fn(|t| f32_at(ptrs[t]));
    (ptrs, ds)
}

/// The safe entry points of a super-block format's kernel module, around its
/// `dot_rows::<T>` and its block size `BYTES`: `vec_dot` (one token), `tile` ([`TILE`]
/// tokens, each weight block unpacked once) and the length check both make first.
///
/// [`TILE`]: crate::kernels::TILE
macro_rules! entry_points {
    ($format:literal) => {
        #[doc = concat!("The dot of a row of ", $format, " blocks with a row of Q8_K blocks.")]
        pub(super) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
            check(w, a);
            // SAFETY: reachable only through the AVX2 kernel table, handed out only when the
            // CPU has AVX2, FMA and F16C; `check` has confirmed whole, matching blocks.
            unsafe { dot_rows::<1>(w, [a])[0] }
        }

        #[doc = concat!("One row of ", $format, " blocks dotted with 4 tokens' Q8_K rows, each weight block unpacked once.")]
        pub(super) fn tile(
            w: &[u8],
            a: [&[u8]; crate::kernels::TILE],
        ) -> [f32; crate::kernels::TILE] {
            for a in a {
                check(w, a);
            }
            // SAFETY: as in `vec_dot`.
            unsafe { dot_rows(w, a) }
        }

        fn check(w: &[u8], a: &[u8]) {
            assert!(w.len() % BYTES == 0 && a.len() == w.len() / BYTES * Q8K_BYTES);
        }
    };
}
pub(super) use entry_points;
