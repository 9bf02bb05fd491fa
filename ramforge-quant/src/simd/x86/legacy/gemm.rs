//! The prefill kernels of the 32-element formats without a min: [`TILE_ROWS`] weight rows
//! times [`TILE`] tokens per call, so that what depends on one side only is done once for
//! the other (a weight block is unpacked once for all tokens, an activation block loaded
//! and its scale converted once for all rows), with no horizontal float sum until the end.
//!
//! Two shapes of the integer work:
//! - [`tile_unsigned`] (Q5_0): the quants stay unsigned (`maddubs` needs no sign trick) and
//!   the four tokens' i16 pair sums of a (row, block) are reduced together by an `hadd` tree
//!   into one vector, lane t the exact dot of the block's first 16 elements with token t's,
//!   lane t + 4 of its last 16; the offset (`BIAS` times the activation sums, reduced by the
//!   same tree once per block for all rows) is taken off exactly in i32. One conversion and
//!   one fma per (row, block) then serve all four tokens.
//! - [`tile_chunked`] (Q4_0): the same, but with the four tokens side by side inside each
//!   product (8-element weight chunks broadcast against the tokens' chunks), so no `hadd`.
//! - [`tile_signed`] (Q8_0, Q8_1, IQ4_NL: quants up to 128 in magnitude, whose sums leave
//!   i16): sign-trick `maddubs` per (row, token), widened to i32 by `madd`, then the four
//!   tokens reduced by an i32 `hadd` tree into the same lane layout.
//!
//! Rounding: per row, lane t (and t + 4) accumulates `fma(isum, dw * da_t, acc)` over the
//! blocks in order, with `isum` the exact integer dot of half the block and `dw * da_t`
//! exact in f32 (11-bit by 11-bit significands); the two lanes of a token are added at the
//! end. The same exact terms as `vec_dot`'s, summed in another order: results differ from
//! it by f32 rounding only. (An `hadd` tree measured faster here than `madd` plus unpacks.)

use super::blocks::{Bytes, Weights, LANES};
use super::common::{read_u16, read_u32};
use crate::formats::{q4_0, q5_0};
use crate::kernel_table::{TILE, TILE_ROWS};
use std::arch::x86_64::*;

/// A format without a min whose quants widen to 32 signed bytes (the value is `d * q`).
pub(super) trait Signed: Weights {
    /// Block `b`'s quants as signed bytes, in element order (element j in byte j).
    unsafe fn signed(b: *const u8) -> __m256i;
}

/// 16 bytes of nibbles at `p` in element order: low nibbles (elements 0..16), then high.
#[inline(always)]
unsafe fn nibbles(p: *const u8) -> __m256i {
    let both = _mm256_broadcastsi128_si256(_mm_loadu_si128(p.cast()));
    let shifted = _mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4));
    _mm256_and_si256(shifted, _mm256_set1_epi8(0x0F))
}

/// A 4- or 5-bit format without a min: unsigned quants, the value `d * (q - BIAS)`.
pub(super) trait Unsigned: Weights {
    const BIAS: i8;
    /// Block `b`'s unsigned quants, in element order (element j in byte j).
    unsafe fn unsigned(b: *const u8) -> __m256i;
}

impl Unsigned for super::blocks::Q4_0 {
    const BIAS: i8 = 8;
    #[inline(always)]
    unsafe fn unsigned(b: *const u8) -> __m256i {
        nibbles(b.add(q4_0::OFFSET_QS))
    }
}

impl Unsigned for super::blocks::Q5_0 {
    const BIAS: i8 = 16;
    #[inline(always)]
    unsafe fn unsigned(b: *const u8) -> __m256i {
        // Element j's fifth bit is bit j of the u32 `qh`: byte j of the spread picks byte
        // j / 8 of that word, then its bit j % 8.
        let words = _mm256_set1_epi32(read_u32(b.add(q5_0::OFFSET_QH)) as i32);
        let which = _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_and_si256(_mm256_shuffle_epi8(words, which), bit);
        let fifth = _mm256_and_si256(_mm256_cmpeq_epi8(set, bit), _mm256_set1_epi8(0x10));
        _mm256_or_si256(nibbles(b.add(q5_0::OFFSET_QS)), fifth)
    }
}

impl<const BYTES: usize, const D: usize, const QS: usize> Signed
    for super::blocks::Q8<BYTES, D, QS>
{
    #[inline(always)]
    unsafe fn signed(b: *const u8) -> __m256i {
        <Self as Bytes>::quants(b)
    }
}

