//! The driver every low-bit format shares ([`dot`] over a [`Codebook`]) and the tables and
//! bit spreads its formats build their quants from.

pub(super) use crate::simd::x86::kquant::common::{
    act_blocks, encodings, entry_points, f16_at, fold, hsum256, load128, load256, planar_block,
    u32_at, weight_blocks, PairSum, Planar, Q8K_BSUMS, Q8K_BYTES, Q8K_QS,
};
use crate::simd::x86::kquant::common::{Avx2Pairs, EvexPairs, VexPairs};
use crate::simd::x86::prefetch::{blocks_ahead, group_after_next};
use std::arch::x86_64::*;

/// A super-block format of 256 elements dotted with Q8_K, as eight chunks of 32. The
/// implementations are `#[inline(always)]` and only ever inlined into [`dot`]'s
/// `#[target_feature(enable = "avx2,fma,f16c")]` body, which is what makes their intrinsics
/// valid; they read within the block they are given.
pub(super) trait Codebook {
    /// Bytes of one block.
    const BYTES: usize;
    /// Whether `chunk` gives unsigned digits 0..=2 that mean `digit - 1`, with unit scales
    /// (the ternary formats): [`dot`] then multiplies them with the activations directly
    /// and takes the activations' sums off once per block.
    const DIGITS: bool = false;
    /// Whether `chunk`'s quants are at most 32 in magnitude (IQ1's, IQ3_S's), so that four of them
    /// times activations offset to unsigned bytes (at most 255) sum within an i16: the
    /// unpacked rows then hold chunk pairs folded ([`fold`]) for fewer multiplies.
    const FOLD: bool = false;
    /// Bytes of one block as [`unpack`] writes it: the factor (f32), then the 256 digits of
    /// a [`Self::DIGITS`] format, or the correction lanes and the chunks (folded in pairs
    /// where [`Self::FOLD`]).
    const UNPACKED_BYTES: usize = if Self::DIGITS {
        UNPACKED_CORRECTION + 256
    } else if Self::FOLD {
        UNPACKED_CHUNKS + 4 * FOLDED_PAIR_BYTES
    } else {
        UNPACKED_CHUNKS + 8 * 64
    };
    /// What the block's chunks are built from, gathered once per block with vector
    /// operations: grid and sign indices whose bits are split across fields, scales. A
    /// chunk then loads its indices instead of shifting and masking each one in scalar
    /// code, which bounded these kernels.
    type Prepared: Copy + Default;
    /// The block's [`Self::Prepared`].
    unsafe fn prepare(wb: *const u8) -> Self::Prepared;
    /// The block's float factor: its scale `d` times the format's constant, so that element j
    /// is `factor * chunk scale * quant` (e.g. IQ2_XXS's `d * (0.5 + ls) / 4` is
    /// `d / 8 * (2 ls + 1)`).
    unsafe fn factor(wb: *const u8) -> f32;
    /// Chunk `c` (elements `32c .. 32c + 32`) of block `wb`, `p` its prepared form: its 32
    /// quants as signed bytes in element order (at most 62 in magnitude), and its integer
    /// scales as i16 (every i16 of the low lane for elements `32c .. 32c + 16`, of the high
    /// lane for the rest: [`fold`]ing a pair relies on the two i16 of each i32 being equal).
    /// The signs of a format with sign bits are applied by `N` ([`Negate`]).
    unsafe fn chunk<N: Negate>(wb: *const u8, p: &Self::Prepared, c: usize) -> (__m256i, __m256i);
}

/// How a kernel negates the bytes of a vector that a format's sign bits select: per encoding,
/// since a CPU with AVX512BW takes the 32 bits as a mask register and negates under it in one
/// instruction, where AVX2 spreads them into bytes first ([`sign_bits`]).
pub(super) trait Negate {
    /// `q` with byte `j` negated (wrapping) where bit `j` of `bits` is set.
    unsafe fn negate(q: __m256i, bits: u32) -> __m256i;
}

impl Negate for Avx2Pairs {
    #[inline(always)]
    unsafe fn negate(q: __m256i, bits: u32) -> __m256i {
        _mm256_sign_epi8(q, sign_bits(bits))
    }
}

