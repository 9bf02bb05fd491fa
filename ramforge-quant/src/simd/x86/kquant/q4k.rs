//! Q4_K x Q8_K: per 32-element group, `maddubs` of the unsigned nibbles with the int8
//! activations, `madd` with the group's 6-bit scale; the mins come from Q8_K's bsums. Each
//! block's integer dot and mins term are reduced to one integer each before the float step
//! ([`add_block_sums`]), so the prefill tile and the resident layout's kernels, which read
//! quants in another element order ([`octs`]: four elements of each of the eight groups per
//! vector), give the same bits as the decode kernels on the packed blocks. Q5_K shares all
//! of it.

use super::common::*;
use crate::formats::q4_k::{BYTES, OFFSET_D, OFFSET_DMIN, OFFSET_QS, OFFSET_SCALES};
use crate::simd::x86::prefetch::group_after_next;
use std::arch::x86_64::*;

encodings!("Q4_K", 1, vex 8, unpacked unpacked_dot);

/// The 12 packed bytes of 6-bit scales and mins at `p` as four words of four bytes: group
/// scales 0..4, scales 4..8, mins 0..4, mins 4..8.
#[inline(always)]
unsafe fn scale_min_words(p: *const u8) -> [u32; 4] {
    const LOW6: u32 = 0x3F3F_3F3F;
    const LOW4: u32 = 0x0F0F_0F0F;
    const TOP2: u32 = 0x0303_0303;
    let (u0, u1, u2) = (u32_at(p), u32_at(p.add(4)), u32_at(p.add(8)));
    [
        u0 & LOW6,
        (u2 & LOW4) | (((u0 >> 6) & TOP2) << 4),
        u1 & LOW6,
        ((u2 >> 4) & LOW4) | (((u1 >> 6) & TOP2) << 4),
    ]
}

/// The 8 group scales (low lane) and 8 group mins (high lane) as i16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn scales_mins(p: *const u8) -> __m256i {
    let [sc_lo, sc_hi, mn_lo, mn_hi] = scale_min_words(p);
    _mm256_cvtepu8_epi16(_mm_setr_epi32(
        sc_lo as i32,
        sc_hi as i32,
        mn_lo as i32,
        mn_hi as i32,
    ))
}

/// Sums of 32 of a Q8_K block's bsums: 8 i16, one per Q4_K group.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bsums32(ab: *const u8) -> __m128i {
    group_sums(bsums(ab))
}

/// The 8 sums of pairs of the 16 bsums `bs`: one per Q4_K group.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_sums(bs: __m256i) -> __m128i {
    _mm_hadd_epi16(
        _mm256_castsi256_si128(bs),
        _mm256_extracti128_si256::<1>(bs),
    )
}

/// Every token's activations of chunk pair `j` (elements 64j..64j+64) of Q8_K blocks `ab`, as
/// [`add_scaled_pair`] takes them.
#[inline(always)]
pub(super) unsafe fn pair_activations<const T: usize>(
    ab: &[*const u8; T],
    j: usize,
) -> [[__m256i; 2]; T] {
    std::array::from_fn(|t| {
        let p = ab[t].add(Q8K_QS + 64 * j);
        [load256(p), load256(p.add(32))]
    })
}

/// Chunk pair `j` (elements 64j..64j+64) of a Q4_K/Q5_K block, its low and high quants as
/// unsigned bytes, into `sumi`, each half scaled by its group scale from `sm` (see
/// [`scales_mins`]), against every token's activations `qa[t]`.
#[inline(always)]
pub(super) unsafe fn add_scaled_pair<E: PairSum, const T: usize>(
    sumi: &mut [__m256i; T],
    lo: __m256i,
    hi: __m256i,
    sm: __m256i,
    j: usize,
    qa: &[[__m256i; 2]; T],
) {
    let sc = _mm256_permute2x128_si256::<0x00>(sm, sm);
    let s_lo = bcast16(sc, 2 * j);
    let s_hi = bcast16(sc, 2 * j + 1);
    for t in 0..T {
        let p_lo = _mm256_maddubs_epi16(lo, qa[t][0]);
        let p_hi = _mm256_maddubs_epi16(hi, qa[t][1]);
        sumi[t] = E::madd_add(E::madd_add(sumi[t], s_lo, p_lo), s_hi, p_hi);
    }
}

/// A Q4_K/Q5_K block's two integers into its row's accumulator (lane `t`: token `t`, up to
/// 4): `acc = fma(d * da, isum, acc)`, then `acc = fnma(dmin * da, msum, acc)`, where `isum`
/// (lane `t`) is the block's whole scaled integer dot with token `t` and `msum` its mins dotted
/// with the token's group sums. One pair of integers per block, however a kernel's lanes
/// split them, so kernels over different layouts of the weights (the packed blocks, the
/// prefill tile's [`unpack`]ed ones) give the same bits.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn add_block_sums(
    acc: &mut __m128,
    d: f32,
    dmin: f32,
    da: __m128,
    isum: __m128i,
    msum: __m128i,
) {
    let sum = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(d), da), _mm_cvtepi32_ps(isum), *acc);
    *acc = _mm_fnmadd_ps(
        _mm_mul_ps(_mm_set1_ps(dmin), da),
        _mm_cvtepi32_ps(msum),
        sum,
    );
}

