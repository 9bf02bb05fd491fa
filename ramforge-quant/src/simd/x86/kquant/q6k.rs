//! Q6_K x Q8_K: the 6-bit quants are used unsigned (stored + 32) in `maddubs`; the offset
//! comes back as `32 * sum(scale * bsum)` from Q8_K's 16-element sums. Each block's integer
//! is reduced to one before the float step, so the prefill tile, over rows [`unpack`]ed into
//! Q4_K's element order (two 16-element groups' products added as i16 before one `madd`:
//! quants up to 63 keep four products within range), gives the decode kernels' bits.

use super::common::*;
use super::q4k::{
    arrange, arranged_at, arranged_products, da_lanes, lane_sums, load_arranged, row_results,
    store_arranged, PAIRS_ARRANGE as ARRANGE,
};
use crate::formats::q6_k::{BYTES, OFFSET_D, OFFSET_QH, OFFSET_QL, OFFSET_SCALES};
use crate::simd::x86::prefetch::blocks_ahead;
use std::arch::x86_64::*;

encodings!("Q6_K", 1, unpacked unpacked_dot);

/// `R` rows by `T` tokens; only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
unsafe fn dot<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let mut acc = [_mm_setzero_ps(); R];
    for i in 0..row / BYTES {
        let wb = weight_blocks::<R>(w, row, BYTES, i);
        let (ab, da) = act_blocks(&a, i);
        let bs: [__m256i; T] = std::array::from_fn(|t| bsums(ab[t]));
        if T == 1 {
            blocks_ahead(&wb, BYTES);
        }
        for r in 0..R {
            let sc16 = _mm256_cvtepi8_epi16(load128(wb[r].add(OFFSET_SCALES)));
            // Start from -32 * sum(scale * bsum): the quants below are stored + 32.
            let mut sumi: [__m256i; T] = std::array::from_fn(|t| {
                let off = _mm256_madd_epi16(sc16, bs[t]);
                _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<5>(off))
            });
            for h in 0..2 {
                let hs = half_scales(sc16, h);
                let q = half_quants(wb[r], h);
                for (k, &qk) in q.iter().enumerate() {
                    let sc = chunk_scales(hs, k);
                    add_scaled_chunk::<E, T>(&mut sumi, qk, sc, &ab, 4 * h + k);
                }
            }
            add_block_total(
                &mut acc[r],
                f16_at(wb[r].add(OFFSET_D)),
                &da,
                lane_sums(&sumi),
            );
        }
    }
    row_results(&acc)
}

/// Half `h` of Q6_K block `wb` as four chunks of 32 unsigned quants (stored + 32): chunk `k`
/// (elements 32k..32k+32 of the half) takes its low nibble from the low or high nibbles of
/// `ql`'s two 32-byte runs and its top two bits from bits 2k, 2k+1 of `qh`, moved to bits 4, 5.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn half_quants(wb: *const u8, h: usize) -> [__m256i; 4] {
    let m4 = _mm256_set1_epi8(0x0F);
    let top = _mm256_set1_epi8(0x30);
    let ql0 = load256(wb.add(OFFSET_QL + 64 * h));
    let ql1 = load256(wb.add(OFFSET_QL + 64 * h + 32));
    let qh = load256(wb.add(OFFSET_QH + 32 * h));
    [
        _mm256_or_si256(
            _mm256_and_si256(ql0, m4),
            _mm256_and_si256(_mm256_slli_epi16::<4>(qh), top),
        ),
        _mm256_or_si256(
            _mm256_and_si256(ql1, m4),
            _mm256_and_si256(_mm256_slli_epi16::<2>(qh), top),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(ql0), m4),
            _mm256_and_si256(qh, top),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<4>(ql1), m4),
            _mm256_and_si256(_mm256_srli_epi16::<2>(qh), top),
        ),
    ]
}

/// A block's whole integer dots (lane `t`: token `t`) into its row's accumulator:
/// `acc = fma(d * da, total, acc)`; one integer per block, whichever lanes made it.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn add_block_total<const T: usize>(acc: &mut __m128, d: f32, da: &[f32; T], total: __m128i) {
    *acc = _mm_fmadd_ps(
        _mm_mul_ps(_mm_set1_ps(d), da_lanes(da)),
        _mm_cvtepi32_ps(total),
        *acc,
    );
}