impl Negate for VexPairs {
    #[inline(always)]
    unsafe fn negate(q: __m256i, bits: u32) -> __m256i {
        Avx2Pairs::negate(q, bits)
    }
}

/// A subtraction from zero under mask register `k1`, loaded from `bits` (AVX512BW and
/// AVX512VL, which every CPU of the `evex` table has): two instructions where AVX2's
/// [`sign_bits`] and `sign` take six. Inline assembly, as `EvexPairs`' own instructions, so
/// the kernels stay compiled for AVX2 alone (with AVX-512's features enabled the compiler
/// merges neighbouring 256-bit steps into 512-bit ones).
impl Negate for EvexPairs {
    #[inline(always)]
    unsafe fn negate(q: __m256i, bits: u32) -> __m256i {
        negate_evex(q, bits)
    }
}

/// `q` with byte `j` negated where bit `j` of `bits` is set, by `kmovd` and a masked
/// `vpsubb` (the caller checked AVX512BW and AVX512VL).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn negate_evex(mut q: __m256i, bits: u32) -> __m256i {
    std::arch::asm!(
        "kmovd k1, {bits:e}",
        "vpsubb {q}{{k1}}, {zero}, {q}",
        bits = in(reg) bits,
        q = inout(ymm_reg) q,
        zero = in(ymm_reg) _mm256_setzero_si256(),
        out("k1") _,
        options(pure, nomem, nostack, preserves_flags),
    );
    q
}

/// `R` weight rows of `F` (back to back in `w`) dotted with `T` Q8_K activation rows:
/// `out[r][t]`. Per (row, token) the same steps whatever `R` and `T` are, so every entry
/// point returns bit for bit what the single-row, single-token call does.
///
/// Per chunk: `maddubs(|a|, sign(q, a))` (pairs of at most 2 * 128 * 62, no saturation),
/// `madd` with the scales into i32 (exact: at most 8 * 2 * 31 * 15872 per lane); per block
/// `acc = fma(factor * da, sum, acc)`. `madd` + `add` is `E`'s (one `vpdpwssd` with VNNI);
/// only inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
pub(super) unsafe fn dot<F: Codebook, E: PairSum + Negate, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let nb = row / F::BYTES;
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    for i in 0..nb {
        let wb = weight_blocks::<R>(w, row, F::BYTES, i);
        let (ab, da) = act_blocks(&a, i);
        if R > 1 {
            group_after_next::<_MM_HINT_T0>(w, i, nb);
        } else if T == 1 {
            blocks_ahead(&wb, F::BYTES);
        }
        let mut prepared = [F::Prepared::default(); R];
        for r in 0..R {
            prepared[r] = F::prepare(wb[r]);
        }
        let sumi = if F::DIGITS {
            digit_sums::<F, E, R, T>(&wb, &prepared, &ab)
        } else {
            let mut sumi = [[_mm256_setzero_si256(); T]; R];
            for c in 0..8 {
                let mut x = [_mm256_setzero_si256(); T];
                let mut mag = [_mm256_setzero_si256(); T];
                for t in 0..T {
                    x[t] = load256(ab[t].add(Q8K_QS + 32 * c));
                    mag[t] = _mm256_abs_epi8(x[t]);
                }
                for r in 0..R {
                    let (q, sc) = F::chunk::<E>(wb[r], &prepared[r], c);
                    for t in 0..T {
                        let p = _mm256_maddubs_epi16(mag[t], _mm256_sign_epi8(q, x[t]));
                        sumi[r][t] = E::madd_add(sumi[r][t], p, sc);
                    }
                }
            }
            sumi
        };
        for r in 0..R {
            let f = F::factor(wb[r]);
            for t in 0..T {
                acc[r][t] = _mm256_fmadd_ps(
                    _mm256_set1_ps(f * da[t]),
                    _mm256_cvtepi32_ps(sumi[r][t]),
                    acc[r][t],
                );
            }
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|t| hsum256(acc[r][t])))
}

