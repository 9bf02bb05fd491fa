//! Q4_K x Q8_K: per 32-element group, `maddubs` of the unsigned nibbles with the int8
//! activations, `madd` with the group's 6-bit scale; the mins come from Q8_K's bsums.

use super::common::*;
use crate::formats::q4_k::{BYTES, OFFSET_D, OFFSET_DMIN, OFFSET_QS, OFFSET_SCALES};
use crate::kernel_table::TILE;
use crate::simd::x86::prefetch::group_after_next;
use std::arch::x86_64::*;
use std::mem::MaybeUninit;

encodings!("Q4_K", 2, vex 8, shared tile_shared);

/// The 8 group scales (low lane) and 8 group mins (high lane) as i16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn scales_mins(p: *const u8) -> __m256i {
    const LOW6: u32 = 0x3F3F_3F3F;
    const LOW4: u32 = 0x0F0F_0F0F;
    const TOP2: u32 = 0x0303_0303;
    let (u0, u1, u2) = (u32_at(p), u32_at(p.add(4)), u32_at(p.add(8)));
    let sc_lo = u0 & LOW6;
    let mn_lo = u1 & LOW6;
    let sc_hi = (u2 & LOW4) | (((u0 >> 6) & TOP2) << 4);
    let mn_hi = ((u2 >> 4) & LOW4) | (((u1 >> 6) & TOP2) << 4);
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
    let bs = bsums(ab);
    _mm_hadd_epi16(
        _mm256_castsi256_si128(bs),
        _mm256_extracti128_si256::<1>(bs),
    )
}

/// Every token's activations of chunk pair `j` (elements 64j..64j+64) of Q8_K blocks `ab`, as
/// [`add_scaled_pair`] takes them: loaded, or zero (and unused) where the block's are `folded`.
#[inline(always)]
pub(super) unsafe fn pair_activations<const T: usize>(
    ab: &[*const u8; T],
    j: usize,
    folded: bool,
) -> [[__m256i; 2]; T] {
    if folded {
        return [[_mm256_setzero_si256(); 2]; T];
    }
    std::array::from_fn(|t| {
        let p = ab[t].add(Q8K_QS + 64 * j);
        [load256(p), load256(p.add(32))]
    })
}

/// Chunk pair `j` (elements 64j..64j+64) of a Q4_K/Q5_K block, its low and high quants as
/// unsigned bytes, into `sumi`, each half scaled by its group scale from `sm` (see
/// [`scales_mins`]): against this block's [`fold`]ed activations `folded` where given (the
/// prefill tiles that fold), else against every token's activations `qa[t]`.
#[inline(always)]
pub(super) unsafe fn add_scaled_pair<E: PairSum, const T: usize>(
    sumi: &mut [__m256i; T],
    lo: __m256i,
    hi: __m256i,
    sm: __m256i,
    j: usize,
    qa: &[[__m256i; 2]; T],
    folded: Option<&Folded<T>>,
) {
    let sc = _mm256_permute2x128_si256::<0x00>(sm, sm);
    if let Some(f) = folded {
        add_folded::<T>(sumi, fold(lo, hi), pair_scales(sc, j), &f[j]);
        return;
    }
    let s_lo = bcast16(sc, 2 * j);
    let s_hi = bcast16(sc, 2 * j + 1);
    for t in 0..T {
        let p_lo = _mm256_maddubs_epi16(lo, qa[t][0]);
        let p_hi = _mm256_maddubs_epi16(hi, qa[t][1]);
        sumi[t] = E::madd_add(E::madd_add(sumi[t], s_lo, p_lo), s_hi, p_hi);
    }
}

/// A Q4_K/Q5_K block (at `wb`: f16 `d`, f16 `dmin` (Q5_K's at the same offsets), scales and mins `sm`) into its row's f32
/// lanes: `acc[t] += d * da[t] * sumi[t] - dmin * da[t] * (mins . bsums[t])`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn add_block_with_mins<const T: usize>(
    acc: &mut [__m256; T],
    wb: *const u8,
    sm: __m256i,
    da: &[f32; T],
    bs: &[__m128i; T],
    sumi: &[__m256i; T],
) {
    let d = f16_at(wb.add(OFFSET_D));
    let dmin = f16_at(wb.add(OFFSET_DMIN));
    let mins = _mm256_extracti128_si256::<1>(sm);
    for t in 0..T {
        // The mins' 4 sums ride in the low half of the accumulator.
        let m = _mm256_zextsi128_si256(_mm_madd_epi16(mins, bs[t]));
        let sum = _mm256_fmadd_ps(
            _mm256_set1_ps(d * da[t]),
            _mm256_cvtepi32_ps(sumi[t]),
            acc[t],
        );
        acc[t] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * da[t]), _mm256_cvtepi32_ps(m), sum);
    }
}

