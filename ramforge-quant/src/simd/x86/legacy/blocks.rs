//! The 32-element weight formats and their exact integer dots with Q8_0 / Q8_1 activation
//! blocks, eight (weight block, activation block) lanes at a time.
//!
//! Every block-dot driver (the sibling module `dots`) is built on [`Weights::isums`]: lane k is the exact i32
//! dot of weight block `w[k]` with activation block `a[k]`. The decode kernel gives the
//! lanes eight weight rows and one shared activation block, the single-row dot eight
//! consecutive blocks, the prefill tile four tokens times two blocks. Because the integer
//! part is exact, every driver rounds only in the float steps, which are the same per lane.
//!
//! Two families:
//! - 4- and 5-bit quants ([`Nibbles`]: Q4_0, Q4_1, Q5_0, Q5_1) are kept unsigned (0..=15 /
//!   0..=31) so `maddubs` needs no sign trick; the offset of Q4_0 / Q5_0 is taken off
//!   in i16 as `bias * (pair sums of the activations)`. Two lanes share one vector (lane p in
//!   the low 128 bits, lane p + 4 in the high), first the 16 low-half elements of both, then
//!   the 16 high-half ones, so a nibble block is unpacked with one load, one shift and two
//!   masks, and the eight lanes are reduced mostly in i16 ([`tree16`]).
//! - 8-bit quants ([`Bytes`]: Q8_0, Q8_1, IQ4_NL levels) are signed: `maddubs` with the sign
//!   trick, widened to i32 per lane and reduced in i32 ([`tree32`]).
//!
//! Activation quants are at most 127 in magnitude (the quantizers never produce -128); the
//! sign trick and the i16 bounds below rely on it, as ggml's kernels do.

use super::common::{e8m0_half_x8, f16x8, nibbles, read_u32};
use crate::formats::{iq4_nl, mxfp4, q4_0, q4_1, q5_0, q5_1, q8_0, q8_1};
use crate::GgmlType;
use std::arch::x86_64::*;

/// Lanes of one integer step.
pub(super) const LANES: usize = 8;

/// The activation block layout a weight format is dotted with (from the generated format).
#[derive(Clone, Copy)]
pub(super) struct Act {
    pub bytes: usize,
    /// Offset of the f16 scale.
    pub d: usize,
    /// Offset of the 32 i8 quants.
    pub qs: usize,
}

/// The layout of activation type `ty` (Q8_0 or Q8_1: what the generated formats pair the
/// 32-element weights with).
const fn act_layout(ty: GgmlType) -> Act {
    match ty {
        GgmlType::Q8_0 => Act {
            bytes: q8_0::BYTES,
            d: q8_0::OFFSET_D,
            qs: q8_0::OFFSET_QS,
        },
        GgmlType::Q8_1 => Act {
            bytes: q8_1::BYTES,
            d: q8_1::OFFSET_D,
            qs: q8_1::OFFSET_QS,
        },
        _ => panic!("not an activation type of the 32-element kernels"),
    }
}

/// One 32-element weight format: its scale at `OFFSET_D` (an f16, unless [`Weights::scales`]
/// reads it otherwise), and for formats with a min, the f16 min at `MIN_AT`.
pub(super) trait Weights {
    const BYTES: usize;
    const OFFSET_D: usize;
    /// Offset of the f16 min (`None` without one).
    const MIN_AT: Option<usize>;
    const HAS_MIN: bool = Self::MIN_AT.is_some();
    const ACT: Act;
    /// Lane k: the exact dot of weight block `w[k]`'s quants with activation block `a[k]`'s
    /// (first), and for formats with a min the exact sum of `a[k]`'s quants (second; zero
    /// otherwise). Lanes may repeat a pointer; repeated loads are merged by the compiler.
    unsafe fn isums(w: [*const u8; LANES], a: [*const u8; LANES]) -> (__m256i, __m256i);
    /// Lane k: weight block `w[k]`'s scale as f32 (exactly: the drivers' `dw * da` relies on
    /// it). The f16 at `OFFSET_D` unless a format stores it otherwise.
    #[inline(always)]
    unsafe fn scales(w: [*const u8; LANES]) -> __m256 {
        f16x8(w, Self::OFFSET_D)
    }
}

#[inline(always)]
unsafe fn ones_epi16() -> __m256i {
    _mm256_set1_epi16(1)
}

// ---------------------------------------------------------------------------------------
// 4- and 5-bit formats
// ---------------------------------------------------------------------------------------

