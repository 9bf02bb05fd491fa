//! Dots of F32, F16 and BF16 weight rows with f32 activations (FMA; F16 widened with F16C,
//! BF16 by a byte shuffle), for one token and for a tile of rows times [`TILE`] tokens.
//!
//! Two 8-lane accumulators per token, summed in one fixed order, then the tail elements one
//! by one: [`tile_rows`] runs exactly the operations of [`dot`] for each of its pairs, so the
//! prefill product equals one matvec per token bit for bit. Against the scalar reference the
//! summation order differs (f32 rounding only).

use super::common::{f16_to_f32, hsum_ps};
use crate::kernel_table::TILE;
use crate::simd::x86::prefetch::line_ahead;
use crate::GgmlType;
use std::arch::x86_64::*;

/// A float weight encoding: its element width and how 8 elements become 8 f32 lanes.
pub(super) trait Float {
    const WIDTH: usize;
    unsafe fn load8(p: *const u8) -> __m256;
    unsafe fn at(p: *const u8) -> f32;
}

pub(super) struct F32;
impl Float for F32 {
    const WIDTH: usize = GgmlType::F32.type_size();
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        _mm256_loadu_ps(p.cast())
    }
    #[inline(always)]
    unsafe fn at(p: *const u8) -> f32 {
        p.cast::<f32>().read_unaligned()
    }
}

pub(super) struct F16;
impl Float for F16 {
    const WIDTH: usize = GgmlType::F16.type_size();
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
    }
    #[inline(always)]
    unsafe fn at(p: *const u8) -> f32 {
        f16_to_f32(p.cast::<u16>().read_unaligned())
    }
}

pub(super) struct Bf16;
impl Float for Bf16 {
    const WIDTH: usize = GgmlType::BF16.type_size();
    /// The 8 values go to both 128-bit lanes, and one byte shuffle puts each lane's 4 into the
    /// high halves of its 32-bit slots, zeros below: no shift on the ports the FMAs use.
    #[inline(always)]
    unsafe fn load8(p: *const u8) -> __m256 {
        let both = _mm256_broadcastsi128_si256(_mm_loadu_si128(p.cast()));
        #[rustfmt::skip]
        let high_halves = _mm256_setr_epi8(
            -1, -1, 0, 1, -1, -1, 2, 3, -1, -1, 4, 5, -1, -1, 6, 7,
            -1, -1, 8, 9, -1, -1, 10, 11, -1, -1, 12, 13, -1, -1, 14, 15,
        );
        _mm256_castsi256_ps(_mm256_shuffle_epi8(both, high_halves))
    }
    #[inline(always)]
    unsafe fn at(p: *const u8) -> f32 {
        f32::from_bits((p.cast::<u16>().read_unaligned() as u32) << 16)
    }
}

/// Weight row `w` (elements of `F`) dotted with `x`.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot<F: Float>(w: &[u8], x: &[f32]) -> f32 {
    let n = x.len().min(w.len() / F::WIDTH);
    let (wp, xp) = (w.as_ptr(), x.as_ptr());
    let (mut a0, mut a1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
    let mut i = 0;
    while i + 16 <= n {
        line_ahead(wp.add(i * F::WIDTH));
        let w0 = F::load8(wp.add(i * F::WIDTH));
        let w1 = F::load8(wp.add((i + 8) * F::WIDTH));
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xp.add(i)), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xp.add(i + 8)), a1);
        i += 16;
    }
    if i + 8 <= n {
        a0 = _mm256_fmadd_ps(
            F::load8(wp.add(i * F::WIDTH)),
            _mm256_loadu_ps(xp.add(i)),
            a0,
        );
        i += 8;
    }
    let mut sum = hsum_ps(_mm256_add_ps(a0, a1));
    for j in i..n {
        sum += F::at(wp.add(j * F::WIDTH)) * *xp.add(j);
    }
    sum
}

/// Elements of the row segment (at least, and below twice) that every row of a [`tile_rows`]
/// call visits before the next: whole steps of [`dot`]'s loop (16 elements), so that four
/// tokens' activations of one segment (8-16 KiB) stay in L1 while the call's three row groups
/// read them. Without it, rows of a few thousand elements read each token's whole row from L2
/// once per row group.
const SEGMENT: usize = 512;