/// `R` rows by `T` tokens; only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
unsafe fn dot<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    dot_with::<E, R, T>(w, a, None, None)
}

/// [`dot`], with block `i`'s activation group sums ([`bsums32`] of each token's Q8_K block)
/// taken from `sums[i]` and its activations [`fold`]ed from `folded[i]` where given (made once
/// for several rows: [`block_sums`], [`fold_activations`]).
#[inline(always)]
unsafe fn dot_with<E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
    sums: Option<&[[__m128i; T]]>,
    folded: Option<&[Folded<T>]>,
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for i in 0..row / BYTES {
        let wb = weight_blocks::<R>(w, row, BYTES, i);
        let (ab, da) = act_blocks(&a, i);
        let sm: [__m256i; R] = std::array::from_fn(|r| scales_mins(wb[r].add(OFFSET_SCALES)));
        if R > 1 {
            group_after_next::<_MM_HINT_T0>(w, i, row / BYTES);
        }
        let mut sumi = [[_mm256_setzero_si256(); T]; R];
        let folded = if E::FOLD { folded.map(|f| &f[i]) } else { None };
        for j in 0..4 {
            let qa = pair_activations(&ab, j, folded.is_some());
            for r in 0..R {
                let q = load256(wb[r].add(OFFSET_QS + 32 * j));
                let lo = _mm256_and_si256(q, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16::<4>(q), m4);
                add_scaled_pair::<E, T>(&mut sumi[r], lo, hi, sm[r], j, &qa, folded);
            }
        }
        let bs: [__m128i; T] = match sums {
            Some(sums) => sums[i],
            None => std::array::from_fn(|t| bsums32(ab[t])),
        };
        for r in 0..R {
            add_block_with_mins(&mut acc[r], wb[r], sm[r], &da, &bs, &sumi[r]);
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|t| hsum256(acc[r][t])))
}

/// Scales `2j` and `2j + 1` of `sc` (the 8 group scales of [`scales_mins`] in both lanes) in
/// alternate i16 of both lanes: the `madd` operand of chunk pair `j` [`fold`]ed.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pair_scales(sc: __m256i, j: usize) -> __m256i {
    // Scales 2j and 2j + 1 are i32 number j of each lane.
    match j {
        0 => _mm256_shuffle_epi32::<0x00>(sc),
        1 => _mm256_shuffle_epi32::<0x55>(sc),
        2 => _mm256_shuffle_epi32::<0xAA>(sc),
        _ => _mm256_shuffle_epi32::<0xFF>(sc),
    }
}

/// A Q8_K block's activations for `T` tokens, [`fold`]ed per chunk pair: `[j][t]`, chunk pair
/// `j` (elements 64j..64j+64) of token `t`.
pub(super) type Folded<const T: usize> = [[[__m256i; 2]; T]; 4];

/// Blocks per row up to which [`fold_activations`] folds a tile's activations once for its
/// rows (40 KiB of stack: rows of up to 10240 elements); longer rows take the unfolded path,
/// which gives the same integers.
pub(super) const FOLDED_BLOCKS: usize = 40;

/// Space for [`fold_activations`]' table.
pub(super) type FoldTable = [MaybeUninit<Folded<TILE>>; FOLDED_BLOCKS];

