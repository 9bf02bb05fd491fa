//! One generic driver for every format's `vec_dot`, decode `rows` and prefill tile: a
//! [`Format`] says how a weight block and the activation bytes it meets split into chunks of
//! 32 quants and how the reference turns the chunks' exact integer dots into its f32 sums;
//! an [`IntDot`](super::int_dot::IntDot) takes those dots (widening multiplies, `sdot`, or
//! `smmla` two rows by two tokens at once).
//!
//! Every (row, token) pair is summed block by block in the reference's order whatever the
//! grouping, so `rows` (each activation block's quants loaded and its scale read once for
//! [`ROWS`] rows) and the tile ([`TILE_ROWS`] rows by [`TILE`] tokens: each weight block
//! unpacked and its scales read once for every token, each activation block's scale and sums
//! once for every row) return the reference's results bit for bit.

use super::blocks::{q8k_scale, Act32, ActQ8_0, Block32, BlockK};
use super::int_dot::IntDot;
use super::lowbit::nvfp4_pair;
use crate::formats;
use crate::kernel_table::{ROWS, TILE, TILE_ROWS};
use std::arch::aarch64::*;
use std::marker::PhantomData;

/// Chunks of 32 quants in a weight block, at most (a 256-element block).
pub(super) const MAX_CHUNKS: usize = 8;

/// The exact dots of each chunk's two halves (elements 0..16, 16..32) of one block.
pub(super) type Dots = [[i32; 2]; MAX_CHUNKS];

/// A weight format with its activation type, as the drivers see it.
pub(super) trait Format {
    /// Bytes of a weight block.
    const W: usize;
    /// Bytes of the activations one weight block meets.
    const A: usize;
    /// Chunks of 32 quants per weight block (at most [`MAX_CHUNKS`]).
    const CHUNKS: usize;
    /// A weight block's scales (and mins), as the reference computes them.
    type WParams: Copy;
    /// An activation block's scales (and quant sums where the format has mins).
    type AParams: Copy + Default;
    fn w_params(w: &[u8]) -> Self::WParams;
    /// Only inlined into `#[target_feature]` code; reads `A` bytes.
    unsafe fn a_params(a: &[u8]) -> Self::AParams;
    /// Weight quants of chunk `c` of the block at `p` (`W` bytes).
    unsafe fn w_chunk(p: *const u8, c: usize) -> (int8x16_t, int8x16_t);
    /// Activation quants of chunk `c` of the activation bytes at `p` (`A` bytes).
    unsafe fn a_chunk(p: *const u8, c: usize) -> (int8x16_t, int8x16_t);
    /// `acc` after one block, the reference's f32 arithmetic term by term.
    fn finish(acc: f32, w: &Self::WParams, a: &Self::AParams, d: &Dots) -> f32;
}

/// 32 `i8` at `p`: elements 0..16, 16..32.
#[inline(always)]
unsafe fn load32(p: *const u8) -> (int8x16_t, int8x16_t) {
    let p = p.cast::<i8>();
    (vld1q_s8(p), vld1q_s8(p.add(16)))
}

/// The sum of 32 `i8`, exact.
#[inline(always)]
unsafe fn total(a: (int8x16_t, int8x16_t)) -> i32 {
    vaddlvq_s8(a.0) as i32 + vaddlvq_s8(a.1) as i32
}

/// A 32-element block format `F` against activation type `A`: per block `sum = 0;
/// sum += s * dot; sum += m * sum(a)` with a min; `acc += da * sum`.
pub(super) struct B32<F, A>(PhantomData<(F, A)>);
impl<F: Block32, A: Act32> Format for B32<F, A> {
    const W: usize = F::BYTES;
    const A: usize = A::BYTES;
    const CHUNKS: usize = 1;
    type WParams = (f32, f32);
    type AParams = (f32, i32);
    #[inline(always)]
    fn w_params(w: &[u8]) -> (f32, f32) {
        F::params(w)
    }
    #[inline(always)]
    unsafe fn a_params(a: &[u8]) -> (f32, i32) {
        let sum = if F::HAS_MIN {
            total(load32(a.as_ptr().add(A::QS)))
        } else {
            0
        };
        (A::scale(a), sum)
    }
    #[inline(always)]
    unsafe fn w_chunk(p: *const u8, _: usize) -> (int8x16_t, int8x16_t) {
        F::quants(p)
    }
    #[inline(always)]
    unsafe fn a_chunk(p: *const u8, _: usize) -> (int8x16_t, int8x16_t) {
        load32(p.add(A::QS))
    }
    #[inline(always)]
    fn finish(acc: f32, &(s, m): &(f32, f32), &(da, a_sum): &(f32, i32), d: &Dots) -> f32 {
        let mut sum = 0f32;
        sum += s * (d[0][0] + d[0][1]) as f32;
        if F::HAS_MIN {
            sum += m * a_sum as f32;
        }
        acc + da * sum
    }
}

