//! The prefill kernels of the 32-element formats: [`TILE_ROWS`] weight rows times [`TILE`]
//! tokens per call, so that what depends on one side only is done once for the other (a
//! weight block is unpacked once for all tokens, an activation block loaded and its scale
//! converted once for all rows), with no horizontal float sum until the end.
//!
//! The shapes of the integer work:
//! - [`tile_unsigned`] (Q5_0): the quants stay unsigned (`maddubs` needs no sign trick) and
//!   the four tokens' i16 pair sums of a (row, block) are reduced together by an `hadd` tree
//!   into one vector, lane t the exact dot of the block's first 16 elements with token t's,
//!   lane t + 4 of its last 16; the offset (`BIAS` times the activation sums, reduced by the
//!   same tree once per block for all rows) is taken off exactly in i32. One conversion and
//!   one fma per (row, block) then serve all four tokens.
//! - [`tile_chunked`] (Q4_0): the same, but with the four tokens side by side inside each
//!   product (8-element weight chunks broadcast against the tokens' chunks), so no `hadd`.
//! - [`tile_signed`] (Q8_0, Q8_1, IQ4_NL, MXFP4: quants up to 128 in magnitude, whose sums
//!   leave i16): [`tile_chunked`]'s layout, sign-trick `maddubs` widened to i32 by `madd`.
//! - [`tile_chunked_min`] (Q4_1): [`tile_chunked`]'s layout with a min, bit for bit `vec_dot`.
//!
//! Rounding, but for [`tile_chunked_min`]: per row, each token's two lanes (t and t + 4; 2t
//! and 2t + 1 in the chunked layout) accumulate `fma(isum, dw * da_t, acc)` over the blocks
//! in order, with `isum` the exact integer dot of half the block's products and `dw * da_t`
//! exact in f32 (11-bit by 11-bit significands); the two lanes of a token are added at the
//! end. The same exact terms as `vec_dot`'s, summed in another order: results differ from
//! it by f32 rounding only. (For Q5_0 an `hadd` tree measured faster than `madd` plus unpacks.)

use super::blocks::{Bytes, Weights, LANES};
use super::common::{f16x8, nibbles, read_u16, read_u32};
use crate::formats::{q4_0, q4_1, q5_0};
use crate::kernel_table::{TILE, TILE_ROWS};
use std::arch::x86_64::*;

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