/// Lane `t`: the sum of the lanes of `v[t]` (`T` at most 4).
#[inline(always)]
pub(super) unsafe fn lane_sums<const T: usize>(v: &[__m256i; T]) -> __m128i {
    let halves: [__m128i; T] = std::array::from_fn(|t| {
        _mm_add_epi32(
            _mm256_castsi256_si128(v[t]),
            _mm256_extracti128_si256::<1>(v[t]),
        )
    });
    lane_sums128(&halves)
}

/// Lane `t`: the sum of the lanes of `v[t]` (`T` at most 4).
#[inline(always)]
pub(super) unsafe fn lane_sums128<const T: usize>(v: &[__m128i; T]) -> __m128i {
    const { assert!(T >= 1 && T <= 4) };
    if T == 1 {
        let x = _mm_add_epi32(v[0], _mm_shuffle_epi32::<0x4E>(v[0]));
        return _mm_add_epi32(x, _mm_shuffle_epi32::<0xB1>(x));
    }
    let at = |t: usize| if t < T { v[t] } else { _mm_setzero_si128() };
    _mm_hadd_epi32(_mm_hadd_epi32(at(0), at(1)), _mm_hadd_epi32(at(2), at(3)))
}

/// Every token's Q8_K scale `da` of a block in lane `t`.
#[inline(always)]
pub(super) unsafe fn da_lanes<const T: usize>(da: &[f32; T]) -> __m128 {
    let at = |t: usize| if t < T { da[t] } else { 0.0 };
    _mm_setr_ps(at(0), at(1), at(2), at(3))
}

/// The `T` lanes of each row's accumulator.
#[inline(always)]
pub(super) unsafe fn row_results<const R: usize, const T: usize>(
    acc: &[__m128; R],
) -> [[f32; T]; R] {
    std::array::from_fn(|r| {
        let mut lanes = [0f32; 4];
        _mm_storeu_ps(lanes.as_mut_ptr(), acc[r]);
        std::array::from_fn(|t| lanes[t])
    })
}

/// A packed Q4_K/Q5_K block (at `wb`: f16 `d` and `dmin` (Q5_K's at the same offsets),
/// scales and mins `sm`) into its row's accumulator ([`add_block_sums`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn add_block_with_mins<const T: usize>(
    acc: &mut __m128,
    wb: *const u8,
    mins: __m128i,
    da: &[f32; T],
    bs: &[__m128i; T],
    sumi: &[__m256i; T],
) {
    let m: [__m128i; T] = std::array::from_fn(|t| _mm_madd_epi16(mins, bs[t]));
    if T == 1 {
        // The decode kernels' case, with fewer shuffles: both integers reduced by one tree
        // and converted at once, `d` and `dmin` read and scaled together; then the same two
        // rounded steps as `add_block_sums`.
        const _: () = assert!(OFFSET_DMIN == OFFSET_D + 2);
        let x = _mm_add_epi32(
            _mm256_castsi256_si128(sumi[0]),
            _mm256_extracti128_si256::<1>(sumi[0]),
        );
        let h = _mm_hadd_epi32(x, m[0]);
        // Lanes: isum, msum (then the same again).
        let sums = _mm_cvtepi32_ps(_mm_hadd_epi32(h, h));
        let dd = _mm_cvtph_ps(_mm_cvtsi32_si128(
            wb.add(OFFSET_D).cast::<i32>().read_unaligned(),
        ));
        // Lanes: d * da, dmin * da.
        let dd = _mm_mul_ps(dd, _mm_set1_ps(da[0]));
        let sum = _mm_fmadd_ps(dd, sums, *acc);
        *acc = _mm_fnmadd_ps(_mm_movehdup_ps(dd), _mm_movehdup_ps(sums), sum);
        return;
    }
    add_block_sums(
        acc,
        f16_at(wb.add(OFFSET_D)),
        f16_at(wb.add(OFFSET_DMIN)),
        da_lanes(da),
        lane_sums(sumi),
        lane_sums128(&m),
    );
}

/// `R` rows by `T` tokens; only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
unsafe fn dot<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = [_mm_setzero_ps(); R];
    for i in 0..row / BYTES {
        let wb = weight_blocks::<R>(w, row, BYTES, i);
        let (ab, da) = act_blocks(&a, i);
        let sm: [__m256i; R] = std::array::from_fn(|r| scales_mins(wb[r].add(OFFSET_SCALES)));
        if R > 1 {
            group_after_next::<_MM_HINT_T0>(w, i, row / BYTES);
        } else if T == 1 {
            crate::simd::x86::prefetch::blocks_ahead(&wb, BYTES);
        }
        let mut sumi = [[_mm256_setzero_si256(); T]; R];
        for j in 0..4 {
            let qa = pair_activations(&ab, j);
            for r in 0..R {
                let q = load256(wb[r].add(OFFSET_QS + 32 * j));
                let lo = _mm256_and_si256(q, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                add_scaled_pair::<E, T>(&mut sumi[r], lo, hi, sm[r], j, &qa);
            }
        }
        let bs: [__m128i; T] = std::array::from_fn(|t| bsums32(ab[t]));
        for r in 0..R {
            let mins = _mm256_extracti128_si256::<1>(sm[r]);
            add_block_with_mins(&mut acc[r], wb[r], mins, &da, &bs, &sumi[r]);
        }
    }
    row_results(&acc)
}