/// `R` weight rows of `F`, back to back in `w`, dotted with [`TILE`] activation rows over their
/// whole length (rows shorter than two [`SEGMENT`]s): each weight vector is widened once and
/// each activation vector loaded once for all `R` rows.
/// Every (row, token) pair runs [`dot`]'s operations in its order (its even 8-element steps
/// into one accumulator, its odd ones into another, summed, then the tail), so the prefill
/// product equals one matvec per token bit for bit. The even steps and the odd ones go in two
/// passes over the rows, so that one accumulator per pair is live at a time: `R * TILE`
/// of them, the weights and an activation vector fit the 16 registers.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_group<F: Float, const R: usize>(w: &[u8], x: [&[f32]; TILE]) -> [[f32; TILE]; R] {
    let (wp, xp, n) = rows_and_tokens::<F, R>(w, x);
    let steps = n / 16;
    let mut even = [[_mm256_setzero_ps(); TILE]; R];
    let mut odd = [[_mm256_setzero_ps(); TILE]; R];
    pass::<F, R>(wp, xp, &mut even, 0, 0..steps);
    // `dot`'s one 8-element step after its loop (`k = steps`), into the even accumulator.
    let extra = n % 16 >= 8;
    if extra {
        pass::<F, R>(wp, xp, &mut even, 0, steps..steps + 1);
    }
    pass::<F, R>(wp, xp, &mut odd, 8, 0..steps);
    sums::<F, R>(wp, xp, &even, &odd, extra, n)
}

/// The row pointers of the `R` weight rows back to back in `w`, the tokens' activation
/// pointers, and the elements every pair dots (the shortest of the rows and the tokens).
#[inline(always)]
unsafe fn rows_and_tokens<F: Float, const R: usize>(
    w: &[u8],
    x: [&[f32]; TILE],
) -> ([*const u8; R], [*const f32; TILE], usize) {
    let row = w.len() / R;
    let n = x.iter().fold(row / F::WIDTH, |n, r| n.min(r.len()));
    let wp: [*const u8; R] = std::array::from_fn(|r| w.as_ptr().add(r * row));
    (wp, x.map(|r| r.as_ptr()), n)
}

/// Each (row, token) pair's dot as [`dot`] ends it: its even and odd accumulators summed, then
/// the tail elements after the 16-element steps (and, with `extra`, the last 8-element one).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn sums<F: Float, const R: usize>(
    wp: [*const u8; R],
    xp: [*const f32; TILE],
    even: &[[__m256; TILE]; R],
    odd: &[[__m256; TILE]; R],
    extra: bool,
    n: usize,
) -> [[f32; TILE]; R] {
    let tail = n / 16 * 16 + if extra { 8 } else { 0 };
    std::array::from_fn(|r| {
        std::array::from_fn(|t| {
            let mut sum = hsum_ps(_mm256_add_ps(even[r][t], odd[r][t]));
            for j in tail..n {
                sum += F::at(wp[r].add(j * F::WIDTH)) * *xp[t].add(j);
            }
            sum
        })
    })
}

/// [`TILE_ROWS`](crate::kernel_table::TILE_ROWS) weight rows of `F`, back to back in `w`,
/// dotted with [`TILE`] activation rows: rows 0-2, 3-5 and 6-7 in turn over each
/// [`SEGMENT`] of the rows' length, each weight vector widened once and each activation vector
/// loaded once per group. Every (row, token) pair runs [`dot`]'s operations in its order (its
/// even 8-element steps into one accumulator, its odd ones into another, each in order across
/// the segments, then `dot`'s last 8-element step, summed, then the tail), so the prefill
/// product equals one matvec per token bit for bit. The even steps and the odd ones go in two
/// passes over a segment, so that one accumulator per pair is live at a time: 3 x [`TILE`] of
/// them, the weights and an activation vector fit the 16 registers; the accumulators wait in
/// memory between segments.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tile_rows<F: Float>(w: &[u8], x: [&[f32]; TILE]) -> [[f32; TILE]; 8] {
    let (wp, xp, n) = rows_and_tokens::<F, 8>(w, x);
    let row = w.len() / 8;
    let steps = n / 16;
    if steps < 2 * (SEGMENT / 16) {
        // One segment: each group over the whole rows, its accumulators in registers throughout
        // (the same operations; measured faster than the segmented loop on short rows).
        let a = tile_group::<F, 3>(&w[..3 * row], x);
        let b = tile_group::<F, 3>(&w[3 * row..6 * row], x);
        let c = tile_group::<F, 2>(&w[6 * row..], x);
        return std::array::from_fn(|r| match r {
            0..3 => a[r],
            3..6 => b[r - 3],
            _ => c[r - 6],
        });
    }
    let mut even = [[_mm256_setzero_ps(); TILE]; 8];
    let mut odd = [[_mm256_setzero_ps(); TILE]; 8];
    // Whole segments of about `SEGMENT` elements, the remainder spread over them (a short last
    // segment would cost its accumulators' round trip for little work).
    let segments = (steps / (SEGMENT / 16)).max(1);
    for s in 0..segments {
        let ks = steps * s / segments..steps * (s + 1) / segments;
        groups::<F>(wp, xp, &mut even, Some(&mut odd), ks);
    }
    // `dot`'s one 8-element step after its loop (`k = steps`), into the even accumulator.
    let extra = n % 16 >= 8;
    if extra {
        groups::<F>(wp, xp, &mut even, None, steps..steps + 1);
    }
    sums::<F, 8>(wp, xp, &even, &odd, extra, n)
}

