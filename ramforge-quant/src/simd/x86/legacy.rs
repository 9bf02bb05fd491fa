//! AVX2 kernels for the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL),
//! their activation quantizers (Q8_0, Q8_1) and the float weights (F32, F16, BF16).
//!
//! The quantizers are bit-identical to the generated scalar reference. Every block format
//! has two dots built on one exact integer core ([`blocks`]) that round identically per
//! row and token ([`dots`]): the single-row `vec_dot` and a [`Rows`] kernel ([`ROWS`]
//! weight rows, one token; decode). They agree bit for bit, so decode results do not depend
//! on how rows are grouped, and differ from the reference by f32 summation order only.
//! The prefill [`Tile`] kernel is, for the formats with a min (Q4_1, Q5_1, which must equal
//! the reference bit for bit), the one-row [`dots::tile`] (bit for bit `vec_dot`); for the
//! others a [`TILE_ROWS`] x [`TILE`] kernel ([`gemm`]) that sums the same exact terms in
//! another order (f32 summation order only). The float dots use FMA (also f32 summation
//! order only). Dequantizing reuses the reference except for F16.

mod act;
mod blocks;
mod common;
mod dots;
mod float;
mod gemm;
#[cfg(test)]
mod tests;

use crate::kernel_table::{Dot, Kernels, Tile, ROWS, TILE, TILE_ROWS};
use crate::{formats, GgmlType};

// SAFETY (every wrapper below): these functions are reachable only through the statics in
// this module, which `kernels` hands out only for `Isa::Avx2`, and the kernel table uses
// that instruction set only when `Isa::Avx2.is_available()` (AVX2, FMA and F16C detected at
// run time). The bodies read only within the slices they are given.

/// Safe `vec_dot`, `tile` and `rows` entry points for one block format: the tile is the
/// one-row [`dots::tile`] for formats with a min (which must equal the reference bit for
/// bit), else a multi-row [`gemm`] kernel.
macro_rules! block_kernels {
    (@common $format:ty, $vec_dot:ident, $rows:ident) => {
        fn $vec_dot(w: &[u8], a: &[u8]) -> f32 {
            // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
            unsafe { dots::vec_dot::<$format>(w, a) }
        }
        fn $rows(w: &[u8], a: &[u8]) -> [f32; ROWS] {
            // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
            unsafe { dots::rows::<$format>(w, a) }
        }
    };
    ($format:ty, $vec_dot:ident, $tile:ident, $rows:ident) => {
        block_kernels!(@common $format, $vec_dot, $rows);
        fn $tile(w: &[u8], a: [&[u8]; TILE]) -> [f32; TILE] {
            // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
            unsafe { dots::tile::<$format>(w, a) }
        }
    };
    ($format:ty, $vec_dot:ident, gemm $gemm:ident $tile:ident, $rows:ident) => {
        block_kernels!(@common $format, $vec_dot, $rows);
        fn $tile(w: &[u8], a: [&[u8]; TILE]) -> [[f32; TILE]; TILE_ROWS] {
            // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
            unsafe { gemm::$gemm::<$format>(w, a) }
        }
    };
}

block_kernels!(blocks::Q4_0, vec_dot_q4_0, gemm tile_chunked tile_q4_0, rows_q4_0);
block_kernels!(blocks::Q4_1, vec_dot_q4_1, tile_q4_1, rows_q4_1);
block_kernels!(blocks::Q5_0, vec_dot_q5_0, gemm tile_unsigned tile_q5_0, rows_q5_0);
block_kernels!(blocks::Q5_1, vec_dot_q5_1, tile_q5_1, rows_q5_1);
block_kernels!(blocks::Q8_0, vec_dot_q8_0, gemm tile_signed tile_q8_0, rows_q8_0);
block_kernels!(blocks::Q8_1, vec_dot_q8_1, gemm tile_signed tile_q8_1, rows_q8_1);
block_kernels!(blocks::Iq4Nl, vec_dot_iq4_nl, gemm tile_signed tile_iq4_nl, rows_iq4_nl);

/// Safe `dot` and `tile` entry points for one float format.
macro_rules! float_kernels {
    ($format:ty, $dot:ident, $tile:ident) => {
        fn $dot(w: &[u8], x: &[f32]) -> f32 {
            // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
            unsafe { float::dot::<$format>(w, x) }
        }
        fn $tile(w: &[u8], x: [&[f32]; TILE]) -> [f32; TILE] {
            // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
            unsafe { float::tile::<$format>(w, x) }
        }
    };
}

float_kernels!(float::F32, dot_f32, tile_f32);
float_kernels!(float::F16, dot_f16, tile_f16);
float_kernels!(float::Bf16, dot_bf16, tile_bf16);