/// Bytes of a Q4_K/Q5_K block as [`unpack`] writes it for the prefill tile: f32 `d` and
/// `dmin`, the 8 mins as i16, the 8 scales as i16, zeros, then the 256 quants as bytes in
/// [`octs`]' order.
pub(super) const UNPACKED_BYTES: usize = 320;
const U_D: usize = 0;
const U_DMIN: usize = 4;
const U_MINS: usize = 8;
const U_SCALES: usize = 24;
const U_QS: usize = 64;

/// The 128 elements of four 32-element groups (`g[k]`: group `k` in element order), each
/// vector of the result holding two bytes (one i16 after `maddubs`) of every group in turn:
/// byte `b` of vector `k` is element `8k + 2(b / 8) + b % 2` of group `(b / 2) % 4`. So the
/// four vectors' `maddubs` products add as i16 (eight products of one group in each i16)
/// before one `madd` with the four groups' scales repeated: five integer multiplies per 128
/// products instead of Q4_K's packed route's six.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn arrange(g: [__m256i; 4]) -> [__m256i; 4] {
    // Word w of each vector below holds word w / 4 of group w % 4 (within each 128-bit lane:
    // qwords 0 and 2 of the groups from the `lo` unpacks, 1 and 3 from the `hi` ones).
    let lo01 = _mm256_unpacklo_epi16(g[0], g[1]);
    let lo23 = _mm256_unpacklo_epi16(g[2], g[3]);
    let hi01 = _mm256_unpackhi_epi16(g[0], g[1]);
    let hi23 = _mm256_unpackhi_epi16(g[2], g[3]);
    let q0a = _mm256_unpacklo_epi32(lo01, lo23);
    let q0b = _mm256_unpackhi_epi32(lo01, lo23);
    let q1a = _mm256_unpacklo_epi32(hi01, hi23);
    let q1b = _mm256_unpackhi_epi32(hi01, hi23);
    [
        _mm256_permute2x128_si256::<0x20>(q0a, q0b),
        _mm256_permute2x128_si256::<0x20>(q1a, q1b),
        _mm256_permute2x128_si256::<0x31>(q0a, q0b),
        _mm256_permute2x128_si256::<0x31>(q1a, q1b),
    ]
}

/// The 128 elements of four 32-element groups (`g[k]`: group `k` in element order) as four
/// vectors of eight elements of each group in turn: qword `q` of vector `k` is elements
/// `8k .. 8k + 8` of group `q`. A transpose of qwords: four unpacks, four lane swaps;
/// [`octs`]' first step.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn quads(g: [__m256i; 4]) -> [__m256i; 4] {
    let lo01 = _mm256_unpacklo_epi64(g[0], g[1]);
    let hi01 = _mm256_unpackhi_epi64(g[0], g[1]);
    let lo23 = _mm256_unpacklo_epi64(g[2], g[3]);
    let hi23 = _mm256_unpackhi_epi64(g[2], g[3]);
    [
        _mm256_permute2x128_si256::<0x20>(lo01, lo23),
        _mm256_permute2x128_si256::<0x20>(hi01, hi23),
        _mm256_permute2x128_si256::<0x31>(lo01, lo23),
        _mm256_permute2x128_si256::<0x31>(hi01, hi23),
    ]
}

/// A block's eight 32-element groups (`g[k]`: group `k` in element order) as eight vectors
/// each holding four elements of every group: i32 lane `P` of every vector belongs to group
/// [`oct_group`]`(P)` ([`oct_at`] says which elements). So the `maddubs` of all eight vectors
/// add as i16 (sixteen products of one group in each) before one `madd` with the groups'
/// scales, and every i32 lane is one `vpdpbusd` lane of one group: Q4_K's and Q5_K's layout
/// for the prefill tile, the resident blocks and the activations they read. [`quads`] of
/// each half, then each pair of vectors' i32 lanes interleaved (two blends, one swap).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn octs(g: [__m256i; 8]) -> [__m256i; 8] {
    let a = quads([g[0], g[1], g[2], g[3]]);
    let b = quads([g[4], g[5], g[6], g[7]]);
    let mut out = [_mm256_setzero_si256(); 8];
    for k in 0..4 {
        out[2 * k] = _mm256_blend_epi32::<0xAA>(a[k], b[k]);
        out[2 * k + 1] = _mm256_shuffle_epi32::<0xB1>(_mm256_blend_epi32::<0x55>(a[k], b[k]));
    }
    out
}

/// The group whose elements i32 lane `p` (0..8) of every [`octs`] vector holds.
pub(super) const fn oct_group(p: usize) -> usize {
    4 * (p % 2) + p / 2
}

