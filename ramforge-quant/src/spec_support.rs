//! Small helpers the spec files' expressions and quantizers call (see `specs/`), and the
//! integer dot products the generated `vec_dot`s are built from.

/// Largest magnitude and the signed value that has it (the first, on ties).
pub fn absmax(x: &[f32]) -> (f32, f32) {
    let mut amax = 0f32;
    let mut max = 0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

/// Smallest and largest value.
pub fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter()
        .fold((f32::MAX, f32::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

/// Largest value (0 for an empty or all-negative slice).
pub fn max_of(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |m, &v| m.max(v))
}

/// Round to nearest, ties to even: ggml's `nearest_int`.
pub fn nearest_int(v: f32) -> i32 {
    v.round_ties_even() as i32
}

/// The value an f32 has after a round trip through f16.
pub fn f16_round(v: f32) -> f32 {
    half::f16::from_f32(v).to_f32()
}

/// Index of the table level nearest to `v`.
pub fn nearest_level(levels: &[i8; 16], v: f32) -> u8 {
    let mut best = 0u8;
    let mut best_err = f32::MAX;
    for (i, &l) in levels.iter().enumerate() {
        let err = (v - l as f32).abs();
        if err < best_err {
            best_err = err;
            best = i as u8;
        }
    }
    best
}

/// `sum a[i] * b[i]` in integers; written so that the compiler vectorizes it.
#[inline(always)]
pub fn int_dot(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| x as i32 * y as i32).sum()
}

/// `sum a[i]` in integers.
#[inline(always)]
pub fn int_sum(a: &[i8]) -> i32 {
    a.iter().map(|&x| x as i32).sum()
}

/// An E8M0 shared exponent (a u8 `e`, no sign, no mantissa) as ggml's `E8M0_TO_FP32_HALF`:
/// `2^(e - 127) / 2 = 2^(e - 128)`, exact in f32 for every `e` (subnormal for `e < 2`).
pub fn e8m0_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        (e as u32 - 1) << 23
    };
    f32::from_bits(bits)
}

/// The E8M0 exponent of the MXFP4 quantizer for a block whose largest magnitude is `amax`
/// (gguf-py's `floor(log2(amax)) - 2 + 127`, clamped to a byte; 0 for an all-zero block).
pub fn e8m0_for(amax: f32) -> u8 {
    if amax > 0.0 {
        (amax.log2().floor() as i32 - 2 + 127).clamp(0, 255) as u8
    } else {
        0
    }
}
