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
pub(super) unsafe fn nibbles(p: *const u8) -> (uint8x16_t, uint8x16_t) {
    let v = vld1q_u8(p);
    (vandq_u8(v, vdupq_n_u8(0x0F)), vshrq_n_u8::<4>(v))
}

/// Bit j of `bits` as a byte mask in byte j (0xFF where set; j < 32): elements 0..16, 16..32.
#[inline(always)]
pub(super) unsafe fn bit_masks(bits: u32) -> (uint8x16_t, uint8x16_t) {
    let v = vreinterpretq_u8_u32(vdupq_n_u32(bits));
    const LO: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1];
    const HI: [u8; 16] = [2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3];
    const BIT: [u8; 16] = [1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128];
    let bit = vld1q_u8(BIT.as_ptr());
    let spread = |idx: &[u8; 16]| vtstq_u8(vqtbl1q_u8(v, vld1q_u8(idx.as_ptr())), bit);
    (spread(&LO), spread(&HI))
}

/// Bit j of the little-endian u32 at `p` as 0x10 in byte j (j < 32): Q5's fifth bits.
#[inline(always)]
unsafe fn fifth_bits(p: *const u8) -> (uint8x16_t, uint8x16_t) {
    let (lo, hi) = bit_masks(u32::from_le_bytes(p.cast::<[u8; 4]>().read_unaligned()));
    let sixteen = vdupq_n_u8(0x10);
    (vandq_u8(lo, sixteen), vandq_u8(hi, sixteen))
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

/// A 256-element block against Q8_K activations (the K-quants, IQ4_XS and the low-bit
/// formats): eight chunks of 32 quants, in groups of `GROUP` (16, 32 or the whole block 256)
/// elements with a scale (and maybe a min) each.
pub(super) trait BlockK {
    const BYTES: usize;
    const HAS_MIN: bool;
    /// Elements per group: 16 (half a chunk), 32 (a chunk) or 256 (the block).
    const GROUP: usize;
    /// Quants `32 * c .. 32 * c + 32` of the block at `p`: elements `..+16`, `+16..+32`.
    unsafe fn chunk(p: *const u8, c: usize) -> (int8x16_t, int8x16_t);
    /// Every group's scale and min (the first `256 / GROUP` entries), as the reference
    /// computes them.
    fn params(b: &[u8]) -> ([f32; 16], [f32; 16]);
}

/// `block_k!(Name = module, |p, c| body)` (or `Name = module, min, ...` for a format with
/// mins): the [`BlockK`] of generated format `module`, its size, group and params the
/// generated ones, `body` its `chunk` (an `unsafe` body, only inlined into
/// `#[target_feature]` code).
macro_rules! block_k {
    ($(#[$doc:meta])* $name:ident = $module:ident $(, $min:ident)?, |$p:ident, $c:ident| $body:block) => {
        $(#[$doc])*
        pub(super) struct $name;
        impl BlockK for $name {
            const BYTES: usize = formats::$module::BYTES;
            const HAS_MIN: bool = block_k!(@min $($min)?);
            const GROUP: usize = formats::$module::GROUP;
            #[inline(always)]
            unsafe fn chunk($p: *const u8, $c: usize) -> (int8x16_t, int8x16_t) $body
            fn params(b: &[u8]) -> ([f32; 16], [f32; 16]) {
                let (s, m) = formats::$module::group_params(&formats::$module::blocks(b)[0]);
                let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
                scales[..s.len()].copy_from_slice(&s);
                mins[..m.len()].copy_from_slice(&m);
                (scales, mins)
            }
        }
    };
    (@min) => { false };
    (@min min) => { true };
}
pub(super) use block_k;

/// Q8_K's scale: an f32 field, as the reference reads it.
pub(super) fn q8k_scale(b: &[u8]) -> f32 {
    formats::q8_k::group_params(&formats::q8_k::blocks(b)[0]).0[0]
}

/// The nibbles of chunk `c` of Q4_K/Q5_K's `qs` at `qs`: the low ones of a 32-byte run for
/// even chunks, the high ones for odd.
#[inline(always)]
unsafe fn k_nibbles(qs: *const u8, c: usize) -> (uint8x16_t, uint8x16_t) {
    let run = qs.add(32 * (c / 2));
    let (a, b) = (vld1q_u8(run), vld1q_u8(run.add(16)));
    if c.is_multiple_of(2) {
        let m = vdupq_n_u8(0x0F);
        (vandq_u8(a, m), vandq_u8(b, m))
    } else {
        (vshrq_n_u8::<4>(a), vshrq_n_u8::<4>(b))
    }
}

block_k!(Q4K = q4_k, min, |p, c| {
    let (lo, hi) = k_nibbles(p.add(formats::q4_k::OFFSET_QS), c);
    (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi))
});

block_k!(Q5K = q5_k, min, |p, c| {
    let (lo, hi) = k_nibbles(p.add(formats::q5_k::OFFSET_QS), c);
    // Element j's fifth bit is bit j / 32 of qh[j % 32].
    let qh = p.add(formats::q5_k::OFFSET_QH);
    let bit = vdupq_n_u8(1 << c);
    let fifth = |v: uint8x16_t| vandq_u8(vtstq_u8(v, bit), vdupq_n_u8(0x10));
    (
        vreinterpretq_s8_u8(vorrq_u8(lo, fifth(vld1q_u8(qh)))),
        vreinterpretq_s8_u8(vorrq_u8(hi, fifth(vld1q_u8(qh.add(16))))),
    )
});

block_k!(Q6K = q6_k, |p, c| {
    // Chunk c is quarter q of half h: low 4 bits from ql's run 64h + 32(q % 2) (low
    // nibbles for q < 2), high 2 bits from qh[32h..] shifted by 2q; stored with +32.
    let (h, q) = (c / 4, c % 4);
    let ql = p.add(formats::q6_k::OFFSET_QL + 64 * h + 32 * (q % 2));
    let qh = p.add(formats::q6_k::OFFSET_QH + 32 * h);
    let low = |v: uint8x16_t| {
        if q < 2 {
            vandq_u8(v, vdupq_n_u8(0x0F))
        } else {
            vshrq_n_u8::<4>(v)
        }
    };
    let shift = vdupq_n_s8(-2 * q as i8);
    let high = |v: uint8x16_t| vshlq_n_u8::<4>(vandq_u8(vshlq_u8(v, shift), vdupq_n_u8(3)));
    let quants = |l: uint8x16_t, h: uint8x16_t| {
        vsubq_s8(
            vreinterpretq_s8_u8(vorrq_u8(low(l), high(h))),
            vdupq_n_s8(32),
        )
    };
    (
        quants(vld1q_u8(ql), vld1q_u8(qh)),
        quants(vld1q_u8(ql.add(16)), vld1q_u8(qh.add(16))),
    )
});

/// The 2-bit fields of chunk `c = 4h + q` of Q2_K/Q3_K's `qs` at `qs`: bits `2q..2q + 2` of
/// the 32-byte run `32h`.
#[inline(always)]
pub(super) unsafe fn k_crumbs(qs: *const u8, c: usize) -> (uint8x16_t, uint8x16_t) {
    let run = qs.add(32 * (c / 4));
    let shift = vdupq_n_s8(-2 * (c % 4) as i8);
    let field = |v: uint8x16_t| vandq_u8(vshlq_u8(v, shift), vdupq_n_u8(3));
    (field(vld1q_u8(run)), field(vld1q_u8(run.add(16))))
}

block_k!(Q2K = q2_k, min, |p, c| {
    let (lo, hi) = k_crumbs(p.add(formats::q2_k::OFFSET_QS), c);
    (vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi))
});

block_k!(Q3K = q3_k, |p, c| {
    let (lo, hi) = k_crumbs(p.add(formats::q3_k::OFFSET_QS), c);
    // Minus 4 where bit c of hmask[j % 32] is clear.
    let hmask = p.add(formats::q3_k::OFFSET_HMASK);
    let bit = vdupq_n_u8(1 << c);
    let quants = |q: uint8x16_t, m: uint8x16_t| {
        let minus = vbicq_u8(vdupq_n_u8(4), vtstq_u8(m, bit));
        vsubq_s8(vreinterpretq_s8_u8(q), vreinterpretq_s8_u8(minus))
    };
    (
        quants(lo, vld1q_u8(hmask)),
        quants(hi, vld1q_u8(hmask.add(16))),
    )
});

block_k!(Iq4Xs = iq4_xs, |p, c| {
    // Chunk c is IQ4_NL's layout on the 16 bytes at 16c.
    let table = vld1q_s8(formats::iq4_xs::KVALUES.as_ptr());
    let (lo, hi) = nibbles(p.add(formats::iq4_xs::OFFSET_QS + 16 * c));
    (vqtbl1q_s8(table, lo), vqtbl1q_s8(table, hi))
});