/// Where element `e` (0..256) of a block lies in [`octs`]' eight vectors: (vector, byte).
pub(super) fn oct_at(e: usize) -> (usize, usize) {
    let (g, l) = (e / 32, e % 32);
    let (h, q) = (g / 4, g % 4);
    // In `quads` of half h: vector l / 8, i32 lane 2q + s, s = which four of the eight.
    let s = (l % 8) / 4;
    let p = 2 * q + s;
    let flip = (s != h) as usize;
    (2 * (l / 8) + flip, 4 * (p ^ flip) + l % 4)
}

/// A block's eight groups (in element order) stored at `p` in [`octs`]' order (256 bytes).
#[inline(always)]
unsafe fn store_octs(p: *mut u8, groups: [__m256i; 8]) {
    for (k, v) in octs(groups).into_iter().enumerate() {
        _mm256_storeu_si256(p.add(32 * k).cast(), v);
    }
}

/// A `vpshufb` control spreading eight group scales `width` bytes apart in each 128-bit
/// lane to [`octs`]' lanes: each i16 its group's scale (the low byte; a 6-bit scale's high
/// byte is zero), for `madd`, or with `wide` only each i32's low i16 and the high one zero,
/// for `vpdpwssd` on `vpdpbusd` sums.
const fn oct_spread(width: usize, wide: bool) -> [u8; 32] {
    let mut t = [0x80u8; 32];
    let mut i = 0;
    while i < 32 {
        if i % (if wide { 4 } else { 2 }) == 0 {
            t[i] = (width * oct_group(i / 4)) as u8;
        }
        i += 1;
    }
    t
}

/// [`oct_spread`] for the unpacked block's eight i16 scales: `[wide]`.
static OCT_SCALES: [[u8; 32]; 2] = [oct_spread(2, false), oct_spread(2, true)];

/// The eight i16 scales at `p` as [`OCT_SCALES`] `[wide]` spreads them.
#[inline(always)]
unsafe fn oct_scales(p: *const u8, wide: usize) -> __m256i {
    _mm256_shuffle_epi8(
        _mm256_broadcastsi128_si256(load128(p)),
        load256(OCT_SCALES[wide].as_ptr()),
    )
}

/// Where element `l` of group `g` (of four) lies in [`arrange`]'s four vectors: (vector, byte).
pub(super) fn arranged_at(g: usize, l: usize) -> (usize, usize) {
    (l / 8, 2 * (4 * ((l % 8) / 2) + g) + l % 2)
}

/// A row of Q4_K blocks unpacked for the prefill tile (see [`UNPACKED_BYTES`]).
fn unpack(w: &[u8], out: &mut [u8]) {
    assert!(w.len().is_multiple_of(BYTES) && out.len() == w.len() / BYTES * UNPACKED_BYTES);
    // SAFETY: reachable only through the kernel tables, handed out only when the CPU has
    // AVX2, FMA and F16C; the lengths are whole blocks.
    unsafe { unpack_blocks(w, out) }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack_blocks(w: &[u8], out: &mut [u8]) {
    for (wb, ub) in w
        .chunks_exact(BYTES)
        .zip(out.chunks_exact_mut(UNPACKED_BYTES))
    {
        let wp = wb.as_ptr();
        unpack_block(wp, wp.add(OFFSET_QS), None, ub.as_mut_ptr());
    }
}

/// One Q4_K block at `wp` (its nibbles at `qs`) into [`UNPACKED_BYTES`] at `up`, or with `qh`
/// (its 32 bytes of fifth bits) a Q5_K block, whose `d`, `dmin` and scales sit where Q4_K's do.
#[inline(always)]
pub(super) unsafe fn unpack_block(wp: *const u8, qs: *const u8, qh: Option<__m256i>, up: *mut u8) {
    let one = _mm256_set1_epi8(1);
    unpack_header(wp, up);
    // Chunks 2h and 2h + 1 hold groups 4h, 4h + 1 (low, high nibbles) and 4h + 2, 4h + 3.
    let [g0, g1, g2, g3] = nibble_vectors(qs);
    let [g4, g5, g6, g7] = nibble_vectors(qs.add(64));
    let mut groups = [g0, g1, g2, g3, g4, g5, g6, g7];
    if let Some(qh) = qh {
        // Element l of group g has its fifth bit in bit g of qh[l].
        for (g, group) in groups.iter_mut().enumerate() {
            let bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(g as i32)), one);
            *group = _mm256_or_si256(*group, _mm256_slli_epi16::<4>(bit));
        }
    }
    store_octs(up.add(U_QS), groups);
}

