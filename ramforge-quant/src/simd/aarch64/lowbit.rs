//! The low-bit formats' chunks of 32 quants as two `int8x16_t`, for the Q8_K driver of
//! [`super::dots`]: grid rows gathered by scalar loads into vectors (NEON has no gather),
//! signs, IQ1's eightfold grid and delta, and TQ1_0's base-3 digits applied with vector code;
//! and NVFP4's quants against its two Q8_0 blocks. Every quant is the reference's `unpack`,
//! and scales are its `group_params`.
//!
//! Like [`super::blocks`], every function here is `#[inline(always)]` and only inlined into
//! `#[target_feature]` bodies; a `chunk` reads its block's `BYTES` bytes.

use super::blocks::{bit_masks, block_k, k_crumbs, nibbles, BlockK};
use crate::formats;
use crate::spec_support::u32_at;
use std::arch::aarch64::*;

/// ggml's `ksigns`: a 7-bit sign index to the sign bits of its eight elements, the eighth
/// making the count of minus signs even (the reference's `ksign`).
const KSIGNS: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut s = 0;
    while s < 128 {
        t[s] = s as u8 | ((s.count_ones() as u8 & 1) << 7);
        s += 1;
    }
    t
};

/// The sign bits of a chunk's four groups of 8 (one byte each, element 8l + i in bit i of
/// byte l) from four 7-bit sign indices.
#[inline(always)]
fn ksigns(index: [u32; 4]) -> u32 {
    u32::from_le_bytes(index.map(|s| KSIGNS[(s & 0x7F) as usize]))
}

/// `q` negated where bit j of `bits` is set (two's complement, as `q * -1` wraps in `i8`).
#[inline(always)]
unsafe fn signed(q: (int8x16_t, int8x16_t), bits: u32) -> (int8x16_t, int8x16_t) {
    let (lo, hi) = bit_masks(bits);
    let neg = |q: int8x16_t, m: uint8x16_t| {
        let m = vreinterpretq_s8_u8(m);
        vsubq_s8(veorq_s8(q, m), m)
    };
    (neg(q.0, lo), neg(q.1, hi))
}

/// Rows `r` of a grid eight wide: a chunk's 32 quants.
#[inline(always)]
unsafe fn rows8(grid: &[[i8; 8]], r: [usize; 4]) -> (int8x16_t, int8x16_t) {
    let row = |i: usize| vld1_s8(grid[r[i]].as_ptr());
    (vcombine_s8(row(0), row(1)), vcombine_s8(row(2), row(3)))
}

/// Rows `r` of a grid four wide: a chunk's 32 quants.
#[inline(always)]
unsafe fn rows4(grid: &[[i8; 4]], r: [usize; 8]) -> (int8x16_t, int8x16_t) {
    let word = |i: usize| u32::from_le_bytes(grid[r[i]].map(|v| v as u8));
    let four = |i: usize| {
        let words = [word(i), word(i + 1), word(i + 2), word(i + 3)];
        vreinterpretq_s8_u32(vld1q_u32(words.as_ptr()))
    };
    (four(0), four(4))
}

/// The block of format `$module` at `p`, by its generated fields.
macro_rules! block_at {
    ($module:ident, $p:ident) => {
        &*$p.cast::<formats::$module::Block>()
    };
}

block_k!(Iq2Xxs = iq2_xxs, |p, c| {
    // Chunk c is qs[8c..8c + 8]: four grid rows, then a u32 of four sign indices (bits 7l..).
    let qs = &block_at!(iq2_xxs, p).qs;
    let aux = u32_at(qs, 8 * c + 4);
    let rows = rows8(
        &formats::iq2_xxs::GRID,
        [0, 1, 2, 3].map(|l| qs[8 * c + l] as usize),
    );
    signed(rows, ksigns([0, 1, 2, 3].map(|l| aux >> (7 * l))))
});

block_k!(Iq2Xs = iq2_xs, |p, c| {
    // Groups 4c..4c + 4: a u16 each, grid row in bits 0-8, sign index in bits 9-15.
    let b = block_at!(iq2_xs, p);
    let q: [u32; 4] = std::array::from_fn(|l| u16::from_le_bytes(b.qs[4 * c + l]) as u32);
    let rows = rows8(&formats::iq2_xs::GRID, q.map(|v| (v & 511) as usize));
    signed(rows, ksigns(q.map(|v| v >> 9)))
});

block_k!(Iq2S = iq2_s, |p, c| {
    // Group 4c + l: row qs[4c + l] plus bits 2l.. of qh[c] as bits 8-9; one sign bit each.
    let b = block_at!(iq2_s, p);
    let r =
        [0, 1, 2, 3].map(|l| b.qs[4 * c + l] as usize | ((b.qh[c] as usize >> (2 * l)) & 3) << 8);
    signed(rows8(&formats::iq2_s::GRID, r), u32_at(&b.signs, 4 * c))
});

block_k!(Iq3Xxs = iq3_xxs, |p, c| {
    // Eight rows qs[8c..8c + 8]; sign indices in the u32 at sas[4c] (bits 7l..).
    let b = block_at!(iq3_xxs, p);
    let aux = u32_at(&b.sas, 4 * c);
    let rows = rows4(
        &formats::iq3_xxs::GRID,
        std::array::from_fn(|i| b.qs[8 * c + i] as usize),
    );
    signed(rows, ksigns([0, 1, 2, 3].map(|l| aux >> (7 * l))))
});