fn quantize_q8_0(src: &[f32], dst: &mut [u8]) {
    // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
    unsafe { act::quantize_q8_0(src, dst) }
}

fn quantize_q8_1(src: &[f32], dst: &mut [u8]) {
    // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
    unsafe { act::quantize_q8_1(src, dst) }
}

fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    // SAFETY: see the note above; only reachable when AVX2+FMA+F16C are available.
    unsafe { float::dequantize::<float::F16>(src, dst) }
}

/// The kernel table entry of a block format: reference dequantize, AVX2 dot, tile and rows.
macro_rules! block_static {
    ($name:ident, $module:ident, $quantize:expr, $act:ident, $vec_dot:ident, $tile:ident, $rows:ident) => {
        block_static!(
            $name,
            $module,
            $quantize,
            $act,
            $vec_dot,
            Tile::Quant($tile),
            $rows
        );
    };
    ($name:ident, $module:ident, $quantize:expr, $act:ident, $vec_dot:ident, gemm $tile:ident, $rows:ident) => {
        block_static!(
            $name,
            $module,
            $quantize,
            $act,
            $vec_dot,
            Tile::QuantRows($tile),
            $rows
        );
    };
    ($name:ident, $module:ident, $quantize:expr, $act:ident, $vec_dot:ident, $tile:expr, $rows:ident) => {
        static $name: Kernels = Kernels {
            dequantize: formats::$module::dequantize_row,
            quantize: $quantize,
            dot: Dot::Quant {
                act: GgmlType::$act,
                vec_dot: $vec_dot,
            },
            tile: Some($tile),
            rows: Some($rows),
        };
    };
}

block_static!(
    Q4_0,
    q4_0,
    formats::q4_0::quantize_row,
    Q8_0,
    vec_dot_q4_0,
    gemm tile_q4_0,
    rows_q4_0
);
block_static!(
    Q4_1,
    q4_1,
    formats::q4_1::quantize_row,
    Q8_1,
    vec_dot_q4_1,
    tile_q4_1,
    rows_q4_1
);
block_static!(
    Q5_0,
    q5_0,
    formats::q5_0::quantize_row,
    Q8_0,
    vec_dot_q5_0,
    gemm tile_q5_0,
    rows_q5_0
);
block_static!(
    Q5_1,
    q5_1,
    formats::q5_1::quantize_row,
    Q8_1,
    vec_dot_q5_1,
    tile_q5_1,
    rows_q5_1
);
block_static!(
    Q8_0,
    q8_0,
    quantize_q8_0,
    Q8_0,
    vec_dot_q8_0,
    gemm tile_q8_0,
    rows_q8_0
);
block_static!(
    Q8_1,
    q8_1,
    quantize_q8_1,
    Q8_1,
    vec_dot_q8_1,
    gemm tile_q8_1,
    rows_q8_1
);
block_static!(
    IQ4_NL,
    iq4_nl,
    formats::iq4_nl::quantize_row,
    Q8_0,
    vec_dot_iq4_nl,
    gemm tile_iq4_nl,
    rows_iq4_nl
);

static F32: Kernels = Kernels {
    dequantize: crate::float::dequantize_f32,
    quantize: crate::float::quantize_f32,
    dot: Dot::Float(dot_f32),
    tile: Some(Tile::Float(tile_f32)),
    rows: None,
};
static F16: Kernels = Kernels {
    dequantize: dequantize_f16,
    quantize: crate::float::quantize_f16,
    dot: Dot::Float(dot_f16),
    tile: Some(Tile::Float(tile_f16)),
    rows: None,
};
static BF16: Kernels = Kernels {
    dequantize: crate::float::dequantize_bf16,
    quantize: crate::float::quantize_bf16,
    dot: Dot::Float(dot_bf16),
    tile: Some(Tile::Float(tile_bf16)),
    rows: None,
};

/// The AVX2 kernels for `ty`, if written. Only for `Isa::Avx2` (see the SAFETY note above).
pub(crate) fn kernels(ty: GgmlType) -> Option<&'static Kernels> {
    Some(match ty {
        GgmlType::Q4_0 => &Q4_0,
        GgmlType::Q4_1 => &Q4_1,
        GgmlType::Q5_0 => &Q5_0,
        GgmlType::Q5_1 => &Q5_1,
        GgmlType::Q8_0 => &Q8_0,
        GgmlType::Q8_1 => &Q8_1,
        GgmlType::IQ4_NL => &IQ4_NL,
        GgmlType::F32 => &F32,
        GgmlType::F16 => &F16,
        GgmlType::BF16 => &BF16,
        _ => return None,
    })
}