/// The scales, mins and super-block scales of the Q4_K/Q5_K block at `wp` into the unpacked
/// block at `up` (everything but its quants).
#[inline(always)]
unsafe fn unpack_header(wp: *const u8, up: *mut u8) {
    let sm = scales_mins(wp.add(OFFSET_SCALES));
    up.add(U_D)
        .cast::<f32>()
        .write_unaligned(f16_at(wp.add(OFFSET_D)));
    up.add(U_DMIN)
        .cast::<f32>()
        .write_unaligned(f16_at(wp.add(OFFSET_DMIN)));
    _mm_storeu_si128(up.add(U_MINS).cast(), _mm256_extracti128_si256::<1>(sm));
    _mm_storeu_si128(up.add(U_SCALES).cast(), _mm256_castsi256_si128(sm));
    up.add(U_SCALES + 16).write_bytes(0, U_QS - U_SCALES - 16);
}

/// The four vectors of 32 nibbles in the 64 bytes at `q`: the low then high nibbles of its
/// first 32 bytes, then of its second.
#[inline(always)]
unsafe fn nibble_vectors(q: *const u8) -> [__m256i; 4] {
    let m4 = _mm256_set1_epi8(0x0F);
    let (c0, c1) = (load256(q), load256(q.add(32)));
    [
        _mm256_and_si256(c0, m4),
        _mm256_and_si256(_mm256_srli_epi16::<4>(c0), m4),
        _mm256_and_si256(c1, m4),
        _mm256_and_si256(_mm256_srli_epi16::<4>(c1), m4),
    ]
}

/// Four 32-element groups stored at `p` in [`arrange`]'s order (128 bytes).
#[inline(always)]
pub(super) unsafe fn store_arranged(p: *mut u8, groups: [__m256i; 4]) {
    for (k, v) in arrange(groups).into_iter().enumerate() {
        _mm256_storeu_si256(p.add(32 * k).cast(), v);
    }
}

/// The four arranged vectors at `p` (128 bytes).
#[inline(always)]
pub(super) unsafe fn load_arranged(p: *const u8) -> [__m256i; 4] {
    std::array::from_fn(|k| load256(p.add(32 * k)))
}

/// The `maddubs` of four arranged weight vectors `v` with the arranged activations at `x`.
#[inline(always)]
pub(super) unsafe fn arranged_products(v: &[__m256i; 4], x: *const u8) -> [__m256i; 4] {
    std::array::from_fn(|k| _mm256_maddubs_epi16(v[k], load256(x.add(32 * k))))
}

/// A Q8_K activation row in the form the K-quant tiles and resident kernels read, the row
/// planar ([`planar_at`]): with `OCTS` (Q4_K's and Q5_K's) each block's quants in [`octs`]'
/// order and, in place of its bsums, its eight 32-element group sums (i16, then 16 zero
/// bytes); otherwise (Q6_K's) its quants in [`arrange`]'s order and its bsums.
fn arrange_activations<const OCTS: bool>(a: &[u8], out: &mut [u8]) {
    assert!(a.len().is_multiple_of(Q8K_BYTES) && out.len() == a.len());
    // SAFETY: as in `unpack`; the lengths are whole Q8_K blocks.
    unsafe { arrange_activation_blocks::<OCTS>(a, out) }
}

/// [`arrange_activations`].
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn arrange_activation_blocks<const OCTS: bool>(a: &[u8], out: &mut [u8]) {
    let nb = a.len() / Q8K_BYTES;
    let op = out.as_mut_ptr();
    for (i, ab) in a.chunks_exact(Q8K_BYTES).enumerate() {
        let ap = ab.as_ptr();
        if OCTS {
            let sums = _mm256_zextsi128_si256(group_sums(bsums(ap)));
            let qs = planar_block(op, nb, i, ap, sums);
            let [g0, g1, g2, g3] = load_arranged(ap.add(Q8K_QS));
            let [g4, g5, g6, g7] = load_arranged(ap.add(Q8K_QS + 128));
            store_octs(op.add(qs), [g0, g1, g2, g3, g4, g5, g6, g7]);
        } else {
            let qs = planar_block(op, nb, i, ap, bsums(ap));
            for h in 0..2 {
                let groups = load_arranged(ap.add(Q8K_QS + 128 * h));
                store_arranged(op.add(qs + 128 * h), groups);
            }
        }
    }
}

/// How the driver turns an activation row into what [`unpacked_dot`] and the resident
/// layout's kernels read (Q4_K's and Q5_K's).
pub(super) const ARRANGE: Option<crate::kernel_table::Arrange> = Some(arrange_activations::<true>);

/// Q6_K's activation arrangement ([`arrange`]'s order).
pub(super) const PAIRS_ARRANGE: Option<crate::kernel_table::Arrange> =
    Some(arrange_activations::<false>);

