//! Loads and reductions the super-block kernels share, and the Q8_K block layout they read.

use crate::formats::q8_k;
use std::arch::x86_64::*;

/// Bytes of one Q8_K activation block: f32 `d`, 256 `qs`, 16 i16 `bsums`.
pub(in crate::simd::x86) const Q8K_BYTES: usize = q8_k::BYTES;
/// Offset of the f32 scale in a Q8_K block.
pub(in crate::simd::x86) const Q8K_D: usize = q8_k::OFFSET_D;
/// Offset of the quants in a Q8_K block.
pub(in crate::simd::x86) const Q8K_QS: usize = q8_k::OFFSET_QS;
/// Offset of the 16-element sums in a Q8_K block.
pub(in crate::simd::x86) const Q8K_BSUMS: usize = q8_k::OFFSET_BSUMS;

/// 32 unaligned bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn load256(p: *const u8) -> __m256i {
    _mm256_loadu_si256(p.cast::<__m256i>())
}

/// 16 unaligned bytes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn load128(p: *const u8) -> __m128i {
    _mm_loadu_si128(p.cast::<__m128i>())
}

/// The little-endian f16 at `p`, widened.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn f16_at(p: *const u8) -> f32 {
    let bits = u16::from_le_bytes(p.cast::<[u8; 2]>().read_unaligned());
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// The little-endian f32 at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn f32_at(p: *const u8) -> f32 {
    f32::from_le_bytes(p.cast::<[u8; 4]>().read_unaligned())
}

/// The little-endian u32 at `p`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn u32_at(p: *const u8) -> u32 {
    u32::from_le_bytes(p.cast::<[u8; 4]>().read_unaligned())
}

/// Sum of the 4 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn hsum128(v: __m128) -> f32 {
    let v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    let v = _mm_add_ss(v, _mm_movehdup_ps(v));
    _mm_cvtss_f32(v)
}

/// Sum of the 8 lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn hsum256(v: __m256) -> f32 {
    hsum128(_mm_add_ps(
        _mm256_castps256_ps128(v),
        _mm256_extractf128_ps::<1>(v),
    ))
}

/// The 16 bsums of a Q8_K block as i16.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn bsums(ab: *const u8) -> __m256i {
    load256(ab.add(Q8K_BSUMS))
}

/// The byte shuffles of [`chunk_scales`], one per chunk: built once rather than per call,
/// where a loop that is not unrolled would assemble them byte by byte.
static CHUNK_CTRL: [[u8; 32]; 4] = {
    let mut t = [[0u8; 32]; 4];
    let mut k = 0;
    while k < 4 {
        let mut b = 0;
        while b < 32 {
            // Lane 0 picks i16 number 2k, lane 1 number 2k + 1 (bytes 4k, 4k+1 / 4k+2, 4k+3).
            let first = if b < 16 { 4 * k } else { 4 * k + 2 };
            t[k][b] = (first + b % 2) as u8;
            b += 1;
        }
        k += 1;
    }
    t
};

/// The byte shuffles of [`bcast16`], one per i16 of a lane.
static BCAST16_CTRL: [[u8; 32]; 8] = {
    let mut t = [[0u8; 32]; 8];
    let mut k = 0;
    while k < 8 {
        let mut b = 0;
        while b < 32 {
            t[k][b] = (2 * k + b % 2) as u8;
            b += 1;
        }
        k += 1;
    }
    t
};

/// For the formats with 16 groups of 16: `sc16` holds the 16 group scales as i16
/// (groups 0-7 in the low lane, 8-15 in the high). Returns, for half `h` of the block and its
/// 32-element chunk `k`, the scale of group `8h + 2k` in every i16 of the low lane and that of
/// group `8h + 2k + 1` in the high lane: the two groups a 32-byte chunk of quants covers.
/// (Equally, for `half_scales` holding 8 scales in both lanes, scales `2k` and `2k + 1`.)
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn chunk_scales(half_scales: __m256i, k: usize) -> __m256i {
    _mm256_shuffle_epi8(half_scales, load256(CHUNK_CTRL[k].as_ptr()))
}

