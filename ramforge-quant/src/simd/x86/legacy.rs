//! AVX2 kernels for the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL, MXFP4),
//! their activation quantizers (Q8_0, Q8_1) and the float weights (F32, F16, BF16).
//!
//! The quantizers are bit-identical to the generated scalar reference. Every block format
//! has two dots built on one exact integer core ([`blocks`]) that round identically per
//! row and token ([`dots`]): the single-row `vec_dot` and a `Rows` kernel (`ROWS`
//! weight rows, one token; decode). They agree bit for bit, so decode results do not depend
//! on how rows are grouped, and differ from the reference by f32 summation order only.
//! The prefill `Tile` kernel is, for the formats with a min (Q4_1, Q5_1, which must equal
//! the reference bit for bit), bit for bit `vec_dot`: Q4_1's a `TILE_ROWS` x `TILE` kernel
//! ([`gemm::tile_chunked_min`]), Q5_1's the one-row [`dots::tile`]; for the others a
//! `TILE_ROWS` x `TILE` kernel ([`gemm`]) that sums the same exact terms in another order
//! (f32 summation order only). The float dots use FMA (also f32 summation
//! order only). Dequantizing reuses the reference except for F16.
//!
//! With AVX-VNNI, or AVX512-VNNI, every block format has the same kernels with the integer
//! sums done by `vpdpbusd` ([`vnni`], in the VEX or the EVEX encoding): bit for bit the AVX2
//! results, so the instruction set never changes a number.

mod act;
mod blocks;
mod common;
mod dots;
mod float;
mod gemm;
#[cfg(test)]
mod tests;
mod vnni;

use crate::kernel_table::{Tile, ROWS, TILE, TILE_ROWS};
use crate::simd::register::fast_kernels;

// SAFETY (every wrapper below): these functions are reachable only through the table entries
// of `kernels`, which the kernel table uses only for `Isa::Avx2`, and only when
// `Isa::Avx2.is_available()` (AVX2, FMA and F16C detected at run time). The bodies read only
// within the slices they are given.

/// A module `$module` of safe entry points for the block format `blocks::$format`: `vec_dot`,
/// `rows` and the prefill tile kernel `PREFILL`, which is the one-row [`dots::tile`] (`tile one_row`, for the
/// formats with a min, which must equal the reference bit for bit) or a multi-row [`gemm`]
/// kernel (`tile gemm_kernel`).
macro_rules! entry_points {
    ($module:ident, $format:ident, tile one_row) => {
        entry_points!(@module $module, $format, Tile::Quant(tile), {
            fn tile(w: &[u8], a: [&[u8]; TILE]) -> [f32; TILE] {
                // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
                unsafe { dots::tile::<blocks::$format>(w, a) }
            }
        });
    };
    ($module:ident, $format:ident, tile $gemm:ident) => {
        entry_points!(@module $module, $format, Tile::QuantRows(tile), {
            fn tile(w: &[u8], a: [&[u8]; TILE]) -> [[f32; TILE]; super::TILE_ROWS] {
                // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
                unsafe { super::gemm::$gemm::<blocks::$format>(w, a) }
            }
        });
    };
    (@module $module:ident, $format:ident, $tile:expr, { $($tile_fn:item)* }) => {
        mod $module {
            use super::{blocks, dots, Tile, ROWS, TILE};

            pub(super) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
                // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
                unsafe { dots::vec_dot::<blocks::$format>(w, a) }
            }

            pub(super) fn rows(w: &[u8], a: &[u8]) -> [f32; ROWS] {
                // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
                unsafe { dots::rows::<blocks::$format>(w, a) }
            }

            $($tile_fn)*

            pub(super) const PREFILL: Tile = $tile;
        }
    };
}

/// The formats whose tile is, per token, bit for bit their `vec_dot` (the per-token products
/// of batched decoding may use it): Q4_1 (`tile_chunked_min`) and Q5_1 (`tile one_row`).
pub(super) const EXACT_TILES: [crate::GgmlType; 2] = [crate::GgmlType::Q4_1, crate::GgmlType::Q5_1];

