//! IQ1_S and IQ1_M: groups of 8 from the iq1s grid (levels -1, 0, 1), kept eightfold as the
//! spec stores them (`8 grid + delta`, delta ±1: one table of `8 grid ± 1`, the delta's sign
//! bit above the 11-bit grid index, so a group is one lookup), with 3-bit scales `2 s + 1`
//! (per 32 elements in S, per 16 in M) and the block factor `d / 8`.

use super::common::*;
use crate::formats;
use std::arch::x86_64::*;

/// The iq1s grid times 8 plus its delta (IQ1_M shares it): entry `i` is group `i % 2048`
/// of the grid times 8, plus 1 below 2048 and minus 1 from there (the delta's sign bit).
static GRID8_DELTA: [u64; 4096] = {
    let grid = rows8(&formats::iq1_s::GRID, 8);
    let mut out = [0u64; 4096];
    let mut i = 0;
    while i < 4096 {
        let delta: i8 = if i < 2048 { 1 } else { -1 };
        let mut l = 0;
        while l < 8 {
            let q = (grid[i % 2048] >> (8 * l)) as u8 as i8;
            out[i] |= (q.wrapping_add(delta) as u8 as u64) << (8 * l);
            l += 1;
        }
        i += 1;
    }
    out
};
const _: () = assert!(formats::iq1_s::GRID.len() == formats::iq1_m::GRID.len());
// `Codebook::FOLD`'s bound: every quant of the table at most 32 in magnitude.
const _: () = {
    let mut i = 0;
    while i < GRID8_DELTA.len() {
        let mut l = 0;
        while l < 8 {
            let q = (GRID8_DELTA[i] >> (8 * l)) as u8 as i8;
            assert!(-32 <= q && q <= 32);
            l += 1;
        }
        i += 1;
    }
};

/// A block's 32 grid indices (the delta's sign as bit 11, see [`GRID8_DELTA`]) and its
/// scales: per chunk (IQ1_S) or per 16 elements (IQ1_M).
#[derive(Clone, Copy, Default)]
pub(super) struct Iq1Prepared {
    idx: [u16; 32],
    scales: [i16; 16],
}

/// `(v << (13 - 3 l)) mod 2^16` per u16 lane, `l` = lane % 4: bits `3 l .. 3 l + 3` of `v`
/// at 13-15.
#[inline(always)]
unsafe fn three_bit_fields(v: __m256i) -> __m256i {
    // The multipliers 2^13, 2^10, 2^7, 2^4 in each qword's four u16 lanes.
    _mm256_mullo_epi16(v, _mm256_set1_epi64x(0x0010_0080_0400_2000))
}

/// u16 lane j of half `H` takes u16 `4 H + j / 4` of a 16-byte source in both lanes.
#[inline(always)]
unsafe fn spread_u16<const H: i64>(v: __m256i) -> __m256i {
    // Qword q's four u16 lanes pick source bytes `8 H + 2 q` and `8 H + 2 q + 1`.
    let pick = |q: i64| 0x0001_0001_0001_0001 * ((8 * H + 2 * q) | (8 * H + 2 * q + 1) << 8);
    _mm256_shuffle_epi8(v, _mm256_setr_epi64x(pick(0), pick(1), pick(2), pick(3)))
}

/// IQ1_S: grid index `qs[k]` plus three bits of the u16 `qh[k / 4]`, whose bits 12-14 are
/// the chunk's scale and bit 15 its delta's sign.
pub(super) struct Iq1S;
impl Codebook for Iq1S {
    const BYTES: usize = formats::iq1_s::BYTES;
    const FOLD: bool = true;
    type Prepared = Iq1Prepared;
    #[inline(always)]
    unsafe fn prepare(wb: *const u8) -> Iq1Prepared {
        let mut p = Iq1Prepared::default();
        let qh = load128(wb.add(formats::iq1_s::OFFSET_QH));
        let both = _mm256_broadcastsi128_si256(qh);
        let high = _mm256_set1_epi16(0x700);
        let sign = _mm256_set1_epi16(0x800);
        for (h, v) in [spread_u16::<0>(both), spread_u16::<1>(both)]
            .into_iter()
            .enumerate()
        {
            let bits = _mm256_and_si256(_mm256_srli_epi16::<5>(three_bit_fields(v)), high);
            let delta = _mm256_and_si256(_mm256_srli_epi16::<4>(v), sign);
            let low = _mm256_cvtepu8_epi16(load128(wb.add(formats::iq1_s::OFFSET_QS + 16 * h)));
            let idx = _mm256_or_si256(low, _mm256_or_si256(bits, delta));
            store256(&mut p.idx[16 * h..16 * h + 16], idx);
        }
        // `2 * ((qh >> 12) & 7) + 1` per chunk.
        let sc = _mm_or_si128(
            _mm_and_si128(_mm_srli_epi16::<11>(qh), _mm_set1_epi16(0xE)),
            _mm_set1_epi16(1),
        );
        _mm_storeu_si128(p.scales.as_mut_ptr().cast::<__m128i>(), sc);
        p
    }
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        f16_at(wb.add(formats::iq1_s::OFFSET_D)) * 0.125
    }
    #[inline(always)]
    unsafe fn chunk<N: Negate>(_wb: *const u8, p: &Iq1Prepared, c: usize) -> (__m256i, __m256i) {
        let q = words4(
            &GRID8_DELTA,
            std::array::from_fn(|l| p.idx[4 * c + l] as usize),
        );
        (q, _mm256_set1_epi16(p.scales[c]))
    }
}

