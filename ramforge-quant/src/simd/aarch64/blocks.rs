//! How each 32-element block format's quants become two `int8x16_t` (elements 0..16 and
//! 16..32), and where its activation type keeps its quants. Scales and mins are read by the
//! generated reference's `group_params`, so they are the reference's to the bit.
//!
//! Every `quants` is `#[inline(always)]` and only inlined into `#[target_feature]` bodies of
//! [`super::dots`]; it reads `BYTES` bytes from its pointer.

use crate::formats;
use std::arch::aarch64::*;

/// A 32-element block format with one scale (and maybe a min) per block.
pub(super) trait Block32 {
    /// The block's bytes.
    const BYTES: usize;
    /// Whether a block has a min (element = scale * quant + min).
    const HAS_MIN: bool;
    /// The 32 integer quants of the block at `p`: elements 0..16, 16..32.
    unsafe fn quants(p: *const u8) -> (int8x16_t, int8x16_t);
    /// Scale and min of the block `b` (`BYTES` bytes), as the reference computes them.
    fn params(b: &[u8]) -> (f32, f32);
}

/// An activation block type: 32 `i8` quants at `QS` and one scale.
pub(super) trait Act32 {
    const BYTES: usize;
    const QS: usize;
    /// The block's scale, as the reference computes it.
    fn scale(b: &[u8]) -> f32;
}

macro_rules! params {
    ($module:ident) => {
        fn params(b: &[u8]) -> (f32, f32) {
            let (s, m) = formats::$module::group_params(&formats::$module::blocks(b)[0]);
            (s[0], m[0])
        }
    };
}

macro_rules! act {
    ($name:ident, $module:ident) => {
        pub(super) struct $name;
        impl Act32 for $name {
            const BYTES: usize = formats::$module::BYTES;
            const QS: usize = formats::$module::OFFSET_QS;
            fn scale(b: &[u8]) -> f32 {
                formats::$module::group_params(&formats::$module::blocks(b)[0]).0[0]
            }
        }
    };
}
act!(ActQ8_0, q8_0);
act!(ActQ8_1, q8_1);

/// Low and high nibbles of the 16 bytes at `p`: elements 0..16 and 16..32.
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> (uint8x16_t, uint8x16_t) {
    let v = vld1q_u8(p);
    (vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v))
}

/// Bit j of the little-endian u32 at `p` as 0x10 in byte j (j < 32): Q5's fifth bits.
#[inline(always)]
unsafe fn fifth_bits(p: *const u8) -> (uint8x16_t, uint8x16_t) {
    let qh = vreinterpretq_u8_u32(vdupq_n_u32(u32::from_le_bytes(
        p.cast::<[u8; 4]>().read_unaligned(),
    )));
    const LO: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
    const HI: [u8; 16] = [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3];
    const BIT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    let bit = vld1q_u8(BIT.as_ptr());
    let spread = |idx: &[u8; 16]| {
        let bytes = vqtbl1q_u8(qh, vld1q_u8(idx.as_ptr()));
        vandq_u8(vtstq_u8(bytes, bit), vdupq_n_u8(0x10))
    };
    (spread(&LO), spread(&HI))
}

pub(super) struct Q4_0;
impl Block32 for Q4_0 {
    const BYTES: usize = formats::q4_0::BYTES;
    const HAS_MIN: bool = false;
    #[inline(always)]
    unsafe fn quants(p: *const u8) -> (int8x16_t, int8x16_t) {
        let (lo, hi) = nibbles(p.add(formats::q4_0::OFFSET_QS));
        let eight = vdupq_n_s8(8);
        (
            vsubq_s8(vreinterpretq_s8_u8(lo), eight),
            vsubq_s8(vreinterpretq_s8_u8(hi), eight),
        )
    }
    params!(q4_0);
}

pub(super) struct Q4_1;
impl Block32 for Q4_1 {
    const BYTES: usize = formats::q4_1::BYTES;
    const HAS_MIN: bool = true;
    #[inline(always)]
    unsafe fn quants(p: *const u8) -> (int8x16_t, int8x16_t) {
        let (lo, hi) = nibbles(p.add(formats::q4_1::OFFSET_QS));
        (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi))
    }
    params!(q4_1);
}

pub(super) struct Q5_0;
impl Block32 for Q5_0 {
    const BYTES: usize = formats::q5_0::BYTES;
    const HAS_MIN: bool = false;
    #[inline(always)]
    unsafe fn quants(p: *const u8) -> (int8x16_t, int8x16_t) {
        let (lo, hi) = nibbles(p.add(formats::q5_0::OFFSET_QS));
        let (blo, bhi) = fifth_bits(p.add(formats::q5_0::OFFSET_QH));
        let sixteen = vdupq_n_s8(16);
        (
            vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, blo)), sixteen),
            vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(hi, bhi)), sixteen),
        )
    }
    params!(q5_0);
}

pub(super) struct Q5_1;
impl Block32 for Q5_1 {
    const BYTES: usize = formats::q5_1::BYTES;
    const HAS_MIN: bool = true;
    #[inline(always)]
    unsafe fn quants(p: *const u8) -> (int8x16_t, int8x16_t) {
        let (lo, hi) = nibbles(p.add(formats::q5_1::OFFSET_QS));
        let (blo, bhi) = fifth_bits(p.add(formats::q5_1::OFFSET_QH));
        (
            vreinterpretq_s8_u8(vorrq_u8(lo, blo)),
            vreinterpretq_s8_u8(vorrq_u8(hi, bhi)),
        )
    }
    params!(q5_1);
}

macro_rules! eight_bit {
    ($name:ident, $module:ident) => {
        pub(super) struct $name;
        impl Block32 for $name {
            const BYTES: usize = formats::$module::BYTES;
            const HAS_MIN: bool = false;
            #[inline(always)]
            unsafe fn quants(p: *const u8) -> (int8x16_t, int8x16_t) {
                let q = p.add(formats::$module::OFFSET_QS).cast::<i8>();
                (vld1q_s8(q), vld1q_s8(q.add(16)))
            }
            params!($module);
        }
    };
}
eight_bit!(Q8_0, q8_0);
eight_bit!(Q8_1, q8_1);

macro_rules! codebook {
    ($name:ident, $module:ident) => {
        pub(super) struct $name;
        impl Block32 for $name {
            const BYTES: usize = formats::$module::BYTES;
            const HAS_MIN: bool = false;
            #[inline(always)]
            unsafe fn quants(p: *const u8) -> (int8x16_t, int8x16_t) {
                let table = vld1q_s8(formats::$module::KVALUES.as_ptr());
                let (lo, hi) = nibbles(p.add(formats::$module::OFFSET_QS));
                (vqtbl1q_s8(table, lo), vqtbl1q_s8(table, hi))
            }
            params!($module);
        }
    };
}
codebook!(Iq4Nl, iq4_nl);
codebook!(Mxfp4, mxfp4);