/// The first `nb` Q8_K blocks of each of the [`TILE`] token rows `a`, [`fold`]ed, written into
/// `table` and returned, for several weight rows to share; `None` past [`FOLDED_BLOCKS`] or
/// where the encoding does not fold.
#[inline(always)]
pub(super) unsafe fn fold_activations<'t, E: PairSum>(
    a: [&[u8]; TILE],
    nb: usize,
    table: &'t mut FoldTable,
) -> Option<&'t [Folded<TILE>]> {
    if !E::FOLD || nb > FOLDED_BLOCKS {
        return None;
    }
    for (i, entry) in table.iter_mut().enumerate().take(nb) {
        let mut block = [[[_mm256_setzero_si256(); 2]; TILE]; 4];
        for (j, pair) in block.iter_mut().enumerate() {
            for (t, qa) in pair.iter_mut().enumerate() {
                let p = a[t].as_ptr().add(i * Q8K_BYTES + Q8K_QS + 64 * j);
                *qa = fold(load256(p), load256(p.add(32)));
            }
        }
        entry.write(block);
    }
    // SAFETY: the first `nb` entries were written just above.
    Some(std::slice::from_raw_parts(table.as_ptr().cast(), nb))
}

/// Blocks per row up to which [`block_sums`] tabulates the activation group sums (8 KiB of
/// stack for 4 tokens: rows of up to 32768 elements); past it each row makes its own.
pub(super) const SHARED_SUMS_BLOCKS: usize = 128;

/// Space for [`block_sums`]' table.
pub(super) type SumsTable = [MaybeUninit<[__m128i; TILE]>; SHARED_SUMS_BLOCKS];

/// The activation group sums ([`bsums32`]) of the first `nb` Q8_K blocks of each of the
/// [`TILE`] token rows `a`, written into `table` and returned, for several weight rows to share;
/// `None` past [`SHARED_SUMS_BLOCKS`].
#[inline(always)]
pub(super) unsafe fn block_sums<'t>(
    a: [&[u8]; TILE],
    nb: usize,
    table: &'t mut SumsTable,
) -> Option<&'t [[__m128i; TILE]]> {
    if nb > SHARED_SUMS_BLOCKS {
        return None;
    }
    for (i, sums) in table.iter_mut().enumerate().take(nb) {
        sums.write(std::array::from_fn(|t| {
            bsums32(a[t].as_ptr().add(i * Q8K_BYTES))
        }));
    }
    // SAFETY: the first `nb` entries were written just above.
    Some(std::slice::from_raw_parts(table.as_ptr().cast(), nb))
}

/// Defines `tile_shared::<E>`, the prefill tile of an encoding `E` (see [`encodings`]) for the
/// module's format (its `BYTES` and `dot_with`, Q4_K's or Q5_K's): `TILE_ROWS` rows, back to
/// back in `w`, with [`TILE`] tokens, one row at a time (a row's accumulators, sums and
/// unpacked quants fill the registers; two rows at once spilled), the activations' group sums
/// made once for the rows ([`block_sums`]) instead of once per row: the same integers, so bit
/// for bit `dot`'s results. A macro, not a function taking the row kernel: a closure or a
/// function pointer is compiled without the kernel's target features, and the closure version,
/// left uninlined, ran every intrinsic as a call.
macro_rules! shared_sums_tile {
    () => {
        #[inline(always)]
        unsafe fn tile_shared<E: PairSum>(
            w: &[u8],
            a: [&[u8]; $crate::kernel_table::TILE],
        ) -> [[f32; $crate::kernel_table::TILE]; $crate::kernel_table::TILE_ROWS] {
            use $crate::kernel_table::{TILE, TILE_ROWS};
            use $crate::simd::x86::kquant::q4k::{
                block_sums, fold_activations, FoldTable, SumsTable, FOLDED_BLOCKS,
                SHARED_SUMS_BLOCKS,
            };
            let row = w.len() / TILE_ROWS;
            let mut table: SumsTable =
                [const { std::mem::MaybeUninit::uninit() }; SHARED_SUMS_BLOCKS];
            let sums = block_sums(a, row / BYTES, &mut table);
            let mut fold_table: FoldTable =
                [const { std::mem::MaybeUninit::uninit() }; FOLDED_BLOCKS];
            let folded = fold_activations::<E>(a, row / BYTES, &mut fold_table);
            let mut out = [[0f32; TILE]; TILE_ROWS];
            for (r, o) in out.iter_mut().enumerate() {
                *o = dot_with::<E, 1, TILE>(&w[r * row..(r + 1) * row], a, sums, folded)[0];
            }
            out
        }
    };
}
pub(super) use shared_sums_tile;

shared_sums_tile!();