/// One half block's integer sums of four [`octs`] weight vectors `v` with four activation
/// vectors `x`, for one `madd` + `add` (`E`) with [`oct_scales`]' spread: with `wide` (VNNI,
/// quants at most 15) four `vpdpbusd`, each i32 lane sixteen products of one group (at most
/// 16 * 15 * 128, an i16); otherwise four `maddubs` added as i16 (at most 8 * 31 * 128, and
/// the two halves' sums of 4-bit quants added at most 16 * 15 * 128).
#[inline(always)]
unsafe fn quad_sums<E: PairSum>(wide: bool, v: &[__m256i; 4], x: &[__m256i; 4]) -> __m256i {
    if wide {
        let mut s = E::dpbusd(_mm256_setzero_si256(), v[0], x[0]);
        for k in 1..4 {
            s = E::dpbusd(s, v[k], x[k]);
        }
        s
    } else {
        // No closure: its intrinsics could stay calls (benches/README, 2026-12-07).
        _mm256_add_epi16(
            _mm256_add_epi16(
                _mm256_maddubs_epi16(v[0], x[0]),
                _mm256_maddubs_epi16(v[1], x[1]),
            ),
            _mm256_add_epi16(
                _mm256_maddubs_epi16(v[2], x[2]),
                _mm256_maddubs_epi16(v[3], x[3]),
            ),
        )
    }
}

/// `R` Q4_K rows [`unpack`]ed (back to back in `u`) dotted with `T` activation rows
/// [`ARRANGE`] made: [`oct_dot`] with its 4-bit quants.
#[inline(always)]
pub(super) unsafe fn unpacked_dot<E: PairSum, const R: usize, const T: usize>(
    u: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    oct_dot::<E, R, T, true>(u, a)
}

/// The same for Q5_K's unpacked rows (5-bit quants).
#[inline(always)]
pub(super) unsafe fn unpacked_dot5<E: PairSum, const R: usize, const T: usize>(
    u: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    oct_dot::<E, R, T, false>(u, a)
}

/// Every token's sums of the lanes of `v[t]` (lane `t`): with [`PairSum::WIDE_SHUFFLES`] by
/// 256-bit `hadd`s, else halves added first (Zen 1 splits 256-bit shuffles). The same
/// integers either way.
#[inline(always)]
pub(super) unsafe fn token_sums<E: PairSum, const T: usize>(v: &[__m256i; T]) -> __m128i {
    const { assert!(T >= 1 && T <= 4) };
    if !E::WIDE_SHUFFLES || T == 1 {
        return lane_sums(v);
    }
    let mut w = [_mm256_setzero_si256(); 4];
    w[..T].copy_from_slice(v);
    let tree = _mm256_hadd_epi32(_mm256_hadd_epi32(w[0], w[1]), _mm256_hadd_epi32(w[2], w[3]));
    _mm_add_epi32(
        _mm256_castsi256_si128(tree),
        _mm256_extracti128_si256::<1>(tree),
    )
}

/// Every token's mins term of a block (lane `t`): the block's eight mins `mins` (i16, in
/// both 128-bit lanes) dotted with the token's eight group sums, two tokens per `madd`
/// (`gs[k]`: tokens 2k and 2k + 1's group sums, one per 128-bit lane).
#[inline(always)]
unsafe fn mins_terms(mins: __m256i, gs: &[__m256i; 2]) -> __m128i {
    let m0 = _mm256_madd_epi16(mins, gs[0]);
    let m1 = _mm256_madd_epi16(mins, gs[1]);
    lane_sums128(&[
        _mm256_castsi256_si128(m0),
        _mm256_extracti128_si256::<1>(m0),
        _mm256_castsi256_si128(m1),
        _mm256_extracti128_si256::<1>(m1),
    ])
}

/// `R` rows [`unpack`]ed (back to back in `u`) dotted with `T` activation rows [`ARRANGE`]
/// made. Per row, block and token: with 4-bit quants (`NIBBLES`) the whole block's eight
/// `maddubs` added as i16 and one `madd` with the scales (with VNNI two [`quad_sums`] by
/// `vpdpbusd`, each with a `vpdpwssd`); Q5_K's quants one `madd` + `add` per half. Per block
/// [`add_block_sums`], the mins terms two tokens per `madd`. The same integers as [`dot`] per
/// block, so bit for bit its results. Rows run one at a time (blocks outer, LLVM copies
/// the tokens' activations to the stack); only inlined into the encodings' kernels (see
/// [`encodings`]).
#[inline(always)]
unsafe fn oct_dot<E: PairSum, const R: usize, const T: usize, const NIBBLES: bool>(
    u: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    const { assert!(T >= 1 && T <= 4) };
    let row = u.len() / R;
    let mut acc = [_mm_setzero_ps(); R];
    let wide = E::DPBUSD && NIBBLES;
    let planar = Planar::new(&a);
    for (r, acc) in acc.iter_mut().enumerate() {
        for i in 0..row / UNPACKED_BYTES {
            let ub = u.as_ptr().add(r * row + i * UNPACKED_BYTES);
            let (xq, da, xg) = planar.block(i);
            let sc = oct_scales(ub.add(U_SCALES), wide as usize);
            let mut sumi = [_mm256_setzero_si256(); T];
            if NIBBLES && !wide {
                let mut p = [_mm256_setzero_si256(); T];
                for h in 0..2 {
                    let v = load_arranged(ub.add(U_QS + 128 * h));
                    for t in 0..T {
                        let x = load_arranged(xq[t].add(128 * h));
                        p[t] = _mm256_add_epi16(p[t], quad_sums::<E>(false, &v, &x));
                    }
                }
                for t in 0..T {
                    sumi[t] = _mm256_madd_epi16(sc, p[t]);
                }
            } else {
                for h in 0..2 {
                    let v = load_arranged(ub.add(U_QS + 128 * h));
                    for t in 0..T {
                        let x = load_arranged(xq[t].add(128 * h));
                        let p = quad_sums::<E>(wide, &v, &x);
                        sumi[t] = E::madd_add(sumi[t], sc, p);
                    }
                }
            }
            // No closure: its intrinsics could stay calls (benches/README, 2026-12-07).
            let mut sums = [_mm_setzero_si128(); 4];
            for t in 0..T {
                sums[t] = load128(xg[t]);
            }
            let gs = [
                _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(sums[0]), sums[1]),
                _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(sums[2]), sums[3]),
            ];
            let mins = _mm256_broadcastsi128_si256(load128(ub.add(U_MINS)));
            add_block_sums(
                acc,
                f32_at(ub.add(U_D)),
                f32_at(ub.add(U_DMIN)),
                da_lanes(&da),
                token_sums::<E, T>(&sumi),
                mins_terms(mins, &gs),
            );
        }
    }
    row_results(&acc)
}