/// IQ1_M: grid index `qs[k]` plus bits 0-2 of nibble k % 2 of `qh[k / 2]`, whose bit 3 is
/// the group's delta sign (together the 12-bit index into [`GRID8_DELTA`]); 3-bit scales
/// per 16 elements in the u16 `scales`, whose top nibbles hold the f16 `d`.
pub(super) struct Iq1M;
impl Codebook for Iq1M {
    const BYTES: usize = formats::iq1_m::BYTES;
    const FOLD: bool = true;
    type Prepared = Iq1Prepared;
    #[inline(always)]
    unsafe fn prepare(wb: *const u8) -> Iq1Prepared {
        let mut p = Iq1Prepared::default();
        let qh = load128(wb.add(formats::iq1_m::OFFSET_QH));
        let nibble = _mm_set1_epi8(15);
        let (lo, hi) = (
            _mm_and_si128(qh, nibble),
            _mm_and_si128(_mm_srli_epi16::<4>(qh), nibble),
        );
        // Group k's nibble is the high byte of its u16 index.
        let nibbles = [_mm_unpacklo_epi8(lo, hi), _mm_unpackhi_epi8(lo, hi)];
        for (h, n) in nibbles.into_iter().enumerate() {
            let qs = load128(wb.add(formats::iq1_m::OFFSET_QS + 16 * h));
            let out = p.idx.as_mut_ptr().add(16 * h).cast::<__m128i>();
            _mm_storeu_si128(out, _mm_unpacklo_epi8(qs, n));
            _mm_storeu_si128(out.add(1), _mm_unpackhi_epi8(qs, n));
        }
        // Group g's scale: bits 3 (g % 4) .. of the u16 `scales[g / 4]`, as `2 s + 1`.
        let sc = _mm_loadl_epi64(wb.add(formats::iq1_m::OFFSET_SCALES).cast::<__m128i>());
        let fields = three_bit_fields(spread_u16::<0>(_mm256_broadcastsi128_si256(sc)));
        let sc = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi16::<12>(fields), _mm256_set1_epi16(0xE)),
            _mm256_set1_epi16(1),
        );
        store256(&mut p.scales, sc);
        p
    }
    #[inline(always)]
    unsafe fn factor(wb: *const u8) -> f32 {
        let sc = u64_at(wb.add(formats::iq1_m::OFFSET_SCALES));
        // The top nibble of u16 number n is bits 4n .. 4n + 4 of d.
        let bits =
            ((sc >> 12) & 0xF) | ((sc >> 24) & 0xF0) | ((sc >> 36) & 0xF00) | ((sc >> 48) & 0xF000);
        let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)));
        d * 0.125
    }
    #[inline(always)]
    unsafe fn chunk<N: Negate>(_wb: *const u8, p: &Iq1Prepared, c: usize) -> (__m256i, __m256i) {
        let q = words4(
            &GRID8_DELTA,
            std::array::from_fn(|l| p.idx[4 * c + l] as usize),
        );
        (q, scale_pair(&p.scales, c))
    }
}

pub(super) mod iq1_s {
    super::super::common::codebook_entry_points!("IQ1_S", iq1_s, super::Iq1S, 4);
}

pub(super) mod iq1_m {
    super::super::common::codebook_entry_points!("IQ1_M", iq1_m, super::Iq1M, 4);
}