entry_points!(q4_0, Q4_0, tile tile_chunked);
entry_points!(q4_1, Q4_1, tile tile_chunked_min);
entry_points!(q5_0, Q5_0, tile tile_unsigned);
entry_points!(q5_1, Q5_1, tile one_row);
entry_points!(q8_0, Q8_0, tile tile_signed);
entry_points!(q8_1, Q8_1, tile tile_signed);
entry_points!(iq4_nl, Iq4Nl, tile tile_signed);
entry_points!(mxfp4, Mxfp4, tile tile_signed);

/// A module `$module` of the VNNI entry points of `blocks::$format` in encoding `vnni::$enc`,
/// as [`entry_points`]'s: `vec_dot`, `rows` and the one-row tile are [`dots`]' drivers
/// `[$vec_dot, $rows, $one_row]` (compiled for that encoding) over [`vnni::Vnni`], a multi-row
/// tile is [`vnni`]`::$tile`.
macro_rules! vnni_entry_points {
    ($enc:ident [$vec_dot:ident, $rows:ident, $one_row:ident] $module:ident, $format:ident, tile one_row) => {
        vnni_entry_points!(@module $enc [$vec_dot, $rows] $module, $format, Tile::Quant(tile), {
            fn tile(w: &[u8], a: [&[u8]; TILE]) -> [f32; TILE] {
                // SAFETY: see the note at `vnni_kernels`.
                unsafe { dots::$one_row::<vnni::Vnni<blocks::$format, vnni::$enc>>(w, a) }
            }
        });
    };
    ($enc:ident [$vec_dot:ident, $rows:ident, $one_row:ident] $module:ident, $format:ident, tile $tile:ident) => {
        vnni_entry_points!(@module $enc [$vec_dot, $rows] $module, $format, Tile::QuantRows(tile), {
            fn tile(w: &[u8], a: [&[u8]; TILE]) -> [[f32; TILE]; super::TILE_ROWS] {
                // SAFETY: see the note at `vnni_kernels`.
                unsafe { vnni::$tile::<blocks::$format>(w, a) }
            }
        });
    };
    (@module $enc:ident [$vec_dot:ident, $rows:ident] $module:ident, $format:ident, $tile:expr, { $($tile_fn:item)* }) => {
        mod $module {
            use super::{blocks, dots, vnni, Tile, ROWS, TILE};

            pub(super) fn vec_dot(w: &[u8], a: &[u8]) -> f32 {
                // SAFETY: see the note at `vnni_kernels`.
                unsafe { dots::$vec_dot::<vnni::Vnni<blocks::$format, vnni::$enc>>(w, a) }
            }

            pub(super) fn rows(w: &[u8], a: &[u8]) -> [f32; ROWS] {
                // SAFETY: see the note at `vnni_kernels`.
                unsafe { dots::$rows::<vnni::Vnni<blocks::$format, vnni::$enc>>(w, a) }
            }

            $($tile_fn)*

            pub(super) const PREFILL: Tile = $tile;
        }
    };
}

/// Module `$table` with the VNNI table of encoding `vnni::$enc` (`$table::kernels`): the entry
/// points of every 32-element block format over [`dots`]' drivers `[$vec_dot, $rows,
/// $one_row]` compiled for that encoding, and its multi-row tiles `vnni::$biased` (Q5_0),
/// `vnni::$chunked` (Q4_0) and `vnni::$signed` (the 8-bit and table formats).
macro_rules! vnni_table {
    ($table:ident: $enc:ident [$vec_dot:ident, $rows:ident, $one_row:ident], $biased:ident, $chunked:ident, $signed:ident) => {
        mod $table {
            use super::{
                blocks, dots, fast_kernels, quantize_q8_0, quantize_q8_1, vnni, Tile, ROWS, TILE,
                TILE_ROWS,
            };

            vnni_entry_points!($enc [$vec_dot, $rows, $one_row] q4_0, Q4_0, tile $chunked);
            vnni_entry_points!($enc [$vec_dot, $rows, $one_row] q4_1, Q4_1, tile one_row);
            vnni_entry_points!($enc [$vec_dot, $rows, $one_row] q5_0, Q5_0, tile $biased);
            vnni_entry_points!($enc [$vec_dot, $rows, $one_row] q5_1, Q5_1, tile one_row);
            vnni_entry_points!($enc [$vec_dot, $rows, $one_row] q8_0, Q8_0, tile $signed);
            vnni_entry_points!($enc [$vec_dot, $rows, $one_row] q8_1, Q8_1, tile $signed);
            vnni_entry_points!($enc [$vec_dot, $rows, $one_row] iq4_nl, Iq4Nl, tile $signed);
            vnni_entry_points!($enc [$vec_dot, $rows, $one_row] mxfp4, Mxfp4, tile $signed);

            fast_kernels! {
                q4_0: block(q4_0);
                q4_1: block(q4_1);
                q5_1: block(q5_1);
                q5_0: block(q5_0);
                q8_0: block(q8_0), quantize: quantize_q8_0;
                q8_1: block(q8_1), quantize: quantize_q8_1;
                iq4_nl: block(iq4_nl);
                mxfp4: block(mxfp4);
            }
        }
    };
}