/// Q4_K blocks held in the x86 kernels' arranged layout ([`crate::Layout::Arranged`]): each
/// block's 128 bytes of quants rewritten so that the low and high nibbles of each 32 bytes
/// are two of [`octs`]' eight vectors, in order. The decode kernel then adds the block's
/// eight `maddubs` as i16 before one `madd` (with VNNI: two sets of four `vpdpbusd`, each
/// with a `vpdpwssd`), with neither the packed route's madd per group nor its scale
/// shuffles, reading the same bytes from memory; the prefill tile unpacks the blocks
/// without shuffles. The scales and super-block scales stay where they were.
pub(super) mod arranged {
    use super::*;

    arranged_layout!("Q4_K (arranged)", q4_k);

    /// Where element `e` of a block (0..256) lies in its 128 bytes of quants: (byte, shift of
    /// its nibble), in the file's order (`arranged == false`) or the arranged one.
    pub(in crate::simd::x86) fn quant_at(e: usize, arranged: bool) -> (usize, u32) {
        let (g, l) = (e / 32, e % 32);
        if !arranged {
            return (32 * (g / 2) + l, 4 * (g % 2) as u32);
        }
        // Octs vectors 2m and 2m + 1 are the low and high nibbles of bytes 32m .. 32m + 32.
        let (k, b) = oct_at(e);
        (32 * (k / 2) + b, 4 * (k % 2) as u32)
    }