/// A 4- or 5-bit format: unsigned quants, value `q - BIAS` (times the scale, plus the min).
pub(super) trait Nibbles: Weights {
    /// The offset taken off every quant (8 for Q4_0, 16 for Q5_0, 0 with a min).
    const BIAS: i8;
    /// Whether a 16-product sum of `(q - BIAS) * a` may leave i16 (Q5_1: 16 * 31 * 127),
    /// so the last reduction level runs in i32.
    const WIDE: bool;
    /// Blocks `x` and `y` as two vectors of unsigned quants: `[x 0..16 | y 0..16]` and
    /// `[x 16..32 | y 16..32]`.
    unsafe fn halves(x: *const u8, y: *const u8) -> [__m256i; 2];
}

/// The 16 bytes of nibbles at `x` and `y`, unpacked side by side (see [`Nibbles::halves`]):
/// element j < 16 is the low nibble of byte j, element j + 16 the high nibble.
#[inline(always)]
unsafe fn nibble_halves(x: *const u8, y: *const u8) -> [__m256i; 2] {
    let v = _mm256_loadu2_m128i(y.cast(), x.cast());
    let mask = _mm256_set1_epi8(0x0F);
    [
        _mm256_and_si256(v, mask),
        _mm256_and_si256(_mm256_srli_epi16::<4>(v), mask),
    ]
}

/// `0x10` in every byte whose bit is set in the fifth-bit words `qx` (low 128 bits) and `qy`
/// (high), split like [`Nibbles::halves`]: bits 0..16, then bits 16..32.
#[inline(always)]
unsafe fn fifth_bit_halves(qx: u32, qy: u32) -> [__m256i; 2] {
    let words = _mm256_set_m128i(_mm_set1_epi32(qy as i32), _mm_set1_epi32(qx as i32));
    [
        spread_bits(
            words,
            _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
            ),
        ),
        spread_bits(
            words,
            _mm256_setr_epi8(
                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, //
                2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
            ),
        ),
    ]
}

/// `0x10` in byte j where bit j % 8 of byte `bytes[j]` of `words` (per 128-bit half) is set.
#[inline(always)]
unsafe fn spread_bits(words: __m256i, bytes: __m256i) -> __m256i {
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let b = _mm256_and_si256(_mm256_shuffle_epi8(words, bytes), bit);
    _mm256_and_si256(_mm256_cmpeq_epi8(b, bit), _mm256_set1_epi8(0x10))
}

/// The 32 bytes at `x` and at `y` side by side: `[x 0..16 | y 0..16]`, `[x 16..32 | y 16..32]`.
#[inline(always)]
unsafe fn side_by_side(x: *const u8, y: *const u8) -> [__m256i; 2] {
    [
        _mm256_loadu2_m128i(y.cast(), x.cast()),
        _mm256_loadu2_m128i(y.add(16).cast(), x.add(16).cast()),
    ]
}

/// The activation quants of lanes p and p + 4 side by side ([`side_by_side`]), as the
/// paired integer sums take them.
#[inline(always)]
pub(super) unsafe fn lane_pair_acts<F: Weights>(a: &[*const u8; LANES], p: usize) -> [__m256i; 2] {
    side_by_side(a[p].add(F::ACT.qs), a[p + 4].add(F::ACT.qs))
}

/// Q4 halves: nibbles at `NIBBLES`.
#[inline(always)]
unsafe fn q4_halves<const NIBBLES: usize>(x: *const u8, y: *const u8) -> [__m256i; 2] {
    nibble_halves(x.add(NIBBLES), y.add(NIBBLES))
}

/// Q5 halves: nibbles at `NIBBLES`, the fifth bits (u32) at `QH`.
#[inline(always)]
unsafe fn q5_halves<const QH: usize, const NIBBLES: usize>(
    x: *const u8,
    y: *const u8,
) -> [__m256i; 2] {
    let [lo, hi] = nibble_halves(x.add(NIBBLES), y.add(NIBBLES));
    let [fl, fh] = fifth_bit_halves(read_u32(x.add(QH)), read_u32(y.add(QH)));
    [_mm256_or_si256(lo, fl), _mm256_or_si256(hi, fh)]
}

