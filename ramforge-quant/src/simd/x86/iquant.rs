//! AVX2 kernels for the low-bit super-block formats (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
//! IQ1_S, IQ1_M, TQ2_0, TQ1_0) against Q8_K activations, and for NVFP4 against Q8_0
//! ([`nvfp4`], on its own).
//!
//! Every Q8_K format is a [`common::Codebook`]: per 32-element chunk of a block it builds the 32
//! signed weight quants (grid rows looked up into 64- or 32-bit words of a vector, signs
//! from the ksigns table or the sign bits applied with `sign_epi8`, IQ1's delta added) and
//! the chunk's integer scales; one driver ([`common::dot`]) dots them with the activations
//! (`maddubs` of the activations' magnitudes with the quants carrying the activations'
//! signs, so an activation of -128 still multiplies exactly), `madd`s the scales and takes
//! one float multiply-add per block. The integer sums are exact; the float factor per block
//! (`d` times the format's constant, times the activation scale) rounds differently from
//! the reference's per-group scales, so results match it to f32 summation tolerance. As in
//! [`super::kquant`], one `dot::<R, T>` serves `vec_dot`, the prefill tile and the decode
//! `rows` kernel, which agree bit for bit. The prefill tile is `Tile::Unpacked`: the driver
//! unpacks a work item's rows once ([`common::unpack`]: each chunk's quants and scales as
//! `chunk` returns them) and [`common::unpacked_dot`] runs every token of the batch over
//! them, two rows and four tokens a call, bit for bit the packed kernel's result.
//! Dequantizing and quantizing stay the generated reference.

mod common;
mod iq1;
mod iq2;
mod iq3;
mod nvfp4;
#[cfg(test)]
mod tests;
mod tq;

use crate::simd::register::fast_kernels;

fast_kernels! {
    iq2_xxs: block(iq2::iq2_xxs::avx2);
    iq2_xs: block(iq2::iq2_xs::avx2);
    iq2_s: block(iq2::iq2_s::avx2);
    iq3_xxs: block(iq3::iq3_xxs::avx2);
    iq3_s: block(iq3::iq3_s::avx2);
    iq1_s: block(iq1::iq1_s::avx2);
    iq1_m: block(iq1::iq1_m::avx2);
    tq2_0: block(tq::tq2_0::avx2);
    tq1_0: block(tq::tq1_0::avx2);
    nvfp4: block(nvfp4);
}

// The codebook formats with each `madd` + `add` one AVX-VNNI `vpdpwssd` (bit for bit the AVX2
// results; NVFP4's float steps have no such pair and keep the AVX2 kernel).
fast_kernels! {
    fn vnni_kernels;
    iq2_xxs: block(iq2::iq2_xxs::vex);
    iq2_xs: block(iq2::iq2_xs::vex);
    iq2_s: block(iq2::iq2_s::vex);
    iq3_xxs: block(iq3::iq3_xxs::vex);
    iq3_s: block(iq3::iq3_s::vex);
    iq1_s: block(iq1::iq1_s::vex);
    iq1_m: block(iq1::iq1_m::vex);
    tq2_0: block(tq::tq2_0::vex);
    tq1_0: block(tq::tq1_0::vex);
}

// The same with AVX512-VNNI's encoding.
fast_kernels! {
    fn vnni512_kernels;
    iq2_xxs: block(iq2::iq2_xxs::evex);
    iq2_xs: block(iq2::iq2_xs::evex);
    iq2_s: block(iq2::iq2_s::evex);
    iq3_xxs: block(iq3::iq3_xxs::evex);
    iq3_s: block(iq3::iq3_s::evex);
    iq1_s: block(iq1::iq1_s::evex);
    iq1_m: block(iq1::iq1_m::evex);
    tq2_0: block(tq::tq2_0::evex);
    tq1_0: block(tq::tq1_0::evex);
}