/// Bytes of a Q6_K block as [`unpack`] writes it for the prefill tile: f32 `d`; the 16 scales
/// times -32 as i16 (at most 4096 in magnitude: the offset's multipliers); per 128-element
/// half `h` the scales of its even and odd 16-element groups as four i16 each (qwords `2h`,
/// `2h + 1` at [`U_PAIRS`]); the 256 quants (stored + 32) as bytes in Q4_K's [`arrange`]d
/// order.
const UNPACKED_BYTES: usize = 352;
const U_D: usize = 0;
const U_SCALES: usize = 8;
const U_PAIRS: usize = 40;
const U_QS: usize = 96;

/// The 16 scales `sc16` as the paired products take them: per half (lane), its even 16-element
/// groups' scales then its odd ones' (i16 0, 2, 4, 6 | 1, 3, 5, 7 of each lane).
#[inline(always)]
unsafe fn pair_scales(sc16: __m256i) -> __m256i {
    _mm256_shuffle_epi8(
        sc16,
        _mm256_setr_epi8(
            0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3,
            6, 7, 10, 11, 14, 15,
        ),
    )
}

/// A row of Q6_K blocks unpacked for the prefill tile (see [`UNPACKED_BYTES`]).
fn unpack(w: &[u8], out: &mut [u8]) {
    assert!(w.len().is_multiple_of(BYTES) && out.len() == w.len() / BYTES * UNPACKED_BYTES);
    // SAFETY: reachable only through the kernel tables, handed out only when the CPU has
    // AVX2, FMA and F16C; the lengths are whole blocks.
    unsafe { unpack_blocks::<false>(w, out) }
}

/// Blocks in the file's layout, or with `ARRANGED` in [`arranged`]'s (whose quants already
/// assemble in the tile's order).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack_blocks<const ARRANGED: bool>(w: &[u8], out: &mut [u8]) {
    for (wb, ub) in w
        .chunks_exact(BYTES)
        .zip(out.chunks_exact_mut(UNPACKED_BYTES))
    {
        let (wp, up) = (wb.as_ptr(), ub.as_mut_ptr());
        up.add(U_D)
            .cast::<f32>()
            .write_unaligned(f16_at(wp.add(OFFSET_D)));
        up.add(4).write_bytes(0, U_SCALES - 4);
        let sc16 = _mm256_cvtepi8_epi16(load128(wp.add(OFFSET_SCALES)));
        _mm256_storeu_si256(
            up.add(U_SCALES).cast(),
            _mm256_mullo_epi16(sc16, _mm256_set1_epi16(-32)),
        );
        _mm256_storeu_si256(up.add(U_PAIRS).cast(), pair_scales(sc16));
        up.add(U_PAIRS + 32).write_bytes(0, U_QS - U_PAIRS - 32);
        for h in 0..2 {
            let q = half_quants(wp, h);
            if ARRANGED {
                for (k, v) in q.into_iter().enumerate() {
                    _mm256_storeu_si256(up.add(U_QS + 128 * h + 32 * k).cast(), v);
                }
            } else {
                store_arranged(up.add(U_QS + 128 * h), q);
            }
        }
    }
}

/// Half `h` of a block in the tile's order (`v`, four vectors) against every token's arranged
/// quants `xq[t]` (a block's, [`Planar::block`]): the even 16-element groups' two `maddubs` and the odd groups' two added
/// as i16 (at most 4 * 63 * 128), one `madd` + `add` (`E`) each with their scales.
#[inline(always)]
unsafe fn add_paired_half<E: PairSum, const T: usize>(
    sumi: &mut [__m256i; T],
    v: &[__m256i; 4],
    even: __m256i,
    odd: __m256i,
    xq: &[*const u8; T],
    h: usize,
) {
    for t in 0..T {
        let [p0, p1, p2, p3] = arranged_products(v, xq[t].add(128 * h));
        let (p_even, p_odd) = (_mm256_add_epi16(p0, p1), _mm256_add_epi16(p2, p3));
        sumi[t] = E::madd_add(E::madd_add(sumi[t], even, p_even), odd, p_odd);
    }
}

