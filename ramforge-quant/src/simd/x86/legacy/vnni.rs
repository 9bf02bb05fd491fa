//! AVX-VNNI prefill tiles of the 32-element formats without a min: the AVX2 tiles of
//! [`super::gemm`] (same lane layouts, same float steps) with the integer dots done by
//! `vpdpbusd` (unsigned bytes times signed bytes, four products summed into an i32 lane, no
//! i16 step). The integer dots are exact in both, so each tile returns bit for bit what its
//! AVX2 counterpart does.
//!
//! `vpdpbusd` takes one side unsigned: the weights go in as `q + BIAS` (Q8_0, Q8_1 and
//! IQ4_NL's signed levels plus 128; Q4_0's and Q5_0's stored quants, whose bias is their
//! offset), the activations signed as they are, and each lane's accumulator starts from
//! `-BIAS * (sum of its activation quants)`, computed once per block for all weight rows. So
//! a (row, token) pair costs one instruction per four-element group, with no sign step.
//!
//! The single-row dot, the decode rows kernel and Q4_1 / Q5_1's one-row tile are the drivers
//! of [`super::dots`] (compiled with AVX-VNNI) over [`Vnni`]: the format with its exact
//! integer sums ([`Weights::isums`]) done by `vpdpbusd` the same way.
//!
//! Bit for bit the AVX2 results for activation quants within -127..=127, which is all the
//! quantizers make (AVX2's sign trick, not these, would wrap on -128).
//!
//! Every kernel here is generic over the encoding of `vpdpbusd` ([`Encoding`]): the VEX one of
//! AVX-VNNI ([`Vex`]) or the EVEX one of AVX512-VNNI with AVX512VL ([`Evex`], for CPUs that
//! have only that one: Ice Lake and Cascade Lake servers, Zen 4). The instruction and its
//! results are the same.

use super::blocks::{lane_pair_acts, tree32, Iq4Nl, Mxfp4, Nibbles, Weights, LANES, Q8};
use super::gemm::{
    accumulate, broadcast_chunks, by_chunk, fold_halves, fold_pairs, pair_scales, token_quants,
    token_scales, Chunked, Unsigned,
};
use crate::formats::{iq4_nl, mxfp4};
use crate::kernel_table::{TILE, TILE_ROWS};
use std::arch::x86_64::*;
use std::marker::PhantomData;

/// One encoding of `vpdpbusd` on 256-bit vectors: `s` plus, per i32 lane, the four products
/// of `a`'s unsigned bytes with `b`'s signed bytes.
pub(super) trait Encoding {
    unsafe fn dpbusd(s: __m256i, a: __m256i, b: __m256i) -> __m256i;
}

/// AVX-VNNI's VEX encoding (Alder Lake, Sapphire Rapids, Zen 5).
pub(super) struct Vex;

/// AVX512-VNNI's EVEX encoding on 256-bit vectors (needs AVX512VL too).
///
/// Written as inline assembly so that its kernels are compiled for AVX2 alone: with the
/// AVX-512 target features enabled, the compiler also moves and permutes in 512-bit registers,
/// which can lower these CPUs' clock or close a vector port for the 256-bit work around them.
pub(super) struct Evex;

impl Encoding for Vex {
    #[inline(always)]
    unsafe fn dpbusd(s: __m256i, a: __m256i, b: __m256i) -> __m256i {
        _mm256_dpbusd_avx_epi32(s, a, b)
    }
}

impl Encoding for Evex {
    #[inline(always)]
    unsafe fn dpbusd(s: __m256i, a: __m256i, b: __m256i) -> __m256i {
        dpbusd_evex(s, a, b)
    }
}

/// `s` plus (`a`'s unsigned bytes) x (`b`'s signed bytes), four products per i32 lane, by the
/// EVEX `vpdpbusd` (the caller checked AVX512-VNNI and AVX512VL).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn dpbusd_evex(mut s: __m256i, a: __m256i, b: __m256i) -> __m256i {
    std::arch::asm!(
        "{{evex}} vpdpbusd {s}, {a}, {b}",
        s = inout(ymm_reg) s,
        a = in(ymm_reg) a,
        b = in(ymm_reg) b,
        options(pure, nomem, nostack, preserves_flags),
    );
    s
}

/// A format without a min whose quants, plus `BIAS`, are 32 unsigned bytes.
pub(super) trait Biased: Weights {
    const BIAS: u8;
    /// Block `b`'s quants plus `BIAS` as unsigned bytes, in element order.
    unsafe fn biased(b: *const u8) -> __m256i;
}

