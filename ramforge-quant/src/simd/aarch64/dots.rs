//! The block dots: one exact integer dot per block (NEON's widening multiplies, or `sdot`),
//! scaled and summed in f32 exactly as the generated reference does, so `vec_dot`, the
//! decode `rows` and the prefill tile all return the reference's result bit for bit.

use super::blocks::{
    q8k_scale, Act32, ActQ8_0, ActQ8_1, Block32, BlockK, Iq4Nl, Iq4Xs, Mxfp4, Q2K, Q3K, Q4K, Q4_0,
    Q4_1, Q5K, Q5_0, Q5_1, Q6K, Q8_0, Q8_1,
};
use super::lowbit::{nvfp4_pair, Iq1M, Iq1S, Iq2S, Iq2Xs, Iq2Xxs, Iq3S, Iq3Xxs, Tq1_0, Tq2_0};
use crate::kernel_table::Kernels;
use crate::simd::register::fast_kernels;
use crate::GgmlType;
use std::arch::aarch64::*;

/// How the exact integer dot of 32 weight quants with 32 activation quants is taken.
pub(super) trait IntDot {
    unsafe fn dot(w: (int8x16_t, int8x16_t), a: (int8x16_t, int8x16_t)) -> i32;
    /// The same over 16 quants.
    unsafe fn dot16(w: int8x16_t, a: int8x16_t) -> i32;
}

/// Plain NEON: widening multiplies to i16 (|q| <= 128, so a product fits), pairwise
/// accumulated into i32.
pub(super) struct Mull;
impl IntDot for Mull {
    #[inline(always)]
    unsafe fn dot(w: (int8x16_t, int8x16_t), a: (int8x16_t, int8x16_t)) -> i32 {
        let s = vpaddlq_s16(vmull_s8(vget_low_s8(w.0), vget_low_s8(a.0)));
        let s = vpadalq_s16(s, vmull_high_s8(w.0, a.0));
        let s = vpadalq_s16(s, vmull_s8(vget_low_s8(w.1), vget_low_s8(a.1)));
        let s = vpadalq_s16(s, vmull_high_s8(w.1, a.1));
        vaddvq_s32(s)
    }

    #[inline(always)]
    unsafe fn dot16(w: int8x16_t, a: int8x16_t) -> i32 {
        let s = vpaddlq_s16(vmull_s8(vget_low_s8(w), vget_low_s8(a)));
        vaddvq_s32(vpadalq_s16(s, vmull_high_s8(w, a)))
    }
}

/// The dot-product extension: four 4-element i8 dots into i32 lanes per `sdot`.
pub(super) struct Sdot;
impl IntDot for Sdot {
    #[inline(always)]
    unsafe fn dot(w: (int8x16_t, int8x16_t), a: (int8x16_t, int8x16_t)) -> i32 {
        let s = sdot(vdupq_n_s32(0), w.0, a.0);
        vaddvq_s32(sdot(s, w.1, a.1))
    }

    #[inline(always)]
    unsafe fn dot16(w: int8x16_t, a: int8x16_t) -> i32 {
        vaddvq_s32(sdot(vdupq_n_s32(0), w, a))
    }
}

/// `acc + sdot(a, b)`; written as assembly because the intrinsic is not stable Rust yet.
/// Only inlined into `#[target_feature(enable = "dotprod")]` bodies.
#[inline(always)]
unsafe fn sdot(acc: int32x4_t, a: int8x16_t, b: int8x16_t) -> int32x4_t {
    let mut acc = acc;
    std::arch::asm!(
        "sdot {acc:v}.4s, {a:v}.16b, {b:v}.16b",
        acc = inout(vreg) acc,
        a = in(vreg) a,
        b = in(vreg) b,
        options(pure, nomem, nostack, preserves_flags),
    );
    acc
}