/// One block's integer sums for a [`Codebook::DIGITS`] format, per (row, token): `maddubs(digit,
/// x)` summed in i16 over the block (lane j: elements `2j, 2j + 1` of every chunk, at most
/// 8 * 2 * 2 * 128), the activations' 16-element sums (Q8_K's `bsums`, lane j: elements
/// `16j .. 16j + 16`, at most 16 * 128) taken off in i16, one `madd` into i32. The lanes
/// differ from the signed route's; their sum, the block's integer, is the same.
#[inline(always)]
unsafe fn digit_sums<F: Codebook, N: Negate, const R: usize, const T: usize>(
    wb: &[*const u8; R],
    prepared: &[F::Prepared; R],
    ab: &[*const u8; T],
) -> [[__m256i; T]; R] {
    let mut sum16 = [[_mm256_setzero_si256(); T]; R];
    for c in 0..8 {
        let mut x = [_mm256_setzero_si256(); T];
        for t in 0..T {
            x[t] = load256(ab[t].add(Q8K_QS + 32 * c));
        }
        for r in 0..R {
            let (d, _) = F::chunk::<N>(wb[r], &prepared[r], c);
            for t in 0..T {
                sum16[r][t] = _mm256_add_epi16(sum16[r][t], _mm256_maddubs_epi16(d, x[t]));
            }
        }
    }
    digit_block_sums(sum16, ab)
}

/// [`digit_sums`]' last step: the activations' `bsums` off each (row, token)'s i16 sums, then
/// into i32 lanes.
#[inline(always)]
unsafe fn digit_block_sums<const R: usize, const T: usize>(
    mut sum16: [[__m256i; T]; R],
    ab: &[*const u8; T],
) -> [[__m256i; T]; R] {
    let unit = _mm256_set1_epi16(1);
    for t in 0..T {
        let bsums = load256(ab[t].add(Q8K_BSUMS));
        for row in &mut sum16 {
            row[t] = _mm256_madd_epi16(_mm256_sub_epi16(row[t], bsums), unit);
        }
    }
    sum16
}

/// Where an unpacked block's correction lanes start, after its factor (a digit format's
/// digits start there instead).
const UNPACKED_CORRECTION: usize = 4;
/// Where an unpacked block's chunks start.
const UNPACKED_CHUNKS: usize = UNPACKED_CORRECTION + 32;
/// Bytes of a chunk pair as [`unpack`] folds it: two vectors of quants, one of scales.
const FOLDED_PAIR_BYTES: usize = 96;

/// Row `w` of `F` unpacked into `out` ([`Codebook::UNPACKED_BYTES`] per block), so that a
/// prefill batch pays the grid lookups once per row instead of once per tile of tokens: the
/// block's factor (f32), then a [`Codebook::DIGITS`] format's digits as `chunk` gives them;
/// any other's correction `128 * sum q * sc` per i32 lane (see [`unpacked_dot`]) and per
/// chunk the 32 quants and 16 i16 scales `chunk` returns, or where [`Codebook::FOLD`] per
/// chunk pair its quants folded by [`fold`] and its scales in alternate i16.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `w` is whole blocks of `F` and `out` is
/// `w.len() / F::BYTES * F::UNPACKED_BYTES` bytes.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn unpack<F: Codebook>(w: &[u8], out: &mut [u8]) {
    for (wb, ub) in w
        .chunks_exact(F::BYTES)
        .zip(out.chunks_exact_mut(F::UNPACKED_BYTES))
    {
        ub[..4].copy_from_slice(&F::factor(wb.as_ptr()).to_le_bytes());
        let prepared = F::prepare(wb.as_ptr());
        let chunk = |c| F::chunk::<Avx2Pairs>(wb.as_ptr(), &prepared, c);
        let base = ub.as_mut_ptr();
        let store = |at: usize, v: __m256i| {
            debug_assert!(at + 32 <= F::UNPACKED_BYTES);
            _mm256_storeu_si256(base.add(at).cast::<__m256i>(), v)
        };
        if F::DIGITS {
            for c in 0..8 {
                store(UNPACKED_CORRECTION + 32 * c, chunk(c).0);
            }
            continue;
        }
        let mut correction = _mm256_setzero_si256();
        for pair in 0..4 {
            let chunks = [chunk(2 * pair), chunk(2 * pair + 1)];
            for (q, sc) in chunks {
                let pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(-128), q);
                correction = _mm256_add_epi32(correction, _mm256_madd_epi16(pairs, sc));
            }
            let [(q, sc), (q1, sc1)] = chunks;
            if F::FOLD {
                let [qa, qb] = fold(q, q1);
                let at = UNPACKED_CHUNKS + FOLDED_PAIR_BYTES * pair;
                store(at, qa);
                store(at + 32, qb);
                // Each chunk's two i16 per i32 are equal: alternate i16 pick one of each.
                store(at + 64, _mm256_blend_epi16::<0xAA>(sc, sc1));
            } else {
                for (k, (q, sc)) in [(q, sc), (q1, sc1)].into_iter().enumerate() {
                    store(UNPACKED_CHUNKS + 64 * (2 * pair + k), q);
                    store(UNPACKED_CHUNKS + 64 * (2 * pair + k) + 32, sc);
                }
            }
        }
        store(UNPACKED_CORRECTION, correction);
    }
}