    /// Whole blocks rewritten in place into the arranged layout.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn arrange_blocks(w: &mut [u8]) {
        for b in w.chunks_exact_mut(BYTES) {
            let q = b.as_mut_ptr().add(OFFSET_QS);
            let [g0, g1, g2, g3] = nibble_vectors(q);
            let [g4, g5, g6, g7] = nibble_vectors(q.add(64));
            let o = octs([g0, g1, g2, g3, g4, g5, g6, g7]);
            for m in 0..4 {
                let packed = _mm256_or_si256(o[2 * m], _mm256_slli_epi16::<4>(o[2 * m + 1]));
                _mm256_storeu_si256(q.add(32 * m).cast(), packed);
            }
        }
    }

    /// One arranged Q4_K block restored in place to the file's layout.
    fn restore_block(b: &mut [u8]) {
        let qs = &mut b[OFFSET_QS..OFFSET_QS + 128];
        let mut file = [0u8; 128];
        for e in 0..256 {
            let (from, from_shift) = quant_at(e, true);
            let (to, to_shift) = quant_at(e, false);
            file[to] |= ((qs[from] >> from_shift) & 0x0F) << to_shift;
        }
        qs.copy_from_slice(&file);
    }

    /// A row of arranged Q4_K blocks unpacked for the prefill tile ([`UNPACKED_BYTES`]): the
    /// quants are already in its order.
    fn unpack(w: &[u8], out: &mut [u8]) {
        assert!(w.len().is_multiple_of(BYTES) && out.len() == w.len() / BYTES * UNPACKED_BYTES);
        // SAFETY: as in `arrange_rows`; the lengths are whole blocks.
        unsafe { unpack_blocks(w, out) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn unpack_blocks(w: &[u8], out: &mut [u8]) {
        for (wb, ub) in w
            .chunks_exact(BYTES)
            .zip(out.chunks_exact_mut(UNPACKED_BYTES))
        {
            let (wp, up) = (wb.as_ptr(), ub.as_mut_ptr());
            unpack_header(wp, up);
            for h in 0..2 {
                let v = nibble_vectors(wp.add(OFFSET_QS + 64 * h));
                for (k, v) in v.into_iter().enumerate() {
                    _mm256_storeu_si256(up.add(U_QS + 128 * h + 32 * k).cast(), v);
                }
            }
        }
    }

    /// `R` arranged rows by `T` activation rows [`arrange_activations`] made: per block, row
    /// and token, the eight `maddubs` added as i16 and one `madd` with the eight groups'
    /// scales (with VNNI per half four `vpdpbusd` and one `vpdpwssd`); per block
    /// [`add_block_with_mins`]. The same integers per block as [`super::dot`] on the file's
    /// blocks, so its bits. Only inlined into the encoding's kernels.
    #[inline(always)]
    unsafe fn dot<E: PairSum, const R: usize, const T: usize>(
        w: &[u8],
        a: [&[u8]; T],
    ) -> [[f32; T]; R] {
        let row = w.len() / R;
        let mut acc = [_mm_setzero_ps(); R];
        // Block i - 1's float steps run after block i's integer work: the same operations in
        // the same order, placed where the out-of-order window finds their inputs ready
        // (measured faster on Zen 1, benches/README.md).
        let mut pending = None;
        let planar = Planar::new(&a);
        for i in 0..row / BYTES {
            let wb = weight_blocks::<R>(w, row, BYTES, i);
            let (xq, _, _) = planar.block(i);
            // A loop, not `array::from_fn`: a closure's call would not inline.
            let mut sm = [(_mm256_setzero_si256(), _mm_setzero_si128()); R];
            for r in 0..R {
                sm[r] = split_scales_mins(wb[r].add(OFFSET_SCALES), E::DPBUSD);
            }
            if R > 1 {
                group_after_next::<_MM_HINT_T0>(w, i, row / BYTES);
            } else if T == 1 {
                crate::simd::x86::prefetch::blocks_ahead(&wb, BYTES);
            }
            let mut sumi = [[_mm256_setzero_si256(); T]; R];
            // Without VNNI the halves' i16 sums (`p`) add before one `madd`.
            let mut p = [[_mm256_setzero_si256(); T]; R];
            for h in 0..2 {
                let x: [[__m256i; 4]; T] =
                    std::array::from_fn(|t| load_arranged(xq[t].add(128 * h)));
                for r in 0..R {
                    let v = nibble_vectors(wb[r].add(OFFSET_QS + 64 * h));
                    for t in 0..T {
                        let s = quad_sums::<E>(E::DPBUSD, &v, &x[t]);
                        if E::DPBUSD {
                            sumi[r][t] = E::madd_add(sumi[r][t], sm[r].0, s);
                        } else {
                            p[r][t] = _mm256_add_epi16(p[r][t], s);
                        }
                    }
                }
            }
            if !E::DPBUSD {
                for r in 0..R {
                    for t in 0..T {
                        sumi[r][t] = _mm256_madd_epi16(sm[r].0, p[r][t]);
                    }
                }
            }
            let mins: [__m128i; R] = std::array::from_fn(|r| sm[r].1);
            if let Some((j, mins, sumi)) = pending {
                finish_block(&mut acc, w, row, &planar, j, &mins, &sumi);
            }
            pending = Some((i, mins, sumi));
        }
        if let Some((j, mins, sumi)) = pending {
            finish_block(&mut acc, w, row, &planar, j, &mins, &sumi);
        }
        row_results(&acc)
    }

    /// Block `i`'s integers `sumi` (and its mins as i16, `mins`) of each of the `R` rows into
    /// its accumulator ([`add_block_with_mins`]).
    #[inline(always)]
    unsafe fn finish_block<const R: usize, const T: usize>(
        acc: &mut [__m128; R],
        w: &[u8],
        row: usize,
        planar: &Planar<T>,
        i: usize,
        mins: &[__m128i; R],
        sumi: &[[__m256i; T]; R],
    ) {
        let wb = weight_blocks::<R>(w, row, BYTES, i);
        let (_, da, xg) = planar.block(i);
        let gs: [__m128i; T] = std::array::from_fn(|t| load128(xg[t]));
        for r in 0..R {
            add_block_with_mins(&mut acc[r], wb[r], mins[r], &da, &gs, &sumi[r]);
        }
    }

    /// [`scales_mins`] as the arranged kernel takes them: the eight group scales spread to
    /// [`octs`]' lanes (every i16 its group's, or with `wide` the low i16 of every i32 and
    /// zero in the high one, for `vpdpwssd` on `vpdpbusd` sums), and the eight mins as i16;
    /// built from 32-bit words, so no lane-crossing widen or permute. A target-feature
    /// function, not an `#[inline(always)]` one: called from the kernel's closures, whose
    /// intrinsics would otherwise stay calls.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn split_scales_mins(p: *const u8, wide: bool) -> (__m256i, __m128i) {
        let [sc_lo, sc_hi, mn_lo, mn_hi] = scale_min_words(p);
        let spread = load256(SCALE_SPREAD[wide as usize].as_ptr());
        let scales = (sc_lo as u64 | (sc_hi as u64) << 32) as i64;
        let sc = _mm256_shuffle_epi8(_mm256_set1_epi64x(scales), spread);
        let mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(
            (mn_lo as u64 | (mn_hi as u64) << 32) as i64,
        ));
        (sc, mins)
    }

    /// [`oct_spread`] for the eight scale bytes (a broadcast qword): `[wide]`.
    static SCALE_SPREAD: [[u8; 32]; 2] = [oct_spread(1, false), oct_spread(1, true)];
}
