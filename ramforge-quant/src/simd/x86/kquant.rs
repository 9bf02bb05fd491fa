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
//!
//! Every kernel is compiled three times ([`common::encodings`]): for AVX2, and with each
//! `madd` + `add` of i16 pairs done by one `vpdpwssd` for AVX-VNNI and AVX512-VNNI (the
//! `vnni_kernels` and `vnni512_kernels` tables), the same integers, so the same results.

pub(super) mod common;
mod iq4xs;
mod q2k;
mod q3k;
mod q4k;
mod q5k;
mod q6k;
mod q8k;
#[cfg(test)]
pub(super) mod tests;

use crate::isa::Isa;
use crate::kernel_table::Resident;
use crate::simd::register::encoding_tables;
use crate::GgmlType;

/// The arranged resident layout of `ty` for `isa`'s kernels (AVX2, AVX-VNNI or AVX512-VNNI:
/// the same arranged bytes, the same results), if it has one.
pub(super) fn resident(isa: Isa, ty: GgmlType) -> Option<&'static Resident> {
    let [avx2, vex, evex] = match ty {
        GgmlType::Q4_K => &q4k::arranged::RESIDENT,
        GgmlType::Q6_K => &q6k::arranged::RESIDENT,
        _ => return None,
    };
    match isa {
        Isa::Avx2 => Some(avx2),
        Isa::AvxVnni => Some(vex),
        Isa::Avx512Vnni => Some(evex),
        _ => None,
    }
}

encoding_tables! {
    [q8_k: block, quantize: q8k::quantize_row;]
    q4_k: q4k;
    q6_k: q6k;
    iq4_xs: iq4xs;
    q5_k: q5k;
    q3_k: q3k;
    q2_k: q2k;
}