/// The safe `dot`, `PREFILL` (tile) and (for F16) `dequantize` entry points of the float format
/// `float::$format`, as module `$module`.
macro_rules! float_entry_points {
    ($module:ident, $format:ident) => {
        mod $module {
            use super::{float, Tile, TILE, TILE_ROWS};

            pub(super) fn dot(w: &[u8], x: &[f32]) -> f32 {
                // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
                unsafe { float::dot::<float::$format>(w, x) }
            }

            /// [`TILE_ROWS`] rows (`float::tile_rows`: groups of 3, 3 and 2 rows over each
            /// segment of the rows' length).
            fn tile(w: &[u8], x: [&[f32]; TILE]) -> [[f32; TILE]; TILE_ROWS] {
                const _: () = assert!(TILE_ROWS == 8);
                assert!(w.len() % TILE_ROWS == 0);
                // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are
                // available. The kernel reads within its rows of `w` and within `x`.
                unsafe { float::tile_rows::<float::$format>(w, x) }
            }

            pub(super) const PREFILL: Tile = Tile::FloatRows(tile);

            #[allow(dead_code)] // F16's is registered; F32 and BF16 keep the reference's.
            pub(super) fn dequantize(src: &[u8], dst: &mut [f32]) {
                // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
                unsafe { float::dequantize::<float::$format>(src, dst) }
            }
        }
    };
}

float_entry_points!(f32_dots, F32);
float_entry_points!(f16_dots, F16);
float_entry_points!(bf16_dots, Bf16);

fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
    unsafe { act::quantize_q8_0(src, dst) }
}

fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
    unsafe { act::quantize_q8_1(src, dst) }
}

fast_kernels! {
    q4_0: block(q4_0);
    q4_1: block(q4_1);
    q5_0: block(q5_0);
    q5_1: block(q5_1);
    q8_0: block(q8_0), quantize: quantize_q8_0;
    q8_1: block(q8_1), quantize: quantize_q8_1;
    iq4_nl: block(iq4_nl);
    mxfp4: block(mxfp4);
    F32: float(f32_dots);
    F16: float(f16_dots), dequantize: f16_dots::dequantize;
    BF16: float(bf16_dots);
}

// SAFETY (every VNNI wrapper below): the `Vex` ones are reachable only through the table
// entries of `vnni_kernels`, which the kernel table uses only for `Isa::AvxVnni`, and only
// when `Isa::AvxVnni.is_available()` (AVX2, FMA, F16C and AVX-VNNI detected at run time); the
// `Evex` ones only through `vnni512_kernels`, for `Isa::Avx512Vnni` when it is available
// (AVX2, FMA, F16C, AVX512-VNNI and AVX512VL). The bodies read only within the slices they
// are given.
vnni_table!(vex: Vex [vec_dot_vnni, rows_vnni, tile_vnni], tile_biased_vex, tile_chunked_vex, tile_signed_vex);
vnni_table!(evex: Evex [vec_dot, rows, tile], tile_biased_evex, tile_chunked_evex, tile_signed_evex);

/// The AVX-VNNI kernels for `ty`, if written.
pub(super) fn vnni_kernels(ty: crate::GgmlType) -> Option<&'static crate::kernel_table::Kernels> {
    vex::kernels(ty)
}

/// The AVX512-VNNI kernels for `ty`, if written: the same in the EVEX encoding.
pub(super) fn vnni512_kernels(
    ty: crate::GgmlType,
) -> Option<&'static crate::kernel_table::Kernels> {
    evex::kernels(ty)
}
