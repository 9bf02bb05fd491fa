//! Dots of the 32-element weight formats with their Q8_0 / Q8_1 activation blocks: one row
//! (`vec_dot`) and one row with [`TILE`] tokens (`tile`, the prefill GEMM kernel).
//!
//! The scheme of ggml's AVX2 path: weights unpacked to 32 bytes, multiplied with `maddubs`
//! (unsigned x signed bytes; signed weights use the sign trick, moving the weight's sign onto
//! the activation) and widened with `madd` to exact i32 partial sums, converted to f32 and
//! added with one FMA by `dw * da` into an 8-lane f32 accumulator per token. Blocks go two
//! at a time (their partial sums share one vector, see [`pair`]), with a lone last block on
//! its own. The min term of Q4_1 / Q5_1 uses the exact integer sum of the activation quants
//! (not Q8_1's `s`, which is rounded to f16). One horizontal sum ends the row. There is no per-block horizontal
//! reduction, so results differ from the generated scalar reference (which reduces each
//! block, then adds blocks in order) by f32 summation order only. `tile` runs the same
//! operations per token as `vec_dot`, so the two agree bit for bit (matmul equals matvec).
//!
//! Activation quants are at most 127 in magnitude (the quantizers never produce -128); the
//! sign trick relies on it, as ggml's does.

use super::common::{hsum_ps, read_u16, read_u32};
use crate::kernels::TILE;
use std::arch::x86_64::*;

/// The activation block layout a weight format is dotted with.
#[derive(Clone, Copy)]
pub(super) struct Act {
    bytes: usize,
    /// Offset of the 32 i8 quants (the f16 scale is at 0).
    qs: usize,
}

pub(super) const Q8_0_ACT: Act = Act { bytes: 34, qs: 2 };
pub(super) const Q8_1_ACT: Act = Act { bytes: 36, qs: 4 };

/// One 32-element weight format: how to unpack a block and dot it with activation quants.
/// The f16 scale `d` is at offset 0 of every block; formats with a min keep it (f16) at 2.
pub(super) trait Weights {
    const BYTES: usize;
    const ACT: Act;
    const HAS_MIN: bool;
    /// A block's quants, unpacked once and dotted with one or more activation blocks.
    type Quants: Copy;
    unsafe fn unpack(b: *const u8) -> Self::Quants;
    /// Whether the quants have at most 5 bits, so that [`pair`] may add the `maddubs` pair
    /// sums of two blocks in i16: the largest such sum, 8 products of Q5_1 (31 * 127 each),
    /// is 31496, below `i16::MAX`.
    const SMALL: bool;
    /// The 16 i16 sums of adjacent pairs of `q[j] * a[j]` (`maddubs`).
    unsafe fn pairs(q: Self::Quants, a: __m256i) -> __m256i;
    /// The 8 i32 partial sums of `q[j] * a[j]`.
    #[inline(always)]
    unsafe fn dot(q: Self::Quants, a: __m256i) -> __m256i {
        _mm256_madd_epi16(Self::pairs(q, a), ones_epi16())
    }
}

#[inline(always)]
unsafe fn ones_epi16() -> __m256i {
    _mm256_set1_epi16(1)
}

/// Pair sums of unsigned `q` (each < 128) times signed `a`.
#[inline(always)]
unsafe fn pairs_unsigned(q: __m256i, a: __m256i) -> __m256i {
    _mm256_maddubs_epi16(q, a)
}

/// Pair sums of signed `q` times signed `a`, given `q_abs = |q|` (sign trick; exact while
/// `a` has no -128).
#[inline(always)]
unsafe fn pairs_signed(q_abs: __m256i, q: __m256i, a: __m256i) -> __m256i {
    _mm256_maddubs_epi16(q_abs, _mm256_sign_epi8(a, q))
}

/// Pair sums of the activation quants (for the min term of Q4_1 / Q5_1).
#[inline(always)]
unsafe fn pairs_act(a: __m256i) -> __m256i {
    _mm256_maddubs_epi16(_mm256_set1_epi8(1), a)
}