/// The scales of half `h` (`sc16`'s low lane for 0, high for 1) in both lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn half_scales(sc16: __m256i, h: usize) -> __m256i {
    if h == 0 {
        _mm256_permute2x128_si256::<0x00>(sc16, sc16)
    } else {
        _mm256_permute2x128_si256::<0x11>(sc16, sc16)
    }
}

/// Copies i16 number `k` of each lane of `v` to every i16 of that lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn bcast16(v: __m256i, k: usize) -> __m256i {
    _mm256_shuffle_epi8(v, load256(BCAST16_CTRL[k].as_ptr()))
}

/// The Q8_K blocks number `i` of `T` activation rows: pointers to their starts and their
/// scales `d`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn act_blocks<const T: usize>(
    a: &[&[u8]; T],
    i: usize,
) -> ([*const u8; T], [f32; T]) {
    let ptrs: [*const u8; T] = std::array::from_fn(|t| a[t].as_ptr().add(i * Q8K_BYTES));
    let ds = std::array::from_fn(|t| f32_at(ptrs[t].add(Q8K_D)));
    (ptrs, ds)
}

/// Where block `i`'s parts lie in an arranged Q8_K row of `nb` blocks, which the K-quants'
/// arrangements write planar (same length as the row): every block's 256 quants first, back
/// to back, so that each is as aligned as the row (the driver aligns arranged rows), then
/// every block's `d`, then every block's 16 bsums. (quants, `d`, bsums) offsets.
pub(in crate::simd::x86) const fn planar_at(nb: usize, i: usize) -> (usize, usize, usize) {
    (256 * i, 256 * nb + 4 * i, 260 * nb + 32 * i)
}

/// Block `i` of a planar arranged row of `nb` blocks at `op` ([`planar_at`]): the Q8_K
/// block at `ap`'s scale `d` and the 32 bytes `sums` (its bsums, or what an arrangement keeps
/// in their place) written to their planes. Returns where the block's quants go.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn planar_block(
    op: *mut u8,
    nb: usize,
    i: usize,
    ap: *const u8,
    sums: __m256i,
) -> usize {
    let (qs, d, bs) = planar_at(nb, i);
    op.add(d)
        .cast::<f32>()
        .write_unaligned(f32_at(ap.add(Q8K_D)));
    _mm256_storeu_si256(op.add(bs).cast(), sums);
    qs
}

/// `T` planar arranged activation rows ([`planar_at`]): where each one's quants, scales `d`
/// and bsums start, found once per call rather than per block.
#[derive(Clone, Copy)]
pub(in crate::simd::x86) struct Planar<const T: usize> {
    qs: [*const u8; T],
    d: [*const u8; T],
    bsums: [*const u8; T],
}

impl<const T: usize> Planar<T> {
    /// The planes of the rows `a` (whole Q8_K rows). Pointer arithmetic only: the kernels
    /// run it once per call, which for a decode kernel is once per row.
    #[inline(always)]
    pub(in crate::simd::x86) fn new(a: &[&[u8]; T]) -> Self {
        let nb = |t: usize| a[t].len() / Q8K_BYTES;
        // Every plane starts within its row: `planar_at(nb, 0)` is at most `260 nb`.
        Planar {
            qs: std::array::from_fn(|t| a[t].as_ptr()),
            d: std::array::from_fn(|t| a[t].as_ptr().wrapping_add(planar_at(nb(t), 0).1)),
            bsums: std::array::from_fn(|t| a[t].as_ptr().wrapping_add(planar_at(nb(t), 0).2)),
        }
    }

    /// Block `i` of every row: pointers to its quants, its scales `d`, pointers to its
    /// bsums.
    ///
    /// # Safety
    /// `i` is below the rows' block count.
    #[inline(always)]
    pub(in crate::simd::x86) unsafe fn block(
        &self,
        i: usize,
    ) -> ([*const u8; T], [f32; T], [*const u8; T]) {
        (
            std::array::from_fn(|t| self.qs[t].add(256 * i)),
            // Plain reads, not `f32_at`: a closure here would call a target-feature function.
            std::array::from_fn(|t| {
                f32::from_le_bytes(self.d[t].add(4 * i).cast::<[u8; 4]>().read_unaligned())
            }),
            std::array::from_fn(|t| self.bsums[t].add(32 * i)),
        )
    }
}