/// A row of `F` blocks dotted with a row of `A` blocks: the reference's `vec_dot`, term by
/// term (per block `sum = 0; sum += s * dot; sum += m * sum(a)` with a min; `acc += da * sum`).
#[inline(always)]
unsafe fn block_dot<F: Block32, A: Act32, D: IntDot>(w: &[u8], a: &[u8]) -> f32 {
    assert!(a.len() / A::BYTES >= w.len() / F::BYTES);
    let mut acc = 0f32;
    for (wb, ab) in w.chunks_exact(F::BYTES).zip(a.chunks_exact(A::BYTES)) {
        let q = F::quants(wb.as_ptr());
        let aq = ab.as_ptr().add(A::QS).cast::<i8>();
        let aq = (vld1q_s8(aq), vld1q_s8(aq.add(16)));
        let da = A::scale(ab);
        let (s, m) = F::params(wb);
        let mut sum = 0f32;
        sum += s * D::dot(q, aq) as f32;
        if F::HAS_MIN {
            let total = vaddlvq_s8(aq.0) as i32 + vaddlvq_s8(aq.1) as i32;
            sum += m * total as f32;
        }
        acc += da * sum;
    }
    acc
}

/// A row of 256-element blocks dotted with a row of Q8_K blocks, term by term as the
/// reference: per block `sum = 0`, then per group `sum += s * dot` (and `sum += m * sum(a)`
/// with a min), then `acc += da * sum`. A whole-block group's dot is the exact sum of the
/// chunks' (no such format has a min).
#[inline(always)]
unsafe fn k_block_dot<F: BlockK, D: IntDot>(w: &[u8], a: &[u8]) -> f32 {
    const Q8K_BYTES: usize = crate::formats::q8_k::BYTES;
    assert!(a.len() / Q8K_BYTES >= w.len() / F::BYTES);
    let mut acc = 0f32;
    for (wb, ab) in w.chunks_exact(F::BYTES).zip(a.chunks_exact(Q8K_BYTES)) {
        let da = q8k_scale(ab);
        let (s, m) = F::params(wb);
        let aq = ab
            .as_ptr()
            .add(crate::formats::q8_k::OFFSET_QS)
            .cast::<i8>();
        let mut sum = 0f32;
        let mut whole = 0i32;
        for c in 0..8 {
            let q = F::chunk(wb.as_ptr(), c);
            let a = (vld1q_s8(aq.add(32 * c)), vld1q_s8(aq.add(32 * c + 16)));
            match F::GROUP {
                256 => whole += D::dot(q, a),
                32 => {
                    sum += s[c] * D::dot(q, a) as f32;
                    if F::HAS_MIN {
                        sum += m[c] * (vaddlvq_s8(a.0) as i32 + vaddlvq_s8(a.1) as i32) as f32;
                    }
                }
                _ => {
                    for (g, (q, a)) in [(2 * c, (q.0, a.0)), (2 * c + 1, (q.1, a.1))] {
                        sum += s[g] * D::dot16(q, a) as f32;
                        if F::HAS_MIN {
                            sum += m[g] * vaddlvq_s8(a) as i32 as f32;
                        }
                    }
                }
            }
        }
        if F::GROUP == 256 {
            sum += s[0] * whole as f32;
        }
        acc += da * sum;
    }
    acc
}

/// A row of NVFP4 blocks dotted with a row of Q8_0 blocks (two per block), term by term as
/// the reference: per Q8_0 block `sum = 0`, `sum += s * dot` for its two groups of 16,
/// `acc += da * sum`.
#[inline(always)]
unsafe fn nvfp4_dot<D: IntDot>(w: &[u8], a: &[u8]) -> f32 {
    use crate::formats::{nvfp4, q8_0};
    assert!(a.len() / (2 * q8_0::BYTES) >= w.len() / nvfp4::BYTES);
    let mut acc = 0f32;
    for (wb, ab) in w
        .chunks_exact(nvfp4::BYTES)
        .zip(a.chunks_exact(2 * q8_0::BYTES))
    {
        let (s, _) = nvfp4::group_params(&nvfp4::blocks(wb)[0]);
        for (k, ab) in ab.chunks_exact(q8_0::BYTES).enumerate() {
            let q = nvfp4_pair(wb.as_ptr(), k);
            let aq = ab.as_ptr().add(q8_0::OFFSET_QS).cast::<i8>();
            let da = ActQ8_0::scale(ab);
            let mut sum = 0f32;
            sum += s[2 * k] * D::dot16(q.0, vld1q_s8(aq)) as f32;
            sum += s[2 * k + 1] * D::dot16(q.1, vld1q_s8(aq.add(16))) as f32;
            acc += da * sum;
        }
    }
    acc
}

