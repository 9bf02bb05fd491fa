//! Fast paths per instruction set. Each kernel here has a scalar reference beside it (the
//! generated one for its format) and is tested against it; a type without a fast path on
//! the active instruction set runs the reference.

#[cfg(target_arch = "aarch64")]
mod aarch64;
mod register;
#[cfg(target_arch = "x86_64")]
mod x86;

use crate::isa::Isa;
use crate::kernel_table::{Kernels, Resident};
use crate::GgmlType;

/// Whether the tile kernel of `ty` on `isa` gives, per token, exactly the type's dot (x86's
/// one-row tiles of the formats with a min, every aarch64 tile): batched decoding may then
/// use it and still get each sequence's numbers as if it were alone.
pub(crate) fn tile_is_exact(isa: Isa, ty: GgmlType) -> bool {
    match isa {
        Isa::Scalar => false,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86::tile_is_exact(ty),
        #[cfg(target_arch = "x86_64")]
        Isa::AvxVnni | Isa::Avx512Vnni => x86::vnni_tile_is_exact(ty),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon | Isa::Dotprod | Isa::I8mm => aarch64::tile_is_exact(ty),
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => {
            let _ = ty;
            false
        }
        #[cfg(not(target_arch = "aarch64"))]
        Isa::Neon | Isa::Dotprod | Isa::I8mm => {
            let _ = ty;
            false
        }
    }
}

/// The fast kernels for `ty` on `isa`, if there are any.
pub(crate) fn kernels(isa: Isa, ty: GgmlType) -> Option<&'static Kernels> {
    match isa {
        Isa::Scalar => None,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => x86::kernels(ty),
        #[cfg(target_arch = "x86_64")]
        Isa::AvxVnni => x86::vnni_kernels(ty),
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512Vnni => x86::vnni512_kernels(ty),
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => aarch64::neon_kernels(ty),
        #[cfg(target_arch = "aarch64")]
        Isa::Dotprod => aarch64::dotprod_kernels(ty),
        #[cfg(target_arch = "aarch64")]
        Isa::I8mm => aarch64::i8mm_kernels(ty),
        #[cfg(not(target_arch = "x86_64"))]
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => {
            let _ = ty;
            None
        }
        #[cfg(not(target_arch = "aarch64"))]
        Isa::Neon | Isa::Dotprod | Isa::I8mm => {
            let _ = ty;
            None
        }
    }
}

/// The arranged resident layout of `ty` on `isa`, if its fast kernels have one (x86: the same
/// layout for the AVX2 and both VNNI tables).
pub(crate) fn resident(isa: Isa, ty: GgmlType) -> Option<&'static Resident> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni => x86::resident(isa, ty),
        _ => {
            let _ = ty;
            None
        }
    }
}