/// One 32-quant chunk `c` (0..8) of a weight block, `q` as unsigned bytes with its 16-element
/// group scales `sc` (i16), against every token's Q8_K block: `sumi[t] += sc . (q x a_t)`.
/// (`#[inline(always)]`: only ever inlined into a kernel whose target features allow `E`.)
#[inline(always)]
pub(in crate::simd::x86) unsafe fn add_scaled_chunk<E: PairSum, const T: usize>(
    sumi: &mut [__m256i; T],
    q: __m256i,
    sc: __m256i,
    ab: &[*const u8; T],
    c: usize,
) {
    for t in 0..T {
        let qa = load256(ab[t].add(Q8K_QS + 32 * c));
        sumi[t] = E::madd_add(sumi[t], sc, _mm256_maddubs_epi16(q, qa));
    }
}

/// Rotates each i32 of `v` by 16 bits: its two i16 change places.
static SWAP16_CTRL: [u8; 32] = {
    let mut t = [0u8; 32];
    let mut b = 0;
    while b < 32 {
        t[b] = ((b % 16) ^ 2) as u8;
        b += 1;
    }
    t
};

/// Two 32-byte chunks `x` and `y` of unsigned quants (or of the activations they meet), each
/// one scale group (or one per 128-bit lane), rearranged so that the `maddubs` of the
/// rearranged quants with the rearranged activations, added as i16, hold in every even i16
/// the 4 products of `x`'s positions 4k..4k+3 and in every odd i16 those of `y`'s: one `madd`
/// with the two groups' scales in alternate i16 then gives every i32 lane the same integer as
/// the two `madd`s of `x`'s and `y`'s products, with half their multiplies. (The first holds
/// `x`'s even and `y`'s odd i16, the second the rest with its i16 pairs swapped into place.)
/// The i16 sums stay below 2^15 for quants up to 63 against Q8_K's `[-128, 127]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn fold(x: __m256i, y: __m256i) -> [__m256i; 2] {
    let rest = _mm256_blend_epi16::<0xAA>(y, x);
    [
        _mm256_blend_epi16::<0xAA>(x, y),
        _mm256_shuffle_epi8(rest, load256(SWAP16_CTRL.as_ptr())),
    ]
}

/// How a kernel adds `madd(a, b)` (the i16 lanes multiplied in pairs, each pair summed into an
/// i32 lane) to an accumulator: two instructions on AVX2, one `vpdpwssd` with AVX-VNNI or
/// AVX512-VNNI. Both wrap the same way, so every encoding gives the same integers and each
/// kernel returns bit for bit what its AVX2 form does.
pub(in crate::simd::x86) trait PairSum {
    /// Whether every CPU that runs this encoding executes 256-bit shuffles whole (every CPU
    /// with VNNI does), so a reduction may `hadd` 256-bit vectors; Zen 1 and 2, which run
    /// the AVX2 encoding, split each into two 128-bit halves at several times the cost.
    const WIDE_SHUFFLES: bool;
    /// Whether `madd_add` is plain intrinsics the compiler may reassociate across a loop's
    /// iterations (AVX2's `madd` + `add`; the VNNI forms are one opaque instruction): a
    /// kernel that keeps more sums live than registers hold pins its accumulators then.
    const REASSOCIATES: bool;
    /// `acc + madd(a, b)`.
    unsafe fn madd_add(acc: __m256i, a: __m256i, b: __m256i) -> __m256i;
    /// Whether [`PairSum::dpbusd`] is one instruction (the VNNI encodings): kernels then sum
    /// four byte products into an i32 lane at once instead of by `maddubs` and adds.
    const DPBUSD: bool;
    /// `acc` plus, per i32 lane, the four products of unsigned bytes of `a` with signed bytes
    /// of `b`. Only called where [`PairSum::DPBUSD`].
    unsafe fn dpbusd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i;
}

