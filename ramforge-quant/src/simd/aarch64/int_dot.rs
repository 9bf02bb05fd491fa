//! The exact integer dots of 32-quant chunks with 32 activation quants: NEON's widening
//! multiplies ([`Mull`]), the dot-product extension's `sdot` ([`Sdot`]), and the int8 matrix
//! multiply's `smmla` two rows by two tokens ([`Smmla`]). [`super::multi`]'s drivers take
//! them as an [`IntDot`].

use std::arch::aarch64::*;

/// How the exact integer dots of 32 weight quants with 32 activation quants are taken.
pub(super) trait IntDot {
    /// The dots of the two halves (elements 0..16, 16..32).
    unsafe fn halves(w: (int8x16_t, int8x16_t), a: (int8x16_t, int8x16_t)) -> [i32; 2];

    /// The halves' dots of two weight chunks with two activation chunks: `out[r][t]`.
    #[inline(always)]
    unsafe fn quad(
        w: [(int8x16_t, int8x16_t); 2],
        a: [(int8x16_t, int8x16_t); 2],
    ) -> [[[i32; 2]; 2]; 2] {
        [
            [Self::halves(w[0], a[0]), Self::halves(w[0], a[1])],
            [Self::halves(w[1], a[0]), Self::halves(w[1], a[1])],
        ]
    }
}

/// Plain NEON: widening multiplies to i16 (|q| <= 128, so a product fits), pairwise
/// accumulated into i32.
pub(super) struct Mull;
impl IntDot for Mull {
    #[inline(always)]
    unsafe fn halves(w: (int8x16_t, int8x16_t), a: (int8x16_t, int8x16_t)) -> [i32; 2] {
        let dot16 = |w: int8x16_t, a: int8x16_t| {
            let s = vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(a)));
            vaddvq_s32(vpadalq_s16(s, vmull_high_s8(w, a)))
        };
        [dot16(w.0, a.0), dot16(w.1, a.1)]
    }
}

/// The dot-product extension: four 4-element i8 dots into i32 lanes per `sdot`.
pub(super) struct Sdot;
impl IntDot for Sdot {
    #[inline(always)]
    unsafe fn halves(w: (int8x16_t, int8x16_t), a: (int8x16_t, int8x16_t)) -> [i32; 2] {
        let zero = vdupq_n_s32(0);
        let s = vpaddq_s32(sdot(zero, w.0, a.0), sdot(zero, w.1, a.1));
        let s = vpaddq_s32(s, s);
        [vgetq_lane_s32::<0>(s), vgetq_lane_s32::<1>(s)]
    }
}

/// The int8 matrix multiply: `smmla` takes a 2x8 by 8x2 product into a 2x2 of i32, two
/// weight rows by two tokens; one-row dots are [`Sdot`]'s.
pub(super) struct Smmla;
impl IntDot for Smmla {
    #[inline(always)]
    unsafe fn halves(w: (int8x16_t, int8x16_t), a: (int8x16_t, int8x16_t)) -> [i32; 2] {
        Sdot::halves(w, a)
    }

    #[inline(always)]
    unsafe fn quad(
        w: [(int8x16_t, int8x16_t); 2],
        a: [(int8x16_t, int8x16_t); 2],
    ) -> [[[i32; 2]; 2]; 2] {
        // Eight elements of row 0 then the same eight of row 1 (and of token 0, token 1):
        // one `smmla` gives lanes [r0.t0, r0.t1, r1.t0, r1.t1] of those eight.
        let low = |x: int8x16_t, y: int8x16_t| {
            vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(x), vreinterpretq_s64_s8(y)))
        };
        let high = |x: int8x16_t, y: int8x16_t| {
            vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(x), vreinterpretq_s64_s8(y)))
        };
        let half = |w0: int8x16_t, w1: int8x16_t, a0: int8x16_t, a1: int8x16_t| {
            let s = smmla(vdupq_n_s32(0), low(w0, w1), low(a0, a1));
            smmla(s, high(w0, w1), high(a0, a1))
        };
        let h0 = half(w[0].0, w[1].0, a[0].0, a[1].0);
        let h1 = half(w[0].1, w[1].1, a[0].1, a[1].1);
        // Lanes 0..2 (row 0) and 2..4 (row 1), each [t0, t1], per half.
        let r0 = vzip1q_s32(h0, h1); // [h0.r0t0, h1.r0t0, h0.r0t1, h1.r0t1]
        let r1 = vzip2q_s32(h0, h1); // [h0.r1t0, h1.r1t0, h0.r1t1, h1.r1t1]
        let lanes = |v: int32x4_t| {
            let mut out = [0i32; 4];
            vst1q_s32(out.as_mut_ptr(), v);
            [[out[0], out[1]], [out[2], out[3]]]
        };
        [lanes(r0), lanes(r1)]
    }
}

/// `acc + sdot(a, b)`; written as assembly because the intrinsic is not stable Rust yet.
/// Only inlined into `#[target_feature(enable = "dotprod")]` bodies.
#[inline(always)]
unsafe fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    std::arch::asm!(
        "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags),
    );
    acc
}

/// `acc + smmla(a, b)`: `a` and `b` two rows of eight i8 each, `acc` lane `2i + j` plus the
/// dot of row i of `a` with row j of `b`; assembly like [`sdot`]. Only inlined into
/// `#[target_feature(enable = "i8mm")]` bodies.
#[inline(always)]
unsafe fn smmla(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    std::arch::asm!(
        "smmla {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags),
    );
    acc
}