/// Reduces four two-lane vectors of i16 partial sums (8 per lane, see [`Nibbles::halves`])
/// to one i32 per lane, lanes in order 0..8. Adds wrap, so only the final per-lane
/// 16-product sums must fit in i16 (or, `wide`, the 8-product ones).
#[inline(always)]
unsafe fn tree16(v: [__m256i; 4], wide: bool) -> __m256i {
    // Per 128-bit half: [lane p x4, lane p+1 x4] (low half lanes 0..4, high half 4..8).
    let a0 = _mm256_hadd_epi16(v[0], v[1]);
    let a1 = _mm256_hadd_epi16(v[2], v[3]);
    if wide {
        _mm256_hadd_epi32(
            _mm256_madd_epi16(a0, ones_epi16()),
            _mm256_madd_epi16(a1, ones_epi16()),
        )
    } else {
        _mm256_madd_epi16(_mm256_hadd_epi16(a0, a1), ones_epi16())
    }
}

/// The i16 pair sums of the low halves `wl * al` plus those of the high halves `wh * ah`.
#[inline(always)]
unsafe fn pair_sums(wl: __m256i, wh: __m256i, al: __m256i, ah: __m256i) -> __m256i {
    _mm256_add_epi16(_mm256_maddubs_epi16(wl, al), _mm256_maddubs_epi16(wh, ah))
}

/// [`Weights::isums`] of a [`Nibbles`] format. Per lane pair p: the i16 pair sums of the
/// low and high halves added (4 products of at most 31 * 127 each), less `BIAS` times the
/// activations' pair sums, then [`tree16`]. With a bias the 16-product sums are at most
/// 16 * 16 * 127 = 32512 (Q5_0); without, 16 * 15 * 127 (Q4_1) or, `WIDE`, 8 * 31 * 127.
#[inline(always)]
unsafe fn nibble_isums<F: Nibbles>(
    w: [*const u8; LANES],
    a: [*const u8; LANES],
) -> (__m256i, __m256i) {
    let mut dots = [_mm256_setzero_si256(); 4];
    let mut sums = [_mm256_setzero_si256(); 4];
    for p in 0..4 {
        let [wl, wh] = F::halves(w[p], w[p + 4]);
        let [al, ah] = lane_pair_acts::<F>(&a, p);
        let mut d = pair_sums(wl, wh, al, ah);
        if F::BIAS != 0 {
            let bias = _mm256_set1_epi8(F::BIAS);
            d = _mm256_sub_epi16(d, pair_sums(bias, bias, al, ah));
        }
        dots[p] = d;
        if F::HAS_MIN {
            let one = _mm256_set1_epi8(1);
            sums[p] = pair_sums(one, one, al, ah);
        }
    }
    let isum = tree16(dots, F::WIDE);
    let asum = if F::HAS_MIN {
        tree16(sums, false)
    } else {
        _mm256_setzero_si256()
    };
    (isum, asum)
}

/// A [`Nibbles`] format over the generated format module `$m`: sizes, field offsets and the
/// activation layout come from it; `halves q4` reads nibbles only, `halves q5` also the
/// fifth bits `qh`.
macro_rules! nibble_format {
    ($name:ident, $m:ident, min $min:tt, bias $bias:expr, wide $wide:expr, halves $halves:ident) => {
        pub(super) struct $name;
        impl Weights for $name {
            const BYTES: usize = $m::BYTES;
            const OFFSET_D: usize = $m::OFFSET_D;
            const MIN_AT: Option<usize> = nibble_format!(@min $m $min);
            const ACT: Act = act_layout($m::ACT);
            #[inline(always)]
            unsafe fn isums(w: [*const u8; LANES], a: [*const u8; LANES]) -> (__m256i, __m256i) {
                nibble_isums::<Self>(w, a)
            }
        }
        impl Nibbles for $name {
            const BIAS: i8 = $bias;
            const WIDE: bool = $wide;
            #[inline(always)]
            unsafe fn halves(x: *const u8, y: *const u8) -> [__m256i; 2] {
                nibble_format!(@halves $halves $m x y)
            }
        }
    };
    (@min $m:ident true) => { Some($m::OFFSET_M) };
    (@min $m:ident false) => { None };
    (@halves q4 $m:ident $x:ident $y:ident) => { q4_halves::<{ $m::OFFSET_QS }>($x, $y) };
    (@halves q5 $m:ident $x:ident $y:ident) => {
        q5_halves::<{ $m::OFFSET_QH }, { $m::OFFSET_QS }>($x, $y)
    };
}

nibble_format!(Q4_0, q4_0, min false, bias 8, wide false, halves q4);
nibble_format!(Q4_1, q4_1, min true, bias 0, wide false, halves q4);
nibble_format!(Q5_0, q5_0, min false, bias 16, wide false, halves q5);
nibble_format!(Q5_1, q5_1, min true, bias 0, wide true, halves q5);

