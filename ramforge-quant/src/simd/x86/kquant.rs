//! AVX2 kernels for the 256-element super-block formats (Q2_K ... Q6_K, IQ4_XS) and their
//! activation quantizer (Q8_K).

use crate::kernels::Kernels;
use crate::GgmlType;

/// The AVX2 kernels for `ty`, if written.
pub(crate) fn kernels(ty: GgmlType) -> Option<&'static Kernels> {
    let _ = ty;
    None
}