/// AVX2: `vpmaddwd` then `vpaddd`.
pub(in crate::simd::x86) struct Avx2Pairs;

/// AVX-VNNI's VEX `vpdpwssd` (Alder Lake and later, Sapphire Rapids, Zen 5).
pub(in crate::simd::x86) struct VexPairs;

/// AVX512-VNNI's EVEX `vpdpwssd` on 256-bit vectors (with AVX512VL: Ice Lake and Cascade Lake
/// servers, Zen 4), as inline assembly so that its kernels compile for AVX2 alone (see
/// `legacy::vnni::Evex` for why).
pub(in crate::simd::x86) struct EvexPairs;

impl PairSum for Avx2Pairs {
    const WIDE_SHUFFLES: bool = false;
    const REASSOCIATES: bool = true;
    #[inline(always)]
    unsafe fn madd_add(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
    }
    const DPBUSD: bool = false;
    unsafe fn dpbusd(_: __m256i, _: __m256i, _: __m256i) -> __m256i {
        unreachable!("AVX2 has no vpdpbusd: kernels check PairSum::DPBUSD first")
    }
}

impl PairSum for VexPairs {
    const WIDE_SHUFFLES: bool = true;
    const REASSOCIATES: bool = false;
    #[inline(always)]
    unsafe fn madd_add(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        dpwssd_vex(acc, a, b)
    }
    const DPBUSD: bool = true;
    #[inline(always)]
    unsafe fn dpbusd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        dpbusd_vex(acc, a, b)
    }
}

impl PairSum for EvexPairs {
    const WIDE_SHUFFLES: bool = true;
    const REASSOCIATES: bool = false;
    #[inline(always)]
    unsafe fn madd_add(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        dpwssd_evex(acc, a, b)
    }
    const DPBUSD: bool = true;
    #[inline(always)]
    unsafe fn dpbusd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        dpbusd_evex(acc, a, b)
    }
}

/// `fn $name(s, a, b) = s + madd(a, b)` by `vpdpwssd` (or with `vpdpbusd`, four byte
/// products per lane) in the encoding `$prefix` names (the caller checked the instruction
/// set). Inline assembly, not the intrinsic: for a generic x86-64 target LLVM splits the
/// `vpdpwssd` intrinsic back into `vpmaddwd` + `vpaddd`, which measured slower here than the
/// fused instruction.
macro_rules! dpwssd {
    ($name:ident, $prefix:literal) => {
        dpwssd!($name, $prefix, "vpdpwssd");
    };
    ($name:ident, $prefix:literal, $instruction:literal) => {
        #[target_feature(enable = "avx2")]
        #[inline]
        unsafe fn $name(mut s: __m256i, a: __m256i, b: __m256i) -> __m256i {
            std::arch::asm!(
                concat!($prefix, " ", $instruction, " {s}, {a}, {b}"),
                s = inout(ymm_reg) s,
                a = in(ymm_reg) a,
                b = in(ymm_reg) b,
                options(pure, nomem, nostack, preserves_flags),
            );
            s
        }
    };
}
dpwssd!(dpwssd_vex, "{{vex}}");
dpwssd!(dpwssd_evex, "{{evex}}");
dpwssd!(dpbusd_vex, "{{vex}}", "vpdpbusd");
dpwssd!(dpbusd_evex, "{{evex}}", "vpdpbusd");

