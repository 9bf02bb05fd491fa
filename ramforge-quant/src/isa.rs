//! Which instruction set the kernels run on: detected once at run time, overridable for
//! testing and benchmarking (`RAMFORGE_ISA=scalar`, or [`set`]).
//!
//! The scalar kernels generated from the specs are the reference: every fast path is tested
//! against them, and they are what runs on a CPU without a supported extension.

use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction set with its own kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Isa {
    /// The generated scalar reference kernels; runs everywhere.
    Scalar,
    /// x86-64 with AVX2, FMA and F16C (Haswell and later, Zen and later).
    Avx2,
    /// [`Isa::Avx2`] plus AVX-VNNI (`vpdpbusd` / `vpdpwssd` on 256-bit vectors: Alder Lake,
    /// Sapphire Rapids, Zen 5 and later). Formats without a VNNI kernel run their AVX2 ones.
    AvxVnni,
    /// [`Isa::Avx2`] plus AVX512-VNNI, AVX512VL and AVX512BW: the [`Isa::AvxVnni`] kernels
    /// with `vpdpbusd` in its EVEX encoding, for CPUs that lack the VEX one (Ice Lake and
    /// Cascade Lake servers, Zen 4), and the low-bit formats' sign bits applied under a mask
    /// register. Still 256-bit vectors; the same results.
    Avx512Vnni,
    /// aarch64's Advanced SIMD, which every ARMv8-A CPU has.
    Neon,
    /// [`Isa::Neon`] plus the dot-product extension (`sdot`: ARMv8.2-A and later, e.g. Apple
    /// M1 and later, Graviton 2 and later). The same results as [`Isa::Neon`].
    Dotprod,
    /// [`Isa::Dotprod`] plus the int8 matrix multiply (`smmla`: ARMv8.6-A and later, e.g.
    /// Apple M2 and later, Graviton 3 and later) in the prefill tiles. The same results.
    I8mm,
}

impl Isa {
    /// Every instruction set, the reference first.
    pub const ALL: [Isa; 7] = [
        Isa::Scalar,
        Isa::Avx2,
        Isa::AvxVnni,
        Isa::Avx512Vnni,
        Isa::Neon,
        Isa::Dotprod,
        Isa::I8mm,
    ];

