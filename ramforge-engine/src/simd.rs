//! What the engine's own vector kernels (the attention tiles, the gate activations) share:
//! whether they may run, and `exp` in f64 lanes, accurate enough that, rounded to f32, it
//! equals the correctly rounded `expf` but for rare near-ties, so a vector kernel rounds as its
//! scalar reference (libm's `exp`) does.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Whether the engine's kernels may use AVX2 + FMA + F16C (the instruction set the quant
/// kernels run on includes them, so `RAMFORGE_ISA=scalar` turns this off too).
pub(crate) fn avx2_enabled() -> bool {
    ramforge_quant::isa::active().has_avx2()
}

/// `exp(x)` for 4 lanes of `x` in `-150..=89`, in f64: range reduction by `ln 2` in two
/// parts and a degree-11 Taylor polynomial (relative error under 1e-14), so rounded to
/// f32 it is the correctly rounded `expf` but for rare near-ties.
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn exp4_f64(x: __m256d) -> __m256d {
    const LN2_HI: f64 = 0.693_147_180_369_123_8;
    const LN2_LO: f64 = 1.908_214_929_270_587_7e-10;
    let n = _mm256_round_pd(
        _mm256_mul_pd(x, _mm256_set1_pd(std::f64::consts::LOG2_E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    let r = _mm256_fnmadd_pd(n, _mm256_set1_pd(LN2_HI), x);
    let r = _mm256_fnmadd_pd(n, _mm256_set1_pd(LN2_LO), r);
    // 1/k! for k = 11 down to 1.
    const INV_FACT: [f64; 11] = [
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
        1.0,
    ];
    let mut p = _mm256_set1_pd(INV_FACT[0]);
    for &c in &INV_FACT[1..] {
        p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(c));
    }
    p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(1.0));
    // Times 2^n: n (at least -217) added to the exponent field.
    let ni = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n));
    _mm256_castsi256_pd(_mm256_add_epi64(
        _mm256_castpd_si256(p),
        _mm256_slli_epi64::<52>(ni),
    ))
}