/// A 256-element block against Q8_K: per block `sum = 0`, then per group `sum += s * dot`
/// (and `sum += m * sum(a)` with a min), then `acc += da * sum`. A whole-block group's dot
/// is the exact sum of the chunks' (no such format has a min).
pub(super) struct K<F>(PhantomData<F>);
impl<F: BlockK> Format for K<F> {
    const W: usize = F::BYTES;
    const A: usize = formats::q8_k::BYTES;
    const CHUNKS: usize = 8;
    type WParams = ([f32; 16], [f32; 16]);
    /// The scale and, with a min, the quant sum of every 16 elements.
    type AParams = (f32, [i32; 16]);
    #[inline(always)]
    fn w_params(w: &[u8]) -> Self::WParams {
        F::params(w)
    }
    #[inline(always)]
    unsafe fn a_params(a: &[u8]) -> Self::AParams {
        let mut sums = [0i32; 16];
        if F::HAS_MIN {
            for c in 0..8 {
                let q = Self::a_chunk(a.as_ptr(), c);
                sums[2 * c] = vaddlvq_s8(q.0) as i32;
                sums[2 * c + 1] = vaddlvq_s8(q.1) as i32;
            }
        }
        (q8k_scale(a), sums)
    }
    #[inline(always)]
    unsafe fn w_chunk(p: *const u8, c: usize) -> (int8x16_t, int8x16_t) {
        F::chunk(p, c)
    }
    #[inline(always)]
    unsafe fn a_chunk(p: *const u8, c: usize) -> (int8x16_t, int8x16_t) {
        load32(p.add(formats::q8_k::OFFSET_QS + 32 * c))
    }
    #[inline(always)]
    fn finish(acc: f32, (s, m): &Self::WParams, (da, sums): &Self::AParams, d: &Dots) -> f32 {
        let mut sum = 0f32;
        let mut whole = 0i32;
        for (c, d) in d.iter().enumerate() {
            match F::GROUP {
                256 => whole += d[0] + d[1],
                32 => {
                    sum += s[c] * (d[0] + d[1]) as f32;
                    if F::HAS_MIN {
                        sum += m[c] * (sums[2 * c] + sums[2 * c + 1]) as f32;
                    }
                }
                _ => {
                    for (h, &d) in d.iter().enumerate() {
                        let g = 2 * c + h;
                        sum += s[g] * d as f32;
                        if F::HAS_MIN {
                            sum += m[g] * sums[g] as f32;
                        }
                    }
                }
            }
        }
        if F::GROUP == 256 {
            sum += s[0] * whole as f32;
        }
        acc + *da * sum
    }
}

/// NVFP4 against Q8_0, two Q8_0 blocks per NVFP4 block: per Q8_0 block `sum = 0`,
/// `sum += s * dot` for its two groups of 16, `acc += da * sum`.
pub(super) struct Nvfp4;
impl Format for Nvfp4 {
    const W: usize = formats::nvfp4::BYTES;
    const A: usize = 2 * formats::q8_0::BYTES;
    const CHUNKS: usize = 2;
    type WParams = [f32; 4];
    type AParams = [f32; 2];
    #[inline(always)]
    fn w_params(w: &[u8]) -> [f32; 4] {
        let (s, _) = formats::nvfp4::group_params(&formats::nvfp4::blocks(w)[0]);
        [s[0], s[1], s[2], s[3]]
    }
    #[inline(always)]
    unsafe fn a_params(a: &[u8]) -> [f32; 2] {
        let q8 = formats::q8_0::BYTES;
        [ActQ8_0::scale(&a[..q8]), ActQ8_0::scale(&a[q8..])]
    }
    #[inline(always)]
    unsafe fn w_chunk(p: *const u8, c: usize) -> (int8x16_t, int8x16_t) {
        nvfp4_pair(p, c)
    }
    #[inline(always)]
    unsafe fn a_chunk(p: *const u8, c: usize) -> (int8x16_t, int8x16_t) {
        load32(p.add(c * formats::q8_0::BYTES + formats::q8_0::OFFSET_QS))
    }
    #[inline(always)]
    fn finish(mut acc: f32, s: &[f32; 4], da: &[f32; 2], d: &Dots) -> f32 {
        for k in 0..2 {
            let mut sum = 0f32;
            sum += s[2 * k] * d[k][0] as f32;
            sum += s[2 * k + 1] * d[k][1] as f32;
            acc += da[k] * sum;
        }
        acc
    }
}

