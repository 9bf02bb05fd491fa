//! x86-64 kernels for AVX2 + FMA + F16C. Every function here is only reachable through the
//! kernel table when `Isa::Avx2.is_available()`; the `#[target_feature]` bodies are entered
//! through safe wrappers that rely on that.

mod kquant;
mod legacy;
mod register;

use crate::kernel_table::Kernels;
use crate::GgmlType;

/// Whether the AVX2 tile of `ty` is, per token, bit for bit its `vec_dot`.
pub(crate) fn tile_is_exact(ty: GgmlType) -> bool {
    legacy::EXACT_TILES.contains(&ty)
}

/// The AVX2 kernels for `ty`, if written.
pub(crate) fn kernels(ty: GgmlType) -> Option<&'static Kernels> {
    legacy::kernels(ty).or_else(|| kquant::kernels(ty))
}