    /// Lower-case name, as `RAMFORGE_ISA` and the tools spell it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx512Vnni => "avx512vnni",
            Isa::Neon => "neon",
            Isa::Dotprod => "dotprod",
            Isa::I8mm => "i8mm",
        }
    }

    /// Parses a name written by [`Isa::name`].
    pub fn from_name(name: &str) -> Option<Isa> {
        let name = name.trim().to_ascii_lowercase();
        Isa::ALL.into_iter().find(|isa| isa.name() == name)
    }

    /// Whether this CPU can run the instruction set's kernels.
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            Isa::Avx2 => avx2_available(),
            Isa::AvxVnni => avx2_available() && avx_vnni_available(),
            Isa::Avx512Vnni => avx2_available() && avx512_vnni_available(),
            Isa::Neon => neon_available(),
            Isa::Dotprod => neon_available() && dotprod_available(),
            Isa::I8mm => neon_available() && dotprod_available() && i8mm_available(),
        }
    }

    /// Whether this instruction set includes [`Isa::Avx2`] (so AVX2 kernels may run on it).
    pub fn has_avx2(self) -> bool {
        matches!(self, Isa::Avx2 | Isa::AvxVnni | Isa::Avx512Vnni)
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_available() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
        && std::arch::is_x86_feature_detected!("f16c")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_available() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn avx_vnni_available() -> bool {
    std::arch::is_x86_feature_detected!("avxvnni")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx_vnni_available() -> bool {
    false
}

#[cfg(target_arch = "x86_64")]
fn avx512_vnni_available() -> bool {
    std::arch::is_x86_feature_detected!("avx512vnni")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx512bw")
}

#[cfg(not(target_arch = "x86_64"))]
fn avx512_vnni_available() -> bool {
    false
}

#[cfg(target_arch = "aarch64")]
fn neon_available() -> bool {
    std::arch::is_aarch64_feature_detected!("neon")
}

#[cfg(not(target_arch = "aarch64"))]
fn neon_available() -> bool {
    false
}

#[cfg(target_arch = "aarch64")]
fn dotprod_available() -> bool {
    std::arch::is_aarch64_feature_detected!("dotprod")
}

#[cfg(not(target_arch = "aarch64"))]
fn dotprod_available() -> bool {
    false
}

#[cfg(target_arch = "aarch64")]
fn i8mm_available() -> bool {
    std::arch::is_aarch64_feature_detected!("i8mm")
}

#[cfg(not(target_arch = "aarch64"))]
fn i8mm_available() -> bool {
    false
}

/// The best instruction set this CPU supports (AVX-VNNI before AVX512-VNNI where both are:
/// the same kernels, the shorter encoding).
pub fn detected() -> Isa {
    if Isa::AvxVnni.is_available() {
        Isa::AvxVnni
    } else if Isa::Avx512Vnni.is_available() {
        Isa::Avx512Vnni
    } else if Isa::Avx2.is_available() {
        Isa::Avx2
    } else if Isa::I8mm.is_available() {
        Isa::I8mm
    } else if Isa::Dotprod.is_available() {
        Isa::Dotprod
    } else if Isa::Neon.is_available() {
        Isa::Neon
    } else {
        Isa::Scalar
    }
}

const UNSET: u8 = 0;
static ACTIVE: AtomicU8 = AtomicU8::new(UNSET);

fn code(isa: Isa) -> u8 {
    match isa {
        Isa::Scalar => 1,
        Isa::Avx2 => 2,
        Isa::AvxVnni => 3,
        Isa::Avx512Vnni => 4,
        Isa::Neon => 5,
        Isa::Dotprod => 6,
        Isa::I8mm => 7,
    }
}

/// The instruction set the kernels use now: [`set`]'s choice, else `RAMFORGE_ISA` when it
/// names an available one, else [`detected`].
pub fn active() -> Isa {
    match ACTIVE.load(Ordering::Relaxed) {
        1 => Isa::Scalar,
        2 => Isa::Avx2,
        3 => Isa::AvxVnni,
        4 => Isa::Avx512Vnni,
        5 => Isa::Neon,
        6 => Isa::Dotprod,
        7 => Isa::I8mm,
        _ => {
            let isa = requested().ok().flatten().unwrap_or_else(detected);
            ACTIVE.store(code(isa), Ordering::Relaxed);
            isa
        }
    }
}

/// `RAMFORGE_ISA`'s choice, checked: `None` when it is unset; an error when it names no
/// instruction set or one this CPU lacks. [`active`] ignores such a value (the detected set
/// runs); a program can call this first to refuse it instead.
pub fn requested() -> Result<Option<Isa>, crate::QuantError> {
    let Some(value) = std::env::var_os("RAMFORGE_ISA") else {
        return Ok(None);
    };
    let name = value.to_string_lossy();
    let isa = Isa::from_name(&name).ok_or_else(|| crate::QuantError::UnknownIsa {
        name: name.clone().into_owned(),
        choices: Isa::ALL.iter().map(|i| i.name()).collect(),
    })?;
    if !isa.is_available() {
        return Err(crate::QuantError::IsaUnavailable { isa: isa.name() });
    }
    Ok(Some(isa))
}

/// Chooses the instruction set for every later call; an error if this CPU lacks it.
pub fn set(isa: Isa) -> Result<(), crate::QuantError> {
    if !isa.is_available() {
        return Err(crate::QuantError::IsaUnavailable { isa: isa.name() });
    }
    ACTIVE.store(code(isa), Ordering::Relaxed);
    Ok(())
}
