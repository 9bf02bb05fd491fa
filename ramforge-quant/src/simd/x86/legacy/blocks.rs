//! Dots of the 32-element weight formats with their Q8_0 / Q8_1 activation blocks: one row
//! (`vec_dot`) and one row with [`TILE`] tokens (`tile`, the prefill GEMM kernel).
//!
//! Integer products as in ggml's AVX2 path: weights unpacked to 32 bytes, multiplied with
//! `maddubs` (unsigned x signed bytes; signed weights use the sign trick, moving the weight's
//! sign onto the activation), then summed per block: widened with `madd` to i32 first, or
//! for the 4- and 5-bit formats (whose products are small) added in i16 before widening.
//! The float part then follows the generated reference operation for operation, per block:
//! `acc += da * (dw * idot)` (`+ mw * isum` inside the parentheses for formats with a min),
//! with blocks added in order, so results are bit-identical to the reference `vec_dot`.
//!
//! Activation quants are at most 127 in magnitude (the quantizers never produce -128); the
//! sign trick relies on it, as ggml's does.

use super::common::{
    f16_to_f32, f16x4, hsum4_epi16_pairs, hsum4_epi32, lanes4, read_u16, read_u32,
};
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
    /// Whether four of [`Weights::pairs`]' i16 pair sums always add without overflow, so
    /// that blocks can be reduced in i16 before widening: true when `2 * 4 * max|q| * 128`
    /// fits i16, i.e. for quants of at most 5 bits (Q5_1: 8 * 31 * 128 = 31744).
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
    const BYTES: usize = 18;
    const ACT: Act = Q8_0_ACT;
    const HAS_MIN: bool = false;
    const SMALL: bool = true;
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
    const BYTES: usize = 20;
    const ACT: Act = Q8_1_ACT;
    const HAS_MIN: bool = true;
    const SMALL: bool = true;
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
    const BYTES: usize = 22;
    const ACT: Act = Q8_0_ACT;
    const HAS_MIN: bool = false;
    const SMALL: bool = true;
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
    const BYTES: usize = 24;
    const ACT: Act = Q8_1_ACT;
    const HAS_MIN: bool = true;
    const SMALL: bool = true;
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
    const BYTES: usize = BYTES;
    const ACT: Act = Act {
        bytes: BYTES,
        qs: QS,
    };
    const HAS_MIN: bool = false;
    const SMALL: bool = false;
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
    const BYTES: usize = 18;
    const ACT: Act = Q8_0_ACT;
    const HAS_MIN: bool = false;
    const SMALL: bool = false;
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

/// The integer products of one weight block with one activation block, as i16 pair sums
/// when `F::SMALL` (else as i32 partial sums), and the activation's pair sums for formats
/// with a min (reduced per block by [`reduce`]).
#[inline(always)]
unsafe fn block<F: Weights>(q: F::Quants, a: *const u8) -> (__m256i, __m256i) {
    let aq = _mm256_loadu_si256(a.add(F::ACT.qs).cast());
    let dot = if F::SMALL {
        F::pairs(q, aq)
    } else {
        F::dot(q, aq)
    };
    let sum = if F::HAS_MIN {
        pairs_act(aq)
    } else {
        _mm256_setzero_si256()
    };
    (dot, sum)
}

/// `(idot, isum)` of four blocks from their [`block`] results, lane j for block j.
#[inline(always)]
unsafe fn reduce<F: Weights>(dots: [__m256i; 4], sums: [__m256i; 4]) -> (__m128i, __m128i) {
    let idot = if F::SMALL {
        hsum4_epi16_pairs(dots)
    } else {
        hsum4_epi32(dots)
    };
    // Activation pair sums are at most 256 in magnitude: always small.
    let isum = if F::HAS_MIN {
        hsum4_epi16_pairs(sums)
    } else {
        _mm_setzero_si128()
    };
    (idot, isum)
}