/// The steps `k` of `ks` of all 8 rows, in groups of 3, 3 and 2 rows whose accumulators stay
/// in registers over the steps: each group's even 8-element steps (`16 k`) into `even`, then
/// (where given) its odd ones (`16 k + 8`) into `odd`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn groups<F: Float>(
    wp: [*const u8; 8],
    xp: [*const f32; TILE],
    even: &mut [[__m256; TILE]; 8],
    mut odd: Option<&mut [[__m256; TILE]; 8]>,
    ks: std::ops::Range<usize>,
) {
    for r in [0, 3] {
        let w = [wp[r], wp[r + 1], wp[r + 2]];
        pass::<F, 3>(w, xp, rows_of(even, r), 0, ks.clone());
        if let Some(odd) = odd.as_deref_mut() {
            pass::<F, 3>(w, xp, rows_of(odd, r), 8, ks.clone());
        }
    }
    let w = [wp[6], wp[7]];
    pass::<F, 2>(w, xp, rows_of(even, 6), 0, ks.clone());
    if let Some(odd) = odd {
        pass::<F, 2>(w, xp, rows_of(odd, 6), 8, ks);
    }
}

/// Rows `r .. r + K` of a tile's accumulators.
#[inline(always)]
fn rows_of<const K: usize>(acc: &mut [[__m256; TILE]; 8], r: usize) -> &mut [[__m256; TILE]; K] {
    (&mut acc[r..r + K])
        .try_into()
        .expect("K rows within the 8")
}

/// One accumulator per (row, token), taken from `acc` and put back: the 8 elements at
/// `offset + 16 k` for each `k` of `ks`, in order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pass<F: Float, const R: usize>(
    wp: [*const u8; R],
    xp: [*const f32; TILE],
    acc: &mut [[__m256; TILE]; R],
    offset: usize,
    ks: std::ops::Range<usize>,
) {
    let mut regs = *acc;
    for k in ks {
        step_rows::<F, R>(wp, xp, &mut regs, offset + 16 * k);
    }
    *acc = regs;
}

/// The 8 elements at `i` of each of the `R` rows times each token's, into `acc`.
#[inline(always)]
unsafe fn step_rows<F: Float, const R: usize>(
    wp: [*const u8; R],
    xp: [*const f32; TILE],
    acc: &mut [[__m256; TILE]; R],
    i: usize,
) {
    // Plain loops, no closures: a closure is compiled without the kernel's target features and
    // may stay a call (`intrinsics_are_inlined_not_called`).
    let mut wv = [_mm256_setzero_ps(); R];
    for r in 0..R {
        wv[r] = F::load8(wp[r].add(i * F::WIDTH));
    }
    for t in 0..TILE {
        let xv = _mm256_loadu_ps(xp[t].add(i));
        for r in 0..R {
            acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
        }
    }
}

/// A row of `F` widened to f32 (for embedding rows).
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dequantize<F: Float>(src: &[u8], dst: &mut [f32]) {
    let n = dst.len().min(src.len() / F::WIDTH);
    let (sp, dp) = (src.as_ptr(), dst.as_mut_ptr());
    let mut i = 0;
    while i + 8 <= n {
        _mm256_storeu_ps(dp.add(i), F::load8(sp.add(i * F::WIDTH)));
        i += 8;
    }
    for j in i..n {
        *dp.add(j) = F::at(sp.add(j * F::WIDTH));
    }
}