/// `R` rows unpacked by [`unpack`] (back to back in `w`) dotted with `T` Q8_K activation
/// rows, arranged by [`arrangement`]'s function unless digits: bit for bit what [`dot`]
/// returns on the packed rows. Digits run as in [`digit_sums`]. Otherwise, by another route
/// to the same i32 lanes: the activations offset to unsigned bytes (`x + 128`, made once per
/// token for the whole product by the arrangement) multiply the signed quants directly
/// (`maddubs`: pairs at most 2 * 255 * 62, no saturation), `madd` + `add` (`E`) the scales
/// as in [`dot`], and the block's stored `128 * sum q * sc` per lane
/// comes off before the same float step. Where [`Codebook::FOLD`], the activations are
/// folded as the quants were ([`fold`]) and two `maddubs` add as i16 (at most
/// 4 * 255 * 32) before one `madd`: three integer multiplies per 64 elements instead of
/// four, the one vector multiplier being what bounds this loop on CPUs such as Zen 1. Only
/// inlined into the encodings' kernels (see [`encodings`]).
#[inline(always)]
pub(super) unsafe fn unpacked_dot<F: Codebook, E: PairSum, const R: usize, const T: usize>(
    w: &[u8],
    a: [&[u8]; T],
) -> [[f32; T]; R] {
    let row = w.len() / R;
    let nb = row / F::UNPACKED_BYTES;
    let mut acc = [[_mm256_setzero_ps(); T]; R];
    // The arranged rows are planar: `xq[t]` a block's quants, `da` its scales.
    let planar = Planar::new(&a);
    for i in 0..nb {
        let wb = weight_blocks::<R>(w, row, F::UNPACKED_BYTES, i);
        // `ab[t]`: a digit format's (quantized) blocks; `xq[t]`: every token's block quants.
        let (ab, xq, da) = if F::DIGITS {
            let (ab, da) = act_blocks(&a, i);
            (ab, ab.map(|b| b.add(Q8K_QS)), da)
        } else {
            let (xq, da, _) = planar.block(i);
            (xq, xq, da)
        };
        let mut sumi = [[_mm256_setzero_si256(); T]; R];
        if F::DIGITS {
            for c in 0..8 {
                let x: [__m256i; T] = std::array::from_fn(|t| load256(xq[t].add(32 * c)));
                for r in 0..R {
                    let d = load256(wb[r].add(UNPACKED_CORRECTION + 32 * c));
                    for t in 0..T {
                        let p = _mm256_maddubs_epi16(d, x[t]);
                        // Plain adds in every encoding: pinned (see `pinned`; a third
                        // faster).
                        sumi[r][t] = _mm256_add_epi16(in_register(sumi[r][t]), p);
                    }
                }
            }
            sumi = digit_block_sums(sumi, &ab);
        } else if F::FOLD {
            // Token by token, so that the accumulators and one token's folded activations
            // stay in registers (the weights are reloaded from L1 per token).
            for pair in 0..4 {
                for t in 0..T {
                    let at = xq[t].add(64 * pair);
                    let (xa, xb) = (pinned::<E>(load256(at)), pinned::<E>(load256(at.add(32))));
                    for r in 0..R {
                        let p = wb[r].add(UNPACKED_CHUNKS + FOLDED_PAIR_BYTES * pair);
                        let s = _mm256_add_epi16(
                            _mm256_maddubs_epi16(xa, load256(p)),
                            _mm256_maddubs_epi16(xb, load256(p.add(32))),
                        );
                        sumi[r][t] = E::madd_add(pinned::<E>(sumi[r][t]), s, load256(p.add(64)));
                    }
                }
            }
        } else {
            for c in 0..8 {
                for t in 0..T {
                    let x = pinned::<E>(load256(xq[t].add(32 * c)));
                    for r in 0..R {
                        let p = wb[r].add(UNPACKED_CHUNKS + 64 * c);
                        let q = _mm256_maddubs_epi16(x, load256(p));
                        sumi[r][t] = E::madd_add(pinned::<E>(sumi[r][t]), q, load256(p.add(32)));
                    }
                }
            }
        }
        for r in 0..R {
            let f = f32::from_le_bytes(wb[r].cast::<[u8; 4]>().read_unaligned());
            let correction = if F::DIGITS {
                _mm256_setzero_si256()
            } else {
                load256(wb[r].add(UNPACKED_CORRECTION))
            };
            for t in 0..T {
                acc[r][t] = _mm256_fmadd_ps(
                    _mm256_set1_ps(f * da[t]),
                    _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[r][t], correction)),
                    acc[r][t],
                );
            }
        }
    }
    std::array::from_fn(|r| std::array::from_fn(|t| hsum256(acc[r][t])))
}