/// A super-block format's kernels once per [`PairSum`] encoding, as the modules `avx2`, `vex`
/// and `evex`, each with the [`entry_points`] of the format's
/// `dot::<E: PairSum, R, T>` (an `#[inline(always)]` body) compiled under that encoding's
/// target features. `$group` is the decode kernel's rows per call; `vex N` gives the VEX
/// table its own, where the CPUs that use it (Intel's with AVX-VNNI) measured another best.
macro_rules! encodings {
    ($format:literal, $group:literal $(, vex $vex_group:literal)? $(, unpacked $unpacked:ident)? $(, shared $shared:ident)?) => {
        encodings!(@one avx2, "avx2,fma,f16c", $crate::simd::x86::kquant::common::Avx2Pairs, $format, $group $(, unpacked $unpacked)? $(, shared $shared)?);
        encodings!(@one vex, "avx2,fma,f16c,avxvnni", $crate::simd::x86::kquant::common::VexPairs, $format,
            { #[allow(unused_variables)] let g = $group; $(let g = $vex_group;)? g } $(, unpacked $unpacked)? $(, shared $shared)?);
        encodings!(@one evex, "avx2,fma,f16c", $crate::simd::x86::kquant::common::EvexPairs, $format, $group $(, unpacked $unpacked)? $(, shared $shared)?);
    };
    (@one $module:ident, $features:literal, $pairs:path, $format:literal, $group:expr $(, unpacked $unpacked:ident)? $(, shared $shared:ident)?) => {
        pub(in crate::simd::x86) mod $module {
            use super::*;

            /// The format's kernel for this encoding.
            #[target_feature(enable = $features)]
            unsafe fn dot<const R: usize, const T: usize>(
                w: &[u8],
                a: [&[u8]; T],
            ) -> [[f32; T]; R] {
                super::dot::<$pairs, R, T>(w, a)
            }

            $(
            /// The same dots over rows of the format unpacked by `super::unpack` (the
            /// format module's generic `$unpacked`).
            #[target_feature(enable = $features)]
            unsafe fn $unpacked<const R: usize, const T: usize>(
                w: &[u8],
                a: [&[u8]; T],
            ) -> [[f32; T]; R] {
                super::$unpacked::<$pairs, R, T>(w, a)
            }
            )?

            $(
            /// The format's prefill tile of [`TILE_ROWS`](crate::kernel_table::TILE_ROWS) rows
            /// (the format module's generic `$shared`).
            #[target_feature(enable = $features)]
            unsafe fn $shared(
                w: &[u8],
                a: [&[u8]; crate::kernel_table::TILE],
            ) -> [[f32; crate::kernel_table::TILE]; crate::kernel_table::TILE_ROWS] {
                super::$shared::<$pairs>(w, a)
            }
            )?

            entry_points!($format, $group $(, unpacked $unpacked)? $(, shared $shared)?);
        }
    };
}
pub(in crate::simd::x86) use encodings;

/// `arranged_layout!("Q4_K", q4_k)`, inside a format's `arranged` module: the layout's kernels
/// in each encoding (`encodings!` over the module's `dot` and `unpacked_dot`, its `unpack`),
/// and its table entries `RESIDENT` (one per encoding: AVX2, AVX-VNNI, AVX512-VNNI), whose
/// `arrange` runs the module's `arrange_blocks` and whose `dequantize` and `quantize` wrap the
/// reference's (`crate::formats::<key>`) with the module's `restore_block` and
/// `arrange_blocks`. The module writes only what differs per format.
macro_rules! arranged_layout {
    ($format:literal, $key:ident) => {
        encodings!($format, 1, unpacked unpacked_dot);

        /// The layout's entries in the AVX2, AVX-VNNI and AVX512-VNNI tables, in that order:
        /// one layout, its kernels once per [`PairSum`] encoding (the same bits).
        pub(in crate::simd::x86) static RESIDENT: [$crate::kernel_table::Resident; 3] = [
            arranged_layout!(@resident avx2),
            arranged_layout!(@resident vex),
            arranged_layout!(@resident evex),
        ];

        /// Whole blocks rewritten in place into the arranged layout.
        fn arrange_rows(w: &mut [u8]) {
            assert!(w.len().is_multiple_of(BYTES));
            // SAFETY: reachable only through the AVX2 table, handed out only when the CPU has
            // AVX2, FMA and F16C; the length is whole blocks.
            unsafe { arrange_blocks(w) }
        }

        /// Dequantizes arranged blocks: each restored into a copy, then the reference's.
        fn dequantize(src: &[u8], dst: &mut [f32]) {
            let mut block = [0u8; BYTES];
            for (b, out) in src.chunks_exact(BYTES).zip(dst.chunks_exact_mut(256)) {
                block.copy_from_slice(b);
                restore_block(&mut block);
                $crate::formats::$key::dequantize_row(&block, out);
            }
        }

        /// The reference quantizer, then arranged.
        fn quantize(src: &[f32], dst: &mut [u8]) {
            $crate::formats::$key::quantize_row(src, dst);
            arrange_rows(dst);
        }
    };
    (@resident $module:ident) => {
        $crate::kernel_table::Resident {
            arrange: arrange_rows,
            kernels: $crate::kernel_table::Kernels {
                dequantize,
                quantize,
                dot: $crate::kernel_table::Dot::Quant {
                    act: $crate::GgmlType::Q8_K,
                    vec_dot: $module::vec_dot,
                },
                tile: Some($module::PREFILL),
                rows: Some($module::rows),
                arranged_acts: ARRANGE,
            },
        }
    };
}
pub(in crate::simd::x86) use arranged_layout;

/// A weight block's integer sums into its row's f32 lanes: `acc[t] += (d * da[t]) * sumi[t]`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn add_block<const T: usize>(
    acc: &mut [__m256; T],
    d: f32,
    da: &[f32; T],
    sumi: &[__m256i; T],
) {
    for t in 0..T {
        acc[t] = _mm256_fmadd_ps(
            _mm256_set1_ps(d * da[t]),
            _mm256_cvtepi32_ps(sumi[t]),
            acc[t],
        );
    }
}

/// Super-block number `i` of each of `R` weight rows of `row` bytes, back to back in `w`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(in crate::simd::x86) unsafe fn weight_blocks<const R: usize>(
    w: &[u8],
    row: usize,
    bytes: usize,
    i: usize,
) -> [*const u8; R] {
    std::array::from_fn(|r| w.as_ptr().add(r * row + i * bytes))
}

