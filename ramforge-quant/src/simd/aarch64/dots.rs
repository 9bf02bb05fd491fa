//! The kernel tables, one per integer dot of [`super::int_dot`] (NEON's widening multiplies,
//! `sdot`, or `smmla` two rows by two tokens): every format's `vec_dot`, decode `rows` and
//! prefill tile are [`multi`]'s generic drivers over its [`multi::Format`], scaled and summed
//! in f32 exactly as the generated reference does, so bit for bit its result.

use super::blocks::{
    ActQ8_0, ActQ8_1, Iq4Nl, Iq4Xs, Mxfp4, Q2K, Q3K, Q4K, Q4_0, Q4_1, Q5K, Q5_0, Q5_1, Q6K, Q8_0,
    Q8_1,
};
use super::int_dot::{Mull, Sdot, Smmla};
use super::lowbit::{Iq1M, Iq1S, Iq2S, Iq2Xs, Iq2Xxs, Iq3S, Iq3Xxs, Tq1_0, Tq2_0};
use super::multi::{self, Nvfp4, B32, K};
use crate::kernel_table::Kernels;
use crate::simd::register::fast_kernels;
use crate::GgmlType;

/// Module `$table` with the kernels of every listed format (its [`Format`]) over integer
/// dot `$dot`, compiled for `$feature` (`$table::kernels`): `vec_dot`, `rows` and the
/// multi-row tile are [`multi`]'s generic drivers.
macro_rules! table {
    ($table:ident: $feature:literal, $dot:ident; $($module:ident: $format:ty;)*) => {
        pub(super) mod $table {
            use super::*;
            use crate::kernel_table::{Tile, ROWS, TILE, TILE_ROWS};
            $(
                mod $module {
                    use super::*;

                    type F = $format;

                    #[target_feature(enable = $feature)]
                    unsafe fn dot(w: &[u8], a: &[u8]) -> f32 {
                        multi::dot::<F, $dot>(w, a)
                    }

                    #[target_feature(enable = $feature)]
                    unsafe fn rows_in(w: &[u8], a: &[u8]) -> [f32; ROWS] {
                        multi::rows::<F, $dot>(w, a)
                    }

                    #[target_feature(enable = $feature)]
                    unsafe fn tile_in(w: &[u8], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE_ROWS] {
                        multi::tile::<F, $dot>(w, a)
                    }

                    // SAFETY (the three below): reachable only through this table, which the
                    // kernel table uses only when `$feature` was detected (see `isa.rs`);
                    // the drivers read whole blocks of `w` and `a` through checked slices.

                    pub(in super::super) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
                        unsafe { dot(w, a) }
                    }

                    pub(in super::super) fn rows(w: &[u8], a: &[u8]) -> [f32; ROWS] {
                        unsafe { rows_in(w, a) }
                    }

                    fn tile(w: &[u8], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE_ROWS] {
                        unsafe { tile_in(w, a) }
                    }

                    pub(in super::super) const PREFILL: Tile = Tile::QuantRows(tile);
                }
            )*
            fast_kernels! { $($module: block($module);)* }
        }
    };
}

/// The formats with kernels, listed once: a `neon` table over widening multiplies, a
/// `dotprod` one over `sdot` and an `i8mm` one whose tiles use `smmla`; the same drivers
/// and unpacking in all.
macro_rules! tables {
    ($($list:tt)*) => {
        table!(neon: "neon", Mull; $($list)*);
        table!(dotprod: "neon,dotprod", Sdot; $($list)*);
        table!(i8mm: "neon,dotprod,i8mm", Smmla; $($list)*);
    };
}

tables!(
    q2_k: K<Q2K>;
    q3_k: K<Q3K>;
    q4_k: K<Q4K>;
    q5_k: K<Q5K>;
    q6_k: K<Q6K>;
    iq4_xs: K<Iq4Xs>;
    iq2_xxs: K<Iq2Xxs>;
    iq3_xxs: K<Iq3Xxs>;
    iq2_xs: K<Iq2Xs>;
    iq2_s: K<Iq2S>;
    iq3_s: K<Iq3S>;
    iq1_s: K<Iq1S>;
    iq1_m: K<Iq1M>;
    tq2_0: K<Tq2_0>;
    tq1_0: K<Tq1_0>;
    q4_0: B32<Q4_0, ActQ8_0>;
    q4_1: B32<Q4_1, ActQ8_1>;
    q5_0: B32<Q5_0, ActQ8_0>;
    q5_1: B32<Q5_1, ActQ8_1>;
    q8_0: B32<Q8_0, ActQ8_0>;
    q8_1: B32<Q8_1, ActQ8_1>;
    iq4_nl: B32<Iq4Nl, ActQ8_0>;
    mxfp4: B32<Mxfp4, ActQ8_0>;
    nvfp4: Nvfp4;
);

/// The NEON kernels for `ty`, if written.
pub(super) fn neon_kernels(ty: GgmlType) -> Option<&'static Kernels> {
    neon::kernels(ty)
}

/// The `sdot` kernels for `ty`, if written.
pub(super) fn dotprod_kernels(ty: GgmlType) -> Option<&'static Kernels> {
    dotprod::kernels(ty)
}

/// The `smmla` kernels for `ty`, if written.
pub(super) fn i8mm_kernels(ty: GgmlType) -> Option<&'static Kernels> {
    i8mm::kernels(ty)
}