/// Weight block `b` of the row at `row`, `row_bytes` bytes a row.
#[inline(always)]
fn block<F: Format>(w: &[u8], row: usize, row_bytes: usize, b: usize) -> &[u8] {
    &w[row * row_bytes + b * F::W..][..F::W]
}

/// A row of blocks dotted with a row of activations (the reference's `vec_dot`).
#[inline(always)]
pub(super) unsafe fn dot<F: Format, D: IntDot>(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0f32;
    for (wb, ab) in w.chunks_exact(F::W).zip(a.chunks_exact(F::A)) {
        let mut d = [[0i32; 2]; MAX_CHUNKS];
        for (c, d) in d.iter_mut().enumerate().take(F::CHUNKS) {
            *d = D::halves(F::w_chunk(wb.as_ptr(), c), F::a_chunk(ab.as_ptr(), c));
        }
        acc = F::finish(acc, &F::w_params(wb), &F::a_params(ab), &d);
    }
    acc
}

/// [`ROWS`] rows (back to back in `w`) dotted with one activation row: each activation
/// block's quants loaded and its params read once for all the rows.
#[inline(always)]
pub(super) unsafe fn rows<F: Format, D: IntDot>(w: &[u8], a: &[u8]) -> [f32; ROWS] {
    let row_bytes = w.len() / ROWS;
    let mut acc = [0f32; ROWS];
    for b in 0..row_bytes / F::W {
        let ab = &a[b * F::A..(b + 1) * F::A];
        let ap = F::a_params(ab);
        let mut aq = [(vdupq_n_s8(0), vdupq_n_s8(0)); MAX_CHUNKS];
        for (c, aq) in aq.iter_mut().enumerate().take(F::CHUNKS) {
            *aq = F::a_chunk(ab.as_ptr(), c);
        }
        for (r, acc) in acc.iter_mut().enumerate() {
            let wb = block::<F>(w, r, row_bytes, b);
            let mut d = [[0i32; 2]; MAX_CHUNKS];
            for (c, (d, &aq)) in d.iter_mut().zip(&aq).enumerate().take(F::CHUNKS) {
                *d = D::halves(F::w_chunk(wb.as_ptr(), c), aq);
            }
            *acc = F::finish(*acc, &F::w_params(wb), &ap, &d);
        }
    }
    acc
}

/// [`TILE_ROWS`] rows (back to back in `w`) times [`TILE`] activation rows, `out[r][t]`:
/// per block, each token's params read once for every row, each row's params read and its
/// chunks unpacked once for every token, and the integer dots taken two rows by two tokens.
#[inline(always)]
pub(super) unsafe fn tile<F: Format, D: IntDot>(
    w: &[u8],
    a: [&[u8]; TILE],
) -> [[f32; TILE]; TILE_ROWS] {
    const _: () = assert!(TILE_ROWS.is_multiple_of(2) && TILE.is_multiple_of(2));
    let row_bytes = w.len() / TILE_ROWS;
    let mut acc = [[0f32; TILE]; TILE_ROWS];
    for b in 0..row_bytes / F::W {
        let ab: [&[u8]; TILE] = std::array::from_fn(|t| &a[t][b * F::A..(b + 1) * F::A]);
        let mut ap = [F::AParams::default(); TILE];
        for (ap, ab) in ap.iter_mut().zip(ab) {
            *ap = F::a_params(ab);
        }
        for r0 in (0..TILE_ROWS).step_by(2) {
            let wb = [
                block::<F>(w, r0, row_bytes, b),
                block::<F>(w, r0 + 1, row_bytes, b),
            ];
            let mut d = [[[[0i32; 2]; MAX_CHUNKS]; TILE]; 2];
            #[allow(clippy::needless_range_loop)] // `c` indexes the innermost of `d`
            for c in 0..F::CHUNKS {
                let q = [F::w_chunk(wb[0].as_ptr(), c), F::w_chunk(wb[1].as_ptr(), c)];
                for t0 in (0..TILE).step_by(2) {
                    let x = [
                        F::a_chunk(ab[t0].as_ptr(), c),
                        F::a_chunk(ab[t0 + 1].as_ptr(), c),
                    ];
                    let quad = D::quad(q, x);
                    for (r, quad) in quad.iter().enumerate() {
                        d[r][t0][c] = quad[0];
                        d[r][t0 + 1][c] = quad[1];
                    }
                }
            }
            for (r, d) in d.iter().enumerate() {
                let wp = F::w_params(wb[r]);
                for (t, d) in d.iter().enumerate() {
                    acc[r0 + r][t] = F::finish(acc[r0 + r][t], &wp, &ap[t], d);
                }
            }
        }
    }
    acc
}