impl Signed for super::blocks::Iq4Nl {
    #[inline(always)]
    unsafe fn signed(b: *const u8) -> __m256i {
        <Self as Bytes>::quants(b)
    }
}

impl Signed for super::blocks::Mxfp4 {
    #[inline(always)]
    unsafe fn signed(b: *const u8) -> __m256i {
        <Self as Bytes>::quants(b)
    }
}

/// [`TILE_ROWS`] weight rows (back to back in `w`) dotted with [`TILE`] activation rows:
/// `out[r][t]` is row r with token t. Each (row, token) block dot is widened to i32 by
/// `madd` (its sums may leave i16), then the four tokens' are reduced together as in
/// [`reduce_tokens`] (lane t: token t's first 16 elements, lane t + 4: its last 16).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile_signed<F: Signed>(
    w: &[u8],
    a: [&[u8]; TILE],
) -> [[f32; TILE]; TILE_ROWS] {
    let ones = _mm256_set1_epi16(1);
    let acc = accumulate::<F, _>(
        w,
        a,
        |ap, b| {
            (
                token_quants::<F>(ap, b),
                token_scales(ap, b * F::ACT.bytes + F::ACT.d),
            )
        },
        |x, wb| {
            let q = F::signed(wb);
            // |q| (-128 stays the byte 0x80, which `maddubs` reads as 128).
            let mag = _mm256_sign_epi8(q, q);
            let mut p = [_mm256_setzero_si256(); TILE];
            for t in 0..TILE {
                // Pair sums of |q| * (x with q's sign): at most 2 * 128 * 127, no
                // saturation (activation quants are at most 127 in magnitude).
                let pairs = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(x[t], q));
                p[t] = _mm256_madd_epi16(pairs, ones);
            }
            let h01 = _mm256_hadd_epi32(p[0], p[1]);
            let h23 = _mm256_hadd_epi32(p[2], p[3]);
            _mm256_hadd_epi32(h01, h23)
        },
    );
    fold_halves(acc)
}

/// The block loop the tile kernels share, over the blocks of [`TILE_ROWS`] weight rows (back
/// to back in `w`) and [`TILE`] activation rows: for each block `b`, `tokens(ap, b)` gives
/// what the tokens share (their quants as the kernel arranges them, and their scales `da` in
/// its lane layout); then for each row, `isum(shared, block)` gives the exact integer dots
/// of its block in that layout, and the row's accumulator takes `fma(isum, dw * da, acc)`.
/// The weight scales `dw` are converted eight blocks at a time.
#[inline(always)]
pub(super) unsafe fn accumulate<F: Weights, S>(
    w: &[u8],
    a: [&[u8]; TILE],
    mut tokens: impl FnMut([*const u8; TILE], usize) -> (S, __m256),
    mut isum: impl FnMut(&S, *const u8) -> __m256i,
) -> [__m256; TILE_ROWS] {
    let row = w.len() / TILE_ROWS;
    let nb = a
        .iter()
        .fold(row / F::BYTES, |n, r| n.min(r.len() / F::ACT.bytes));
    let mut wp = [w.as_ptr(); TILE_ROWS];
    for (r, p) in wp.iter_mut().enumerate() {
        *p = w.as_ptr().add(r * row);
    }
    let ap = a.map(|r| r.as_ptr());
    let mut acc = [_mm256_setzero_ps(); TILE_ROWS];
    // The weight scales of the current group of (up to) eight blocks.
    let mut dw = [[0f32; LANES]; TILE_ROWS];
    let mut i = 0;
    while i < nb {
        let n = (nb - i).min(LANES);
        for r in 0..TILE_ROWS {
            // Lanes past `n` repeat the last block.
            let blocks: [*const u8; LANES] =
                std::array::from_fn(|k| wp[r].add((i + k.min(n - 1)) * F::BYTES));
            let v = F::scales(blocks);
            _mm256_storeu_ps(dw[r].as_mut_ptr(), v);
        }
        for (k, b) in (i..i + n).enumerate() {
            let (shared, da) = tokens(ap, b);
            for r in 0..TILE_ROWS {
                let s = isum(&shared, wp[r].add(b * F::BYTES));
                let d = _mm256_mul_ps(_mm256_broadcast_ss(&dw[r][k]), da);
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc[r]);
            }
        }
        i += n;
    }
    acc
}