/// `R` rows [`unpack`]ed (back to back in `u`) dotted with `T` activation rows arranged as
/// Q4_K's tile reads them: in [`arrange`]'s order, vectors 0 and 1 of a half hold its even
/// 16-element groups (i16 `l`: group `2 (l % 4)`), 2 and 3 its odd ones, so each pair's two
/// `maddubs` add as i16 (at most 4 * 63 * 128) before one `madd` + `add` (`E`) with those
/// groups' scales; the offset `32 * (scales . bsums)` comes off each token's lanes (one more
/// `madd` + `add` with the stored `-32 * scales`) before one reduction and
/// [`add_block_total`]. The same integers as [`dot`] per block, so bit for bit its results.
/// Rows run one at a time; only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
unsafe fn unpacked_dot<E: PairSum, const R: usize, const T: usize>(
    u: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    let row = u.len() / R;
    let mut acc = [_mm_setzero_ps(); R];
    let planar = Planar::new(&a);
    for (r, acc) in acc.iter_mut().enumerate() {
        for i in 0..row / UNPACKED_BYTES {
            let ub = u.as_ptr().add(r * row + i * UNPACKED_BYTES);
            let (xq, da, xb) = planar.block(i);
            let mut sumi = [_mm256_setzero_si256(); T];
            for h in 0..2 {
                let scale = |p: usize| {
                    _mm256_broadcastq_epi64(_mm_loadl_epi64(
                        ub.add(U_PAIRS + 16 * h + 8 * p).cast(),
                    ))
                };
                let (even, odd) = (scale(0), scale(1));
                add_paired_half::<E, T>(
                    &mut sumi,
                    &load_arranged(ub.add(U_QS + 128 * h)),
                    even,
                    odd,
                    &xq,
                    h,
                );
            }
            // The offset into each token's sums before one reduction: the same integers.
            let offset_scales = load256(ub.add(U_SCALES));
            for t in 0..T {
                sumi[t] = E::madd_add(sumi[t], offset_scales, load256(xb[t]));
            }
            add_block_total(acc, f32_at(ub.add(U_D)), &da, lane_sums(&sumi));
        }
    }
    row_results(&acc)
}

/// Q6_K blocks held in the x86 kernels' arranged layout ([`crate::Layout::Arranged`]): each
/// half's `ql` and `qh` bytes rewritten so that [`half_quants`]' assembly gives the prefill
/// tile's vectors ([`arrange`]'s order) directly. The decode kernel then adds the even and the
/// odd 16-element groups' `maddubs` as i16 before one `madd` each, with the scales paired once
/// per block instead of a shuffle per chunk: two `madd` per 128 elements instead of four. The
/// scales and `d` stay where they were.
pub(super) mod arranged {
    use super::*;

    arranged_layout!("Q6_K (arranged)", q6_k);

    /// Where element `e` of a block (0..256) lies: its low four bits (byte of `ql`, shift), its
    /// top two (byte of `qh`, shift), in the file's order (`arranged == false`) or the
    /// arranged one.
    pub(in crate::simd::x86) fn quant_at(e: usize, arranged: bool) -> ((usize, u32), (usize, u32)) {
        let (h, c, l) = (e / 128, e % 128 / 32, e % 32);
        // The file's chunk c of a half, element l, is byte l of vector c of [`half_quants`];
        // arranged, vector and byte come from `arrange`'s order.
        let (k, b) = if arranged { arranged_at(c, l) } else { (c, l) };
        (
            (64 * h + 32 * (k % 2) + b, 4 * (k / 2) as u32),
            (32 * h + b, 2 * k as u32),
        )
    }