/// `x`, in a register where this stands: opaque to the compiler (an empty `asm!`, no cost).
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn in_register(mut x: __m256i) -> __m256i {
    std::arch::asm!("/* {x} */", x = inout(ymm_reg) x, options(pure, nomem, nostack, preserves_flags));
    x
}

/// A value of [`unpacked_dot`]'s loop (an accumulator, a token's loaded activations),
/// [`in_register`] where `E` [`PairSum::REASSOCIATES`]: the compiler otherwise reorders that
/// loop, unrolled, into trees of adds and loads moved away from their products, and spills
/// (the AVX2 tiles ran 25-60% slower so). The VNNI forms run fastest left alone.
#[inline(always)]
unsafe fn pinned<E: PairSum>(x: __m256i) -> __m256i {
    if E::REASSOCIATES {
        in_register(x)
    } else {
        x
    }
}

/// The activation arrangement [`unpacked_dot`] reads for `F`: none for digits (they meet
/// the signed activations), [`offset_acts`] or, where [`Codebook::FOLD`], [`folded_acts`].
/// Two formats that read alike share one function, so a fused product of both arranges once.
pub(super) const fn arrangement<F: Codebook>() -> Option<crate::kernel_table::Arrange> {
    if F::DIGITS {
        None
    } else if F::FOLD {
        Some(folded_acts)
    } else {
        Some(offset_acts)
    }
}

/// Q8_K rows `a` as a non-folding codebook's [`unpacked_dot`] reads them, into `out`: each
/// block as quantized but its quants offset to unsigned bytes (`x + 128`), once per token for
/// the whole product instead of once per token, chunk and pair of rows in the tile.
fn offset_acts(a: &[u8], out: &mut [u8]) {
    assert!(a.len() == out.len() && a.len().is_multiple_of(Q8K_BYTES));
    // SAFETY: handed out only in the kernel tables, which exist only where the CPU has AVX2,
    // FMA and F16C; the lengths are whole Q8_K blocks.
    unsafe { arrange_acts::<false>(a, out) }
}

/// [`offset_acts`], then each pair of chunks [`fold`]ed as a folding codebook's unpacked quants
/// are (`fold` moves bytes, so offsetting before or after is the same).
fn folded_acts(a: &[u8], out: &mut [u8]) {
    assert!(a.len() == out.len() && a.len().is_multiple_of(Q8K_BYTES));
    // SAFETY: as in `offset_acts`.
    unsafe { arrange_acts::<true>(a, out) }
}