/// Module `$table` with the kernels of every listed format over integer dot `$dot`,
/// compiled for `$feature` (`$table::kernels`). `rows` and the tile call `vec_dot` per row
/// and token: each block's work is small next to its load, and the results stay exact.
macro_rules! table {
    ($table:ident: $feature:literal, $dot:ident; $($module:ident: $body:ident $(::<$($ty:ident),*>)?;)*) => {
        pub(super) mod $table {
            use super::*;
            use crate::kernel_table::{Tile, ROWS, TILE};
            $(
                mod $module {
                    use super::*;

                    #[target_feature(enable = $feature)]
                    unsafe fn dot(w: &[u8], a: &[u8]) -> f32 {
                        $body::<$($($ty,)*)? $dot>(w, a)
                    }

                    pub(in super::super) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
                        // SAFETY: reachable only through this table, which the kernel table
                        // uses only when `$feature` was detected (see `isa.rs`); reads stay
                        // within `w` and `a`, whose lengths `vec_dot` checks.
                        unsafe { dot(w, a) }
                    }

                    pub(in super::super) fn rows(w: &[u8], a: &[u8]) -> [f32; ROWS] {
                        let row = w.len() / ROWS;
                        std::array::from_fn(|r| vec_dot(&w[r * row..(r + 1) * row], a))
                    }

                    fn tile(w: &[u8], a: [&[u8]; TILE]) -> [f32; TILE] {
                        a.map(|a| vec_dot(w, a))
                    }

                    pub(in super::super) const PREFILL: Tile = Tile::Quant(tile);
                }
            )*
            fast_kernels! { $($module: block($module);)* }
        }
    };
}

/// The formats with kernels, listed once: a `neon` table over widening multiplies and a
/// `dotprod` one over `sdot`, the same drivers and unpacking in both.
macro_rules! tables {
    ($($list:tt)*) => {
        table!(neon: "neon", Mull; $($list)*);
        table!(dotprod: "neon,dotprod", Sdot; $($list)*);
    };
}

tables!(
    q2_k: k_block_dot::<Q2K>;
    q3_k: k_block_dot::<Q3K>;
    q4_k: k_block_dot::<Q4K>;
    q5_k: k_block_dot::<Q5K>;
    q6_k: k_block_dot::<Q6K>;
    iq4_xs: k_block_dot::<Iq4Xs>;
    iq2_xxs: k_block_dot::<Iq2Xxs>;
    iq3_xxs: k_block_dot::<Iq3Xxs>;
    iq2_xs: k_block_dot::<Iq2Xs>;
    iq2_s: k_block_dot::<Iq2S>;
    iq3_s: k_block_dot::<Iq3S>;
    iq1_s: k_block_dot::<Iq1S>;
    iq1_m: k_block_dot::<Iq1M>;
    tq2_0: k_block_dot::<Tq2_0>;
    tq1_0: k_block_dot::<Tq1_0>;
    q4_0: block_dot::<Q4_0, ActQ8_0>;
    q4_1: block_dot::<Q4_1, ActQ8_1>;
    q5_0: block_dot::<Q5_0, ActQ8_0>;
    q5_1: block_dot::<Q5_1, ActQ8_1>;
    q8_0: block_dot::<Q8_0, ActQ8_0>;
    q8_1: block_dot::<Q8_1, ActQ8_1>;
    iq4_nl: block_dot::<Iq4Nl, ActQ8_0>;
    mxfp4: block_dot::<Mxfp4, ActQ8_0>;
    nvfp4: nvfp4_dot;
);

/// The NEON kernels for `ty`, if written.
pub(super) fn neon_kernels(ty: GgmlType) -> Option<&'static Kernels> {
    neon::kernels(ty)
}

/// The `sdot` kernels for `ty`, if written.
pub(super) fn dotprod_kernels(ty: GgmlType) -> Option<&'static Kernels> {
    dotprod::kernels(ty)
}