    /// Whole blocks rewritten in place into the arranged layout.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn arrange_blocks(w: &mut [u8]) {
        let m4 = _mm256_set1_epi8(0x0F);
        let m2 = _mm256_set1_epi8(0x03);
        for b in w.chunks_exact_mut(BYTES) {
            let p = b.as_mut_ptr();
            let halves = [half_quants(p, 0), half_quants(p, 1)];
            for (h, q) in halves.into_iter().enumerate() {
                let a = arrange(q);
                let low = |v| _mm256_and_si256(v, m4);
                let top = |v| _mm256_and_si256(_mm256_srli_epi16::<4>(v), m2);
                let ql0 = _mm256_or_si256(low(a[0]), _mm256_slli_epi16::<4>(low(a[2])));
                let ql1 = _mm256_or_si256(low(a[1]), _mm256_slli_epi16::<4>(low(a[3])));
                let qh = _mm256_or_si256(
                    _mm256_or_si256(top(a[0]), _mm256_slli_epi16::<2>(top(a[1]))),
                    _mm256_or_si256(
                        _mm256_slli_epi16::<4>(top(a[2])),
                        _mm256_slli_epi16::<6>(top(a[3])),
                    ),
                );
                _mm256_storeu_si256(p.add(OFFSET_QL + 64 * h).cast(), ql0);
                _mm256_storeu_si256(p.add(OFFSET_QL + 64 * h + 32).cast(), ql1);
                _mm256_storeu_si256(p.add(OFFSET_QH + 32 * h).cast(), qh);
            }
        }
    }

    /// One arranged Q6_K block restored in place to the file's layout.
    fn restore_block(b: &mut [u8]) {
        let (mut ql, mut qh) = ([0u8; 128], [0u8; 64]);
        for e in 0..256 {
            let ((from_l, from_ls), (from_h, from_hs)) = quant_at(e, true);
            let ((to_l, to_ls), (to_h, to_hs)) = quant_at(e, false);
            ql[to_l] |= ((b[OFFSET_QL + from_l] >> from_ls) & 0x0F) << to_ls;
            qh[to_h] |= ((b[OFFSET_QH + from_h] >> from_hs) & 0x03) << to_hs;
        }
        b[OFFSET_QL..OFFSET_QL + 128].copy_from_slice(&ql);
        b[OFFSET_QH..OFFSET_QH + 64].copy_from_slice(&qh);
    }

    /// A row of arranged Q6_K blocks unpacked for the prefill tile ([`UNPACKED_BYTES`]).
    fn unpack(w: &[u8], out: &mut [u8]) {
        assert!(w.len().is_multiple_of(BYTES) && out.len() == w.len() / BYTES * UNPACKED_BYTES);
        // SAFETY: as in `arrange_rows`; the lengths are whole blocks.
        unsafe { unpack_blocks::<true>(w, out) }
    }

    /// `R` arranged rows by `T` activation rows arranged as Q4_K's tile reads them: per half,
    /// row and token, the even groups' two `maddubs` and the odd groups' two added as i16, one
    /// `madd` + `add` (`E`) each with the paired scales; the offset `32 * (scales . bsums)`
    /// first. The same integer per block as [`super::dot`] on the file's blocks, so its bits.
    /// Only inlined into the encoding's kernels.
    #[inline(always)]
    unsafe fn dot<E: PairSum, const R: usize, const T: usize>(
        w: &[u8],
        a: [&[u8]; T],
    ) -> [[f32; T]; R] {
        let row = w.len() / R;
        let mut acc = [_mm_setzero_ps(); R];
        // Block i - 1's float step runs after block i's integer work: the same operations in
        // the same order, placed where the out-of-order window finds their inputs ready
        // (measured faster on Zen 1, benches/README.md).
        let mut pending: Option<(usize, [__m128i; R])> = None;
        let planar = Planar::new(&a);
        for i in 0..row / BYTES {
            let wb = weight_blocks::<R>(w, row, BYTES, i);
            let (xq, _, xb) = planar.block(i);
            let bs: [__m256i; T] = std::array::from_fn(|t| load256(xb[t]));
            if T == 1 {
                blocks_ahead(&wb, BYTES);
            }
            let mut totals = [_mm_setzero_si128(); R];
            for r in 0..R {
                let sc16 = _mm256_cvtepi8_epi16(load128(wb[r].add(OFFSET_SCALES)));
                let mut sumi: [__m256i; T] = std::array::from_fn(|t| {
                    let off = _mm256_madd_epi16(sc16, bs[t]);
                    _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<5>(off))
                });
                let pairs = pair_scales(sc16);
                for h in 0..2 {
                    let half = if h == 0 {
                        _mm256_permute2x128_si256::<0x00>(pairs, pairs)
                    } else {
                        _mm256_permute2x128_si256::<0x11>(pairs, pairs)
                    };
                    let even = _mm256_unpacklo_epi64(half, half);
                    let odd = _mm256_unpackhi_epi64(half, half);
                    add_paired_half::<E, T>(&mut sumi, &half_quants(wb[r], h), even, odd, &xq, h);
                }
                totals[r] = lane_sums(&sumi);
            }
            if let Some((j, totals)) = pending {
                finish_block(&mut acc, w, row, &planar, j, &totals);
            }
            pending = Some((i, totals));
        }
        if let Some((j, totals)) = pending {
            finish_block(&mut acc, w, row, &planar, j, &totals);
        }
        row_results(&acc)
    }

    /// Block `i`'s integers `totals` of each of the `R` rows into its accumulator
    /// ([`add_block_total`]).
    #[inline(always)]
    unsafe fn finish_block<const R: usize, const T: usize>(
        acc: &mut [__m128; R],
        w: &[u8],
        row: usize,
        planar: &Planar<T>,
        i: usize,
        totals: &[__m128i; R],
    ) {
        let wb = weight_blocks::<R>(w, row, BYTES, i);
        let (_, da, _) = planar.block(i);
        for r in 0..R {
            add_block_total(&mut acc[r], f16_at(wb[r].add(OFFSET_D)), &da, totals[r]);
        }
    }
}
