//! Fast paths per instruction set. Each kernel here has a scalar reference beside it (the
//! generated one for its format) and is tested against it; a type without a fast path on
//! the active instruction set runs the reference.

#[cfg(target_arch = "x86_64")]
mod x86;

use crate::isa::Isa;
use crate::kernel_table::Kernels;
use crate::GgmlType;

/// The fast kernels for `ty` on `isa`, if there are any.
pub(crate) fn kernels(isa: Isa, ty: GgmlType) -> Option<&'static Kernels> {
    match isa {
        Isa::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86::kernels(ty),
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 => {
            let _ = ty;
            None
        }
    }
}
