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
mod tests;

use crate::simd::register::fast_kernels;

fast_kernels! {
    q8_k: block, quantize: q8k::quantize_row;
    q4_k: block(q4k::avx2);
    q6_k: block(q6k::avx2);
    iq4_xs: block(iq4xs::avx2);
    q5_k: block(q5k::avx2);
    q3_k: block(q3k::avx2);
    q2_k: block(q2k::avx2);
}

fast_kernels! {
    fn vnni_kernels;
    q4_k: block(q4k::vex);
    q6_k: block(q6k::vex);
    iq4_xs: block(iq4xs::vex);
    q5_k: block(q5k::vex);
    q3_k: block(q3k::vex);
    q2_k: block(q2k::vex);
}

fast_kernels! {
    fn vnni512_kernels;
    q4_k: block(q4k::evex);
    q6_k: block(q6k::evex);
    iq4_xs: block(iq4xs::evex);
    q5_k: block(q5k::evex);
    q3_k: block(q3k::evex);
    q2_k: block(q2k::evex);
}