/// The safe entry points of a super-block format's kernel module, around its
/// `dot::<R, T>` (`R` weight rows back to back, each dotted with `T` activation rows; every
/// (row, token) pair runs the same arithmetic whatever `R` and `T` are) and its block size
/// `BYTES`: `vec_dot` (one row, one token), `tile` (one row, [`TILE`] tokens, each weight
/// block unpacked once), or with `unpacked` or `shared` the tiles those arms describe, `rows`
/// ([`ROWS`] rows, one token, each activation block loaded once; run as `ROWS / $group`
/// calls of `$group` rows: 8 where that measured faster, 1, a plain loop of single rows,
/// where the wider kernel spilled and measured slower) and the length check they make
/// first. All of them return bit for bit what `vec_dot` does.
///
/// [`TILE`]: crate::kernel_table::TILE
/// [`ROWS`]: crate::kernel_table::ROWS
macro_rules! entry_points {
    ($format:literal, $group:expr) => {
        entry_points!(@common $format, $group);

        #[doc = concat!("One row of ", $format, " blocks dotted with 4 tokens' Q8_K rows, each weight block unpacked once.")]
        pub(in crate::simd::x86) fn tile(
            w: &[u8],
            a: [&[u8]; crate::kernel_table::TILE],
        ) -> [f32; crate::kernel_table::TILE] {
            for a in a {
                check(w, a);
            }
            // SAFETY: as in `vec_dot`.
            unsafe { dot::<1, { crate::kernel_table::TILE }>(w, a)[0] }
        }

        /// The prefill kernel the kernel table registers.
        pub(in crate::simd::x86) const PREFILL: crate::kernel_table::Tile = crate::kernel_table::Tile::Quant(tile);
    };
    (@common $format:literal, $group:expr) => {
        #[doc = concat!("The dot of a row of ", $format, " blocks with a row of Q8_K blocks.")]
        pub(in crate::simd::x86) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
            check(w, a);
            // SAFETY: reachable only through the AVX2 kernel table, handed out only when the
            // CPU has AVX2, FMA and F16C; `check` has confirmed whole, matching blocks.
            unsafe { dot::<1, 1>(w, [a])[0][0] }
        }

        #[doc = concat!("8 rows of ", $format, " blocks, back to back, dotted with one token's Q8_K row.")]
        pub(in crate::simd::x86) fn rows(w: &[u8], a: &[u8]) -> [f32; crate::kernel_table::ROWS] {
            const ROWS: usize = crate::kernel_table::ROWS;
            const GROUP: usize = $group;
            const _: () = assert!(GROUP > 0 && ROWS / GROUP * GROUP == ROWS);
            assert!(w.len() % ROWS == 0);
            let row = w.len() / ROWS;
            check(&w[..row], a);
            let mut out = [0f32; ROWS];
            for (g, part) in w.chunks_exact(GROUP * row).enumerate() {
                // SAFETY: as in `vec_dot`; `part` is `GROUP` rows of the checked length.
                let got = unsafe { dot::<GROUP, 1>(part, [a]) };
                for (k, v) in got.into_iter().enumerate() {
                    out[g * GROUP + k] = v[0];
                }
            }
            out
        }

        fn check(w: &[u8], a: &[u8]) {
            assert!(w.len() % BYTES == 0 && a.len() == w.len() / BYTES * Q8K_BYTES);
        }
    };
    ($format:literal, $group:expr, unpacked $unpacked:ident) => {
        entry_points!(@common $format, $group);

        #[doc = concat!("Two rows of ", $format, " blocks, unpacked, back to back, dotted with 4 tokens' Q8_K rows.")]
        fn unpacked_tile(
            u: &[u8],
            a: [&[u8]; crate::kernel_table::TILE],
        ) -> [[f32; crate::kernel_table::TILE]; crate::kernel_table::UNPACKED_ROWS] {
            const ROWS: usize = crate::kernel_table::UNPACKED_ROWS;
            assert!(u.len() % (ROWS * UNPACKED_BYTES) == 0);
            for a in a {
                assert!(a.len() == u.len() / ROWS / UNPACKED_BYTES * Q8K_BYTES);
            }
            // SAFETY: as in `vec_dot`; the lengths are whole unpacked blocks and their Q8_K
            // blocks.
            unsafe { $unpacked::<ROWS, { crate::kernel_table::TILE }>(u, a) }
        }

        /// The prefill kernel the kernel table registers: the driver unpacks a work item's
        /// rows once (`super::unpack`, `UNPACKED_BYTES` a block, both the format module's)
        /// for every token of the batch.
        pub(in crate::simd::x86) const PREFILL: crate::kernel_table::Tile =
            crate::kernel_table::Tile::Unpacked(crate::kernel_table::Unpack {
                packed_block_bytes: BYTES,
                block_bytes: UNPACKED_BYTES,
                unpack: super::unpack,
                arrange: super::ARRANGE,
                tile: unpacked_tile,
            });
    };
    ($format:literal, $group:expr, shared $shared:ident) => {
        entry_points!(@common $format, $group);

        #[doc = concat!(
            "[`TILE_ROWS`](crate::kernel_table::TILE_ROWS) rows of ", $format,
            " blocks, back to back, dotted with 4 tokens' Q8_K rows, one row at a time with the",
            " activations' block sums made once for them."
        )]
        pub(in crate::simd::x86) fn tile_rows(
            w: &[u8],
            a: [&[u8]; crate::kernel_table::TILE],
        ) -> [[f32; crate::kernel_table::TILE]; crate::kernel_table::TILE_ROWS] {
            assert!(w.len() % crate::kernel_table::TILE_ROWS == 0);
            for a in a {
                check(&w[..w.len() / crate::kernel_table::TILE_ROWS], a);
            }
            // SAFETY: as in `vec_dot`; `w` is whole rows of the checked length.
            unsafe { $shared(w, a) }
        }

        /// The prefill kernel the kernel table registers.
        pub(in crate::simd::x86) const PREFILL: crate::kernel_table::Tile =
            crate::kernel_table::Tile::QuantRows(tile_rows);
    };
}
pub(in crate::simd::x86) use entry_points;