impl<const BYTES: usize, const D: usize, const QS: usize> Biased for Q8<BYTES, D, QS> {
    const BIAS: u8 = 128;
    #[inline(always)]
    unsafe fn biased(b: *const u8) -> __m256i {
        // q + 128 modulo 256 flips the top bit.
        _mm256_xor_si256(
            _mm256_loadu_si256(b.add(QS).cast()),
            _mm256_set1_epi8(i8::MIN),
        )
    }
}

/// A nibble-levels format (IQ4_NL, MXFP4) as [`Biased`]: `$table`, its levels plus 128 (all
/// within 1..=255), so the table lookup gives biased bytes.
macro_rules! biased_levels {
    ($name:ident, $m:ident, $table:ident) => {
        static $table: [u8; 16] = {
            let mut t = [0u8; 16];
            let mut i = 0;
            while i < 16 {
                t[i] = ($m::KVALUES[i] as i32 + 128) as u8;
                i += 1;
            }
            t
        };

        impl Biased for $name {
            const BIAS: u8 = 128;
            #[inline(always)]
            unsafe fn biased(b: *const u8) -> __m256i {
                let levels = _mm256_broadcastsi128_si256(_mm_loadu_si128($table.as_ptr().cast()));
                // The 16 nibble bytes in both halves, the high half shifted down by 4.
                let both =
                    _mm256_broadcastsi128_si256(_mm_loadu_si128(b.add($m::OFFSET_QS).cast()));
                let both = _mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4));
                _mm256_shuffle_epi8(levels, _mm256_and_si256(both, _mm256_set1_epi8(0x0F)))
            }
        }
    };
}

biased_levels!(Iq4Nl, iq4_nl, IQ4_NL_BIASED);
biased_levels!(Mxfp4, mxfp4, MXFP4_BIASED);

impl Biased for super::blocks::Q5_0 {
    const BIAS: u8 = <Self as Unsigned>::BIAS as u8;
    #[inline(always)]
    unsafe fn biased(b: *const u8) -> __m256i {
        <Self as Unsigned>::unsigned(b)
    }
}

/// The four tokens' quants of one block by 4-byte group: vector g holds, in lane t, token
/// t's elements 4g .. 4g + 4 and, in lane t + 4, its elements 16 + 4g .. 20 + 4g (a 4 x 4
/// transpose of i32 words in each 128-bit half).
#[inline(always)]
unsafe fn by_group(x: [__m256i; TILE]) -> [__m256i; 4] {
    let t0 = _mm256_unpacklo_epi32(x[0], x[1]);
    let t1 = _mm256_unpackhi_epi32(x[0], x[1]);
    let t2 = _mm256_unpacklo_epi32(x[2], x[3]);
    let t3 = _mm256_unpackhi_epi32(x[2], x[3]);
    [
        _mm256_unpacklo_epi64(t0, t2),
        _mm256_unpackhi_epi64(t0, t2),
        _mm256_unpacklo_epi64(t1, t3),
        _mm256_unpackhi_epi64(t1, t3),
    ]
}

/// `-bias * (x's four-element sums, lane by lane, over the four vectors)`: the accumulator a
/// row's dots start from, so that the biased weights' products come out exact.
#[inline(always)]
unsafe fn bias_start<E: Encoding>(x: &[__m256i; 4], bias: u8) -> __m256i {
    let b = _mm256_set1_epi8(bias as i8);
    let mut s = _mm256_setzero_si256();
    for v in x {
        s = E::dpbusd(s, b, *v);
    }
    _mm256_sub_epi32(_mm256_setzero_si256(), s)
}

/// [`super::gemm::tile_unsigned`] (Q5_0) on AVX-VNNI: lane t of a row's block sum is the exact dot of the block's first 16
/// elements with token t's, lane t + 4 of its last 16, as there; each weight i32 word is
/// broadcast across its half (`pshufd`) against the four tokens' words side by side.
#[inline(always)]
unsafe fn tile_biased<F: Biased, E: Encoding>(
    w: &[u8],
    a: [&[u8]; TILE],
) -> [[f32; TILE]; TILE_ROWS] {
    let acc = accumulate::<F, _>(
        w,
        a,
        |ap, b| {
            let x = by_group(token_quants::<F>(ap, b));
            let start = bias_start::<E>(&x, F::BIAS);
            ((x, start), token_scales(ap, b * F::ACT.bytes + F::ACT.d))
        },
        |(x, start), wb| {
            let q = F::biased(wb);
            let mut s = *start;
            s = E::dpbusd(s, _mm256_shuffle_epi32::<0x00>(q), x[0]);
            s = E::dpbusd(s, _mm256_shuffle_epi32::<0x55>(q), x[1]);
            s = E::dpbusd(s, _mm256_shuffle_epi32::<0xAA>(q), x[2]);
            E::dpbusd(s, _mm256_shuffle_epi32::<0xFF>(q), x[3])
        },
    );
    fold_halves(acc)
}