block_k!(Iq3S = iq3_s, |p, c| {
    // Row qs[8c + i] plus bit i of qh[c] as bit 8; one sign bit per element.
    let b = block_at!(iq3_s, p);
    let r = std::array::from_fn(|i| b.qs[8 * c + i] as usize | ((b.qh[c] as usize >> i) & 1) << 8);
    signed(rows4(&formats::iq3_s::GRID, r), u32_at(&b.signs, 4 * c))
});

block_k!(Iq1S = iq1_s, |p, c| {
    // Row qs[4c + l] plus bits 3l.. of the u16 qh[c] as bits 8-10; quant 8 grid + delta,
    // the delta's sign bit 15 of qh[c].
    let b = block_at!(iq1_s, p);
    let h = u16::from_le_bytes(b.qh[c]) as usize;
    let r = [0, 1, 2, 3].map(|l| b.qs[4 * c + l] as usize | ((h >> (3 * l)) & 7) << 8);
    let (lo, hi) = rows8(&formats::iq1_s::GRID, r);
    let delta = vdupq_n_s8(if h & 0x8000 != 0 { -1 } else { 1 });
    (
        vaddq_s8(vshlq_n_s8::<3>(lo), delta),
        vaddq_s8(vshlq_n_s8::<3>(hi), delta),
    )
});

block_k!(Iq1M = iq1_m, |p, c| {
    // Group 4c + l: nibble l % 2 of qh[2c + l / 2] holds row bits 8-10 and (bit 3) the
    // sign of its own delta; quant 8 grid + delta.
    let b = block_at!(iq1_m, p);
    let nib = [0, 1, 2, 3].map(|l| b.qh[2 * c + l / 2] >> (4 * (l % 2)));
    let r: [usize; 4] =
        std::array::from_fn(|l| b.qs[4 * c + l] as usize | ((nib[l] & 7) as usize) << 8);
    let delta = nib.map(|n| vdup_n_s8(if n & 8 != 0 { -1 } else { 1 }));
    let (lo, hi) = rows8(&formats::iq1_m::GRID, r);
    (
        vaddq_s8(vshlq_n_s8::<3>(lo), vcombine_s8(delta[0], delta[1])),
        vaddq_s8(vshlq_n_s8::<3>(hi), vcombine_s8(delta[2], delta[3])),
    )
});

block_k!(Tq2_0 = tq2_0, |p, c| {
    // Q2_K's layout of 2-bit fields, stored as q + 1.
    let (lo, hi) = k_crumbs(p.add(formats::tq2_0::OFFSET_QS), c);
    let one = vdupq_n_s8(1);
    (
        vsubq_s8(vreinterpretq_s8_u8(lo), one),
        vsubq_s8(vreinterpretq_s8_u8(hi), one),
    )
});

/// Base-3 digit `n` of each byte, where `pow3` holds `3^n`: the reference's `trit`, the byte
/// times `3^n` (wrapping) times 3, shifted right by 8, minus 1.
#[inline(always)]
unsafe fn trits(bytes: uint8x16_t, pow3: uint8x16_t) -> int8x16_t {
    let q = vmulq_u8(bytes, pow3);
    let three = vdup_n_u8(3);
    let lo = vshrn_n_u16::<8>(vmull_u8(vget_low_u8(q), three));
    let hi = vshrn_n_u16::<8>(vmull_high_u8(q, vdupq_n_u8(3)));
    vsubq_s8(vreinterpretq_s8_u8(vcombine_u8(lo, hi)), vdupq_n_s8(1))
}

block_k!(Tq1_0 = tq1_0, |p, c| {
    // Chunks 0-4 are digit c of qs[0..32]; chunks 5-7 digits 0-4 of qs[32..48] 16 at a
    // time, and last digits 0-3 of qh[0..4] (lane 4n + m: digit n of qh[m]).
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    const QH_POW3: [u8; 16] = [1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27];
    let qs = p.add(formats::tq1_0::OFFSET_QS);
    let pow = |n: usize| vdupq_n_u8(POW3[n]);
    if c < 5 {
        (
            trits(vld1q_u8(qs), pow(c)),
            trits(vld1q_u8(qs.add(16)), pow(c)),
        )
    } else {
        let tail = vld1q_u8(qs.add(32));
        let n = 2 * (c - 5);
        if c < 7 {
            (trits(tail, pow(n)), trits(tail, pow(n + 1)))
        } else {
            let qh = p
                .add(formats::tq1_0::OFFSET_QH)
                .cast::<[u8; 4]>()
                .read_unaligned();
            let qh = vreinterpretq_u8_u32(vdupq_n_u32(u32::from_le_bytes(qh)));
            (trits(tail, pow(4)), trits(qh, vld1q_u8(QH_POW3.as_ptr())))
        }
    }
});

/// NVFP4 block `p`'s groups `2k` and `2k + 1` (its elements `32k..32k + 32`, against its
/// Q8_0 block `k`): group g's elements are the low nibbles of `qs[8g..8g + 8]`, then their
/// high nibbles, each an E2M1 level from `KVALUES`.
#[inline(always)]
pub(super) unsafe fn nvfp4_pair(p: *const u8, k: usize) -> (int8x16_t, int8x16_t) {
    let table = vld1q_s8(formats::nvfp4::KVALUES.as_ptr());
    let (lo, hi) = nibbles(p.add(formats::nvfp4::OFFSET_QS + 16 * k));
    (
        vqtbl1q_s8(table, vcombine_u8(vget_low_u8(lo), vget_low_u8(hi))),
        vqtbl1q_s8(table, vcombine_u8(vget_high_u8(lo), vget_high_u8(hi))),
    )
}