// ---------------------------------------------------------------------------------------
// 8-bit formats
// ---------------------------------------------------------------------------------------

/// An 8-bit format: 32 signed quants per block. The sign trick puts the magnitudes on one
/// side of `maddubs` and the signs on the other. Activation quants are at most 127 in
/// magnitude; a weight quant may be -128 unless [`Bytes::NO_MINUS_128`], and `-q` does not
/// fit a byte, so such weights take the magnitudes (`sign_epi8(q, q)` leaves -128 as the
/// byte 0x80, which `maddubs` reads as the unsigned 128).
pub(super) trait Bytes: Weights {
    /// Whether no quant can be -128 (the levels of a table).
    const NO_MINUS_128: bool;
    /// Block `b`'s quants as signed bytes, in element order (element j in byte j).
    unsafe fn quants(b: *const u8) -> __m256i;
    /// Whether [`byte_isums`] pairs lanes through [`Bytes::halves`].
    const PAIRED: bool;
    /// Blocks `x` and `y` as two vectors of signed quants: `[x 0..16 | y 0..16]` and
    /// `[x 16..32 | y 16..32]` (used only when [`Bytes::PAIRED`]).
    unsafe fn halves(x: *const u8, y: *const u8) -> [__m256i; 2];
}

/// Whether no level of a table is -128.
const fn lacks_minus_128(levels: &[i8]) -> bool {
    let mut i = 0;
    while i < levels.len() {
        if levels[i] == i8::MIN {
            return false;
        }
        i += 1;
    }
    true
}

/// Reduces eight vectors of 8 i32 partial sums (one vector per lane) to one i32 per lane.
#[inline(always)]
pub(super) unsafe fn tree32(p: [__m256i; LANES]) -> __m256i {
    let h01 = _mm256_hadd_epi32(p[0], p[1]);
    let h23 = _mm256_hadd_epi32(p[2], p[3]);
    let h45 = _mm256_hadd_epi32(p[4], p[5]);
    let h67 = _mm256_hadd_epi32(p[6], p[7]);
    // [lanes 0..4 over their low 16 elements | the same over their high 16]; then 4..8.
    let lo = _mm256_hadd_epi32(h01, h23);
    let hi = _mm256_hadd_epi32(h45, h67);
    _mm256_add_epi32(
        _mm256_permute2x128_si256::<0x20>(lo, hi),
        _mm256_permute2x128_si256::<0x31>(lo, hi),
    )
}

/// [`Weights::isums`] of a [`Bytes`] format: the sign trick, whose pair sums are at most
/// 2 * 128 * 127 (no `maddubs` saturation), widened per lane. The activations carry the
/// magnitudes where the weights allow ([`Bytes::NO_MINUS_128`]): in the decode kernel every
/// lane has the same activations, so `|a|` is taken once for all eight rows.
///
/// With [`Bytes::halves`], lanes p and p + 4 share a vector, so the eight lanes reduce within
/// 128-bit halves (three `hadd`s, no cross-lane permute): the table formats, whose nibbles
/// unpack that way for free. Q8's bytes would need two inserts per pair, which cost more
/// than the shorter reduction saves (benches/README.md).
#[inline(always)]
unsafe fn byte_isums<F: Bytes>(w: [*const u8; LANES], a: [*const u8; LANES]) -> (__m256i, __m256i) {
    let pairs = |q: __m256i, aq: __m256i| {
        let p = if F::NO_MINUS_128 {
            _mm256_maddubs_epi16(_mm256_sign_epi8(aq, aq), _mm256_sign_epi8(q, aq))
        } else {
            _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(aq, q))
        };
        _mm256_madd_epi16(p, ones_epi16())
    };
    if F::PAIRED {
        let mut dots = [_mm256_setzero_si256(); 4];
        for p in 0..4 {
            let [wl, wh] = F::halves(w[p], w[p + 4]);
            let [al, ah] = lane_pair_acts::<F>(&a, p);
            dots[p] = _mm256_add_epi32(pairs(wl, al), pairs(wh, ah));
        }
        let h01 = _mm256_hadd_epi32(dots[0], dots[1]);
        let h23 = _mm256_hadd_epi32(dots[2], dots[3]);
        return (_mm256_hadd_epi32(h01, h23), _mm256_setzero_si256());
    }
    // A plain loop: intrinsics inside a closure (`array::from_fn`) may be left out of line.
    let mut p = [_mm256_setzero_si256(); LANES];
    for k in 0..LANES {
        let aq = _mm256_loadu_si256(a[k].add(F::ACT.qs).cast());
        p[k] = pairs(F::quants(w[k]), aq);
    }
    (tree32(p), _mm256_setzero_si256())
}