/// 16 bytes of nibbles: element j < 16 is the low nibble of byte j, element j + 16 the high.
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> __m256i {
    let q = _mm_loadu_si128(p.cast());
    let both = _mm256_set_m128i(_mm_srli_epi16::<4>(q), q);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

/// `0x10` in byte j where bit j of `qh` is set (the fifth bit of Q5_0 / Q5_1 quants).
#[inline(always)]
unsafe fn fifth_bits(qh: u32) -> __m256i {
    let spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(qh as i32),
        _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
        ),
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// Signed quants with their magnitudes, for the sign trick.
#[derive(Clone, Copy)]
pub(super) struct Signed {
    abs: __m256i,
    q: __m256i,
}

#[inline(always)]
unsafe fn signed(q: __m256i) -> Signed {
    Signed {
        abs: _mm256_sign_epi8(q, q),
        q,
    }
}

pub(super) struct Q4_0;
impl Weights for Q4_0 {
    const SMALL: bool = true;
    const BYTES: usize = 18;
    const ACT: Act = Q8_0_ACT;
    const HAS_MIN: bool = false;
    type Quants = Signed;
    #[inline(always)]
    unsafe fn unpack(b: *const u8) -> Signed {
        signed(_mm256_sub_epi8(nibbles(b.add(2)), _mm256_set1_epi8(8)))
    }
    #[inline(always)]
    unsafe fn pairs(q: Signed, a: __m256i) -> __m256i {
        pairs_signed(q.abs, q.q, a)
    }
}

pub(super) struct Q4_1;
impl Weights for Q4_1 {
    const SMALL: bool = true;
    const BYTES: usize = 20;
    const ACT: Act = Q8_1_ACT;
    const HAS_MIN: bool = true;
    type Quants = __m256i;
    #[inline(always)]
    unsafe fn unpack(b: *const u8) -> __m256i {
        nibbles(b.add(4))
    }
    #[inline(always)]
    unsafe fn pairs(q: __m256i, a: __m256i) -> __m256i {
        pairs_unsigned(q, a)
    }
}

pub(super) struct Q5_0;
impl Weights for Q5_0 {
    const SMALL: bool = true;
    const BYTES: usize = 22;
    const ACT: Act = Q8_0_ACT;
    const HAS_MIN: bool = false;
    type Quants = Signed;
    #[inline(always)]
    unsafe fn unpack(b: *const u8) -> Signed {
        let q = _mm256_or_si256(nibbles(b.add(6)), fifth_bits(read_u32(b.add(2))));
        signed(_mm256_sub_epi8(q, _mm256_set1_epi8(16)))
    }
    #[inline(always)]
    unsafe fn pairs(q: Signed, a: __m256i) -> __m256i {
        pairs_signed(q.abs, q.q, a)
    }
}

pub(super) struct Q5_1;
impl Weights for Q5_1 {
    const SMALL: bool = true;
    const BYTES: usize = 24;
    const ACT: Act = Q8_1_ACT;
    const HAS_MIN: bool = true;
    type Quants = __m256i;
    #[inline(always)]
    unsafe fn unpack(b: *const u8) -> __m256i {
        _mm256_or_si256(nibbles(b.add(8)), fifth_bits(read_u32(b.add(4))))
    }
    #[inline(always)]
    unsafe fn pairs(q: __m256i, a: __m256i) -> __m256i {
        pairs_unsigned(q, a)
    }
}

/// Q8_0 and Q8_1 weights: 32 i8 quants at `QS`.
pub(super) struct Q8<const BYTES: usize, const QS: usize>;
pub(super) type Q8_0 = Q8<34, 2>;
pub(super) type Q8_1 = Q8<36, 4>;
impl<const BYTES: usize, const QS: usize> Weights for Q8<BYTES, QS> {
    const SMALL: bool = false;
    const BYTES: usize = BYTES;
    const ACT: Act = Act {
        bytes: BYTES,
        qs: QS,
    };
    const HAS_MIN: bool = false;
    type Quants = Signed;
    #[inline(always)]
    unsafe fn unpack(b: *const u8) -> Signed {
        signed(_mm256_loadu_si256(b.add(QS).cast()))
    }
    #[inline(always)]
    unsafe fn pairs(q: Signed, a: __m256i) -> __m256i {
        pairs_signed(q.abs, q.q, a)
    }
}

/// IQ4_NL: nibbles index a fixed table of int8 levels (none of them -128).
pub(super) struct Iq4Nl;
impl Weights for Iq4Nl {
    const SMALL: bool = false;
    const BYTES: usize = 18;
    const ACT: Act = Q8_0_ACT;
    const HAS_MIN: bool = false;
    type Quants = Signed;
    #[inline(always)]
    unsafe fn unpack(b: *const u8) -> Signed {
        let levels = _mm_loadu_si128(crate::formats::iq4_nl::KVALUES.as_ptr().cast());
        let table = _mm256_set_m128i(levels, levels);
        signed(_mm256_shuffle_epi8(table, nibbles(b.add(2))))
    }
    #[inline(always)]
    unsafe fn pairs(q: Signed, a: __m256i) -> __m256i {
        pairs_signed(q.abs, q.q, a)
    }
}

/// One block's integer products with one activation block as 8 exact i32 lanes converted
/// to f32. Without a min: 8 partial dot sums. With a min (Q4_1 / Q5_1): the i16 pair sums of
/// the dot and of the activation quants are added pairwise by one `hadd` (at most
/// 4 * 31 * 127 in magnitude: no i16 overflow) and widened, giving per 128-bit half two
/// partial dot sums then two partial activation sums, matched by [`weight_scales`].
#[inline(always)]
unsafe fn block<F: Weights>(q: F::Quants, a: *const u8) -> __m256 {
    let aq = _mm256_loadu_si256(a.add(F::ACT.qs).cast());
    let sums = if F::HAS_MIN {
        _mm256_madd_epi16(
            _mm256_hadd_epi16(F::pairs(q, aq), pairs_act(aq)),
            ones_epi16(),
        )
    } else {
        F::dot(q, aq)
    };
    _mm256_cvtepi32_ps(sums)
}

/// The weight block's factors for the lanes of [`block`]: `dw` in every lane without a min;
/// `[dw, dw, mw, mw, dw, dw, mw, mw]` with one.
#[inline(always)]
unsafe fn weight_scales<F: Weights>(wb: *const u8) -> __m256 {
    if F::HAS_MIN {
        let dm = read_u32(wb) as u64;
        let (d, m) = (dm & 0xFFFF, dm >> 16);
        let bits = (d | d << 16 | m << 32 | m << 48) as i64;
        _mm256_cvtph_ps(_mm_set1_epi64x(bits))
    } else {
        _mm256_broadcastss_ps(f16_lane0(wb))
    }
}

/// The f16 at `p` widened to f32 in lane 0. Loaded with one full-width `movd` of 4 bytes
/// (every block has at least 4), so the conversion never waits on an unrelated register
/// (a `pinsrw` would merge into one).
#[inline(always)]
unsafe fn f16_lane0(p: *const u8) -> __m128 {
    _mm_cvtph_ps(_mm_cvtsi32_si128(read_u32(p) as i32))
}

/// `acc + (w * da) * v`, lane-wise: one block of one token added to that token's accumulator.
#[inline(always)]
unsafe fn accumulate(acc: __m256, v: __m256, w: __m256, ab: *const u8) -> __m256 {
    let da = _mm256_broadcastss_ps(f16_lane0(ab));
    _mm256_fmadd_ps(_mm256_mul_ps(w, da), v, acc)
}

/// Two consecutive blocks' integer products with their activation blocks as 8 exact i32
/// lanes converted to f32, laid out per 128-bit half as `[d0, s0, d1, s1]` with a min (dot
/// and activation sums of block 0, then block 1) and `[d0, d0, d1, d1]` without. Adding two
/// blocks before widening halves the `madd`, convert and FMA work per block.
#[inline(always)]
unsafe fn pair<F: Weights>(q: [F::Quants; 2], a: [*const u8; 2]) -> __m256 {
    let aq = a.map(|p| _mm256_loadu_si256(p.add(F::ACT.qs).cast()));
    let sums = if F::HAS_MIN {
        let h0 = _mm256_hadd_epi16(F::pairs(q[0], aq[0]), pairs_act(aq[0]));
        let h1 = _mm256_hadd_epi16(F::pairs(q[1], aq[1]), pairs_act(aq[1]));
        _mm256_madd_epi16(_mm256_hadd_epi16(h0, h1), ones_epi16())
    } else if F::SMALL {
        let h = _mm256_hadd_epi16(F::pairs(q[0], aq[0]), F::pairs(q[1], aq[1]));
        _mm256_madd_epi16(h, ones_epi16())
    } else {
        _mm256_hadd_epi32(F::dot(q[0], aq[0]), F::dot(q[1], aq[1]))
    };
    _mm256_cvtepi32_ps(sums)
}

/// Four f16 values packed as bits (lane 0 lowest) widened to f32 and repeated over 8 lanes.
#[inline(always)]
unsafe fn f16x4_twice(packed: u64) -> __m256 {
    _mm256_cvtph_ps(_mm_set1_epi64x(packed as i64))
}

/// The f16s at `p0` and `p1`, each doubled: `[x0, x0, x1, x1]` packed (one multiply copies
/// each 16-bit value into the free slot above it).
#[inline(always)]
unsafe fn f16_doubled(p0: *const u8, p1: *const u8) -> u64 {
    (read_u16(p0) as u64 | (read_u16(p1) as u64) << 32) * 0x1_0001
}

/// The weight factors for the lanes of [`pair`]: `[dw0, mw0, dw1, mw1]` with a min,
/// `[dw0, dw0, dw1, dw1]` without (repeated in both halves).
#[inline(always)]
unsafe fn pair_weight_scales<F: Weights>(w: [*const u8; 2]) -> __m256 {
    let [p0, p1] = w;
    if F::HAS_MIN {
        f16x4_twice(read_u32(p0) as u64 | (read_u32(p1) as u64) << 32)
    } else {
        f16x4_twice(f16_doubled(p0, p1))
    }
}

/// `acc + (w * [da0, da0, da1, da1]) * v`: two blocks of one token added to its accumulator.
#[inline(always)]
unsafe fn accumulate_pair(acc: __m256, v: __m256, w: __m256, a: [*const u8; 2]) -> __m256 {
    let da = f16x4_twice(f16_doubled(a[0], a[1]));
    _mm256_fmadd_ps(_mm256_mul_ps(w, da), v, acc)
}

/// One weight row dotted with one activation row: blocks two at a time, then a last odd one.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn vec_dot<F: Weights>(w: &[u8], a: &[u8]) -> f32 {
    let nb = (w.len() / F::BYTES).min(a.len() / F::ACT.bytes);
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i + 2 <= nb {
        let wb = [wp.add(i * F::BYTES), wp.add((i + 1) * F::BYTES)];
        let ab = [ap.add(i * F::ACT.bytes), ap.add((i + 1) * F::ACT.bytes)];
        let v = pair::<F>(wb.map(|p| F::unpack(p)), ab);
        acc = accumulate_pair(acc, v, pair_weight_scales::<F>(wb), ab);
        i += 2;
    }
    if i < nb {
        let (wb, ab) = (wp.add(i * F::BYTES), ap.add(i * F::ACT.bytes));
        let v = block::<F>(F::unpack(wb), ab);
        acc = accumulate(acc, v, weight_scales::<F>(wb), ab);
    }
    hsum_ps(acc)
}

