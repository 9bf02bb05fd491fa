//! x86-64 kernels for AVX2 + FMA + F16C, and for AVX-VNNI or AVX512-VNNI on top of them.
//! Every function here is only reachable through the kernel table when its instruction set is
//! available (`Isa::Avx2.is_available()`, or `Isa::AvxVnni` / `Isa::Avx512Vnni`'s for the
//! VNNI entries); the
//! `#[target_feature]` bodies are entered through safe wrappers that rely on that.

mod iquant;
mod kquant;
mod legacy;
mod prefetch;

use crate::isa::Isa;
use crate::kernel_table::{Kernels, Resident};
use crate::GgmlType;

/// Whether the AVX2 tile of `ty` is, per token, bit for bit its `vec_dot`.
pub(crate) fn tile_is_exact(ty: GgmlType) -> bool {
    legacy::EXACT_TILES.contains(&ty)
}

/// The same for the AVX-VNNI and AVX512-VNNI tables: their kernels return bit for bit what the
/// AVX2 ones do.
pub(crate) fn vnni_tile_is_exact(ty: GgmlType) -> bool {
    tile_is_exact(ty)
}

/// The AVX2 kernels for `ty`, if written.
pub(crate) fn kernels(ty: GgmlType) -> Option<&'static Kernels> {
    legacy::kernels(ty)
        .or_else(|| kquant::kernels(ty))
        .or_else(|| iquant::kernels(ty))
}

/// The arranged resident layout of `ty` for `isa`'s kernels (one of the x86 instruction sets),
/// if there is one: the same layout for the AVX2 and both VNNI tables.
pub(crate) fn resident(isa: Isa, ty: GgmlType) -> Option<&'static Resident> {
    kquant::resident(isa, ty)
}

/// The AVX-VNNI kernels for `ty`: the VNNI ones where written (each returns bit for bit what
/// its AVX2 counterpart does, so switching between the two never changes a result), else the
/// AVX2 ones.
pub(crate) fn vnni_kernels(ty: GgmlType) -> Option<&'static Kernels> {
    legacy::vnni_kernels(ty)
        .or_else(|| kquant::vnni_kernels(ty))
        .or_else(|| iquant::vnni_kernels(ty))
        .or_else(|| kernels(ty))
}

/// The AVX512-VNNI kernels for `ty`: [`vnni_kernels`] in the EVEX encoding (the same results).
pub(crate) fn vnni512_kernels(ty: GgmlType) -> Option<&'static Kernels> {
    legacy::vnni512_kernels(ty)
        .or_else(|| kquant::vnni512_kernels(ty))
        .or_else(|| iquant::vnni512_kernels(ty))
        .or_else(|| kernels(ty))
}

#[cfg(test)]
mod tests {
    /// No x86 intrinsic is left as an out-of-line call in this (optimized) test binary, which
    /// holds every kernel: an intrinsic inlines only into a function with its instruction set
    /// enabled, and one used in a closure or a helper without `#[target_feature]` becomes a call
    /// per vector op, several times slower, with the same results (so no other test sees it).
    /// Reads the binary's symbols with `nm` (binutils, which the Rust toolchain's linker setup
    /// brings); a missing `nm` fails the test.
    #[test]
    fn intrinsics_are_inlined_not_called() {
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new("nm")
            .arg("-C")
            .arg(&exe)
            .output()
            .unwrap_or_else(|e| panic!("nm -C {}: {e} (install binutils)", exe.display()));
        assert!(out.status.success(), "nm -C {}: {:?}", exe.display(), out);
        let symbols = String::from_utf8_lossy(&out.stdout);
        assert!(
            symbols.lines().count() > 1000,
            "nm listed the binary's symbols"
        );
        let called: Vec<&str> = symbols
            .lines()
            .filter(|l| l.contains("core::core_arch::x86") && l.contains("::_mm"))
            .collect();
        assert!(called.is_empty(), "intrinsics left as calls: {called:#?}");
    }
}
