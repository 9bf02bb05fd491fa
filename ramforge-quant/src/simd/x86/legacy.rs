//! AVX2 kernels for the 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL), their
//! activation quantizers (Q8_0, Q8_1) and the float weights (F32, F16, BF16).

use crate::kernels::Kernels;
use crate::GgmlType;

/// The AVX2 kernels for `ty`, if written.
pub(crate) fn kernels(ty: GgmlType) -> Option<&'static Kernels> {
    let _ = ty;
    None
}