/// Q8_0 and Q8_1 weights: 32 i8 quants at `QS`, the f16 scale at `D`.
pub(super) struct Q8<const BYTES: usize, const D: usize, const QS: usize>;
pub(super) type Q8_0 = Q8<{ q8_0::BYTES }, { q8_0::OFFSET_D }, { q8_0::OFFSET_QS }>;
pub(super) type Q8_1 = Q8<{ q8_1::BYTES }, { q8_1::OFFSET_D }, { q8_1::OFFSET_QS }>;
// Each is its own activation type.
const _: () = assert!(matches!(q8_0::ACT, GgmlType::Q8_0) && matches!(q8_1::ACT, GgmlType::Q8_1));
impl<const BYTES: usize, const D: usize, const QS: usize> Weights for Q8<BYTES, D, QS> {
    const BYTES: usize = BYTES;
    const OFFSET_D: usize = D;
    const MIN_AT: Option<usize> = None;
    const ACT: Act = Act {
        bytes: BYTES,
        d: D,
        qs: QS,
    };
    #[inline(always)]
    unsafe fn isums(w: [*const u8; LANES], a: [*const u8; LANES]) -> (__m256i, __m256i) {
        byte_isums::<Self>(w, a)
    }
}
impl<const BYTES: usize, const D: usize, const QS: usize> Bytes for Q8<BYTES, D, QS> {
    const NO_MINUS_128: bool = false;
    const PAIRED: bool = false;
    #[inline(always)]
    unsafe fn quants(b: *const u8) -> __m256i {
        _mm256_loadu_si256(b.add(QS).cast())
    }
    #[inline(always)]
    unsafe fn halves(x: *const u8, y: *const u8) -> [__m256i; 2] {
        side_by_side(x.add(QS), y.add(QS))
    }
}

/// A format whose 32 nibbles index a fixed table of 16 int8 levels (`$m::KVALUES`), element
/// j < 16 the low nibble of byte j at `$m::OFFSET_QS`, element j >= 16 the high one: IQ4_NL
/// (f16 scale `d`) and MXFP4 (its levels doubled, an E8M0 scale byte `e`, `scales e8m0`).
macro_rules! nibble_levels {
    ($name:ident, $m:ident, $d:ident, scales $scales:ident) => {
        pub(super) struct $name;
        impl Weights for $name {
            const BYTES: usize = $m::BYTES;
            const OFFSET_D: usize = $m::$d;
            const MIN_AT: Option<usize> = None;
            const ACT: Act = act_layout($m::ACT);
            #[inline(always)]
            unsafe fn isums(w: [*const u8; LANES], a: [*const u8; LANES]) -> (__m256i, __m256i) {
                byte_isums::<Self>(w, a)
            }
            #[inline(always)]
            unsafe fn scales(w: [*const u8; LANES]) -> __m256 {
                nibble_levels!(@scales $scales w)
            }
        }
        impl Bytes for $name {
            const NO_MINUS_128: bool = lacks_minus_128(&$m::KVALUES);
            const PAIRED: bool = true;
            #[inline(always)]
            unsafe fn quants(b: *const u8) -> __m256i {
                let levels = _mm_loadu_si128($m::KVALUES.as_ptr().cast());
                _mm256_shuffle_epi8(_mm256_set_m128i(levels, levels), nibbles(b.add($m::OFFSET_QS)))
            }
            #[inline(always)]
            unsafe fn halves(x: *const u8, y: *const u8) -> [__m256i; 2] {
                let levels = _mm_loadu_si128($m::KVALUES.as_ptr().cast());
                let levels = _mm256_set_m128i(levels, levels);
                nibble_halves(x.add($m::OFFSET_QS), y.add($m::OFFSET_QS))
                    .map(|n| _mm256_shuffle_epi8(levels, n))
            }
        }
    };
    (@scales f16 $w:ident) => { f16x8($w, Self::OFFSET_D) };
    (@scales e8m0 $w:ident) => { e8m0_half_x8($w, Self::OFFSET_D) };
}

nibble_levels!(Iq4Nl, iq4_nl, OFFSET_D, scales f16);
nibble_levels!(Mxfp4, mxfp4, OFFSET_E, scales e8m0);