/// [`TILE_ROWS`] weight rows (back to back in `w`) dotted with [`TILE`] activation rows:
/// `out[r][t]` is row r with token t, lanes 2t and 2t + 1 of a row's accumulator. The four
/// tokens sit side by side in every product, as in [`tile_chunked`]: each 8-element chunk of
/// a weight block is broadcast against the tokens' chunks ([`by_chunk`]), so no `hadd` tree
/// reduces the tokens. The sign trick puts the magnitudes on the activations (taken once per
/// block for every row) and their signs on the weights, which is exact for every weight
/// quant but -128; a Q8 block holding one takes the weights' magnitudes instead.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile_signed<F: Bytes>(w: &[u8], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE_ROWS] {
    let ones = _mm256_set1_epi16(1);
    let acc = accumulate::<F, _>(
        w,
        a,
        |ap, b| {
            let x = by_chunk::<F>(ap, b);
            // |x| as bytes: -128 stays 0x80, which `maddubs` reads as 128.
            let mag = x.map(|v| _mm256_sign_epi8(v, v));
            ((x, mag), pair_scales(ap, b * F::ACT.bytes + F::ACT.d))
        },
        |(x, xmag), wb| {
            let q = F::quants(wb);
            let qc = broadcast_chunks(q);
            let mut sum = _mm256_setzero_si256();
            let minus_128 = _mm256_cmpeq_epi8(q, _mm256_set1_epi8(i8::MIN));
            if F::NO_MINUS_128 || _mm256_testz_si256(minus_128, minus_128) != 0 {
                for c in 0..4 {
                    // Pair sums of |x| * (q with x's sign): at most 2 * 128 * 127.
                    let pairs = _mm256_maddubs_epi16(xmag[c], _mm256_sign_epi8(qc[c], x[c]));
                    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, ones));
                }
            } else {
                // -q would not fit a byte: |q| * (x with q's sign), x at most 127 in magnitude.
                let mc = broadcast_chunks(_mm256_sign_epi8(q, q));
                for c in 0..4 {
                    let pairs = _mm256_maddubs_epi16(mc[c], _mm256_sign_epi8(x[c], qc[c]));
                    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, ones));
                }
            }
            sum
        },
    );
    fold_pairs(acc)
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
    let mut i = 0;
    while i < nb {
        let n = (nb - i).min(LANES);
        let dw = group_values::<F>(&wp, i, n, |b| F::scales(b));
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

/// Per row, `values` (eight f32 from eight blocks' pointers: the scales, or Q4_1's mins) of
/// blocks `i .. i + n` (`n` at most eight; lanes past `n` repeat the last block).
#[inline(always)]
unsafe fn group_values<F: Weights>(
    wp: &[*const u8; TILE_ROWS],
    i: usize,
    n: usize,
    values: impl Fn([*const u8; LANES]) -> __m256,
) -> [[f32; LANES]; TILE_ROWS] {
    let mut out = [[0f32; LANES]; TILE_ROWS];
    for r in 0..TILE_ROWS {
        let mut blocks = [wp[r]; LANES];
        for (k, p) in blocks.iter_mut().enumerate() {
            *p = wp[r].add((i + k.min(n - 1)) * F::BYTES);
        }
        _mm256_storeu_ps(out[r].as_mut_ptr(), values(blocks));
    }
    out
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

/// A format whose block splits cheaply into four chunks of 8 elements, each broadcast to the
/// four 64-bit lanes (chunk c: elements 8c .. 8c + 8), for [`tile_chunked`] (with
/// [`Unsigned`]) and [`tile_chunked_min`].
pub(super) trait Chunked: Weights {
    unsafe fn chunks(b: *const u8) -> [__m256i; 4];
}

/// The four 8-byte chunks of `v`, each broadcast to the four 64-bit lanes (through memory:
/// a lane-crossing permute is dear on Zen 1).
#[inline(always)]
pub(super) unsafe fn broadcast_chunks(v: __m256i) -> [__m256i; 4] {
    let mut words = [0i64; 4];
    _mm256_storeu_si256(words.as_mut_ptr().cast(), v);
    // No closure (`map`): a closure's body may be compiled without the caller's target features.
    [
        _mm256_set1_epi64x(words[0]),
        _mm256_set1_epi64x(words[1]),
        _mm256_set1_epi64x(words[2]),
        _mm256_set1_epi64x(words[3]),
    ]
}

/// The four 8-element chunks of a Q4_0 / Q4_1 block whose 16 nibble bytes are at `qs`
/// (elements 0..16 the low nibbles, 16..32 the high ones), each broadcast to the four lanes.
#[inline(always)]
unsafe fn q4_chunks(qs: *const u8) -> [__m256i; 4] {
    let m = _mm256_set1_epi8(0x0F);
    let first = _mm256_set1_epi64x(qs.cast::<i64>().read_unaligned());
    let second = _mm256_set1_epi64x(qs.add(8).cast::<i64>().read_unaligned());
    [
        _mm256_and_si256(first, m),
        _mm256_and_si256(second, m),
        _mm256_and_si256(_mm256_srli_epi16::<4>(first), m),
        _mm256_and_si256(_mm256_srli_epi16::<4>(second), m),
    ]
}

impl Chunked for super::blocks::Q4_0 {
    #[inline(always)]
    unsafe fn chunks(b: *const u8) -> [__m256i; 4] {
        q4_chunks(b.add(q4_0::OFFSET_QS))
    }
}

impl Chunked for super::blocks::Q4_1 {
    #[inline(always)]
    unsafe fn chunks(b: *const u8) -> [__m256i; 4] {
        q4_chunks(b.add(q4_1::OFFSET_QS))
    }
}

/// Four tokens' activation quants of block `b` regrouped by chunk: vector c holds elements
/// 8c .. 8c + 8 of token 0, then of tokens 1, 2 and 3 (a 4 x 4 transpose of 64-bit words),
/// from 16-byte loads and in-lane unpacks (a lane-crossing permute is dear on Zen 1).
#[inline(always)]
pub(super) unsafe fn by_chunk<F: Weights>(ap: [*const u8; TILE], b: usize) -> [__m256i; 4] {
    let q = ap.map(|p| p.add(b * F::ACT.bytes + F::ACT.qs));
    // Lane 0 from token 0 (or 1), lane 1 from token 2 (or 3); `h` picks the 16-byte half.
    let pair = |t: usize, h: usize| {
        _mm256_loadu2_m128i(q[t + 2].add(16 * h).cast(), q[t].add(16 * h).cast())
    };
    let (e0, o0, e1, o1) = (pair(0, 0), pair(1, 0), pair(0, 1), pair(1, 1));
    [
        _mm256_unpacklo_epi64(e0, o0),
        _mm256_unpackhi_epi64(e0, o0),
        _mm256_unpacklo_epi64(e1, o1),
        _mm256_unpackhi_epi64(e1, o1),
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
pub(super) unsafe fn tile_chunked<F: Chunked + Unsigned>(
    w: &[u8],
    a: [&[u8]; TILE],
) -> [[f32; TILE]; TILE_ROWS] {
    let ones = _mm256_set1_epi16(1);
    let bias = _mm256_set1_epi8(F::BIAS);
    let acc = accumulate::<F, _>(
        w,
        a,
        |ap, b| {
            let x = by_chunk::<F>(ap, b);
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

/// [`tile_chunked`] for a format with a min (Q4_1), bit for bit its `vec_dot` per row and
/// token: each block's whole integer dot sits in both of a token's lanes (2t, 2t + 1), and
/// every lane takes the drivers' rounded steps with a min, `acc + da * (dw * isum + mw *
/// asum)`, no fma (see `dots`), with `asum` the exact sum of the token's activation quants
/// (shared by all rows).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile_chunked_min<F: Chunked>(
    w: &[u8],
    a: [&[u8]; TILE],
) -> [[f32; TILE]; TILE_ROWS] {
    let min_at = F::MIN_AT.expect("a format with a min");
    let ones = _mm256_set1_epi16(1);
    let ones8 = _mm256_set1_epi8(1);
    // Lanes 2t and 2t + 1 both hold the sum of the pair.
    let whole = |v: __m256i| _mm256_add_epi32(v, _mm256_shuffle_epi32::<0b10_11_00_01>(v));
    let row = w.len() / TILE_ROWS;
    let nb = a
        .iter()
        .fold(row / F::BYTES, |n, r| n.min(r.len() / F::ACT.bytes));
    let wp: [*const u8; TILE_ROWS] = std::array::from_fn(|r| w.as_ptr().add(r * row));
    let ap = a.map(|r| r.as_ptr());
    let mut acc = [_mm256_setzero_ps(); TILE_ROWS];
    let mut i = 0;
    while i < nb {
        let n = (nb - i).min(LANES);
        let dw = group_values::<F>(&wp, i, n, |b| F::scales(b));
        let mw = group_values::<F>(&wp, i, n, |b| f16x8(b, min_at));
        for (k, b) in (i..i + n).enumerate() {
            let x = by_chunk::<F>(ap, b);
            let asum = _mm256_cvtepi32_ps(whole(chunk_dots([ones8; 4], &x, ones)));
            let da = pair_scales(ap, b * F::ACT.bytes + F::ACT.d);
            for r in 0..TILE_ROWS {
                let isum = _mm256_cvtepi32_ps(whole(chunk_dots(
                    F::chunks(wp[r].add(b * F::BYTES)),
                    &x,
                    ones,
                )));
                let scaled = _mm256_mul_ps(_mm256_broadcast_ss(&dw[r][k]), isum);
                let min = _mm256_mul_ps(_mm256_broadcast_ss(&mw[r][k]), asum);
                acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(da, _mm256_add_ps(scaled, min)));
            }
        }
        i += n;
    }
    let mut out = [[0f32; TILE]; TILE_ROWS];
    for r in 0..TILE_ROWS {
        let lanes = std::mem::transmute::<__m256, [f32; LANES]>(acc[r]);
        for t in 0..TILE {
            out[r][t] = lanes[2 * t];
        }
    }
    out
}