/// One weight row dotted with [`TILE`] activation rows: each weight block is unpacked once
/// and added into one accumulator per token with the same operations as [`vec_dot`], so
/// token t's result equals `vec_dot(w, a[t])` bit for bit.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile<F: Weights>(w: &[u8], a: [&[u8]; TILE]) -> [f32; TILE] {
    let nb = a
        .iter()
        .fold(w.len() / F::BYTES, |n, r| n.min(r.len() / F::ACT.bytes));
    let wp = w.as_ptr();
    let ap = a.map(|r| r.as_ptr());
    let mut acc = [_mm256_setzero_ps(); TILE];
    let mut i = 0;
    while i + 2 <= nb {
        let wb = [wp.add(i * F::BYTES), wp.add((i + 1) * F::BYTES)];
        let (q, ws) = (wb.map(|p| F::unpack(p)), pair_weight_scales::<F>(wb));
        for t in 0..TILE {
            let ab = [
                ap[t].add(i * F::ACT.bytes),
                ap[t].add((i + 1) * F::ACT.bytes),
            ];
            acc[t] = accumulate_pair(acc[t], pair::<F>(q, ab), ws, ab);
        }
        i += 2;
    }
    if i < nb {
        let wb = wp.add(i * F::BYTES);
        let (q, ws) = (F::unpack(wb), weight_scales::<F>(wb));
        for t in 0..TILE {
            let ab = ap[t].add(i * F::ACT.bytes);
            acc[t] = accumulate(acc[t], block::<F>(q, ab), ws, ab);
        }
    }
    acc.map(|v| hsum_ps(v))
}
