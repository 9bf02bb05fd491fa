//! AVX2 kernels for the low-bit super-block formats (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
//! IQ1_S, IQ1_M, TQ2_0, TQ1_0) against Q8_K activations, and for NVFP4 against Q8_0
//! ([`nvfp4`], on its own).
//!
//! Every Q8_K format is a [`common::Codebook`]: once per block it gathers with vector
//! operations what its chunks are built from (grid indices whose bits are split across fields,
//! sign bits with the ksigns parity, scales), then per 32-element chunk it builds the 32
//! signed weight quants (grid rows looked up into 64- or 32-bit words of a vector, the sign
//! bits applied with `sign_epi8`, IQ1's delta folded into its grid table) and the chunk's
//! integer scales; one driver ([`common::dot`]) dots them with the activations (`maddubs`
//! of the activations' magnitudes with the quants carrying the activations' signs, so an
//! activation of -128 still multiplies exactly), `madd`s the scales and takes one float
//! multiply-add per block. The ternary formats give unsigned digits instead
//! (`Codebook::DIGITS`), multiplied with the activations directly and summed as i16 over
//! the block, the activations' sums (Q8_K's `bsums`) taken off once per block. The integer
//! sums are exact; the float factor per block (`d` times the format's constant, times the
//! activation scale) rounds differently from
//! the reference's per-group scales, so results match it to f32 summation tolerance. As in
//! [`super::kquant`], one `dot::<R, T>` serves `vec_dot`, the prefill tile and the decode
//! `rows` kernel, which agree bit for bit. The prefill tile is `Tile::Unpacked`: the driver
//! unpacks a work item's rows once ([`common::unpack`]: each chunk's quants and scales as
//! `chunk` returns them, IQ1's folded in pairs for fewer multiplies, the ternary formats'
//! digits) and [`common::unpacked_dot`] runs every token of the batch over them, two rows
//! and four tokens a call, bit for bit the packed kernel's result, on activations the driver
//! arranges once per product ([`common::arrangement`]: offset to unsigned bytes, and folded
//! as the quants are where they are).
//! Dequantizing and quantizing stay the generated reference.

mod common;
mod iq1;
mod iq2;
mod iq3;
mod nvfp4;
#[cfg(test)]
mod tests;
mod tq;

use crate::simd::register::encoding_tables;

// The codebook formats in each encoding (AVX-VNNI and AVX512-VNNI: each `madd` + `add` one
// `vpdpwssd`, bit for bit the AVX2 results); NVFP4's float steps have no such pair, so it has
// the AVX2 table only.
encoding_tables! {
    [nvfp4: block(nvfp4);]
    iq2_xxs: iq2::iq2_xxs;
    iq2_xs: iq2::iq2_xs;
    iq2_s: iq2::iq2_s;
    iq3_xxs: iq3::iq3_xxs;
    iq3_s: iq3::iq3_s;
    iq1_s: iq1::iq1_s;
    iq1_m: iq1::iq1_m;
    tq2_0: tq::tq2_0;
    tq1_0: tq::tq1_0;
}
