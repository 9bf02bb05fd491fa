//! AVX2 kernels for the 256-element super-block formats (Q2_K ... Q6_K, IQ4_XS) and their
//! activation quantizer (Q8_K).
//!
//! Integer dot products as in ggml's AVX2 path: `maddubs` of the weight quants with the int8
//! activations, `madd` with the group scales, one float multiply-add per block; the formats
//! with mins (and Q6_K / Q3_K's offsets) take `sum(scale * bsum)` from Q8_K's 16-element sums.
//! Each format's kernel is written once for `R` weight rows and `T` activation rows, the same
//! arithmetic for every (row, token) pair: `1 x 1` is its `vec_dot`, `1 x TILE` its prefill
//! tile (every weight block unpacked once for all tokens), `R x 1` its decode `rows` kernel
//! (every activation block loaded once for all rows), so all three agree bit for bit.
//! Dequantization stays the generated reference (it only serves embedding rows).

mod common;
mod iq4xs;
mod q2k;
mod q3k;
mod q4k;
mod q5k;
mod q6k;
mod q8k;
#[cfg(test)]
mod tests;

use crate::formats;
use crate::kernel_table::{Dot, Kernels, Tile};
use crate::GgmlType;

/// The AVX2 kernels for `ty`, if written.
pub(crate) fn kernels(ty: GgmlType) -> Option<&'static Kernels> {
    match ty {
        GgmlType::Q8_K => Some(&Q8_K),
        GgmlType::Q4_K => Some(&Q4_K),
        GgmlType::Q6_K => Some(&Q6_K),
        GgmlType::IQ4_XS => Some(&IQ4_XS),
        GgmlType::Q5_K => Some(&Q5_K),
        GgmlType::Q3_K => Some(&Q3_K),
        GgmlType::Q2_K => Some(&Q2_K),
        _ => None,
    }
}

const ACT: GgmlType = GgmlType::Q8_K;

static Q8_K: Kernels = Kernels {
    dequantize: formats::q8_k::dequantize_row,
    quantize: q8k::quantize_row,
    dot: Dot::Quant {
        act: ACT,
        vec_dot: formats::q8_k::vec_dot,
    },
    tile: None,
    rows: None,
};

/// The kernels of a weight format whose quantizer and dequantizer are the generated ones;
/// `tile rows` when its prefill kernel is the multi-row `tile_rows`.
macro_rules! weight_kernels {
    ($name:ident, $format:ident, $kernel:ident) => {
        weight_kernels!($name, $format, $kernel, Tile::Quant($kernel::tile));
    };
    ($name:ident, $format:ident, $kernel:ident, tile rows) => {
        weight_kernels!($name, $format, $kernel, Tile::QuantRows($kernel::tile_rows));
    };
    ($name:ident, $format:ident, $kernel:ident, $tile:expr) => {
        static $name: Kernels = Kernels {
            dequantize: formats::$format::dequantize_row,
            quantize: formats::$format::quantize_row,
            dot: Dot::Quant {
                act: ACT,
                vec_dot: $kernel::vec_dot,
            },
            tile: Some($tile),
            rows: Some($kernel::rows),
        };
    };
}

weight_kernels!(Q4_K, q4_k, q4k);
weight_kernels!(Q6_K, q6_k, q6k);
weight_kernels!(IQ4_XS, iq4_xs, iq4xs, tile rows);
weight_kernels!(Q5_K, q5_k, q5k);
weight_kernels!(Q3_K, q3_k, q3k);
weight_kernels!(Q2_K, q2_k, q2k);