/// [`offset_acts`] (`FOLD` false) and [`folded_acts`].
///
/// # Safety
/// The CPU has AVX2, FMA and F16C; `a` and `out` are the same whole number of Q8_K blocks.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn arrange_acts<const FOLD: bool>(a: &[u8], out: &mut [u8]) {
    let offset = _mm256_set1_epi8(-128);
    let nb = a.len() / Q8K_BYTES;
    for (i, ab) in a.chunks_exact(Q8K_BYTES).enumerate() {
        // Planar, as the K-quants' arrangements (`planar_at`): the driver aligns the rows.
        let bsums = load256(ab.as_ptr().add(Q8K_BSUMS));
        let qs = planar_block(out.as_mut_ptr(), nb, i, ab.as_ptr(), bsums);
        for pair in 0..4 {
            let (at, to) = (Q8K_QS + 64 * pair, qs + 64 * pair);
            let x0 = _mm256_xor_si256(load256(ab.as_ptr().add(at)), offset);
            let x1 = _mm256_xor_si256(load256(ab.as_ptr().add(at + 32)), offset);
            let [x0, x1] = if FOLD { fold(x0, x1) } else { [x0, x1] };
            store256(&mut out[to..to + 32], x0);
            store256(&mut out[to + 32..to + 64], x1);
        }
    }
}

/// A grid of 8-wide rows as little-endian u64 words (byte l is value l), each value times
/// `mul`: one word per group of 8 quants.
pub(super) const fn rows8<const N: usize>(grid: &[[i8; 8]; N], mul: i8) -> [u64; N] {
    let mut out = [0u64; N];
    let mut i = 0;
    while i < N {
        let mut l = 0;
        while l < 8 {
            out[i] |= ((grid[i][l].wrapping_mul(mul) as u8) as u64) << (8 * l);
            l += 1;
        }
        i += 1;
    }
    out
}

/// A grid of 4-wide rows as little-endian u32 words.
pub(super) const fn rows4<const N: usize>(grid: &[[i8; 4]; N]) -> [u32; N] {
    let mut out = [0u32; N];
    let mut i = 0;
    while i < N {
        let mut l = 0;
        while l < 4 {
            out[i] |= (grid[i][l] as u8 as u32) << (8 * l);
            l += 1;
        }
        i += 1;
    }
    out
}

/// Four u64 table words `t[i[k]]` as the qwords of a vector, without bounds checks.
///
/// # Safety
/// AVX2; every `i[k] < t.len()` (each format's prepared indices are masked to its table's
/// size).
#[inline(always)]
pub(super) unsafe fn words4(t: &[u64], i: [usize; 4]) -> __m256i {
    debug_assert!(i.iter().all(|&i| i < t.len()));
    // No closures: an intrinsic called in one stays a call wherever the closure is not
    // inlined first (profiles of a test build showed such calls).
    let b0 = _mm256_set1_epi64x(*t.get_unchecked(i[0]) as i64);
    let b1 = _mm256_set1_epi64x(*t.get_unchecked(i[1]) as i64);
    let b2 = _mm256_set1_epi64x(*t.get_unchecked(i[2]) as i64);
    let b3 = _mm256_set1_epi64x(*t.get_unchecked(i[3]) as i64);
    _mm256_blend_epi32::<0xF0>(
        _mm256_blend_epi32::<0x0C>(b0, b1),
        _mm256_blend_epi32::<0xC0>(b2, b3),
    )
}

/// Eight u32 table words `t[i[k]]` as the dwords of a vector, as [`words4`] does.
///
/// # Safety
/// AVX2; every `i[k] < t.len()`.
#[inline(always)]
pub(super) unsafe fn words8(t: &[u32], i: [usize; 8]) -> __m256i {
    debug_assert!(i.iter().all(|&i| i < t.len()));
    let mut b = [_mm256_setzero_si256(); 8];
    for k in 0..8 {
        b[k] = _mm256_set1_epi32(*t.get_unchecked(i[k]) as i32);
    }
    // Pairs (even dwords from the first), then pairs of pairs, then the halves; no closures,
    // as in `words4`.
    let p0 = _mm256_blend_epi32::<0xAA>(b[0], b[1]);
    let p2 = _mm256_blend_epi32::<0xAA>(b[2], b[3]);
    let p4 = _mm256_blend_epi32::<0xAA>(b[4], b[5]);
    let p6 = _mm256_blend_epi32::<0xAA>(b[6], b[7]);
    _mm256_blend_epi32::<0xF0>(
        _mm256_blend_epi32::<0xCC>(p0, p2),
        _mm256_blend_epi32::<0xCC>(p4, p6),
    )
}

