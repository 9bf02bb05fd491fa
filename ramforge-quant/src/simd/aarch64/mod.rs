//! aarch64 kernels: NEON, which every ARMv8-A CPU has, the same kernels with the
//! dot-product extension's `sdot` (ARMv8.2-A and later: Apple M1 on, Graviton 2 on, Ampere),
//! and with the int8 matrix multiply's `smmla` in the prefill tiles on top (`i8mm`: ARMv8.6-A
//! and later, e.g. Apple M2 on, Graviton 3 on).
//!
//! The 32-element block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL, MXFP4), the
//! K-quants (Q2_K to Q6_K), IQ4_XS, the low-bit formats (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
//! IQ3_XXS, IQ3_S, TQ1_0, TQ2_0: [`lowbit`], grid rows gathered by scalar loads) and NVFP4
//! unpack each 32 quants into two vectors ([`blocks`], [`lowbit`]); one generic driver
//! ([`multi`]) takes their exact integer dots with the activation's quants ([`int_dot`]; the tables in [`dots`]) for
//! `vec_dot`, the decode `rows` (each activation block loaded once for 8 rows) and the
//! prefill tile (8 rows by 4 tokens, two by two with `smmla`); scales, mins and the f32 sums
//! are the generated reference's own code in its own order, so every kernel here returns bit
//! for bit what the reference does, whichever instruction set runs and however rows and
//! tokens are grouped. The float dots run the reference.

mod blocks;
mod dots;
mod int_dot;
mod lowbit;
mod multi;
#[cfg(test)]
mod tests;

use crate::kernel_table::Kernels;
use crate::GgmlType;

/// Whether `ty`'s tile kernel is, per token, bit for bit its dot: true of every kernel here.
pub(crate) fn tile_is_exact(ty: GgmlType) -> bool {
    neon_kernels(ty).is_some()
}

/// The NEON kernels for `ty`, if written.
pub(crate) fn neon_kernels(ty: GgmlType) -> Option<&'static Kernels> {
    dots::neon_kernels(ty)
}

/// The `sdot` kernels for `ty`, if written (bit for bit the NEON ones).
pub(crate) fn dotprod_kernels(ty: GgmlType) -> Option<&'static Kernels> {
    dots::dotprod_kernels(ty)
}

/// The `smmla` kernels for `ty`, if written (bit for bit the NEON ones).
pub(crate) fn i8mm_kernels(ty: GgmlType) -> Option<&'static Kernels> {
    dots::i8mm_kernels(ty)
}
