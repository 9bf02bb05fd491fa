//! Which kernels a type runs: the fast path of the active instruction set where there is one,
//! else the scalar reference (generated from the specs, or the plain float kernels).

use crate::kernel_table::{Kernels, Resident};
use crate::{float, formats, isa, simd, GgmlType, Layout, QuantError};

/// The kernels for `ty` on the active instruction set ([`crate::isa`]), or `Unsupported`.
/// A type without a fast path on that instruction set gets its scalar reference kernels.
pub(crate) fn kernels(ty: GgmlType) -> Result<&'static Kernels, QuantError> {
    kernels_for(isa::active(), ty)
}

/// The kernels for `ty` held in `layout` on the active instruction set.
pub(crate) fn kernels_laid(ty: GgmlType, layout: Layout) -> Result<&'static Kernels, QuantError> {
    match layout {
        Layout::Gguf => kernels(ty),
        Layout::Arranged => resident(ty)
            .map(|r| &r.kernels)
            .ok_or(QuantError::NoArrangedLayout { ty }),
    }
}

/// The arranged resident layout of `ty` on the active instruction set, if its fast kernels
/// have one.
pub(crate) fn resident(ty: GgmlType) -> Option<&'static Resident> {
    simd::resident(isa::active(), ty)
}

/// The kernels for `ty` on `isa` (which the caller has checked the CPU supports).
pub(crate) fn kernels_for(isa: isa::Isa, ty: GgmlType) -> Result<&'static Kernels, QuantError> {
    if let Some(k) = simd::kernels(isa, ty) {
        return Ok(k);
    }
    scalar_kernels(ty)
}

/// The scalar reference kernels for `ty` (generated from the specs, or the plain float ones).
pub(crate) fn scalar_kernels(ty: GgmlType) -> Result<&'static Kernels, QuantError> {
    match ty {
        GgmlType::F32 => Ok(&float::F32),
        GgmlType::F16 => Ok(&float::F16),
        GgmlType::BF16 => Ok(&float::BF16),
        _ => formats::kernels(ty).ok_or(QuantError::Unsupported { ty }),
    }
}