/// [`super::gemm::tile_chunked`] (Q4_0) on AVX-VNNI: the same 8-element chunks broadcast
/// against the four tokens' chunks, lanes 2t and 2t + 1 token t's.
#[inline(always)]
unsafe fn tile_chunked<F: Chunked + Unsigned, E: Encoding>(
    w: &[u8],
    a: [&[u8]; TILE],
) -> [[f32; TILE]; TILE_ROWS] {
    chunk_tile::<F, E>(w, a, F::BIAS as u8, |wb| F::chunks(wb))
}

/// [`super::gemm::tile_signed`] (Q8_0, Q8_1, IQ4_NL, MXFP4) on AVX-VNNI: the biased weight
/// quants in 8-element chunks, each broadcast against the four tokens' chunks, lanes 2t and
/// 2t + 1 token t's (the same split of each block as there).
#[inline(always)]
unsafe fn tile_signed<F: Biased, E: Encoding>(
    w: &[u8],
    a: [&[u8]; TILE],
) -> [[f32; TILE]; TILE_ROWS] {
    chunk_tile::<F, E>(w, a, F::BIAS, |wb| broadcast_chunks(F::biased(wb)))
}

/// The chunked tiles' block loop: `chunks(block)` gives a weight block's four 8-element
/// chunks, each broadcast, as unsigned bytes that are the quants plus `bias`; each is
/// dotted with the four tokens' chunks ([`by_chunk`]) from `-bias` times their sums.
#[inline(always)]
unsafe fn chunk_tile<F: Weights, E: Encoding>(
    w: &[u8],
    a: [&[u8]; TILE],
    bias: u8,
    chunks: impl Fn(*const u8) -> [__m256i; 4],
) -> [[f32; TILE]; TILE_ROWS] {
    let acc = accumulate::<F, _>(
        w,
        a,
        |ap, b| {
            let x = by_chunk::<F>(ap, b);
            let start = bias_start::<E>(&x, bias);
            ((x, start), pair_scales(ap, b * F::ACT.bytes + F::ACT.d))
        },
        |(x, start), wb| {
            let c = chunks(wb);
            let mut s = *start;
            for k in 0..4 {
                s = E::dpbusd(s, c[k], x[k]);
            }
            s
        },
    );
    fold_pairs(acc)
}

/// The multi-row tiles compiled for each encoding's target features: `$biased` is
/// [`tile_biased`], `$chunked` [`tile_chunked`], `$signed` [`tile_signed`].
macro_rules! tiles {
    ($features:literal, $encoding:ty, $biased:ident, $chunked:ident, $signed:ident) => {
        #[target_feature(enable = $features)]
        pub(super) unsafe fn $biased<F: Biased>(
            w: &[u8],
            a: [&[u8]; TILE],
        ) -> [[f32; TILE]; TILE_ROWS] {
            tile_biased::<F, $encoding>(w, a)
        }

        #[target_feature(enable = $features)]
        pub(super) unsafe fn $chunked<F: Chunked + Unsigned>(
            w: &[u8],
            a: [&[u8]; TILE],
        ) -> [[f32; TILE]; TILE_ROWS] {
            tile_chunked::<F, $encoding>(w, a)
        }

        #[target_feature(enable = $features)]
        pub(super) unsafe fn $signed<F: Biased>(
            w: &[u8],
            a: [&[u8]; TILE],
        ) -> [[f32; TILE]; TILE_ROWS] {
            tile_signed::<F, $encoding>(w, a)
        }
    };
}

tiles!(
    "avx2,fma,f16c,avxvnni",
    Vex,
    tile_biased_vex,
    tile_chunked_vex,
    tile_signed_vex
);
tiles!(
    "avx2,fma,f16c",
    Evex,
    tile_biased_evex,
    tile_chunked_evex,
    tile_signed_evex
);