/// A `shuffle_epi8` control that gives every u16 lane of qword q byte `bytes[q]` of its
/// 128-bit lane, zero-extended (the high byte's index has its top bit set: zero).
#[inline(always)]
pub(super) unsafe fn byte_per_qword(bytes: [u64; 4]) -> __m256i {
    let pick = |q: usize| (0x0001_0001_0001_0001u64 * (bytes[q] | 0xFF00)) as i64;
    _mm256_setr_epi64x(pick(0), pick(1), pick(2), pick(3))
}

/// 32 sign bits (bit j for element j) as ±1 bytes: -1 where the bit is set.
#[inline(always)]
pub(super) unsafe fn sign_bits(bits: u32) -> __m256i {
    let v = _mm256_set1_epi32(bits as i32);
    // Byte j takes byte j / 8 of the word, then its bit j % 8.
    let which = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, which), bit), bit);
    _mm256_or_si256(set, _mm256_set1_epi8(1))
}

/// 32 bytes of 7-bit ksigns indices with each one's parity added as bit 7: the eight sign
/// bits of its group of 8 (ggml's `ksigns`: bit l < 7 is element l's sign, the eighth makes
/// the count of minus signs even; see `spec_support::ksign`), for [`sign_bits`] to spread.
#[inline(always)]
pub(super) unsafe fn ksign_bytes(s: __m256i) -> __m256i {
    // The parity of a nibble, as bit 7; a byte's is that of its two nibbles.
    let parity = _mm256_setr_epi8(
        0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0, //
        0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0,
    );
    let nibble = _mm256_set1_epi8(15);
    let low = _mm256_shuffle_epi8(parity, _mm256_and_si256(s, nibble));
    let high = _mm256_shuffle_epi8(parity, _mm256_and_si256(_mm256_srli_epi16::<4>(s), nibble));
    _mm256_or_si256(s, _mm256_xor_si256(low, high))
}

/// The i16 scales `2 n + 1` of the low eight bytes of `b`, nibble pairs (low nibble first),
/// in byte order: the 16-element groups' scales of IQ2_XS and IQ2_S, IQ3_S's per chunk.
#[inline(always)]
pub(super) unsafe fn nibble_scales(b: __m128i) -> __m256i {
    let nibble = _mm_set1_epi8(15);
    let n = _mm_unpacklo_epi8(
        _mm_and_si128(b, nibble),
        _mm_and_si128(_mm_srli_epi16::<4>(b), nibble),
    );
    let n = _mm256_cvtepu8_epi16(n);
    _mm256_or_si256(_mm256_slli_epi16::<1>(n), _mm256_set1_epi16(1))
}

/// The eight u32 words of IQ2_XXS and IQ3_XXS, one per chunk (four 7-bit ksigns indices,
/// the scale `ls` in the top 4 bits), as the chunks' sign words for [`sign_bits`] (byte l:
/// index l with its parity, see [`ksign_bytes`]) and their scales `2 ls + 1` (in the low
/// i16 of each u32).
#[inline(always)]
pub(super) unsafe fn aux_signs_scales(aux: __m256i) -> (__m256i, __m256i) {
    let seven = _mm256_set1_epi32(0x7F);
    let indices = _mm256_or_si256(
        _mm256_or_si256(
            _mm256_and_si256(aux, seven),
            _mm256_and_si256(_mm256_slli_epi32::<1>(aux), _mm256_slli_epi32::<8>(seven)),
        ),
        _mm256_or_si256(
            _mm256_and_si256(_mm256_slli_epi32::<2>(aux), _mm256_slli_epi32::<16>(seven)),
            _mm256_and_si256(_mm256_slli_epi32::<3>(aux), _mm256_slli_epi32::<24>(seven)),
        ),
    );
    let scales = _mm256_or_si256(
        _mm256_slli_epi32::<1>(_mm256_srli_epi32::<28>(aux)),
        _mm256_set1_epi32(1),
    );
    (ksign_bytes(indices), scales)
}