/// The four tokens' activation quants of block `b`.
#[inline(always)]
pub(super) unsafe fn token_quants<F: Weights>(ap: [*const u8; TILE], b: usize) -> [__m256i; TILE] {
    let mut x = [_mm256_setzero_si256(); TILE];
    for t in 0..TILE {
        x[t] = _mm256_loadu_si256(ap[t].add(b * F::ACT.bytes + F::ACT.qs).cast());
    }
    x
}

/// Per row, each token's two lanes (t and t + 4) added.
#[inline(always)]
pub(super) unsafe fn fold_halves(acc: [__m256; TILE_ROWS]) -> [[f32; TILE]; TILE_ROWS] {
    let mut out = [[0f32; TILE]; TILE_ROWS];
    for r in 0..TILE_ROWS {
        let lanes = std::mem::transmute::<__m256, [f32; LANES]>(acc[r]);
        for t in 0..TILE {
            out[r][t] = lanes[t] + lanes[t + TILE];
        }
    }
    out
}

const _: () = assert!(TILE == 4, "reduce_tokens and token_scales take four tokens");

/// The four tokens' i16 pair sums `p[t]` of one block, reduced exactly to i32 lanes: lane t
/// sums token t's first 16 elements, lane t + 4 its last 16 (`hadd` works per 128-bit
/// half). The i16 partial sums hold 8 products of at most 31 * 127 in magnitude (Q5_0).
#[inline(always)]
unsafe fn reduce_tokens(p: [__m256i; TILE], ones: __m256i) -> __m256i {
    let h01 = _mm256_hadd_epi16(p[0], p[1]);
    let h23 = _mm256_hadd_epi16(p[2], p[3]);
    _mm256_madd_epi16(_mm256_hadd_epi16(h01, h23), ones)
}

/// The four tokens' f16 scales at `ap[t] + off` as `[da_0 .. da_3 | da_0 .. da_3]`.
#[inline(always)]
pub(super) unsafe fn token_scales(ap: [*const u8; TILE], off: usize) -> __m256 {
    let mut packed = 0u64;
    for (t, p) in ap.iter().enumerate() {
        packed |= (read_u16(p.add(off)) as u64) << (16 * t);
    }
    let v = _mm_cvtph_ps(_mm_set_epi64x(0, packed as i64));
    _mm256_set_m128(v, v)
}

/// The four tokens' f16 scales at `ap[t] + off` as `[da_0, da_0, da_1, da_1 | da_2, da_2,
/// da_3, da_3]` ([`tile_chunked`]'s layout).
#[inline(always)]
pub(super) unsafe fn pair_scales(ap: [*const u8; TILE], off: usize) -> __m256 {
    let v = _mm256_castps256_ps128(token_scales(ap, off));
    _mm256_set_m128(_mm_unpackhi_ps(v, v), _mm_unpacklo_ps(v, v))
}

/// [`TILE_ROWS`] weight rows (back to back in `w`) dotted with [`TILE`] activation rows:
/// `out[r][t]` is row r with token t.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile_unsigned<F: Unsigned>(
    w: &[u8],
    a: [&[u8]; TILE],
) -> [[f32; TILE]; TILE_ROWS] {
    let ones = _mm256_set1_epi16(1);
    let bias = _mm256_set1_epi8(F::BIAS);
    // Lane t (and t + 4) of row r: token t.
    let acc = accumulate::<F, _>(
        w,
        a,
        |ap, b| {
            let x = token_quants::<F>(ap, b);
            let mut offset = [_mm256_setzero_si256(); TILE];
            for t in 0..TILE {
                offset[t] = _mm256_maddubs_epi16(bias, x[t]);
            }
            let offset = reduce_tokens(offset, ones);
            ((x, offset), token_scales(ap, b * F::ACT.bytes + F::ACT.d))
        },
        |(x, offset), wb| {
            let q = F::unsigned(wb);
            let mut p = [_mm256_setzero_si256(); TILE];
            for t in 0..TILE {
                // Pair sums of at most 2 * 31 * 127: no saturation.
                p[t] = _mm256_maddubs_epi16(q, x[t]);
            }
            _mm256_sub_epi32(reduce_tokens(p, ones), *offset)
        },
    );
    fold_halves(acc)
}

/// A [`Unsigned`] format whose block splits cheaply into four chunks of 8 elements, each
/// broadcast to the four 64-bit lanes (chunk c: elements 8c .. 8c + 8), for [`tile_chunked`].
pub(super) trait Chunked: Unsigned {
    unsafe fn chunks(b: *const u8) -> [__m256i; 4];
}

