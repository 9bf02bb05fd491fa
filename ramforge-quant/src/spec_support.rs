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

/// The little-endian u32 at byte `at` of `bytes` (IQ2_XXS and IQ3_XXS keep a sub-block's
/// scale and sign indices in one).
#[inline(always)]
pub fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// An f16 given by its bits, as f32 (IQ1_M assembles its scale from four nibbles).
#[inline(always)]
pub fn f16_bits(bits: u16) -> f32 {
    half::f16::from_bits(bits).to_f32()
}

/// The sign (+1 or -1) of element `l` (0..8) of an eight-value group whose 7-bit sign index is
/// `s`: bit `l` for the first seven, and the eighth makes the count of minus signs even (ggml's
/// `ksigns` table is exactly this).
#[inline(always)]
pub fn ksign(s: u32, l: usize) -> i32 {
    let s = s & 0x7F;
    let bit = if l < 7 {
        (s >> l) & 1
    } else {
        s.count_ones() & 1
    };
    1 - 2 * bit as i32
}

/// The 7-bit sign index of eight values (bits of the negative ones among the first seven)
/// and whether an eighth minus sign is implied but not wanted (an odd count of negatives).
pub fn ksign_index(x: &[f32]) -> (u32, bool) {
    let mut s = 0u32;
    let mut negatives = 0;
    for (l, &v) in x.iter().enumerate().take(8) {
        if v < 0.0 {
            negatives += 1;
            if l < 7 {
                s |= 1 << l;
            }
        }
    }
    (s, negatives % 2 == 1)
}

/// Digit `n` of a TQ1_0 byte holding five base-3 digits as a fixed-point fraction of 3^5:
/// multiplying by 3^n (mod 256) brings digit n to the top, `* 3 >> 8` reads it. Gives -1, 0, 1.
#[inline(always)]
pub fn trit(q: u8, n: usize) -> i32 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    (((q.wrapping_mul(POW3[n]) as u16) * 3) >> 8) as i32 - 1
}

/// Round half away from zero (numpy `np_roundf` in gguf-py's TQ quantizers).
pub fn round_away(v: f32) -> i32 {
    v.round() as i32
}

/// An unsigned E4M3 scale byte (bias 7, 3 mantissa bits; bit 7 unused) as ggml's
/// `ggml_ue4m3_to_fp32`, halved for the doubled E2M1 levels: 0 and 0x7F (NaN) give 0.
pub fn ue4m3_half(x: u8) -> f32 {
    if x == 0 || x == 0x7F {
        return 0.0;
    }
    let exp = ((x >> 3) & 0xF) as i32;
    let man = (x & 7) as f32;
    let raw = if exp == 0 {
        man * 2f32.powi(-9)
    } else {
        (1.0 + man / 8.0) * 2f32.powi(exp - 7)
    };
    raw * 0.5
}

/// The smallest UE4M3 code whose halved scale times `top` covers `amax` (0x7E, the largest
/// finite code, when none does; 0 for an all-zero group): the NVFP4 quantizer's scale.
pub fn ue4m3_for(amax: f32, top: f32) -> u8 {
    if amax <= 0.0 {
        return 0;
    }
    (1..0x7Fu8)
        .find(|&c| ue4m3_half(c) * top >= amax)
        .unwrap_or(0x7E)
}

/// The row of `grid` nearest (least squares) to `target`, where each grid value `v` stands
/// for `v + offset`.
pub fn nearest_grid_row<const W: usize>(grid: &[[i8; W]], target: &[f32], offset: f32) -> usize {
    let mut best = 0;
    let mut best_err = f32::MAX;
    for (i, row) in grid.iter().enumerate() {
        let err: f32 = row
            .iter()
            .zip(target)
            .map(|(&v, &t)| (v as f32 + offset - t) * (v as f32 + offset - t))
            .sum();
        if err < best_err {
            best_err = err;
            best = i;
        }
    }
    best
}

/// Largest magnitude of a slice.
pub fn amax_of(x: &[f32]) -> f32 {
    x.iter().fold(0f32, |m, v| m.max(v.abs()))
}

/// The f16 bits of an f32 (IQ1_M's quantizer spreads them over four nibbles).
pub fn f16_to_bits(v: f32) -> u16 {
    half::f16::from_f32(v).to_bits()
}

/// Grid rows (`R` rows of `W`, covering eight values) and the 7-bit sign index for eight
/// values `x` at `step` per grid unit, where the eighth sign is implied by an even count of
/// minus signs (IQ2_XXS, IQ2_XS, IQ3_XXS). With an odd count of negatives one value must take
/// the wrong sign: every choice is tried (its target magnitude negated, which is exactly the
/// error a wrong sign costs) and the one with the least squared error kept.
pub fn parity_signed_rows<const W: usize, const R: usize>(
    grid: &[[i8; W]],
    x: &[f32],
    step: f32,
) -> ([usize; R], u32) {
    let magnitude = |v: f32| if step > 0.0 { v.abs() / step } else { 0.0 };
    let search = |t: &[f32; 8]| {
        let mut rows = [0usize; R];
        let mut err = 0f32;
        for (r, row) in rows.iter_mut().enumerate() {
            let tr = &t[W * r..W * r + W];
            *row = nearest_grid_row(grid, tr, 0.0);
            err += grid[*row]
                .iter()
                .zip(tr)
                .map(|(&g, &v)| (g as f32 - v) * (g as f32 - v))
                .sum::<f32>();
        }
        (rows, err)
    };
    let t: [f32; 8] = core::array::from_fn(|i| magnitude(x[i]));
    let (index, odd) = ksign_index(x);
    if !odd {
        return (search(&t).0, index);
    }
    let mut best = ([0usize; R], f32::MAX, 0u32);
    for k in 0..8 {
        let mut tk = t;
        tk[k] = -tk[k];
        let (rows, err) = search(&tk);
        if err < best.1 {
            let mut signs: [f32; 8] = core::array::from_fn(|i| x[i]);
            signs[k] = if x[k] < 0.0 { 1.0 } else { -1.0 };
            best = (rows, err, ksign_index(&signs).0);
        }
    }
    (best.0, best.2)
}