/// A format's integer sums done with `vpdpbusd` (the same values as its [`Weights::isums`]).
pub(super) trait VnniSums: Weights {
    unsafe fn vnni_isums<E: Encoding>(
        w: [*const u8; LANES],
        a: [*const u8; LANES],
    ) -> (__m256i, __m256i);
}

/// Format `F` with [`VnniSums::vnni_isums`] in encoding `E` as its `isums`, for the drivers of
/// [`super::dots`] (the `*_vnni` ones for [`Vex`], the AVX2 ones for [`Evex`]).
pub(super) struct Vnni<F, E>(PhantomData<(F, E)>);

impl<F: VnniSums, E: Encoding> Weights for Vnni<F, E> {
    const BYTES: usize = F::BYTES;
    const OFFSET_D: usize = F::OFFSET_D;
    const MIN_AT: Option<usize> = F::MIN_AT;
    const ACT: super::blocks::Act = F::ACT;
    #[inline(always)]
    unsafe fn isums(w: [*const u8; LANES], a: [*const u8; LANES]) -> (__m256i, __m256i) {
        F::vnni_isums::<E>(w, a)
    }
    #[inline(always)]
    unsafe fn scales(w: [*const u8; LANES]) -> __m256 {
        F::scales(w)
    }
}

/// Four vectors of i32 partial sums, lane pair p's in vector p (lane p in the low half, p + 4
/// in the high), reduced to one i32 per lane, lanes in order 0..8.
#[inline(always)]
unsafe fn tree4(v: [__m256i; 4]) -> __m256i {
    _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]))
}

/// [`Weights::isums`] of a [`Nibbles`] format: the unsigned quants of the two lanes of a
/// vector against their activations, less `BIAS` times the activation sums, all in i32.
#[inline(always)]
unsafe fn nibble_isums<F: Nibbles, E: Encoding>(
    w: [*const u8; LANES],
    a: [*const u8; LANES],
) -> (__m256i, __m256i) {
    let zero = _mm256_setzero_si256();
    let mut dots = [zero; 4];
    let mut sums = [zero; 4];
    for p in 0..4 {
        let [wl, wh] = F::halves(w[p], w[p + 4]);
        let [al, ah] = lane_pair_acts::<F>(&a, p);
        let mut d = E::dpbusd(E::dpbusd(zero, wl, al), wh, ah);
        if F::BIAS != 0 {
            let bias = _mm256_set1_epi8(F::BIAS);
            let off = E::dpbusd(E::dpbusd(zero, bias, al), bias, ah);
            d = _mm256_sub_epi32(d, off);
        }
        dots[p] = d;
        if F::HAS_MIN {
            let one = _mm256_set1_epi8(1);
            sums[p] = E::dpbusd(E::dpbusd(zero, one, al), one, ah);
        }
    }
    let asum = if F::HAS_MIN { tree4(sums) } else { zero };
    (tree4(dots), asum)
}

/// [`Weights::isums`] of a [`Biased`] format: per lane, the biased quants against the
/// activations, from `-BIAS` times the activations' four-element sums.
#[inline(always)]
unsafe fn biased_isums<F: Biased, E: Encoding>(
    w: [*const u8; LANES],
    a: [*const u8; LANES],
) -> (__m256i, __m256i) {
    let bias = _mm256_set1_epi8(F::BIAS as i8);
    let zero = _mm256_setzero_si256();
    let mut p = [zero; LANES];
    for k in 0..LANES {
        let aq = _mm256_loadu_si256(a[k].add(F::ACT.qs).cast());
        let start = _mm256_sub_epi32(zero, E::dpbusd(zero, bias, aq));
        p[k] = E::dpbusd(start, F::biased(w[k]), aq);
    }
    (tree32(p), zero)
}

macro_rules! vnni_sums {
    ($via:ident: $($format:ty),*) => {
        $(impl VnniSums for $format {
            #[inline(always)]
            unsafe fn vnni_isums<E: Encoding>(
                w: [*const u8; LANES],
                a: [*const u8; LANES],
            ) -> (__m256i, __m256i) {
                $via::<Self, E>(w, a)
            }
        })*
    };
}

vnni_sums!(nibble_isums: super::blocks::Q4_0, super::blocks::Q4_1, super::blocks::Q5_0, super::blocks::Q5_1);
vnni_sums!(biased_isums: super::blocks::Q8_0, super::blocks::Q8_1, Iq4Nl, Mxfp4);