/// Chunk `c`'s two scales of the sixteen 16-element groups in `s` (group `2c` in the low
/// lane, `2c + 1` in the high lane).
#[inline(always)]
pub(super) unsafe fn scale_pair(s: &[i16; 16], c: usize) -> __m256i {
    let pair = s.as_ptr().add(2 * c).cast::<i32>().read_unaligned();
    let spread = _mm256_setr_epi8(
        0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, //
        2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
    );
    _mm256_shuffle_epi8(_mm256_set1_epi32(pair), spread)
}

/// Store `v` into `out` (whole).
#[inline(always)]
pub(super) unsafe fn store256<E>(out: &mut [E], v: __m256i) {
    debug_assert!(std::mem::size_of_val(out) == 32);
    _mm256_storeu_si256(out.as_mut_ptr().cast::<__m256i>(), v);
}

/// The little-endian u64 at `p`.
#[inline(always)]
pub(super) unsafe fn u64_at(p: *const u8) -> u64 {
    u64::from_le_bytes(p.cast::<[u8; 8]>().read_unaligned())
}

/// The safe entry points of a format module (`vec_dot`, `rows`, `tile`, `PREFILL`) around
/// [`dot`] over the [`Codebook`] `$codebook`, whose generated format is `$format`; `rows`
/// runs as calls of `$group` rows (`vex N`: of N in the VEX table). One set per encoding
/// ([`encodings`]: `avx2`, `vex`, `evex`).
macro_rules! codebook_entry_points {
    ($name:literal, $format:ident, $codebook:ty, $group:literal $(, vex $vex_group:literal)?) => {
        use crate::formats::$format::BYTES;
        use crate::simd::x86::iquant::common::{encodings, entry_points, Codebook, Negate, PairSum, Q8K_BYTES};

        const _: () = assert!(<$codebook as Codebook>::BYTES == BYTES);
        /// Bytes of a block unpacked for the prefill tile.
        const UNPACKED_BYTES: usize = <$codebook as Codebook>::UNPACKED_BYTES;
        /// How the tile reads the activations (offset, folded where the format folds).
        const ARRANGE: Option<crate::kernel_table::Arrange> =
            crate::simd::x86::iquant::common::arrangement::<$codebook>();

        encodings!($name, $group $(, vex $vex_group)?, unpacked unpacked_dot);

        /// The shared dots over unpacked rows, for this format's encodings.
        #[inline(always)]
        unsafe fn unpacked_dot<E: PairSum, const R: usize, const T: usize>(
            w: &[u8],
            a: [&[u8]; T],
        ) -> [[f32; T]; R] {
            crate::simd::x86::iquant::common::unpacked_dot::<$codebook, E, R, T>(w, a)
        }

        /// A row of this format unpacked for the prefill tile (`Tile::Unpacked`).
        fn unpack(w: &[u8], out: &mut [u8]) {
            assert!(w.len() % BYTES == 0 && out.len() == w.len() / BYTES * UNPACKED_BYTES);
            // SAFETY: reachable only through the kernel tables, handed out only when the CPU
            // has AVX2, FMA and F16C; the lengths are whole blocks.
            unsafe { crate::simd::x86::iquant::common::unpack::<$codebook>(w, out) }
        }

        /// The shared driver for this format; the callers' SAFETY notes apply.
        #[inline(always)]
        unsafe fn dot<E: PairSum + Negate, const R: usize, const T: usize>(
            w: &[u8],
            a: [&[u8]; T],
        ) -> [[f32; T]; R] {
            crate::simd::x86::iquant::common::dot::<$codebook, E, R, T>(w, a)
        }
    };
}
pub(super) use codebook_entry_points;