impl Chunked for super::blocks::Q4_0 {
    #[inline(always)]
    unsafe fn chunks(b: *const u8) -> [__m256i; 4] {
        // Elements 0..16 are the low nibbles of the 16 bytes at 2, 16..32 the high ones.
        let m = _mm256_set1_epi8(0x0F);
        let qs = b.add(q4_0::OFFSET_QS);
        let first = _mm256_set1_epi64x(qs.cast::<i64>().read_unaligned());
        let second = _mm256_set1_epi64x(qs.add(8).cast::<i64>().read_unaligned());
        [
            _mm256_and_si256(first, m),
            _mm256_and_si256(second, m),
            _mm256_and_si256(_mm256_srli_epi16::<4>(first), m),
            _mm256_and_si256(_mm256_srli_epi16::<4>(second), m),
        ]
    }
}

/// Four tokens' activation quants of one block regrouped by chunk: vector c holds elements
/// 8c .. 8c + 8 of token 0, then of tokens 1, 2 and 3 (a 4 x 4 transpose of 64-bit words).
#[inline(always)]
pub(super) unsafe fn by_chunk(x: [__m256i; TILE]) -> [__m256i; 4] {
    let l01 = _mm256_unpacklo_epi64(x[0], x[1]);
    let h01 = _mm256_unpackhi_epi64(x[0], x[1]);
    let l23 = _mm256_unpacklo_epi64(x[2], x[3]);
    let h23 = _mm256_unpackhi_epi64(x[2], x[3]);
    [
        _mm256_permute2x128_si256::<0x20>(l01, l23),
        _mm256_permute2x128_si256::<0x20>(h01, h23),
        _mm256_permute2x128_si256::<0x31>(l01, l23),
        _mm256_permute2x128_si256::<0x31>(h01, h23),
    ]
}

/// The exact dots of the unsigned chunks `w` with the four tokens' chunks `x` ([`by_chunk`]):
/// lanes 2t and 2t + 1 hold token t's (each 16 products). The i16 sums add 8 products of at
/// most 15 * 127 in magnitude.
#[inline(always)]
unsafe fn chunk_dots(w: [__m256i; 4], x: &[__m256i; 4], ones: __m256i) -> __m256i {
    let s01 = _mm256_add_epi16(
        _mm256_maddubs_epi16(w[0], x[0]),
        _mm256_maddubs_epi16(w[1], x[1]),
    );
    let s23 = _mm256_add_epi16(
        _mm256_maddubs_epi16(w[2], x[2]),
        _mm256_maddubs_epi16(w[3], x[3]),
    );
    _mm256_madd_epi16(_mm256_add_epi16(s01, s23), ones)
}

/// [`tile_unsigned`] with the tokens side by side in every product instead of reduced by an
/// `hadd` tree: each weight chunk is broadcast and multiplied with the four tokens' chunks at
/// once (measured 7% faster for Q4_0; Q5_0's fifth bits make its chunks dearer, so it keeps
/// [`tile_unsigned`]). Lanes 2t and 2t + 1 of a row's accumulator are token t.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile_chunked<F: Chunked>(
    w: &[u8],
    a: [&[u8]; TILE],
) -> [[f32; TILE]; TILE_ROWS] {
    let ones = _mm256_set1_epi16(1);
    let bias = _mm256_set1_epi8(F::BIAS);
    let acc = accumulate::<F, _>(
        w,
        a,
        |ap, b| {
            let x = by_chunk(token_quants::<F>(ap, b));
            let offset = chunk_dots([bias; 4], &x, ones);
            ((x, offset), pair_scales(ap, b * F::ACT.bytes + F::ACT.d))
        },
        |(x, offset), wb| _mm256_sub_epi32(chunk_dots(F::chunks(wb), x, ones), *offset),
    );
    fold_pairs(acc)
}

/// Per row, each token's two lanes (2t and 2t + 1) added: [`tile_chunked`]'s layout.
#[inline(always)]
pub(super) unsafe fn fold_pairs(acc: [__m256; TILE_ROWS]) -> [[f32; TILE]; TILE_ROWS] {
    let mut out = [[0f32; TILE]; TILE_ROWS];
    for r in 0..TILE_ROWS {
        let lanes = std::mem::transmute::<__m256, [f32; LANES]>(acc[r]);
        for t in 0..TILE {
            out[r][t] = lanes[2 * t] + lanes[2 * t + 1];
        }
    }
    out
}