/// Lane-wise `da * (dw * idot [+ mw * isum])`, exactly the reference's per-block float ops.
#[inline(always)]
unsafe fn scale<F: Weights>(
    idot: __m128i,
    isum: __m128i,
    dw: __m128,
    mw: __m128,
    da: __m128,
) -> __m128 {
    let mut s = _mm_mul_ps(dw, _mm_cvtepi32_ps(idot));
    if F::HAS_MIN {
        s = _mm_add_ps(s, _mm_mul_ps(mw, _mm_cvtepi32_ps(isum)));
    }
    _mm_mul_ps(da, s)
}

/// The per-block results of `k <= 4` consecutive blocks, lane j for block j.
#[inline(always)]
unsafe fn group<F: Weights>(w: *const u8, a: *const u8, k: usize) -> __m128 {
    let zero = _mm256_setzero_si256();
    let (mut dots, mut sums) = ([zero; 4], [zero; 4]);
    let (mut dw, mut mw, mut da) = ([0u16; 4], [0u16; 4], [0u16; 4]);
    for j in 0..k {
        let (wb, ab) = (w.add(j * F::BYTES), a.add(j * F::ACT.bytes));
        (dots[j], sums[j]) = block::<F>(F::unpack(wb), ab);
        dw[j] = read_u16(wb);
        da[j] = read_u16(ab);
        if F::HAS_MIN {
            mw[j] = read_u16(wb.add(2));
        }
    }
    let (idot, isum) = reduce::<F>(dots, sums);
    scale::<F>(idot, isum, f16x4(dw), f16x4(mw), f16x4(da))
}

/// One weight row dotted with one activation row.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn vec_dot<F: Weights>(w: &[u8], a: &[u8]) -> f32 {
    let nb = (w.len() / F::BYTES).min(a.len() / F::ACT.bytes);
    let (wp, ap) = (w.as_ptr(), a.as_ptr());
    let mut acc = 0f32;
    let mut i = 0;
    while i + 4 <= nb {
        let r = lanes4(group::<F>(
            wp.add(i * F::BYTES),
            ap.add(i * F::ACT.bytes),
            4,
        ));
        acc += r[0];
        acc += r[1];
        acc += r[2];
        acc += r[3];
        i += 4;
    }
    if i < nb {
        let k = nb - i;
        let r = lanes4(group::<F>(
            wp.add(i * F::BYTES),
            ap.add(i * F::ACT.bytes),
            k,
        ));
        for v in &r[..k] {
            acc += v;
        }
    }
    acc
}

/// One weight row dotted with [`TILE`] activation rows: each weight block is unpacked once;
/// lane t accumulates token t with the same operations as [`vec_dot`].
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile<F: Weights>(w: &[u8], a: [&[u8]; TILE]) -> [f32; TILE] {
    const _: () = assert!(TILE == 4);
    let nb = a
        .iter()
        .fold(w.len() / F::BYTES, |n, r| n.min(r.len() / F::ACT.bytes));
    let wp = w.as_ptr();
    let ap = a.map(|r| r.as_ptr());
    let mut acc = _mm_setzero_ps();
    for i in 0..nb {
        let wb = wp.add(i * F::BYTES);
        let ab = ap.map(|p| p.add(i * F::ACT.bytes));
        let q = F::unpack(wb);
        let r = ab.map(|p| block::<F>(q, p));
        let (idot, isum) = reduce::<F>(r.map(|(d, _)| d), r.map(|(_, s)| s));
        let dw = _mm_set1_ps(f16_to_f32(read_u16(wb)));
        let mw = if F::HAS_MIN {
            _mm_set1_ps(f16_to_f32(read_u16(wb.add(2))))
        } else {
            _mm_setzero_ps()
        };
        let da = f16x4(ab.map(|p| read_u16(p)));
        acc = _mm_add_ps(acc, scale::<F>(idot, isum, dw, mw, da));
    }
    lanes4(acc)
}
